// table: the concurrent matching hash table of MPIv (seed 000 §3.2), with one FIFO per key.
//
// Design:
// - A power-of-two array of 64-byte buckets, one cache line each. A bucket is four
//   16-byte entries: a control entry (the bucket's spinlock, the context ids of the three
//   keys, the overflow pointer) and three data entries {queue word, source and tag packed
//   in one word}. The key is the full (context id, source, tag): 16 + 32 + 32 bits,
//   compared exactly.
// - A key's value is a FIFO of nodes of one side only: posted receives, or unexpected
//   messages (MPIv kept one value per key, so two messages of one key could match out of
//   order, or match each other). The FIFO is circular and singly linked through the
//   caller's nodes; the queue word holds its tail (tail->next_ is the head) plus the side
//   in bit 0, so push_back and pop_front are O(1) and one word describes the queue.
//   A queue word of 0 means the entry is free.
// - Overflow: a fourth live key in a bucket is not given a new bucket (MPIv allocated
//   one); its queue is chained from the control entry through the spill_ field of its own
//   tail node, and so on. Hence the table allocates nothing after create() and an insert
//   cannot fail. Chained keys cost a pointer chase each: size the table so that buckets
//   rarely hold more than three live keys (about twice the number of keys live at once).
// - queue_guard is the locked access to one key's FIFO. The MPIv operation (if the FIFO
//   holds the other side, pop its head, the earliest; else append) is a few steps of it;
//   basic_comm adds the MPI rules between those steps.
//
// Invariants (under the bucket lock): every key appears at most once in its bucket (in a
// data entry or in the overflow chain); a non-empty FIFO holds nodes of one side, all
// with the key in their detail::link; a node is in at most one FIFO; an entry's tail node
// has spill_ == 0, a chained queue's tail node holds the link to the next chained queue.
// Ordering: the spinlock (detail::spin_lock) is acquired with an acquire exchange and
// released with a release store; all other bucket and node fields are plain data it guards.
// Memory: 64 B per bucket, nothing per key or per node beyond the caller's nodes.
// Serial tables (create(..., serial = true)) skip the bucket locks: for a caller whose
// calls never overlap (an MPI library initialized below MPI_THREAD_MULTIPLE, with no
// progress thread). Everything else is the same.
// When not to use it: wildcard receives (a key cannot express them: see basic_comm).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "base/status.hpp"
#include "matching/node.hpp"

namespace mpiv::match {
namespace detail {

/// Acquire a one-word spinlock (0 = free, 1 = held): test-and-test-and-set with back-off,
/// so that waiters yield once threads outnumber PUs. Used for buckets and peers.
inline void spin_lock(std::atomic<std::uint16_t> &word) noexcept
{
    base::backoff wait;
    // sync: acquire; pairs with release in spin_unlock()
    while (word.exchange(1, std::memory_order_acquire) != 0) {
        while (word.load(std::memory_order_relaxed) != 0) {
            wait.pause();
        }
    }
}

/// Release a spinlock taken with spin_lock().
inline void spin_unlock(std::atomic<std::uint16_t> &word) noexcept
{
    // sync: release; pairs with acquire in spin_lock()
    word.store(0, std::memory_order_release);
}

} // namespace detail

/// A matching key: (context id, source, tag), all exact (no wildcards).
struct key {
    std::uint16_t cid = 0;
    std::int32_t source = 0;
    std::int32_t tag = 0;
};

/// Which kind of node a key's FIFO holds.
enum class side : std::uintptr_t {
    recv = 0, ///< posted receives (recv_node)
    msg = 1,  ///< unexpected messages (msg_node)
};

class table {
    struct bucket;
    struct entry;

  public:
    /// Largest bucket count create() accepts (2^30 buckets = 64 GiB).
    static constexpr std::size_t k_max_buckets = std::size_t{1} << 30;

