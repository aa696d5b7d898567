// copy_small: memcpy for short byte strings of run-time length.
//
// A memcpy whose length is known only at run time becomes a library call or a byte/word
// loop; on a message path that copies a few dozen bytes per message (wire headers, inline
// payloads) that loop costs more than the copy. copy_small() does any length up to 64
// bytes with at most two fixed-size copies that may overlap, which compile to a few
// loads and stores.
#pragma once

#include <cstddef>
#include <cstring>

namespace mpiv::base {

/// Largest length copy_small() accepts.
constexpr std::size_t k_copy_small_max = 64;

/// Copy @p n <= k_copy_small_max bytes from @p src to @p dst (the ranges must not
/// overlap).
inline void copy_small(void *dst, const void *src, std::size_t n) noexcept
{
    auto *d = static_cast<unsigned char *>(dst);
    const auto *s = static_cast<const unsigned char *>(src);
    if (n >= 32) {
        std::memcpy(d, s, 32);
        std::memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 16) {
        std::memcpy(d, s, 16);
        std::memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        std::memcpy(d, s, 8);
        std::memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        std::memcpy(d, s, 4);
        std::memcpy(d + n - 4, s + n - 4, 4);
    } else if (n != 0) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

} // namespace mpiv::base
