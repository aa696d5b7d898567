// copy_small: every length it accepts, every source and destination alignment within a
// word, and nothing written outside the destination range.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "base/copy.hpp"

using mpiv::base::copy_small;
using mpiv::base::k_copy_small_max;

TEST(copy_small, every_length_and_alignment)
{
    constexpr std::size_t k_pad = 16;
    unsigned char src[k_copy_small_max + 2 * k_pad];
    unsigned char dst[k_copy_small_max + 2 * k_pad];
    for (std::size_t i = 0; i < sizeof src; ++i) {
        src[i] = static_cast<unsigned char>(i * 7 + 1);
    }
    for (std::size_t n = 0; n <= k_copy_small_max; ++n) {
        for (std::size_t so = 0; so < 8; ++so) {
            for (std::size_t d = 0; d < 8; ++d) {
                std::memset(dst, 0xee, sizeof dst);
                copy_small(dst + k_pad + d, src + so, n);
                for (std::size_t i = 0; i < sizeof dst; ++i) {
                    const bool inside = i >= k_pad + d && i < k_pad + d + n;
                    const unsigned char want = inside ? src[so + i - k_pad - d] : 0xee;
                    ASSERT_EQ(dst[i], want) << "n " << n << " src offset " << so
                                            << " dst offset " << d << " byte " << i;
                }
            }
        }
    }
}
