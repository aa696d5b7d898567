// runset: the set of runnable ULT ids of one worker, as a two-level bit vector.
//
// Design (seed 000 §3.1, Algorithms 3 and 4, with the hierarchical hint):
// - Level 1 holds one bit per ULT id Γ, 64 per word. Level 2 holds one bit per *group*
//   of 8 level-1 words (a cache line, 512 ids): "this group may have runnable ids".
// - set(Γ) (ThreadSignal) is a fetch_or of the level-1 bit, then of the group's level-2
//   bit unless that is already set. Any thread may call it.
// - drain() (the scheduler; only the owning worker calls it) reads each non-zero level-2
//   word and, for every hinted group, exchanges each non-zero level-1 word with 0 and
//   runs the ids of that local copy. A bit set during the scan lands either in the copy
//   or in the shared word for the next pass, never lost.
// - Hints are sticky: a group's hint is cleared only when a scan finds the group empty
//   (clear_hint() then re-checks it), so under steady traffic neither set() nor drain()
//   spends an atomic RMW on level 2. A stale hint costs one scan of 8 words. Spurious
//   level-1 bits (a stale wake-up) are filtered by the caller.
// - Look-ahead: the ids taken from one level-1 word run in a known order, so before each
//   run drain() shows the caller the ids that follow it in that word (the worker
//   prefetches their stacks: with many ULTs each one is cold when its turn comes).
// - Fairness: each pass takes each word at most once, so an id set before a pass starts
//   runs within that pass or the next; a ULT that yields re-enters the shared word after
//   the snapshot and waits for the next pass. The scan start rotates from pass to pass
//   (word, group and bit) so low ids do not always run first.
// Memory: capacity/8 bytes of level 1 plus capacity/4096 bytes of level 2 (1 Mi ids:
// 128 KiB + 256 B). Words written by other threads are not padded: a group is one line
// on purpose (the scheduler reads it whole).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace mpiv::sched {

class runset {
  public:
    static constexpr std::uint32_t k_ids_per_group = 512;
    static constexpr std::uint32_t k_words_per_group = k_ids_per_group / 64;

    /// @param capacity number of ids, rounded up to a multiple of 512
    explicit runset(std::uint32_t capacity)
        : groups_((capacity + k_ids_per_group - 1) / k_ids_per_group),
          l2_words_((groups_ + 63) / 64),
          l1_(new std::atomic<std::uint64_t>[static_cast<std::size_t>(groups_) * k_words_per_group]),
          l2_(new std::atomic<std::uint64_t>[l2_words_])
    {
        for (std::uint32_t i = 0; i < groups_ * k_words_per_group; ++i) {
            l1_[i].store(0, std::memory_order_relaxed);
        }
        for (std::uint32_t i = 0; i < l2_words_; ++i) {
            l2_[i].store(0, std::memory_order_relaxed);
        }
    }

    std::uint32_t capacity() const noexcept { return groups_ * k_ids_per_group; }

    /// Mark @p id runnable (ThreadSignal). Thread-safe, wait-free: one or two atomic ORs.
    void set(std::uint32_t id) noexcept
    {
        // sync: seq_cst; pairs with the seq_cst exchange of the level-1 word in drain()
        // (release part: what the signaller wrote is visible to the ULT it wakes). seq_cst
        // rather than release so the level-2 check below cannot be ordered before it.
        l1_[id >> 6].fetch_or(std::uint64_t{1} << (id & 63), std::memory_order_seq_cst);
        const std::uint32_t group = id / k_ids_per_group;
        const std::uint64_t gbit = std::uint64_t{1} << (group & 63);
        std::atomic<std::uint64_t> &hint = l2_[group >> 6];
        // The hint is usually still set from an earlier wake-up: skip the second RMW then.
        // If drain() clears it after this load, its level-1 exchange (ordered after the
        // clear, seq_cst) sees our level-1 bit. seq_cst: also orders the caller's check of
        // the worker's sleeping flag after this (Dekker pair with worker::idle()).
        if ((hint.load(std::memory_order_seq_cst) & gbit) == 0) {
            hint.fetch_or(gbit, std::memory_order_seq_cst);
        }
    }

