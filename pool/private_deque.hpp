// private_deque: a worker's fixed-capacity cache of packet indexes (seed 000 §3.3).
//
// Design:
// - A ring of indexes with a bottom position and a size, protected by a test-and-test-and-
//   set spinlock. The top (bottom + size - 1) holds the most recently pushed index, the
//   bottom the least recently used one. The owner worker uses the top (pop_top/push_top:
//   LIFO, so it gets back the packet whose lines are still in its cache); a stealer or the
//   communication server takes from the bottom (pop_bottom), i.e. the coldest packet.
// - A lock is the right tool because at most two threads meet here (the worker and one
//   stealer), the critical sections are a few instructions, and a lock makes the three
//   operations trivially linearizable (seed 000 measured it as the fastest option).
// - Invariants (under the lock): 0 <= size <= capacity <= ring size (a power of two);
//   every index is in at most one deque or on the shared stack (the pool's contract).
// - Ordering: lock() acquires and unlock() releases, so a packet's contents written before
//   a push are visible to whoever pops it, owner or stealer. size_ is also stored (relaxed,
//   under the lock) so that stealers can skip empty victims without taking their lock;
//   that read is only a hint, the pop re-checks under the lock.
// - Memory: one 128-byte control line plus the ring, 4 bytes per slot rounded up to
//   128-byte lines (a 64-slot deque takes 384 bytes). Per process: it holds indexes, but the
//   lock is not meant to be shared across processes (a process dying inside it would leave
//   it held); keep deques in the owner's private memory.
// - When not to use: when many threads hit the same deque (the lock would convoy; use the
//   lock-free index_stack), or when the owner may be preempted while holding the lock
//   for long (waiters spin then yield, they do not sleep).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>

#include "base/cacheline.hpp"
#include "base/lock/tas.hpp"
#include "base/status.hpp"

namespace mpiv::pool {

namespace detail {

/// Test-and-test-and-set spinlock for the two-thread case (worker and stealer). Not fair
/// (a stealer may overtake the owner); waiters spin, then yield (base::backoff).
template <template <class> class Atom> class spin_lock {
  public:
    /// @brief Take the lock, spinning on a plain load (no line ping-pong) with back-off.
    /// @context thread-safe; may yield the calling ULT or thread while waiting
    void lock() noexcept { base::tas_acquire(held_); }

    /// @brief Release the lock. @context by the holder only
    void unlock() noexcept { base::tas_release(held_); }

  private:
    Atom<std::uint32_t> held_{0};
};

} // namespace detail

template <template <class> class Atom = std::atomic> class alignas(k_false_sharing) private_deque {
  public:
    /// Largest capacity accepted by init().
    static constexpr std::uint32_t k_max_capacity = 0x80000000u;

    private_deque() = default;
    private_deque(const private_deque &) = delete;
    private_deque &operator=(const private_deque &) = delete;

    /// @brief Allocate the ring for @p capacity indexes; the deque starts empty.
    /// @return status::ok, status::invalid_arg (capacity 0 or > k_max_capacity),
    ///         status::nomem
    /// @context not thread-safe; once, before the deque is shared
    [[nodiscard]] status init(std::uint32_t capacity) noexcept
    {
        if (capacity == 0 || capacity > k_max_capacity) {
            return status::invalid_arg;
        }
        std::uint32_t ring = 1;
        while (ring < capacity) {
            ring <<= 1;
        }
        const std::uint32_t lines = (ring + k_slots_per_line - 1) / k_slots_per_line;
        ring_.reset(new (std::nothrow) slot_line[lines]);
        if (ring_ == nullptr) {
            return status::nomem;
        }
        capacity_ = capacity;
        mask_ = ring - 1;
        return status::ok;
    }

    /// @brief Take the most recently pushed index (owner side).
    /// @param[out] index_p written only on success
    /// @return status::ok or status::not_found (empty)
    /// @context thread-safe; hot path of the owner; may yield while the lock is contended
    [[nodiscard]] status pop_top(std::uint32_t &index_p) noexcept
    {
        std::lock_guard<detail::spin_lock<Atom>> guard(lock_);
        const std::uint32_t size = size_.load(std::memory_order_relaxed);
        if (size == 0) {
            return status::not_found;
        }
        index_p = slot(bottom_ + size - 1);
        size_.store(size - 1, std::memory_order_relaxed);
        return status::ok;
    }

    /// @brief Push @p index on top (owner side). When the deque is full, its bottom (least
    /// recently used) index is evicted first, to make room.
    /// @param[out] evicted_p the evicted index, written only when the result is true
    /// @return true when an index was evicted: the caller must place it elsewhere
    /// @context thread-safe; hot path of the owner; may yield while the lock is contended
    [[nodiscard]] bool push_top(std::uint32_t index, std::uint32_t &evicted_p) noexcept
    {
        std::lock_guard<detail::spin_lock<Atom>> guard(lock_);
        std::uint32_t size = size_.load(std::memory_order_relaxed);
        const bool evict = size == capacity_;
        if (evict) {
            evicted_p = slot(bottom_);
            bottom_ = (bottom_ + 1) & mask_;
            --size;
        }
        slot(bottom_ + size) = index;
        size_.store(size + 1, std::memory_order_relaxed);
        return evict;
    }

    /// @brief Take the least recently used index (stealer / server side).
    /// @param[out] index_p written only on success
    /// @return status::ok or status::not_found (empty)
    /// @context thread-safe; may yield while the lock is contended
    [[nodiscard]] status pop_bottom(std::uint32_t &index_p) noexcept
    {
        std::lock_guard<detail::spin_lock<Atom>> guard(lock_);
        const std::uint32_t size = size_.load(std::memory_order_relaxed);
        if (size == 0) {
            return status::not_found;
        }
        index_p = slot(bottom_);
        bottom_ = (bottom_ + 1) & mask_;
        size_.store(size - 1, std::memory_order_relaxed);
        return status::ok;
    }

    /// Number of indexes at some recent instant (a hint for stealers: no lock taken).
    std::uint32_t size_hint() const noexcept { return size_.load(std::memory_order_relaxed); }

  private:
    friend struct private_deque_test_access;

    static constexpr std::uint32_t k_slots_per_line = k_false_sharing / sizeof(std::uint32_t);
    struct alignas(k_false_sharing) slot_line {
        std::uint32_t slot[k_slots_per_line];
    };

    /// Ring slot at position @p pos (taken modulo the ring size). Caller holds lock_.
    std::uint32_t &slot(std::uint32_t pos) noexcept
    {
        pos &= mask_;
        return ring_[pos / k_slots_per_line].slot[pos % k_slots_per_line];
    }

    detail::spin_lock<Atom> lock_;
    std::uint32_t bottom_ = 0;          // ring position of the LRU index; guarded by lock_
    Atom<std::uint32_t> size_{0};       // written under lock_, read lock-free as a hint
    std::uint32_t capacity_ = 0;        // immutable after init()
    std::uint32_t mask_ = 0;            // ring size - 1; immutable after init()
    std::unique_ptr<slot_line[]> ring_; // the slots; guarded by lock_
};

} // namespace mpiv::pool
