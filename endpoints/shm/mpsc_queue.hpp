// mpsc_queue: a bounded multi-producer single-consumer queue of messages of up to 8 slots
// of 56 bytes whose whole state lives in one caller-supplied memory region (a worker
// endpoint's inbound queue, DESIGN.md "Data path").
//
// Layout, as offsets from the region base (base aligned to k_false_sharing; a shared-memory
// segment is page aligned). Everything is position-independent (positions and offsets, no
// pointers), so several processes may map the region at different addresses:
//   0      queue_header, three k_false_sharing blocks: magic and geometry (read-only once
//          formatted); the producers' tail; the consumer's head
//   384    capacity slots of 64 bytes: a 64-bit sequence word and a 56-byte payload
// The slot size is fixed at 64 bytes whatever --with-cacheline says: it is part of the
// layout every process of a job must agree on, so it must not follow a build option.
//
// Design (after Dmitry Vyukov's bounded queue, with a per-slot sequence number): positions
// are 64-bit counters that never wrap in practice; position p lives in slot p & (capacity-1).
// - A message takes k = 1 .. 8 consecutive positions (its bytes cut into k payloads); its
//   first slot's seq publishes it: the low 56 bits hold p + 1, the top 8 bits k - 1 (so
//   positions may count to 2^56). Any other low value means "no message for p yet"
//   (format() sets slot i's seq to i; a message of an earlier lap left an older stamp).
//   The other k - 1 slots' seq words are not written: the consumer skips them. The
//   consumer never writes a slot.
// - Free slots are told by the consumer's head instead: position p may be written once
//   head > p - capacity (the message of p - capacity was copied out). Each producer view
//   caches the last head it read and reloads it only when the cache says "full", so a push
//   normally touches the tail (its process's own line) and the slot, whose first access is
//   the payload write: one cache-line transfer to the consumer per message, not three.
// - A producer loads the tail, checks room for its k positions against the cached head
//   (reloading it once when short; still short: the queue is full and try_push returns
//   busy), claims them with a CAS of the tail to tail + k (a failed CAS reloads the tail:
//   another producer won it), writes the payloads and publishes the first slot last.
// - The consumer (whoever holds the try-lock, or the caller of drain_serial(), whose drains
//   never overlap) reads slot head & mask: a stamp of head + 1 means a message is ready;
//   anything else means empty (or claimed but not yet published). It copies the k
//   payloads out and advances head past them before handing the message to the caller.
// - The consumer's state lives in its own view, not in the region: its head (the shared
//   head is only its publication to the producers) and its try-lock, whose word names the
//   holder (held_by(): a drain's callback knows the lock is its own). Producers can write
//   the whole region; nothing they write can stop the consumer, make it read outside the
//   slots, or take more than k_max_slots slots for a message (a faulty stamp's count is
//   clamped). Several views of one queue must therefore not drain it (one consumer view,
//   in the owning process).
// Invariants: head <= tail <= head + capacity; slots of positions [head, tail) are claimed
// or published, the others are free; only the consumer (see above) reads payloads and writes
// head; each position is claimed by exactly one producer (the tail CAS).
//
// Ordering: a producer publishes the payloads with a release store of the first slot's
// seq; the consumer loads seq with acquire before copying the payloads. The consumer frees
// slots with a release store of head after copying the payloads out; a producer loads head
// with acquire before overwriting a slot, and passes what it read to the other producers
// of its process through the cache (release store, acquire load: the chain keeps the
// happens-before). The tail CAS is relaxed: it only hands out positions. The try-lock is
// taken with an acquire compare-exchange and released with a release store, which hands
// the view's head from one drainer to the next. format() publishes the region by storing
// the magic last (release); attach() loads it with acquire.
//
// Progress: try_push never blocks (lock-free among producers: a CAS fails only because
// another producer claimed a position). A producer stalled between its claim and its
// publish delays every later message (the consumer stops at the unpublished slot) but loses
// none. drain() never waits for the lock: it returns -1 when another thread holds it.
//
// Memory: 384 bytes of header plus 64 bytes per slot (capacity 2 .. 2^20, a power of two):
// 64 KiB + 384 B for 1024 slots.
//
// When not to use: for payloads larger than 448 bytes (send a descriptor of a packet, see
// packet_region); where the consumer must be able to block (there is no wake-up, only
// polling); where a producer process may die mid-push and others must carry on: a claimed
// but never published slot wedges the queue for good. Many producers pushing hard all write
// the tail line; one queue per consumer keeps that to the producers of one destination.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "base/cacheline.hpp"
#include "base/copy.hpp"
#include "base/log.hpp"
#include "base/status.hpp"