    /// True if any group hint is set (a hint may be stale until the next drain() clears
    /// it, never missing). seq_cst: pairs with set() for the sleep protocol.
    bool any() const noexcept
    {
        for (std::uint32_t i = 0; i < l2_words_; ++i) {
            if (l2_[i].load(std::memory_order_seq_cst) != 0) {
                return true;
            }
        }
        return false;
    }

    /// One scheduling pass over ids below @p limit (the caller's high-water mark of ids
    /// in use; ids at or above it are never set): call run(id) for each id taken from the
    /// set. Only the owning worker calls this. Returns the number of ids taken.
    template <class F> std::uint32_t drain(std::uint32_t limit, F &&run)
    {
        return drain(limit, run, [](const std::uint32_t *, std::uint32_t) {});
    }

    /// drain(limit, run), and before each run(id) a call ahead(next, count): next[0 ..
    /// count) are the ids that run after id in this pass, in their order, as far as they
    /// are known (the rest of the level-1 word id came from).
    template <class F, class A> std::uint32_t drain(std::uint32_t limit, F &&run, A &&ahead)
    {
        const std::uint32_t rot = rotation_++;
        const std::uint32_t groups = (std::min(limit, capacity()) + k_ids_per_group - 1) / k_ids_per_group;
        const std::uint32_t words = (groups + 63) / 64;
        if (words == 0) {
            return 0;
        }
        std::uint32_t taken = 0;
        std::uint32_t w = (rot >> 6) % words;
        for (std::uint32_t i = 0; i < words; ++i, w = w + 1 == words ? 0 : w + 1) {
            // seq_cst: ordered with set()'s level-1 OR and level-2 check (see clear_hint).
            const std::uint64_t hints = l2_[w].load(std::memory_order_seq_cst);
            if (hints == 0) {
                continue;
            }
            for_each_bit(hints, rot, [&](std::uint32_t g) {
                const std::uint32_t group = w * 64 + g;
                bool found = false;
                for (std::uint32_t k = 0; k < k_words_per_group; ++k) {
                    const std::uint32_t word = group * k_words_per_group + (k + rot) % k_words_per_group;
                    if (l1_[word].load(std::memory_order_relaxed) == 0) {
                        continue;
                    }
                    found = true;
                    // sync: seq_cst (acquire); pairs with the level-1 fetch_or in set().
                    const std::uint64_t ids = l1_[word].exchange(0, std::memory_order_seq_cst);
                    std::uint32_t order[64];
                    std::uint32_t n = 0;
                    for_each_bit(ids, rot >> 3, [&](std::uint32_t b) { order[n++] = word * 64 + b; });
                    for (std::uint32_t j = 0; j < n; ++j) {
                        ahead(order + j + 1, n - j - 1);
                        run(order[j]);
                    }
                    taken += n;
                }
                if (!found) {
                    clear_hint(w, g);
                }
            });
        }
        return taken;
    }

  private:
    /// Clear the hint of group (w, g), found empty. A signaller that saw the hint still
    /// set skipped setting it, so look at the group once more after the clear: seq_cst on
    /// both sides means either that signaller's level-2 check comes after the clear (and
    /// sets the hint again) or its level-1 OR is visible to the loads below.
    void clear_hint(std::uint32_t w, std::uint32_t g) noexcept
    {
        const std::uint64_t gbit = std::uint64_t{1} << g;
        l2_[w].fetch_and(~gbit, std::memory_order_seq_cst);
        const std::uint32_t first = (w * 64 + g) * k_words_per_group;
        for (std::uint32_t k = 0; k < k_words_per_group; ++k) {
            if (l1_[first + k].load(std::memory_order_seq_cst) != 0) {
                l2_[w].fetch_or(gbit, std::memory_order_seq_cst);
                return;
            }
        }
    }

    /// Visit the set bits of @p bits, starting at bit (start % 64) and wrapping around.
    template <class F> static void for_each_bit(std::uint64_t bits, std::uint32_t start, F &&f)
    {
        const unsigned s = start & 63;
        std::uint64_t rotated = s == 0 ? bits : (bits >> s) | (bits << (64 - s));
        while (rotated != 0) {
            const unsigned b = static_cast<unsigned>(__builtin_ctzll(rotated));
            rotated &= rotated - 1;
            f((b + s) & 63);
        }
    }

    const std::uint32_t groups_;
    const std::uint32_t l2_words_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> l1_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> l2_;
    std::uint32_t rotation_ = 0; ///< scan start; owner-only
};

} // namespace mpiv::sched
