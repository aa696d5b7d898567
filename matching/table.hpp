// table: the concurrent matching hash table of MPIv (seed 000 §3.2), with one FIFO per key,
// whose bucket array grows with the number of keys alive.
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
//   tail node, and so on. Hence an insert allocates nothing and cannot fail. Each chained
//   key costs a pointer chase, a cache and TLB miss when the nodes live in the stacks of
//   blocked ULTs (400,000 ULTs in 2^14 buckets: chains of 24 keys), hence growth.
// - Growth: the array (buckets, mask, shift) sits behind the atomic pointer array_. An
//   insert that chains a new key behind k_grow_chain (8) chained keys asks for growth,
//   and its queue_guard grows the table after unlocking its bucket: to k_grow_factor (4)
//   times the buckets, up to k_max_buckets. One grower at a time (grow_lock_; the others
//   go on in the current array): it allocates the new array, takes every bucket lock of
//   the current one in bucket order, moves every queue to its new bucket (entries, or
//   chains rebuilt through the tail nodes' spill_; nodes and queue words stay as they
//   are), publishes the new array and leaves the old buckets' lock words k_moved instead
//   of unlocking them. A request that finds the array already replaced, or another grower
//   at work, does nothing.
//   Why a chain length: the inserting thread has just walked the chain (find()), so
//   counting it costs cache hits and no shared write (a count of the keys would be a
//   contended word on every insert). Why 8: keys
//   that hash like random ones put about Poisson(n / b) of n keys in each of b buckets,
//   and a new key meets 8 chained keys when its bucket already holds 11: per insert,
//   1e-8 at 1 key per bucket, 8e-6 at 2, 3e-4 at 3, 3e-3 at 4. Such keys grow the table
//   once the load passes about 3 (0.7 chained keys per bucket), back below 1 (0.02): no
//   growth from bad luck at that load. Consecutive tags (one receive per ULT on tag i)
//   spread far more evenly (the fullest bucket holds one or two keys more than the mean),
//   so they grow it only near 11 keys per bucket (400,000 of them end in 2^16 buckets,
//   chains of about 3). Chains of up to 8 keys cost little: 2^20 buckets instead of 2^14
//   did not speed up 200,000 ULTs (chains of 9), but did 400,000 (24; bench/README.md).
//   Full entries: chains of a few keys are cheap only while their nodes are in the cache.
//   Keys that spread evenly (consecutive tags or ranks: one receive per ULT) chain in
//   every bucket alike, each chained node a miss in a blocked ULT's stack, and every post
//   of a key not in the entries walks them all, long before any chain reaches 8 (500,000
//   ULTs in 2^16 buckets: about 7.6 keys per bucket, chains of 4 to 5). So an insert that
//   chains behind k_load_chain (2) chained keys or more also checks, once in
//   k_load_check_every such inserts of its thread (a thread-local count: no shared
//   write), whether the table is full around its bucket: after unlocking it, it
//   try-locks the next k_load_sample buckets one at a time (skipping any that is held or
//   moved; it waits for none, so no lock order is at stake) and counts their used
//   entries; with at least half of them seen, at least 5/6 of their entries in use (a mean load of about 3.5 for random keys, where
//   Poisson leaves a sixth of the entries free) asks for the same growth. One crowded
//   bucket in a light table (a few keys that hash alike) does not: its neighbours are
//   mostly free. Why 2 and not 1: with evenly spread keys at 4 per bucket (65,536 ULTs in
//   2^14 buckets: one chained key each) growing to 2^16 buckets made the rate 0.95x, the
//   bucket array then outgrowing the level-2 cache; with chains of 4 or more it was 1.7x
//   (bench/README.md).
//   Why 4x: a growth stops every keyed access for one pass over the table (a miss per
//   chained node), so fewer passes are better; the replaced arrays then add at most
//   1/4 + 1/16 + ... = 1/3 of the current one (2x: up to as much again, and twice the
//   passes). The hash keeps the top bits of a product, so old bucket i spreads over new
//   buckets 4i .. 4i + 3: the pass writes the new array in order.
// - The re-check, in the lock word: queue_guard loads array_ and locks the key's bucket
//   of that array with a CAS from free to held, which fails on k_moved: then it loads
//   array_ again and starts over in the newer array. A grower holds every bucket lock of
//   the array it replaces from before it reads a queue until after it publishes, and then
//   leaves them k_moved, never free again. So a guard whose CAS took a bucket of array a
//   works on the live array while it holds it: a grower of a waits for that lock, and one
//   that ran before would have left the word k_moved. all_guard locks every bucket the
//   same way. A second load of array_ after locking would do as well, but it keeps the
//   table and the array live across the lock: 7 % slower in bench_match (BM_match_posted).
//   Replaced arrays are kept until the table is destroyed (a guard may still try one of
//   their buckets before it sees the newer pointer): no reclamation protocol, and a
//   pointer is never reused. contrib/model/table_grow.pml checks this protocol.
// - Deadlock freedom of growth: the grower holds no bucket lock when it starts; it may
//   hold a peer spinlock and a TLP lock (basic_comm's arrivals and slow paths), which
//   precede bucket locks in basic_comm's lock order. A thread that holds a bucket lock
//   waits for nothing (queue_guard), or only for further bucket locks of the same array
//   taken in bucket order (all_guard, growers): no cycle can form. This needs a thread to
//   hold at most one queue_guard of a table at a time, and none inside an all_guard
//   (basic_comm nests none).
// - queue_guard is the locked access to one key's FIFO. The MPIv operation (if the FIFO
//   holds the other side, pop its head, the earliest; else append) is a few steps of it;
//   basic_comm adds the MPI rules between those steps.
//
// Invariants (under the bucket lock of the current array): every key appears at most once
// in its bucket (in a data entry or in the overflow chain), and in no other bucket of the
// current array; a non-empty FIFO holds nodes of one side, all with the key in their
// detail::link; a node is in at most one FIFO; an entry's tail node has spill_ == 0, a
// chained queue's tail node holds the link to the next chained queue. A replaced array's
// buckets are stale and never read again (only their locks are taken, and let go).
// Ordering: a bucket's spinlock (detail::lock_bucket) is acquired with an acquire CAS and
// released with a release store, of free or (by the grower) k_moved; all other bucket and
// node fields are plain data it guards. array_ is published with a release store and
// loaded with acquire: the new buckets, and every change made under the old array's
// locks, which the grower acquired.
// Memory: 64 B per bucket, plus at most a third of that in replaced arrays; nothing per
// key or per node beyond the caller's nodes. Growth allocates outside every lock; when it
// cannot (no memory, or k_max_buckets reached), growth stops for good, with one log line
// for the former, and keys keep chaining: nothing is lost.
// Serial tables (create(..., serial = true)) skip the bucket locks: for a caller whose
// calls never overlap (an MPI library initialized below MPI_THREAD_MULTIPLE, with no
// progress thread). Everything else, growth included, is the same.
// When not to use it: wildcard receives (a key cannot express them: see basic_comm).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "base/backoff.hpp"
#include "base/cacheline.hpp"
#include "base/lock/tas.hpp"
#include "base/log.hpp"
#include "base/stats.hpp"
#include "base/status.hpp"
#include "matching/node.hpp"