namespace mpiv::shm {

namespace detail {

/// "mpivmsq" plus a layout version byte: a region formatted by an incompatible build is
/// refused by attach().
constexpr std::uint64_t k_queue_magic = 0x6d7069766d735104ull;

/// Bytes per slot: the sequence word and the payload.
constexpr std::size_t k_slot_bytes = 64;

/// One slot. Shared between processes.
template <template <class> class Atom> struct alignas(k_slot_bytes) queue_slot {
    Atom<std::uint64_t> seq;                                        // see the design block
    unsigned char payload[k_slot_bytes - sizeof(Atom<std::uint64_t>)]; // one message
};

/// The first 384 bytes of a region. Shared between processes.
template <template <class> class Atom> struct queue_header {
    Atom<std::uint64_t> magic;   // k_queue_magic once formatted; stored last
    std::uint32_t capacity;      // slots, a power of two
    std::uint32_t slot_bytes;    // k_slot_bytes
    std::uint64_t slots_offset;  // offset of slot 0 from the region base
    std::uint64_t region_bytes;  // bytes the layout needs (the mapping may be larger)
    // Written by every push of every producer process.
    alignas(k_false_sharing) Atom<std::uint64_t> tail;
    // Written only by the consumer (its publication of its view's head).
    alignas(k_false_sharing) Atom<std::uint64_t> head;
};

static_assert(std::is_standard_layout_v<queue_slot<std::atomic>>,
              "the shared slot must be standard layout");
static_assert(sizeof(queue_slot<std::atomic>) == k_slot_bytes, "a slot is one 64-byte line");
static_assert(offsetof(queue_slot<std::atomic>, payload) == 8, "the payload follows seq");
static_assert(std::is_standard_layout_v<queue_header<std::atomic>>,
              "the shared header must be standard layout");
static_assert(offsetof(queue_header<std::atomic>, tail) == 1 * k_false_sharing &&
                  offsetof(queue_header<std::atomic>, head) == 2 * k_false_sharing,
              "geometry, tail and head each take their own 128-byte block");
static_assert(sizeof(queue_header<std::atomic>) == 3 * k_false_sharing,
              "the header takes exactly three 128-byte blocks");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "atomics shared between processes must be lock-free (address-free)");

} // namespace detail