    /// Create a table of at least @p min_buckets buckets (rounded up to a power of two).
    /// @param[in]  min_buckets  1 .. k_max_buckets; about twice the keys live at once
    /// @param[out] table_p      the new table (written on success only)
    /// @return ok; invalid_arg if min_buckets is out of range; nomem.
    /// @context thread-safe; allocates; not for the data path.
    /// @param[in]  serial       true: the caller never overlaps calls (no bucket locks)
    [[nodiscard]] static status create(std::size_t min_buckets, std::unique_ptr<table> &table_p,
                                       bool serial = false) noexcept;

    table(const table &) = delete;
    table &operator=(const table &) = delete;

    /// True for a table whose calls never overlap (created serial): no locks are taken.
    bool serial() const noexcept { return serial_; }

    /// Number of buckets (a power of two).
    std::size_t bucket_count() const noexcept { return mask_ + 1; }

    /// Every bucket lock held at once (construction locks them in bucket order,
    /// destruction unlocks): for a rare change that no keyed access may overlap
    /// (basic_comm::set_assertions). O(bucket count); none is taken in a serial table.
    /// Not while holding a queue_guard of the same table.
    class all_guard {
      public:
        explicit all_guard(table &t) noexcept : t_(t)
        {
            if (!t_.serial_) {
                for (std::size_t i = 0; i <= t_.mask_; ++i) {
                    detail::spin_lock(t_.buckets_[i].lock);
                }
            }
        }
        ~all_guard()
        {
            if (!t_.serial_) {
                for (std::size_t i = 0; i <= t_.mask_; ++i) {
                    detail::spin_unlock(t_.buckets_[i].lock);
                }
            }
        }
        all_guard(const all_guard &) = delete;
        all_guard &operator=(const all_guard &) = delete;

      private:
        table &t_;
    };

    /// Call @p fn(detail::link &tail) for every non-empty FIFO of side @p s whose
    /// key has context id @p cid (the head is tail.next_; the FIFO is circular).
    /// @context only under an all_guard of this table (or in a serial table); O(buckets);
    ///          an exception from @p fn propagates.
    template <class Fn> void for_each_queue(std::uint16_t cid, side s, Fn &&fn)
    {
        const auto wanted = static_cast<std::uintptr_t>(s);
        for (std::size_t i = 0; i <= mask_; ++i) {
            const bucket &b = buckets_[i];
            for (std::size_t e = 0; e < k_entries; ++e) {
                const std::uintptr_t word = b.entries[e].queue;
                if (word != 0 && b.cid[e] == cid && (word & k_side_bit) == wanted) {
                    fn(*tail_of(word));
                }
            }
            for (std::uintptr_t word = b.overflow; word != 0; word = tail_of(word)->spill_) {
                if (tail_of(word)->cid_ == cid && (word & k_side_bit) == wanted) {
                    fn(*tail_of(word));
                }
            }
        }
    }

    /// Locked access to one key's FIFO: construction locks the key's bucket and finds the
    /// key, destruction unlocks. Keep it short: other keys of the bucket wait meanwhile.
    class queue_guard {
      public:
        /// Lock @p k's bucket of @p t. @context thread-safe; spins, then yields.
        queue_guard(table &t, const key &k) noexcept;
        ~queue_guard();
        queue_guard(const queue_guard &) = delete;
        queue_guard &operator=(const queue_guard &) = delete;

        /// True when the key's FIFO is empty (the key is absent).
        bool empty() const noexcept { return slot_ == nullptr; }
        /// True when the key's FIFO is non-empty and holds side @p s.
        bool holds(side s) const noexcept
        {
            return slot_ != nullptr && (*slot_ & k_side_bit) == static_cast<std::uintptr_t>(s);
        }
        /// The earliest node. Precondition: !empty().
        detail::link *front() const noexcept { return tail_of(*slot_)->next_; }
        /// Remove and return the earliest node. Precondition: !empty().
        detail::link *pop_front() noexcept;
        /// Append @p node (its key must be this key). Precondition: empty() or holds(s).
        void push_back(detail::link &node, side s) noexcept;
        /// Remove @p node from anywhere in the FIFO: O(FIFO length).
        /// @return true if it was there.
        bool remove(detail::link &node) noexcept;

