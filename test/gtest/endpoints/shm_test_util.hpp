// Helpers shared by the shm tests: log capture, forked children that cannot hang a test.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"

namespace mpiv::test {

/// Installs a log handler that records error messages for the lifetime of the object.
class shm_log_capture {
  public:
    shm_log_capture() { base::set_log_handler(&shm_log_capture::handler, this); }
    ~shm_log_capture() { base::set_log_handler(nullptr, nullptr); }
    shm_log_capture(const shm_log_capture &) = delete;
    shm_log_capture &operator=(const shm_log_capture &) = delete;

    std::vector<std::string> errors() const
    {
        std::lock_guard<std::mutex> guard(mutex_);
        return errors_;
    }
    /// The last error, or "" when none was logged.
    std::string last() const
    {
        std::lock_guard<std::mutex> guard(mutex_);
        return errors_.empty() ? std::string() : errors_.back();
    }

  private:
    static void handler(int level, const char *message, void *ctx)
    {
        auto *self = static_cast<shm_log_capture *>(ctx);
        if (level == static_cast<int>(base::log_level::error)) {
            std::lock_guard<std::mutex> guard(self->mutex_);
            self->errors_.emplace_back(message);
        }
    }

    mutable std::mutex mutex_;
    std::vector<std::string> errors_;
};

/// Seconds a forked child may run before SIGALRM kills it (and the parent stops waiting).
constexpr unsigned k_child_timeout_s = 60;

/// Fork a child that runs @p body and exits with its result (0 for success). The child
/// never returns into GoogleTest: it leaves with _exit, and an alarm kills it if it hangs.
/// @return the child's pid, or -1 when fork failed
template <class Body> pid_t fork_child(Body &&body)
{
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(k_child_timeout_s);
        int rc = 1;
        try {
            rc = body();
        } catch (...) {
            rc = 99;
        }
        _exit(rc);
    }
    return pid;
}

/// Wait for @p pid, at most k_child_timeout_s + 5 seconds (then SIGKILL it).
/// @return its exit code; 128 + signal when it was killed; -1 when waitpid failed
inline int wait_child(pid_t pid)
{
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(k_child_timeout_s + 5);
    int wstatus = 0;
    for (;;) {
        const pid_t r = waitpid(pid, &wstatus, WNOHANG);
        if (r == pid) {
            break;
        }
        if (r < 0) {
            return -1;
        }
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &wstatus, 0);
            return 128 + SIGKILL;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (WIFEXITED(wstatus)) {
        return WEXITSTATUS(wstatus);
    }
    return WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : -1;
}

} // namespace mpiv::test