namespace mpiv::match {
namespace detail {

/// Lock word of a bucket whose array a larger one replaced: never free again.
constexpr std::uint16_t k_moved = 2;

/// Acquire a bucket's spinlock (0 = free, 1 = held, or k_moved) as base::tas_acquire()
/// does (peers' words are taken with that one; both are released with base::tas_release()).
/// @return true when locked; false when the word is k_moved (the caller goes to the
///         current array).
inline bool lock_bucket(std::atomic<std::uint16_t> &word) noexcept
{
    base::backoff wait;
    for (;;) {
        std::uint16_t seen = 0;
        // sync: acquire; pairs with release in base::tas_release() and with the release store of
        // k_moved in table::grow() (then the new array is visible)
        if (word.compare_exchange_weak(seen, 1, std::memory_order_acquire,
                                       std::memory_order_acquire)) {
            return true;
        }
        if (seen == k_moved) {
            return false;
        }
        while (word.load(std::memory_order_relaxed) == 1) {
            wait.pause();
        }
    }
}

// Inserts the calling thread had to chain (table::k_load_check_every). initial-exec: no
// __tls_get_addr call in a library Open MPI loads with dlopen.
inline thread_local std::uint32_t tl_chained_inserts __attribute__((tls_model("initial-exec"))) = 0;

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
    struct array;
    struct bucket;
    struct entry;