template <template <class> class Atom = std::atomic> class mpsc_queue {
    static_assert(sizeof(Atom<std::uint32_t>) == sizeof(std::uint32_t) &&
                      sizeof(Atom<std::uint64_t>) == sizeof(std::uint64_t),
                  "the shared layout stores atomics as plain-sized words");

  public:
    /// Bytes of one slot's payload.
    static constexpr std::size_t k_payload = sizeof(detail::queue_slot<Atom>::payload);
    /// Most slots one message takes, and the largest message in bytes.
    static constexpr std::size_t k_max_slots = 8;
    static constexpr std::size_t k_max_message = k_payload * k_max_slots;
    /// Smallest and largest capacity (slots).
    static constexpr std::uint32_t k_min_capacity = 2;
    static constexpr std::uint32_t k_max_capacity = 1u << 20;
    /// The holder of a consumer lock taken without an identity (never asked about).
    static constexpr std::uintptr_t k_anonymous = 1;

    static_assert(k_payload == 56, "56-byte payloads are part of the shared layout");

    mpsc_queue() = default;
    mpsc_queue(const mpsc_queue &) = delete;
    mpsc_queue &operator=(const mpsc_queue &) = delete;

    /// @brief Bytes a region needs for @p capacity slots.
    /// @return the size, or 0 when @p capacity is not a power of two in
    ///         [k_min_capacity, k_max_capacity]
    /// @context thread-safe, pure
    static std::size_t bytes_for(std::uint32_t capacity) noexcept
    {
        if (!valid_capacity(capacity)) {
            return 0;
        }
        return sizeof(detail::queue_header<Atom>) + std::size_t{capacity} * detail::k_slot_bytes;
    }

    /// @brief Format a region (owner process): an empty queue of @p capacity slots.
    /// @param[in] base the region, aligned to k_false_sharing
    /// @param[in] bytes size of the region, at least bytes_for(capacity)
    /// @param[in] capacity slots, a power of two in [k_min_capacity, k_max_capacity]
    /// @return status::ok or status::invalid_arg (logged)
    /// @context not thread-safe; no process may use the region during the call
    [[nodiscard]] status format(void *base, std::size_t bytes, std::uint32_t capacity) noexcept
    {
        if (!valid_capacity(capacity)) {
            base::log(base::log_level::error,
                      "shm: invalid queue capacity %u (a power of two in %u .. %u)", capacity,
                      k_min_capacity, k_max_capacity);
            return status::invalid_arg;
        }
        const std::size_t needed = bytes_for(capacity);
        if (!region_fits(base, bytes, needed)) {
            return status::invalid_arg;
        }
        auto *const bytes_base = static_cast<unsigned char *>(base);
        auto *const header = new (bytes_base) detail::queue_header<Atom>;
        // Clear any magic left by an earlier format: attach() must not accept this region
        // before the release store below.
        header->magic.store(0, std::memory_order_relaxed);
        header->capacity = capacity;
        header->slot_bytes = detail::k_slot_bytes;
        header->slots_offset = sizeof(detail::queue_header<Atom>);
        header->region_bytes = needed;
        header->tail.store(0, std::memory_order_relaxed);
        header->head.store(0, std::memory_order_relaxed);
        for (std::uint32_t i = 0; i < capacity; ++i) {
            auto *const slot = new (bytes_base + header->slots_offset +
                                    std::size_t{i} * detail::k_slot_bytes) detail::queue_slot<Atom>;
            slot->seq.store(i, std::memory_order_relaxed);
            std::memset(slot->payload, 0, sizeof(slot->payload));
        }
        bind(bytes_base, header, capacity);
        // sync: release; pairs with the acquire load in attach(): a process that sees the
        // magic sees the formatted header and slots.
        header->magic.store(detail::k_queue_magic, std::memory_order_release);
        return status::ok;
    }

    /// @brief Attach to a queue formatted by another process (or through another mapping).
    /// @param[in] base this process's mapping of the region, aligned to k_false_sharing
    /// @param[in] bytes size of the mapping
    /// @return status::ok, or status::invalid_arg (logged) when the mapping is too small,
    ///         misaligned, not formatted or formatted with an incompatible layout
    /// @context not thread-safe for this view; any number of views may attach
    [[nodiscard]] status attach(void *base, std::size_t bytes) noexcept
    {
        if (!region_fits(base, bytes, sizeof(detail::queue_header<Atom>))) {
            return status::invalid_arg;
        }
        auto *const header = std::launder(reinterpret_cast<detail::queue_header<Atom> *>(base));
        // sync: acquire; pairs with the release store at the end of format().
        if (header->magic.load(std::memory_order_acquire) != detail::k_queue_magic) {
            base::log(base::log_level::error, "shm: region %p is not a formatted queue", base);
            return status::invalid_arg;
        }
        // Each field read once: another process may change them while we look.
        const std::uint32_t capacity = header->capacity;
        if (!valid_capacity(capacity) || header->slot_bytes != detail::k_slot_bytes ||
            header->slots_offset != sizeof(detail::queue_header<Atom>) ||
            header->region_bytes != bytes_for(capacity)) {
            base::log(base::log_level::error, "shm: queue %p has an incompatible layout", base);
            return status::invalid_arg;
        }
        if (!region_fits(base, bytes, bytes_for(capacity))) {
            return status::invalid_arg;
        }
        bind(static_cast<unsigned char *>(base), header, capacity);
        return status::ok;
    }

    /// @brief Enqueue one message (a copy of @p len bytes in ceil(len / k_payload) slots,
    /// at least one; the consumer sees whole slots' payloads, the bytes past @p len zero).
    /// @param[in] msg the message; may be nullptr when @p len is 0
    /// @param[in] len its size, at most k_max_message
    /// @return status::ok; status::busy when the queue is full (nothing was written: retry
    ///         after the consumer drains); status::invalid_arg (logged) when @p len is too
    ///         large (or needs more slots than the queue has); status::not_initialized
    ///         (logged) before format or attach
    /// @context thread-safe, lock-free, any thread of any process attached to the region;
    ///          never blocks or yields; hot path
    [[nodiscard]] status try_push(const void *msg, std::size_t len) noexcept
    {
        return try_push(msg, len, [] {});
    }

    /// @brief try_push() that calls @p before_copy once the slots are claimed, before it
    /// reads @p msg: the caller may finish the message there (e.g. draw a sequence number
    /// that only a message sure to be queued may take). A full queue calls nothing.
    /// @p before_copy must not throw, block or fail: the claimed slots are published
    /// whatever it does (the consumer stops at an unpublished slot).
    /// @context as try_push(); the claim is held while @p before_copy runs
    template <class Fn>
    [[nodiscard]] status try_push(const void *msg, std::size_t len, Fn &&before_copy) noexcept
    {
        if (header_ == nullptr) {
            base::log(base::log_level::error, "shm: queue used before format or attach");
            return status::not_initialized;
        }
        const std::size_t k = len <= k_payload ? 1 : (len + k_payload - 1) / k_payload;
        if (k > k_max_slots || k > capacity_ || (msg == nullptr && len != 0)) {
            base::log(base::log_level::error,
                      "shm: message of %zu bytes (at most %zu, and %u slots)", len,
                      k_max_message, capacity_);
            return status::invalid_arg;
        }
        std::uint64_t pos = header_->tail.load(std::memory_order_relaxed);
        for (;;) {
            // sync: acquire; pairs with the release store in refresh_head() by this
            // process's producer that read the consumer's head.
            if (no_room(pos + k - 1, head_cache_.load(std::memory_order_acquire)) &&
                no_room(pos + k - 1, refresh_head())) {
                return status::busy; // a slot still holds a message of the previous lap
            }
            // On failure the CAS reloads pos: another producer won the position.
            if (header_->tail.compare_exchange_weak(pos, pos + k, std::memory_order_relaxed,
                                                    std::memory_order_relaxed)) {
                break;
            }
        }
        before_copy();
        const auto *bytes = static_cast<const unsigned char *>(msg);
        for (std::size_t j = 0; j < k; ++j) {
            unsigned char *const payload = slot_at(pos + j)->payload;
#if defined(__SANITIZE_THREAD__)
            // The previous lap's producer of this slot wrote it through this same mapping;
            // the order between the two writes goes through the consumer's head, which
            // TSan cannot follow when the consumer uses another mapping of the region.
            __tsan_acquire(payload);
#endif
            const std::size_t at = j * k_payload;
            const std::size_t n = at >= len ? 0 : std::min(k_payload, len - at);
            if (n == k_payload) {
                std::memcpy(payload, bytes + at, k_payload);
            } else {
                std::memset(payload, 0, k_payload);
                base::copy_small(payload, bytes + at, n);
            }
#if defined(__SANITIZE_THREAD__)
            __tsan_release(payload); // for the next lap's producer (before the publish)
#endif
        }
        // sync: release; pairs with the acquire load in drain(): the consumer that sees
        // the stamp of pos sees all k payloads.
        slot_at(pos)->seq.store(stamp(pos, k), std::memory_order_release);
        return status::ok;
    }

    /// @brief Dequeue up to @p max messages in queue order, calling @p fn for each.
    ///
    /// Each message is copied out of its slots and the slots are freed for producers before
    /// @p fn runs: @p fn receives a pointer to a copy of its whole slots' payloads (aligned
    /// to 8; k * k_payload bytes) that is valid only during the call. @p fn runs under the
    /// consumer lock: it may call try_push() on any queue (this one included) but a drain()
    /// of this queue from inside it returns -1. @p fn must not throw.
    /// @param[in] fn callable as fn(const void *payload, std::size_t bytes)
    /// @param[in] max most messages to pop; 0 or less pops nothing
    /// @param[in] holder who drains, as held_by() will recognize it inside @p fn: any value
    ///            but 0 that no other live drainer uses (the caller's ULT or thread). A
    ///            caller whose @p fn may ask held_by() must pass its identity, not the
    ///            default.
    /// @return the number of messages popped (0 when empty), or -1 when another thread
    ///         holds the consumer lock (nothing popped: poll again later)
    /// @context thread-safe among the threads of the owning process (one drains at a time);
    ///          never blocks; hot path. Producers' messages published after the check of
    ///          the next slot are left for the next call.
    template <class Fn> int drain(Fn &&fn, int max, std::uintptr_t holder = k_anonymous) noexcept
    {
        if (header_ == nullptr || max <= 0) {
            return 0;
        }
        if (!try_lock(holder)) {
            return -1;
        }
        const int popped = pop(fn, max);
        unlock();
        return popped;
    }

    /// @brief drain() for a consumer whose drains never overlap (one thread, or threads
    /// that hand the queue over through their own synchronization): no consumer lock.
    /// @context the owning process; never concurrently with drain() or drain_serial() of
    ///          this queue; never blocks; hot path
    template <class Fn> int drain_serial(Fn &&fn, int max) noexcept
    {
        if (header_ == nullptr || max <= 0) {
            return 0;
        }
        return pop(fn, max);
    }

    /// @brief Take the consumer lock without popping: for a caller whose work must not
    /// overlap any drain of this queue (state that only this queue's drains touch).
    /// Release it with unlock_consumer(); a drain() meanwhile returns -1.
    /// @param holder who takes it, for held_by() (see drain())
    /// @return true when taken; false when a drain (or another caller) holds it
    /// @context the owning process; never blocks
    bool try_lock_consumer(std::uintptr_t holder = k_anonymous) noexcept
    {
        return header_ != nullptr && try_lock(holder);
    }

    /// @brief Whether @p holder holds the consumer lock: for a caller inside a drain() or
    /// under try_lock_consumer() that must not take the lock again (a drain's callback that
    /// touches what the lock guards). Only a holder's own identity can be stored while the
    /// caller asks, so the answer is exact for the caller's own identity.
    /// @param holder the caller's identity (not k_anonymous)
    /// @context the owning process; never blocks
    bool held_by(std::uintptr_t holder) const noexcept
    {
        // Relaxed: the lock word holds the holder's identity from its compare-exchange to
        // its release store of 0 (a failed attempt writes nothing). The caller's own stores
        // of the word happen before this load (program order, or the hand-over of a ULT),
        // so it never sees its own identity after its release; another holder's identity
        // never equals the caller's.
        return lock_.load(std::memory_order_relaxed) == holder;
    }

    /// @brief Release the lock taken by try_lock_consumer().
    void unlock_consumer() noexcept { unlock(); }

    /// @brief Whether the queue looks empty: a relaxed peek at the next slot, for a poller
    /// that wants to skip drain() (and its lock) when there is nothing to do.
    /// @return true when no message was ready at the time of the check (a message published
    ///         concurrently, or one behind a drain in progress, may be missed: poll again);
    ///         false when one probably is (another drainer may take it first)
    /// @context thread-safe, any thread; never blocks; reads two words, writes nothing
    bool empty_hint() const noexcept
    {
        if (header_ == nullptr) {
            return true;
        }
        const std::uint64_t pos = head_.load(std::memory_order_relaxed);
        return ((slot_at(pos)->seq.load(std::memory_order_relaxed) ^ (pos + 1)) &
                k_position_mask) != 0;
    }

    /// No drain() in progress at the mark (see drain_mark()).
    static constexpr std::uint64_t k_idle_mark = ~std::uint64_t{0};

    /// @brief A mark for drained_since(): taken after the caller's writes that later drains
    /// must see (and a seq_cst fence after them), it names the drain() running now, if any.
    /// A drain that starts after the mark sees those writes.
    /// @context the owning process; never blocks
    std::uint64_t drain_mark() const noexcept
    {
        // seq_cst: Dekker with the seq_cst compare-exchange in try_lock(): a drain that takes the
        // lock after this load sees the caller's writes (it reads them with seq_cst loads).
        if (lock_.load(std::memory_order_seq_cst) == 0) {
            return k_idle_mark;
        }
        // Acquire: pairs with the release store in unlock(). Read after the lock word,
        // whose compare-exchange by the running holder this thread has seen: the count is
        // at least the one that hold started with (or later: then a later drain must end
        // too, which only delays the caller).
        return drains_.load(std::memory_order_acquire);
    }

    /// @brief Whether the drain() running at @p mark (from drain_mark()) has ended.
    /// @context the owning process; never blocks
    bool drained_since(std::uint64_t mark) const noexcept
    {
        // Acquire: pairs with the release store in unlock(): that drain's accesses happen
        // before the caller's next steps.
        return mark == k_idle_mark || drains_.load(std::memory_order_acquire) > mark;
    }

    /// Number of slots (0 before format or attach).
    std::uint32_t capacity() const noexcept { return capacity_; }

  private:
    friend struct mpsc_queue_test_access;

    /// Pop up to @p max messages; the caller is the only consumer right now.
    template <class Fn> int pop(Fn &fn, int max) noexcept
    {
        // The view's head, not the shared one (which producers could overwrite); the lock's
        // acquire (or the caller's hand-over) made the last consumer's value visible.
        std::uint64_t pos = head_.load(std::memory_order_relaxed);
        int popped = 0;
        alignas(8) unsigned char copy[k_max_message];
        while (popped < max) {
            // sync: acquire; pairs with the release store in try_push(): the stamp of pos
            // makes the payloads visible.
            const std::uint64_t seq = slot_at(pos)->seq.load(std::memory_order_acquire);
            if (((seq ^ (pos + 1)) & k_position_mask) != 0) {
                break; // empty, or the next position is claimed but not yet published
            }
            // At most k_max_slots whatever a faulty peer wrote in the top byte.
            const std::size_t k =
                std::min<std::size_t>((seq >> k_count_shift) + 1, k_max_slots);
            for (std::size_t j = 0; j < k; ++j) {
                std::memcpy(copy + j * k_payload, slot_at(pos + j)->payload, k_payload);
            }
            pos += k;
            head_.store(pos, std::memory_order_relaxed);
            // sync: release; pairs with the acquire load in refresh_head(): the copies
            // above are done before the producers of the next lap overwrite the payloads.
            header_->head.store(pos, std::memory_order_release);
            ++popped;
            fn(static_cast<const void *>(copy), k * k_payload);
        }
        return popped;
    }

    static constexpr bool valid_capacity(std::uint32_t capacity) noexcept
    {
        return capacity >= k_min_capacity && capacity <= k_max_capacity &&
               (capacity & (capacity - 1)) == 0;
    }

    static bool region_fits(const void *base, std::size_t bytes, std::size_t needed) noexcept
    {
        if (base == nullptr || reinterpret_cast<std::uintptr_t>(base) % k_false_sharing != 0) {
            base::log(base::log_level::error, "shm: queue region %p is not aligned to %zu bytes",
                      base, k_false_sharing);
            return false;
        }
        if (bytes < needed) {
            base::log(base::log_level::error, "shm: queue region of %zu bytes, %zu needed",
                      bytes, needed);
            return false;
        }
        return true;
    }

    void bind(unsigned char *base, detail::queue_header<Atom> *header,
              std::uint32_t capacity) noexcept
    {
        header_ = header;
        slots_ = std::launder(reinterpret_cast<detail::queue_slot<Atom> *>(
            base + sizeof(detail::queue_header<Atom>)));
        capacity_ = capacity;
        mask_ = capacity - 1;
        head_.store(header->head.load(std::memory_order_relaxed), std::memory_order_relaxed);
        lock_.store(0, std::memory_order_relaxed);
    }

    detail::queue_slot<Atom> *slot_at(std::uint64_t pos) const noexcept
    {
        return slots_ + (pos & mask_);
    }

    static constexpr unsigned k_count_shift = 56;
    static constexpr std::uint64_t k_position_mask = (std::uint64_t{1} << k_count_shift) - 1;

    /// The first slot's seq of a message of @p k slots at position @p pos.
    static constexpr std::uint64_t stamp(std::uint64_t pos, std::size_t k) noexcept
    {
        return ((pos + 1) & k_position_mask) | (std::uint64_t{k - 1} << k_count_shift);
    }

    /// Whether position @p pos is still taken by the previous lap, going by @p head. A head
    /// past pos (read after pos was) means pos is stale: the CAS will fail and reload it.
    bool no_room(std::uint64_t pos, std::uint64_t head) const noexcept
    {
        return static_cast<std::int64_t>(pos - head) >= static_cast<std::int64_t>(capacity_);
    }

    /// Read the consumer's head into this view's cache; returns it.
    std::uint64_t refresh_head() noexcept
    {
        // sync: acquire; pairs with the release store of head in drain().
        const std::uint64_t head = header_->head.load(std::memory_order_acquire);
        // sync: release; pairs with the acquire load in try_push() by another producer
        // thread of this process. A concurrent refresh may store an older value: that
        // only costs a later refresh.
        head_cache_.store(head, std::memory_order_release);
        return head;
    }

    bool try_lock(std::uintptr_t holder) noexcept
    {
        // Test before the compare-exchange: pollers that find the lock held do not write its line.
        if (lock_.load(std::memory_order_relaxed) != 0) {
            return false;
        }
        // A compare-exchange, not an exchange: a failed attempt must not overwrite the
        // holder's identity (held_by()).
        // sync: acquire; pairs with the release store in unlock(): the previous holder's
        // head and slot frees are visible. seq_cst: Dekker with drain_mark(). Relaxed on
        // failure: nothing is taken.
        std::uintptr_t free_word = 0;
        return lock_.compare_exchange_strong(free_word, holder, std::memory_order_seq_cst,
                                             std::memory_order_relaxed);
    }

    void unlock() noexcept
    {
        // sync: release; pairs with the acquire loads in drain_mark() and drained_since()
        // (only the holder writes the count).
        drains_.store(drains_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        // sync: release; pairs with the acquire compare-exchange in try_lock().
        lock_.store(0, std::memory_order_release);
    }

    detail::queue_header<Atom> *header_ = nullptr;  // in this process's mapping
    detail::queue_slot<Atom> *slots_ = nullptr;     // same
    std::uint64_t mask_ = 0;                        // capacity_ - 1
    std::uint32_t capacity_ = 0;
    // The last head a producer of this process read (process-local, not shared memory).
    Atom<std::uint64_t> head_cache_{0};
    // The consumer's state (process-local): its head, and its try-lock (0 free, else the
    // holder's identity) with the count of drain() calls that held it, on lines of their
    // own: pollers read the head, drainers write all three.
    alignas(k_false_sharing) Atom<std::uint64_t> head_{0};
    alignas(k_false_sharing) Atom<std::uintptr_t> lock_{0};
    Atom<std::uint64_t> drains_{0};
};

} // namespace mpiv::shm
