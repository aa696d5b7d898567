// Helpers shared by the pool tests: region memory, white-box access, log capture.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "pool/packet_pool.hpp"

namespace mpiv::pool {

struct private_deque_test_access {
    /// The deque's indexes from bottom (LRU) to top (MRU).
    template <template <class> class Atom>
    static std::vector<std::uint32_t> contents(private_deque<Atom> &deque)
    {
        std::lock_guard<detail::spin_lock<Atom>> guard(deque.lock_);
        std::vector<std::uint32_t> out;
        const std::uint32_t size = deque.size_.load(std::memory_order_relaxed);
        for (std::uint32_t i = 0; i < size; ++i) {
            out.push_back(deque.slot(deque.bottom_ + i));
        }
        return out;
    }
};

struct packet_region_test_access {
    template <template <class> class Atom>
    static std::uint32_t index_of(const packet_region<Atom> &region, const void *packet)
    {
        std::uint32_t index = k_nil;
        static_cast<void>(region.index_of(packet, index));
        return index;
    }
    template <template <class> class Atom>
    static void *packet(const packet_region<Atom> &region, std::uint32_t index)
    {
        return region.packet(index);
    }
};

struct packet_pool_test_access {
    template <template <class> class Atom>
    static std::vector<std::uint32_t> deque_contents(packet_pool<Atom> &pool, std::uint32_t worker)
    {
        return private_deque_test_access::contents(pool.workers_[worker].deque);
    }
};

} // namespace mpiv::pool

namespace mpiv::test {

/// Zeroed heap memory for a packet region, page aligned like a shared-memory segment.
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

  private:
    static void handler(int level, const char *message, void *ctx)
    {
        auto *self = static_cast<log_capture *>(ctx);
        if (level == static_cast<int>(base::log_level::error)) {
            std::lock_guard<std::mutex> guard(self->mutex_);
            self->errors_.emplace_back(message);
        }
    }

    mutable std::mutex mutex_;
    std::vector<std::string> errors_;
};

} // namespace mpiv::test
