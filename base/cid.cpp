// cid_agreement (cid.hpp): context-id agreement, the process's side.
#include "base/cid.hpp"

#include <algorithm>
#include <new>
#include <vector>

#include "base/backoff.hpp"
#include "base/log.hpp"

namespace mpiv::base {

cid_agreement &cid_agreement::process() noexcept
{
    static cid_agreement instance;
    return instance;
}

bool cid_agreement::take_gate(std::uint64_t key) noexcept
{
    std::lock_guard<std::mutex> guard(mu_);
    if (busy_ || *waiting_.begin() != key) {
        return false;
    }
    busy_ = true;
    return true;
}

void cid_agreement::put_gate(std::uint64_t key, bool held, bool done) noexcept
{
    std::lock_guard<std::mutex> guard(mu_);
    if (held) {
        busy_ = false;
    }
    if (done) {
        waiting_.erase(waiting_.find(key));
    }
}

status cid_agreement::agree(const mpiv_cid_ops_t &ops, std::uint32_t &id_p) noexcept
{
    constexpr std::uint32_t k_max_limit = 1U << 16;
    if (ops.is_free == nullptr || ops.reserve == nullptr || ops.release == nullptr ||
        ops.allreduce_band == nullptr || ops.allreduce_min == nullptr ||
        ops.first >= ops.limit || ops.limit > k_max_limit) {
        log(log_level::error,
            "mpiv_cid_agree: a callback is NULL or the range [%u, %u) is empty or above %u",
            ops.first, ops.limit, k_max_limit);
        return status::invalid_arg;
    }
    // The mask of ids [0, limit), then one word whose bit 0 says "every participant offered".
    const std::size_t words = (ops.limit + 63) / 64 + 1;
    std::vector<std::uint64_t> mask;
    try {
        mask.resize(words);
        std::lock_guard<std::mutex> guard(mu_);
        waiting_.insert(ops.key);
    } catch (const std::bad_alloc &) {
        return status::nomem;
    }
    backoff wait;
    for (;;) {
        const bool own = take_gate(ops.key);
        std::fill(mask.begin(), mask.end(), 0);
        if (own) {
            for (std::uint32_t id = ops.first; id < ops.limit; ++id) {
                if (ops.is_free(ops.ctx, id) != 0) {
                    mask[id / 64] |= std::uint64_t{1} << (id % 64);
                }
            }
            mask.back() = 1;
        }
        if (ops.allreduce_band(ops.ctx, mask.data(), words) != 0) {
            put_gate(ops.key, own, true);
            log(log_level::error, "mpiv_cid_agree: the AND of the masks failed");
            return status::system;
        }
        // Every participant sees the same result: all take the same branch below.
        const bool all_offered = (mask.back() & 1) != 0; // then this process offered too
        std::int64_t id = -1;
        for (std::size_t w = 0; all_offered && w + 1 < words && id < 0; ++w) {
            if (mask[w] != 0) {
                id = static_cast<std::int64_t>(w * 64) + __builtin_ctzll(mask[w]);
            }
        }
        if (id >= 0) {
            const auto cid = static_cast<std::uint32_t>(id);
            const int took = ops.reserve(ops.ctx, cid) != 0 ? 1 : 0;
            int agreed = took;
            if (ops.allreduce_min(ops.ctx, &agreed) != 0) {
                if (took != 0) {
                    ops.release(ops.ctx, cid);
                }
                put_gate(ops.key, own, true);
                log(log_level::error, "mpiv_cid_agree: the confirmation of id %u failed", cid);
                return status::system;
            }
            if (agreed != 0) {
                put_gate(ops.key, own, true);
                id_p = cid;
                return status::ok;
            }
            if (took != 0) {
                ops.release(ops.ctx, cid); // taken by the host somewhere meanwhile: retry
            }
        } else if (all_offered) {
            put_gate(ops.key, own, true);
            log(log_level::error, "mpiv_cid_agree: no context id in [%u, %u) is free everywhere",
                ops.first, ops.limit);
            return status::capacity;
        }
        put_gate(ops.key, own, false);
        if (ops.idle != nullptr) {
            ops.idle(ops.ctx);
        } else {
            wait.pause();
        }
    }
}

} // namespace mpiv::base