  public:
    /// Largest bucket count create() accepts and growth reaches (2^30 buckets = 64 GiB).
    static constexpr std::size_t k_max_buckets = std::size_t{1} << 30;
    /// An insert that chains a new key behind this many chained keys or more asks for growth.
    static constexpr std::uint32_t k_grow_chain = 8;
    /// Of the inserts a thread chains behind at least k_load_chain chained keys, one in
    /// k_load_check_every checks whether the table is full around its bucket (and then
    /// asks for growth).
    static constexpr std::uint32_t k_load_chain = 2;
    static constexpr std::uint32_t k_load_check_every = 64;
    /// Buckets that check samples (the ones after the inserting key's).
    static constexpr std::size_t k_load_sample = 8;
    /// A growth multiplies the bucket count by this.
    static constexpr std::size_t k_grow_factor = 4;

    /// Create a table of at least @p min_buckets buckets (rounded up to a power of two).
    /// @param[in]  min_buckets  1 .. k_max_buckets: the initial size; the table grows when
    ///                          its chains get long
    /// @param[out] table_p      the new table (written on success only)
    /// @param[in]  serial       true: the caller never overlaps calls (no bucket locks)
    /// @return ok; invalid_arg if min_buckets is out of range; nomem.
    /// @context thread-safe; allocates; not for the data path.
    [[nodiscard]] static status create(std::size_t min_buckets, std::unique_ptr<table> &table_p,
                                       bool serial = false) noexcept;

    /// Destroy the table and every array it had.
    ~table();

    table(const table &) = delete;
    table &operator=(const table &) = delete;

    /// True for a table whose calls never overlap (created serial): no locks are taken.
    bool serial() const noexcept { return serial_; }

    /// Number of buckets of the current array (a power of two; it only grows).
    /// @context thread-safe; a concurrent growth may make the answer stale at once.
    std::size_t bucket_count() const noexcept
    {
        // sync: acquire; pairs with the release store in grow() (the array's fields)
        return array_.load(std::memory_order_acquire)->mask + 1;
    }

    /// Every bucket lock of the current array held at once (construction locks them in
    /// bucket order, starting over in the newer array if it meets a bucket k_moved;
    /// destruction unlocks): for a rare change that no keyed access or growth may overlap
    /// (basic_comm::set_assertions). O(bucket count); none is taken in a serial table.
    /// Not while holding a queue_guard of the same table, nor a queue_guard inside it.
    class all_guard {
      public:
        explicit all_guard(table &t) noexcept;
        ~all_guard();
        all_guard(const all_guard &) = delete;
        all_guard &operator=(const all_guard &) = delete;

      private:
        table &t_;
        array *array_; // the array whose locks are held
    };

