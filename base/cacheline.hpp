// Cache-line constants used for padding and alignment.
#pragma once

#include <cstddef>

#include "config.h"

namespace mpiv {

/// Cache-line size chosen at configure time (--with-cacheline).
constexpr std::size_t k_cacheline = MPIV_CACHELINE;
/// Distance that keeps two independently written fields from sharing a line even with
/// adjacent-line prefetch: use for alignas() of fields written by different threads.
constexpr std::size_t k_false_sharing = 128;

} // namespace mpiv
