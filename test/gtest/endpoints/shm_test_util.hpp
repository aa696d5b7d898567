// Helpers shared by the shm tests: forked children that cannot hang a test (plus the
// common helpers).
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

#include "test/gtest/common/test_util.hpp"

namespace mpiv::test {

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
