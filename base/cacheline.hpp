// Cache-line constants used for padding and alignment, and a prefetch hint.
#pragma once

#include <cstddef>

#include "config.h"

namespace mpiv {

/// Cache-line size chosen at configure time (--with-cacheline).
constexpr std::size_t k_cacheline = MPIV_CACHELINE;
/// Distance that keeps two independently written fields from sharing a line even with
/// adjacent-line prefetch: use for alignas() of fields written by different threads.
constexpr std::size_t k_false_sharing = 128;

namespace base {

/// Ask the processor to bring the line holding @p p into its caches. A hint: never
/// faults, even on an unmapped address. Written as an asm statement rather than
/// __builtin_prefetch: GCC takes a function whose only effects are __builtin_prefetch for
/// a pure one and deletes calls to it whose result is unused (seen here: a scheduler's
/// look-ahead vanished from the build), while an asm volatile statement stays where it is.
inline void prefetch(const void *p) noexcept
{
#if defined(__x86_64__)
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char *>(p)));
#elif defined(__aarch64__)
    asm volatile("prfm pldl1keep, %0" : : "Q"(*static_cast<const char *>(p)));
#else
    __builtin_prefetch(p);
#endif
}

} // namespace base

} // namespace mpiv
