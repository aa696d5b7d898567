// Shared helpers for stress tests.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace mpiv::test {

/// Scale factor for stress loops: $MPIV_TEST_TIME_MULTIPLIER (default 1; 0 is treated as 1).
inline std::uint64_t time_multiplier()
{
    const char *v = std::getenv("MPIV_TEST_TIME_MULTIPLIER");
    const long m = v != nullptr ? std::atol(v) : 1;
    return m > 0 ? static_cast<std::uint64_t>(m) : 1;
}

/// Iteration count for a stress loop: @p base scaled by the multiplier, and divided by
/// @p sanitizer_divisor under ThreadSanitizer or AddressSanitizer (they run 5-20x slower)
/// and when $MPIV_TEST_SLOW is set (emulation, e.g. qemu-user in the aarch64 CI stage).
inline std::uint64_t iterations(std::uint64_t base, std::uint64_t sanitizer_divisor = 10)
{
    std::uint64_t n = base * time_multiplier();
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    n /= sanitizer_divisor;
#else
    if (std::getenv("MPIV_TEST_SLOW") != nullptr) {
        n /= sanitizer_divisor;
    }
#endif
    return n > 0 ? n : 1;
}

} // namespace mpiv::test
