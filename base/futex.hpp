// Thin wrappers over the Linux futex system call for 32-bit atomic words.
#pragma once

#include <atomic>
#include <cstdint>

#include <ctime>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mpiv::base {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "futex words must be plain 32-bit integers");

/// Sleep while *word == expected (returns at once otherwise, and spuriously at times:
/// callers loop on their condition).
inline void futex_wait(std::atomic<std::uint32_t> &word, std::uint32_t expected) noexcept
{
    syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(&word), FUTEX_WAIT_PRIVATE, expected,
            nullptr, nullptr, 0);
}

/// Wake up to @p count sleepers on @p word.
inline void futex_wake(std::atomic<std::uint32_t> &word, int count = 1) noexcept
{
    syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(&word), FUTEX_WAKE_PRIVATE, count,
            nullptr, nullptr, 0);
}

/// Sleep while *word == expected, at most @p timeout_ns nanoseconds. @p shared: the word
/// lives in memory shared between processes (a non-private futex).
inline void futex_wait_for(std::atomic<std::uint32_t> &word, std::uint32_t expected,
                           long timeout_ns, bool shared) noexcept
{
    struct timespec ts {
        timeout_ns / 1000000000L, timeout_ns % 1000000000L
    };
    syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(&word),
            shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

/// Wake up to @p count sleepers on a word in memory shared between processes.
inline void futex_wake_shared(std::atomic<std::uint32_t> &word, int count = 1) noexcept
{
    syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(&word), FUTEX_WAKE, count, nullptr,
            nullptr, 0);
}

} // namespace mpiv::base