      private:
        // The queue became empty: free its entry or unchain it.
        void release_slot(detail::link *tail) noexcept;

        std::uint64_t source_tag_; // the key: pack(source, tag) and cid
        std::uint16_t cid_;
        bool locked_; // false in a serial table
        bucket &bucket_;
        std::uintptr_t *slot_; // the queue word (entry or overflow link); null if absent
        entry *free_;          // while absent: a free entry for it, or null (overflow)
    };

  private:
    static constexpr std::uintptr_t k_side_bit = 1;
    static constexpr std::size_t k_entries = 3;

    struct entry {
        std::uintptr_t queue = 0;     // tail node | side bit; 0 = free
        std::uint64_t source_tag = 0; // pack(source, tag) of the key
    };

    // Exactly one cache line; see the design comment.
    struct alignas(64) bucket {
        std::atomic<std::uint16_t> lock{0}; // 1 while held
        std::uint16_t cid[k_entries] = {};  // context ids of entry[]'s keys
        std::uintptr_t overflow = 0;        // first chained queue: tail | side bit
        entry entries[k_entries];
    };
    static_assert(sizeof(bucket) == 64, "a bucket must be exactly one 64-byte line");
    static_assert(alignof(bucket) == 64, "buckets must not straddle cache lines");
    static_assert(sizeof(entry) == 16, "an entry is two 64-bit words");
    static_assert(std::atomic<std::uint16_t>::is_always_lock_free,
                  "the spinlock must be lock-free");

    table(std::unique_ptr<bucket[]> buckets, std::size_t mask, unsigned shift, bool serial) noexcept
        : buckets_(std::move(buckets)), mask_(mask), shift_(shift), serial_(serial)
    {
    }

    static detail::link *tail_of(std::uintptr_t word) noexcept
    {
        return reinterpret_cast<detail::link *>(word & ~k_side_bit);
    }

    // Source and tag in one word: one comparison per entry, and the hash input.
    static std::uint64_t pack(std::int32_t source, std::int32_t tag) noexcept
    {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(source)) << 32) |
               static_cast<std::uint32_t>(tag);
    }

    bucket &bucket_of(std::uint64_t source_tag, std::uint16_t cid) noexcept;
    // The key's queue word, or nullptr (then free_p is the first free entry, or nullptr).
    static std::uintptr_t *find(bucket &b, std::uint64_t source_tag, std::uint16_t cid,
                                entry *&free_p) noexcept;

    std::unique_ptr<bucket[]> buckets_;
    std::size_t mask_;
    unsigned shift_; // 64 - log2(bucket count), 0 for a single bucket (mask_ is 0 then)
    bool serial_;    // calls never overlap: no bucket locks
};

// ---------------------------------------------------------------- inline implementation

inline status table::create(std::size_t min_buckets, std::unique_ptr<table> &table_p,
                            bool serial) noexcept
{
    if (min_buckets == 0 || min_buckets > k_max_buckets) {
        base::log(base::log_level::error, "match::table: bucket count %zu is not in 1..%zu",
                  min_buckets, k_max_buckets);
        return status::invalid_arg;
    }
    std::size_t n = 1;
    unsigned bits = 0;
    while (n < min_buckets) {
        n <<= 1;
        ++bits;
    }
    std::unique_ptr<bucket[]> buckets(new (std::nothrow) bucket[n]);
    std::unique_ptr<table> t;
    if (buckets != nullptr) {
        t.reset(new (std::nothrow)
                    table(std::move(buckets), n - 1, bits == 0 ? 0 : 64 - bits, serial));
    }
    if (t == nullptr) {
        base::log(base::log_level::error, "match::table: cannot allocate %zu buckets", n);
        return status::nomem;
    }
    table_p = std::move(t);
    return status::ok;
}

