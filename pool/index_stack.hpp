// index_stack: a lock-free LIFO of 32-bit indexes whose whole state lives in caller memory.
//
// Design (Treiber stack on indexes, seed 000 §3.3 "shared pool"):
// - State: one 64-bit head word {generation:32 | index:32} and one 32-bit link per index
//   (links[i] = index below i). The empty stack has index k_nil. The class itself is only
//   a per-process view (two pointers): the head and the links may sit in a shared-memory
//   segment mapped at different addresses by several processes, since nothing stored in
//   them is a pointer.
// - Invariants: an index is on the stack at most once (the caller's contract: it pushes
//   only indexes it owns, i.e. ones it popped or never pushed); links[i] is meaningful only
//   while i is on the stack; every successful CAS on the head (push or pop) increments the
//   generation.
// - ABA: pop reads links[top] and then CASes {top, g} -> {links[top], g + 1}. If another
//   thread popped top and pushed it back in between, the head reads {top, g' != g} and the
//   CAS fails, so a stale link is never installed. The generation wraps after 2^32 head
//   updates; a thread stalled between its load and its CAS for exactly a multiple of 2^32
//   updates could still suffer ABA, which we accept. Reading links[top] of an index that
//   was popped meanwhile is harmless: the links are never freed (type-stable memory, the
//   advantage of indexes over pointers) and the CAS then fails.
// - Ordering: push writes its link, then publishes it with a release CAS; pop loads the
//   head with acquire and installs the next index with an acq_rel CAS. All head updates are
//   read-modify-writes, so every pop synchronizes with every earlier push (release
//   sequence): the popper sees both the link and whatever the pusher wrote into the object
//   the index names (packet contents). The release half of pop keeps a later push of the
//   same index (by the thread that receives it next) from feeding this pop's link read.
// - Progress: lock-free (a CAS fails only because another operation succeeded).
// - Memory: 8 bytes of head (give it its own cache line: every operation writes it) plus
//   4 bytes per index.
// - When not to use: as the only pool of a many-threaded process: every operation writes
//   the same head line, which then bounces between cores (seed 000 reports a centralized
//   lock-free pool at >2 us per operation with 14 threads). Use it behind per-worker caches
//   (packet_pool) or where few threads meet.
// - Untrusted state: when other processes can write the head and the links (a shared
//   segment), pop() never reads or returns an index outside 0 .. count-1: a corrupted head
//   or link makes it fail with status::internal instead (the caller treats the stack as
//   unusable). push() trusts its caller's index.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/status.hpp"

namespace mpiv::pool {

/// The "no index" value: the empty stack, the end of a chain.
constexpr std::uint32_t k_nil = 0xffffffffu;

template <template <class> class Atom = std::atomic> class index_stack {
  public:
    index_stack() = default;

    /// @brief Bind the view to its state.
    /// @param[in] head the tagged head word, on its own cache line when shared
    /// @param[in] links one link per index: the stack holds indexes 0 .. count-1
    /// @param[in] count entries of @p links (count < k_nil)
    /// @context not thread-safe; once per view before any other call
    void bind(Atom<std::uint64_t> *head, Atom<std::uint32_t> *links, std::uint32_t count) noexcept
    {
        head_ = head;
        links_ = links;
        count_ = count;
    }

    /// @brief Make the stack empty (generation 0).
    /// @context not thread-safe: only before the state is shared; the caller publishes it
    void format() noexcept { head_->store(pack(k_nil, 0), std::memory_order_relaxed); }

    /// @brief Push @p index (which must have a link and not be on the stack).
    /// @context thread-safe, lock-free; never yields
    void push(std::uint32_t index) noexcept
    {
        std::uint64_t old = head_->load(std::memory_order_relaxed);
        do {
            links_[index].store(top_of(old), std::memory_order_relaxed);
            // sync: release; pairs with the acquire load and CAS in pop(): the popper sees
            // the link above and the contents of the object this index names.
        } while (!head_->compare_exchange_weak(old, pack(index, generation_of(old) + 1),
                                               std::memory_order_release,
                                               std::memory_order_relaxed));
    }

    /// @brief Pop the most recently pushed index.
    /// @param[out] index_p the index, written only on success
    /// @return status::ok, status::not_found when the stack is empty, or status::internal
    ///         when the head or a link holds an index outside 0 .. count-1 (written by
    ///         someone else than this class: the stack is corrupt)
    /// @context thread-safe, lock-free; never yields
    [[nodiscard]] status pop(std::uint32_t &index_p) noexcept
    {
        // sync: acquire; pairs with the release CAS in push().
        std::uint64_t old = head_->load(std::memory_order_acquire);
        for (;;) {
            const std::uint32_t top = top_of(old);
            if (top == k_nil) {
                return status::not_found;
            }
            if (top >= count_) {
                return status::internal;
            }
            const std::uint32_t next = links_[top].load(std::memory_order_relaxed);
            if (next != k_nil && next >= count_) {
                return status::internal;
            }
            // sync: acq_rel; acquire pairs with push()'s release CAS (on failure too: the
            // new top's link is read next); release orders the link read above before any
            // later push of this index by its next owner.
            if (head_->compare_exchange_weak(old, pack(next, generation_of(old) + 1),
                                             std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
                index_p = top;
                return status::ok;
            }
        }
    }

  private:
    static constexpr std::uint64_t pack(std::uint32_t top, std::uint32_t generation) noexcept
    {
        return (std::uint64_t{generation} << 32) | top;
    }
    static constexpr std::uint32_t top_of(std::uint64_t head) noexcept
    {
        return static_cast<std::uint32_t>(head);
    }
    static constexpr std::uint32_t generation_of(std::uint64_t head) noexcept
    {
        return static_cast<std::uint32_t>(head >> 32);
    }

    Atom<std::uint64_t> *head_ = nullptr;  // tagged head, in caller (possibly shared) memory
    Atom<std::uint32_t> *links_ = nullptr; // one link per index, same
    std::uint32_t count_ = 0;              // entries of links_ (kept here, not shared)
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "the tagged head must be lock-free to work across processes");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "links must be lock-free to work across processes");
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4,
              "shared layouts assume plain-sized atomics");

} // namespace mpiv::pool