    /// Call @p fn(detail::link &tail) for every non-empty FIFO of side @p s whose
    /// key has context id @p cid (the head is tail.next_; the FIFO is circular).
    /// @context only under an all_guard of this table (or in a serial table); O(buckets);
    ///          an exception from @p fn propagates.
    template <class Fn> void for_each_queue(std::uint16_t cid, side s, Fn &&fn)
    {
        const auto wanted = static_cast<std::uintptr_t>(s);
        // Relaxed: under an all_guard no growth can run (and the guard's own acquire load
        // saw this array); a serial table's calls never overlap.
        const array &a = *array_.load(std::memory_order_relaxed);
        for (std::size_t i = 0; i <= a.mask; ++i) {
            const bucket &b = a.buckets[i];
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
    /// key, destruction unlocks (and then grows the table if an insert asked for it). Keep
    /// it short: other keys of the bucket wait meanwhile. At most one per thread and table
    /// at a time (see the design block).
    class queue_guard {
      public:
        /// Lock @p k's bucket of @p t. @context thread-safe; spins, then yields.
        /// Always inline: it is most of a keyed access, and GCC's choice flips with the
        /// size of the callers (a call in the arrival's matching cost the latency path).
        [[gnu::always_inline]] queue_guard(table &t, const key &k) noexcept;
        /// Unlock; if push_back() asked for growth, grow the table (see the design block).
        /// @context when it grows (a few times in the table's life, each growth 4x):
        ///          allocates, takes every bucket lock and moves every queue.
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

        array *array_;             // the array of bucket_ (current while it is locked)
        bucket *bucket_;           // the key's bucket, locked unless the table is serial
        std::uintptr_t *slot_;     // the queue word (entry or overflow link); null if absent
        entry *free_;              // while absent: a free entry for it, or null (overflow)
        std::uint64_t source_tag_; // the key: pack(source, tag) and cid
        std::uint16_t cid_;
        bool locked_; // false in a serial table
        // push_back() chained a key: check once unlocked whether the table is full.
        bool check_load_;
        // push_back() chained a key behind a long chain: grow this array once unlocked.
        array *grow_;
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
        std::atomic<std::uint16_t> lock{0}; // 1 while held, k_moved once replaced
        std::uint16_t cid[k_entries] = {};  // context ids of entry[]'s keys
        std::uintptr_t overflow = 0;        // first chained queue: tail | side bit
        entry entries[k_entries];
    };
    static_assert(sizeof(bucket) == 64, "a bucket must be exactly one 64-byte line");
    static_assert(alignof(bucket) == 64, "buckets must not straddle cache lines");
    static_assert(sizeof(entry) == 16, "an entry is two 64-bit words");
    static_assert(std::atomic<std::uint16_t>::is_always_lock_free,
                  "the spinlock must be lock-free");

    // One bucket array. Immutable once published, but for its buckets; kept, once
    // replaced, by the array that replaced it (older), until the table goes.
    struct array {
        array(std::unique_ptr<bucket[]> b, std::size_t m, unsigned s) noexcept
            : buckets(std::move(b)), mask(m), shift(s)
        {
        }
        bucket &of(std::uint64_t source_tag, std::uint16_t cid) noexcept;

        std::unique_ptr<bucket[]> buckets;
        std::size_t mask;
        unsigned shift;               // 64 - log2(bucket count), 0 for a single bucket
        table *owner = nullptr;       // the table (for a growth asked by a queue_guard)
        std::unique_ptr<array> older; // the array this one replaced, or null
    };

    friend struct table_test_access;

    table(array *a, bool serial) noexcept : array_(a), serial_(serial) { a->owner = this; }

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

    // An array of @p n buckets (a power of two), or null without memory.
    static std::unique_ptr<array> make_array(std::size_t n) noexcept;
    // The key's queue word, or nullptr (then free_p is the first free entry, or nullptr).
    static std::uintptr_t *find(bucket &b, std::uint64_t source_tag, std::uint16_t cid,
                                entry *&free_p) noexcept;
    // The keys of the overflow chain of @p b, counted up to k_grow_chain.
    static std::uint32_t chain_length(const bucket &b) noexcept;
    // The key's bucket of the current array, locked, and that array: after a bucket of a
    // replaced one. Static and returning by value, so that the guard stays in registers.
    struct located {
        array *a;
        bucket *b;
    };
    static located relock(table &t, std::uint64_t source_tag,
                          std::uint16_t cid) noexcept; // out of line: rare
    // Lock every bucket of @p a in bucket order (false, none held: @p a was replaced), or
    // unlock them.
    static bool lock_all(array &a) noexcept;
    static void unlock_all(array &a) noexcept;
    // Replace @p from, if it is still the current array, by one k_grow_factor times larger.
    void grow(array &from) noexcept; // out of line: rare
    // grow(@p a) if the k_load_sample buckets after @p b have at least 5/6 of their entries
    // in use. Holding no bucket lock of this table.
    void grow_if_full(array &a, const bucket *b) noexcept; // out of line: rare
    // Move the queue @p word of key (@p source_tag, @p cid) into its bucket of @p to;
    // @p chained: it comes from a chain (its tail's spill_ is then rewritten either way).
    static void move_queue(array &to, std::uintptr_t word, std::uint64_t source_tag,
                           std::uint16_t cid, bool chained) noexcept;

    // The current array; older ones hang off it. Read by every keyed access.
    std::atomic<array *> array_;
    bool serial_; // calls never overlap: no bucket locks
    // Held by the one grower; held for good once growth has stopped (see the design
    // block). Written only when growth is asked for: kept off array_'s line.
    alignas(k_false_sharing) std::atomic<bool> grow_lock_{false};
};

// ---------------------------------------------------------------- inline implementation

inline std::unique_ptr<table::array> table::make_array(std::size_t n) noexcept
{
    unsigned bits = 0;
    while ((std::size_t{1} << bits) < n) {
        ++bits;
    }
    std::unique_ptr<bucket[]> buckets(new (std::nothrow) bucket[n]);
    if (buckets == nullptr) {
        return nullptr;
    }
    return std::unique_ptr<array>(
        new (std::nothrow) array(std::move(buckets), n - 1, bits == 0 ? 0 : 64 - bits));
}

inline status table::create(std::size_t min_buckets, std::unique_ptr<table> &table_p,
                            bool serial) noexcept
{
    if (min_buckets == 0 || min_buckets > k_max_buckets) {
        base::log(base::log_level::error, "match::table: bucket count %zu is not in 1..%zu",
                  min_buckets, k_max_buckets);
        return status::invalid_arg;
    }
    std::size_t n = 1;
    while (n < min_buckets) {
        n <<= 1;
    }
    std::unique_ptr<array> a = make_array(n);
    std::unique_ptr<table> t;
    if (a != nullptr) {
        t.reset(new (std::nothrow) table(a.get(), serial));
    }
    if (t == nullptr) {
        base::log(base::log_level::error, "match::table: cannot allocate %zu buckets", n);
        return status::nomem;
    }
    (void)a.release(); // owned by the table now
    table_p = std::move(t);
    return status::ok;
}

inline table::~table()
{
    // Relaxed: destruction follows the last call, ordered by the caller.
    delete array_.load(std::memory_order_relaxed);
}

inline table::bucket &table::array::of(std::uint64_t source_tag, std::uint16_t cid) noexcept
{
    // Fibonacci hashing: multiply the packed key by 2^64/phi and keep the top bits, which
    // depend on every key bit, so consecutive tags or ranks spread evenly. The context id
    // goes to the top bits of the source, which ranks below 2^16 leave free.
    const std::uint64_t x = source_tag ^ (static_cast<std::uint64_t>(cid) << 48);
    return buckets[((x * 0x9e3779b97f4a7c15ULL) >> shift) & mask];
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

inline std::uint32_t table::chain_length(const bucket &b) noexcept
{
    // The nodes were just walked by find(): in cache.
    std::uint32_t n = 0;
    for (std::uintptr_t w = b.overflow; w != 0 && n < k_grow_chain; w = tail_of(w)->spill_) {
        ++n;
    }
    return n;
}

inline bool table::lock_all(array &a) noexcept
{
    for (std::size_t i = 0; i <= a.mask; ++i) {
        if (!detail::lock_bucket(a.buckets[i].lock)) {
            while (i > 0) {
                base::tas_release(a.buckets[--i].lock);
            }
            return false;
        }
    }
    return true;
}

inline void table::unlock_all(array &a) noexcept
{
    for (std::size_t i = 0; i <= a.mask; ++i) {
        base::tas_release(a.buckets[i].lock);
    }
}

inline table::all_guard::all_guard(table &t) noexcept : t_(t)
{
    // sync: acquire; pairs with the release store in grow() (the array's fields)
    array_ = t_.array_.load(std::memory_order_acquire);
    if (t_.serial_) {
        return;
    }
    while (!lock_all(*array_)) {
        // sync: acquire; pairs with the release store in grow() (a newer array's buckets)
        array_ = t_.array_.load(std::memory_order_acquire);
    }
}

inline table::all_guard::~all_guard()
{
    if (!t_.serial_) {
        unlock_all(*array_);
    }
}

inline table::queue_guard::queue_guard(table &t, const key &k) noexcept
    : source_tag_(pack(k.source, k.tag)), cid_(k.cid), locked_(!t.serial_), check_load_(false),
      grow_(nullptr)
{
    // sync: acquire; pairs with the release store in grow() (the array's buckets, and
    // the changes made under the replaced array's locks)
    array *a = t.array_.load(std::memory_order_acquire);
    bucket *b = &a->of(source_tag_, cid_);
    if (locked_ && !detail::lock_bucket(b->lock)) {
        const located l = relock(t, source_tag_, cid_);
        a = l.a;
        b = l.b;
    }
    array_ = a;
    bucket_ = b;
    slot_ = find(*b, source_tag_, cid_, free_);
}

[[gnu::cold, gnu::noinline]] inline table::located
table::relock(table &t, std::uint64_t source_tag, std::uint16_t cid) noexcept
{
    located l;
    do {
        // sync: acquire; pairs with the release store in grow()
        l.a = t.array_.load(std::memory_order_acquire);
        l.b = &l.a->of(source_tag, cid);
    } while (!detail::lock_bucket(l.b->lock));
    return l;
}

inline table::queue_guard::~queue_guard()
{
    if (locked_) {
        base::tas_release(bucket_->lock);
    }
    if (grow_ != nullptr) {
        grow_->owner->grow(*grow_); // holding no bucket lock (see the design block)
    } else if (check_load_) {
        array_->owner->grow_if_full(*array_, bucket_);
    }
}

inline void table::queue_guard::release_slot(detail::link *tail) noexcept
{
    *slot_ = tail->spill_;
    slot_ = nullptr;
    free_ = nullptr;
    for (entry &e : bucket_->entries) {
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
        bucket_->cid[free_ - bucket_->entries] = cid_;
        free_->queue = word;
        slot_ = &free_->queue;
        return;
    }
    const std::uint32_t chained = chain_length(*bucket_);
    if (chained >= k_grow_chain) {
        grow_ = array_;
    } else if (chained >= k_load_chain && ++detail::tl_chained_inserts % k_load_check_every == 0) {
        check_load_ = true;
    }
    node.spill_ = bucket_->overflow;
    bucket_->overflow = word;
    slot_ = &bucket_->overflow;
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

inline void table::move_queue(array &to, std::uintptr_t word, std::uint64_t source_tag,
                              std::uint16_t cid, bool chained) noexcept
{
    bucket &b = to.of(source_tag, cid);
    detail::link *tail = tail_of(word);
    for (std::size_t i = 0; i < k_entries; ++i) {
        entry &e = b.entries[i];
        if (e.queue == 0) {
            e.queue = word;
            e.source_tag = source_tag;
            b.cid[i] = cid;
            if (chained) { // an entry's tail had spill_ 0 already: not touched again
                tail->spill_ = 0;
            }
            return;
        }
    }
    tail->spill_ = b.overflow;
    b.overflow = word;
}

[[gnu::cold, gnu::noinline]] inline void table::grow_if_full(array &a, const bucket *b) noexcept
{
    // Relaxed: a stale answer only makes the check run on a replaced array, whose
    // buckets it then finds k_moved (or grow() skips it).
    if (array_.load(std::memory_order_relaxed) != &a) {
        return;
    }
    const std::size_t at = static_cast<std::size_t>(b - a.buckets.get());
    std::size_t sampled = 0;
    std::size_t used = 0;
    for (std::size_t i = 1; i <= k_load_sample && i <= a.mask; ++i) {
        bucket &x = a.buckets[(at + i) & a.mask];
        std::uint16_t free_word = 0;
        // sync: acquire; pairs with the release in base::tas_release() (the entries it
        // guards). A try: held or k_moved, the bucket is skipped.
        if (!serial_ && !x.lock.compare_exchange_strong(free_word, 1, std::memory_order_acquire,
                                                        std::memory_order_relaxed)) {
            continue;
        }
        for (const entry &e : x.entries) {
            used += e.queue != 0 ? 1 : 0;
        }
        ++sampled;
        if (!serial_) {
            base::tas_release(x.lock);
        }
    }
    // At least half of the buckets wanted must have been seen: a few, held by others
    // meanwhile, must not decide a growth for good.
    const std::size_t wanted = k_load_sample < a.mask ? k_load_sample : a.mask;
    if (sampled != 0 && sampled * 2 >= wanted && used * 6 >= sampled * k_entries * 5) {
        grow(a);
    }
}

[[gnu::cold, gnu::noinline]] inline void table::grow(array &from) noexcept
{
    // Relaxed: a stale answer only makes this request skip (another grower is at work,
    // or was) or try the lock.
    if (grow_lock_.load(std::memory_order_relaxed) ||
        array_.load(std::memory_order_relaxed) != &from) {
        return;
    }
    // sync: acquire; pairs with the release store below (the previous grower's array_)
    if (grow_lock_.exchange(true, std::memory_order_acquire)) {
        return;
    }
    // Relaxed: only the lock holder stores array_, and the acquire above ordered the
    // previous holder's store before this load.
    if (array_.load(std::memory_order_relaxed) != &from) {
        // sync: release; pairs with the acquire exchange above
        grow_lock_.store(false, std::memory_order_release);
        return;
    }
    const std::size_t n = from.mask + 1;
    if (n >= k_max_buckets) {
        return; // growth has stopped: the lock stays held
    }
    const std::size_t grown = n * k_grow_factor < k_max_buckets ? n * k_grow_factor : k_max_buckets;
    std::unique_ptr<array> next = make_array(grown);
    if (next == nullptr) {
        // Logged once: the lock stays held, so no later request gets here.
        base::log(base::log_level::warn,
                  "match::table: no memory to grow from %zu to %zu buckets; keys chain on", n,
                  grown);
        return;
    }
    if (!serial_ && !lock_all(from)) { // false only if from was replaced: not under grow_lock_
        // sync: release; pairs with the acquire exchange above
        grow_lock_.store(false, std::memory_order_release);
        return;
    }
    for (std::size_t i = 0; i < n; ++i) {
        const bucket &b = from.buckets[i];
        for (std::size_t e = 0; e < k_entries; ++e) {
            if (b.entries[e].queue != 0) {
                move_queue(*next, b.entries[e].queue, b.entries[e].source_tag, b.cid[e], false);
            }
        }
        for (std::uintptr_t word = b.overflow; word != 0;) {
            const detail::link &tail = *tail_of(word);
            const std::uintptr_t following = tail.spill_; // move_queue() rewrites it
            move_queue(*next, word, pack(tail.source_, tail.tag_), tail.cid_, true);
            word = following;
        }
    }
    next->owner = this;
    next->older.reset(&from);
    // sync: release; pairs with the acquire loads in queue_guard(), relock(), all_guard()
    // and bucket_count() (and, through k_moved below, with lock_bucket())
    array_.store(next.release(), std::memory_order_release);
    if (!serial_) {
        for (std::size_t i = 0; i < n; ++i) {
            // sync: release; pairs with the acquire CAS in lock_bucket()
            from.buckets[i].lock.store(detail::k_moved, std::memory_order_release);
        }
    }
    base::stats::add(base::stats::counter::table_growths);
    // sync: release; pairs with the acquire exchange above
    grow_lock_.store(false, std::memory_order_release);
}

} // namespace mpiv::match