inline table::bucket &table::bucket_of(std::uint64_t source_tag, std::uint16_t cid) noexcept
{
    // Fibonacci hashing: multiply the packed key by 2^64/phi and keep the top bits, which
    // depend on every key bit, so consecutive tags or ranks spread evenly. The context id
    // goes to the top bits of the source, which ranks below 2^16 leave free.
    const std::uint64_t x = source_tag ^ (static_cast<std::uint64_t>(cid) << 48);
    return buckets_[((x * 0x9e3779b97f4a7c15ULL) >> shift_) & mask_];
}

inline std::uintptr_t *table::find(bucket &b, std::uint64_t source_tag, std::uint16_t cid,
                                   entry *&free_p) noexcept
{
    free_p = nullptr;
    for (std::size_t i = 0; i < k_entries; ++i) {
        entry &e = b.entries[i];
        if (e.queue == 0) {
            free_p = free_p != nullptr ? free_p : &e;
        } else if (e.source_tag == source_tag && b.cid[i] == cid) {
            return &e.queue;
        }
    }
    for (std::uintptr_t *w = &b.overflow; *w != 0; w = &tail_of(*w)->spill_) {
        const detail::link &n = *tail_of(*w);
        if (pack(n.source_, n.tag_) == source_tag && n.cid_ == cid) {
            return w;
        }
    }
    return nullptr;
}

inline table::queue_guard::queue_guard(table &t, const key &k) noexcept
    : source_tag_(pack(k.source, k.tag)), cid_(k.cid), locked_(!t.serial_),
      bucket_(t.bucket_of(source_tag_, cid_))
{
    if (locked_) {
        detail::spin_lock(bucket_.lock);
    }
    slot_ = find(bucket_, source_tag_, cid_, free_);
}

inline table::queue_guard::~queue_guard()
{
    if (locked_) {
        detail::spin_unlock(bucket_.lock);
    }
}

inline void table::queue_guard::release_slot(detail::link *tail) noexcept
{
    *slot_ = tail->spill_;
    slot_ = nullptr;
    free_ = nullptr;
    for (entry &e : bucket_.entries) {
        if (e.queue == 0) {
            free_ = &e;
            break;
        }
    }
}

inline detail::link *table::queue_guard::pop_front() noexcept
{
    detail::link *tail = tail_of(*slot_);
    detail::link *head = tail->next_;
    if (head == tail) {
        // Last node: free the entry, or unchain the queue (an entry's tail has spill_ 0).
        release_slot(tail);
    } else {
        tail->next_ = head->next_;
    }
    return head;
}

inline void table::queue_guard::push_back(detail::link &node, side s) noexcept
{
    const std::uintptr_t word =
        reinterpret_cast<std::uintptr_t>(&node) | static_cast<std::uintptr_t>(s);
    if (slot_ != nullptr) {
        detail::link *tail = tail_of(*slot_);
        node.next_ = tail->next_;
        node.spill_ = tail->spill_; // the tail carries the overflow link
        tail->next_ = &node;
        *slot_ = word;
        return;
    }
    node.next_ = &node;
    if (free_ != nullptr) {
        node.spill_ = 0;
        free_->source_tag = source_tag_;
        bucket_.cid[free_ - bucket_.entries] = cid_;
        free_->queue = word;
        slot_ = &free_->queue;
        return;
    }
    node.spill_ = bucket_.overflow;
    bucket_.overflow = word;
    slot_ = &bucket_.overflow;
}

inline bool table::queue_guard::remove(detail::link &node) noexcept
{
    if (slot_ == nullptr) {
        return false;
    }
    detail::link *tail = tail_of(*slot_);
    detail::link *prev = tail;
    while (prev->next_ != &node) {
        prev = prev->next_;
        if (prev == tail) {
            return false;
        }
    }
    if (prev == &node) { // the only node
        release_slot(tail);
        return true;
    }
    prev->next_ = node.next_;
    if (&node == tail) {
        prev->spill_ = tail->spill_;
        *slot_ = reinterpret_cast<std::uintptr_t>(prev) | (*slot_ & k_side_bit);
    }
    return true;
}

} // namespace mpiv::match
