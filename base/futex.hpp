// Thin wrappers over the Linux futex system call for 32-bit atomic words.
#pragma once

#include <atomic>
#include <cstdint>

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

} // namespace mpiv::base
