// Helpers shared by the core test suites: page-aligned region memory, log capture, a
// watchdog for waits nothing else can interrupt.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.hpp"
#include "test/gtest/common/stress.hpp"

namespace mpiv::test {

/// Zeroed heap memory for a shared-memory structure (packet region, queue), page aligned
/// like a shared-memory segment.
class region_buffer {
  public:
    explicit region_buffer(std::size_t bytes)
        : bytes_((bytes + k_page - 1) / k_page * k_page),
          data_(static_cast<unsigned char *>(std::aligned_alloc(k_page, bytes_)))
    {
        std::memset(data_, 0, bytes_);
    }
    ~region_buffer() { std::free(data_); }
    region_buffer(const region_buffer &) = delete;
    region_buffer &operator=(const region_buffer &) = delete;

    unsigned char *data() const { return data_; }
    std::size_t size() const { return bytes_; }

  private:
    static constexpr std::size_t k_page = 4096;
    std::size_t bytes_;
    unsigned char *data_;
};

/// Installs a log handler that records error messages for the lifetime of the object.
class log_capture {
  public:
    log_capture() { base::set_log_handler(&log_capture::handler, this); }
    ~log_capture() { base::set_log_handler(nullptr, nullptr); }
    log_capture(const log_capture &) = delete;
    log_capture &operator=(const log_capture &) = delete;

    std::vector<std::string> errors() const
    {
        std::lock_guard<std::mutex> guard(mutex_);
        return errors_;
    }
    std::vector<std::string> warnings() const
    {
        std::lock_guard<std::mutex> guard(mutex_);
        return warnings_;
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
        auto *self = static_cast<log_capture *>(ctx);
        if (level == static_cast<int>(base::log_level::error)) {
            std::lock_guard<std::mutex> guard(self->mutex_);
            self->errors_.emplace_back(message);
        } else if (level == static_cast<int>(base::log_level::warn)) {
            std::lock_guard<std::mutex> guard(self->mutex_);
            self->warnings_.emplace_back(message);
        }
    }

    mutable std::mutex mutex_;
    std::vector<std::string> errors_;
    std::vector<std::string> warnings_;
};

// Aborts the process (a failed test, not a hung one) when a scope does not end in time:
// for waits that nothing else can interrupt.
class watchdog {
  public:
    explicit watchdog(std::string what,
                      std::chrono::seconds limit = std::chrono::seconds(120 * time_multiplier()))
        : what_(std::move(what)), limit_(limit), thread_([this] { run(); })
    {
    }
    ~watchdog()
    {
        {
            std::lock_guard<std::mutex> guard(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    watchdog(const watchdog &) = delete;
    watchdog &operator=(const watchdog &) = delete;

  private:
    void run()
    {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_for(lock, limit_, [this] { return done_; })) {
            std::fprintf(stderr, "watchdog: %s did not finish within %lld s: aborting\n",
                         what_.c_str(), static_cast<long long>(limit_.count()));
            std::fflush(stderr);
            std::abort();
        }
    }

    std::string what_;
    std::chrono::seconds limit_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

} // namespace mpiv::test
