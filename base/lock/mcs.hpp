// mcs_lock: the Mellor-Crummey–Scott queue lock, plus the queue primitives that
// hmcs_lock reuses at every level of its hierarchy.
//
// Design: waiters form a singly linked FIFO of queue nodes. lock() swaps its node into
// tail_; if there was a predecessor it links itself behind it and spins on its own node's
// status word, which only the predecessor writes when it hands the lock over. unlock()
// hands the lock to the linked successor, or swings tail_ back to null when there is none.
// Each waiter polls its own cache line, so a release touches one remote line only.
//
// Queue nodes are taken from a per-thread cache (detail::qnode_cache) when lock() starts
// and given back by unlock(); the owner's node is remembered in holder_. Hence lock()
// takes no argument, a thread may hold any number of MCS locks at once, and two ULTs of
// one worker waiting for the same lock use distinct nodes.
//
// Invariants: tail_ == nullptr iff the lock is free; otherwise tail_ is the last node of
// the queue, whose first node belongs to the owner. A node is in at most one queue and
// returns to a cache only once its owner has handed the lock on, after which no thread
// touches it.
// Ordering: the exchange on tail_ is acq_rel (it publishes the reset node to the
// successor and acquires the predecessor's node); the successor's link store (release) is
// read with acquire by the releaser; the hand-off store on status (release) is read with
// acquire by the spinning waiter, which orders the critical sections. Releasing with the
// tail_ CAS (release) pairs with the next exchange (acquire).
// Oversubscription: waiting uses base::backoff (spin, then yield), both for the status
// word and for the releaser waiting for a successor to finish linking, so a descheduled
// next waiter costs a few context switches, not a time slice of spinning.
// ULT waiters park instead of yielding once their spin is spent (base::park): a yielded
// ULT keeps its place in the queue, so with many ULTs of one worker queued each hand-off
// waited for a pass of that worker over all of them (500,000 ULTs: a pass over 500,000
// cold stacks per hand-off). A queued ULT stores its wake token in its node before it
// links itself; once spun out it moves status from k_wait to k_parked (CAS) and
// suspends. The hand-off to a node with a token exchanges status and unparks the ULT if
// the old value was k_parked; it reads the token before that exchange (published by the
// link store, read after the acquire load of next_), since the node may be reused as soon
// as its owner sees the lock. Pthread waiters (token 0) keep the plain store.
// Memory: 256 B per lock (tail_ and holder_ on separate 128 B blocks); 256 B per queue
// node, a node per lock a thread holds or waits for, kept in the thread's cache until the
// thread exits.
// When not to use it: deep memory hierarchies with heavy contention (the FIFO order moves
// the lock across sockets at every hand-off: use hmcs_lock); single-threaded code
// (an uncontended acquire costs one exchange and one CAS).
#pragma once

#include <atomic>
#include <cstdint>

#include "base/backoff.hpp"
#include "base/cacheline.hpp"
#include "base/lock/lock.hpp"
#include "base/stats.hpp"

namespace mpiv::base {
namespace detail {

/// A queue node of the MCS protocol (also used by every level of hmcs_lock).
struct mcs_qnode {
    /// Value of status_ while the node waits for the lock.
    static constexpr std::uint32_t k_wait = 0xffffffffU;
    /// Hand-off value of the flat MCS lock and of the root level of HMCS.
    static constexpr std::uint32_t k_granted = 1;
    /// Value of status_ while the node's ULT is parked (never a hand-off value).
    static constexpr std::uint32_t k_parked = k_wait - 2;

    // Written by the predecessor at hand-off; polled by the node's owner.
    alignas(k_false_sharing) std::atomic<std::uint32_t> status_{k_wait};
    // Written once by the successor when it links itself; read by the owner on release.
    alignas(k_false_sharing) std::atomic<mcs_qnode *> next_{nullptr};
    // Wake token of a queued ULT waiter (base::park_token()), 0 for a pthread. Written
    // by the owner before its link store, read by the predecessor after loading the link.
    std::uint64_t sleeper_ = 0;
    // Link in the per-thread free list (owner thread only).
    mcs_qnode *free_next_ = nullptr;
};

/// Per-thread cache of free queue nodes. get() and put() touch only thread-local data;
/// nodes are allocated on first need and freed when the thread exits.
class qnode_cache {
  public:
    /// A node for one acquisition (reset by mcs_enqueue()). Allocates when the cache is
    /// empty; running out of memory there terminates (lock() cannot report failure).
    static mcs_qnode *get()
    {
        mcs_qnode *node = head_;
        if (node != nullptr) {
            head_ = node->free_next_;
            return node;
        }
        reaper_.arm();
        return new mcs_qnode;
    }

    /// Give back a node no other thread can reach any more.
    static void put(mcs_qnode *node) noexcept
    {
        node->free_next_ = head_;
        head_ = node;
    }

  private:
    // Frees the cached nodes at thread exit. Kept apart from head_ so that the hot path
    // reads a trivially destructible thread_local (no guard, no wrapper call).
    struct reaper {
        // Touching the thread_local constructs it, which registers its destructor.
        void arm() noexcept {}
        ~reaper()
        {
            while (head_ != nullptr) {
                mcs_qnode *node = head_;
                head_ = node->free_next_;
                delete node;
            }
        }
    };

    // Initial-exec: in libmpiv.so the default model costs a __tls_get_addr call in every
    // get() and put(), that is in every acquisition and release of an MCS lock.
    static inline thread_local mcs_qnode *head_ __attribute__((tls_model("initial-exec"))) =
        nullptr;
    static inline thread_local reaper reaper_;
};

/// Join the queue ending at @p tail with @p node and wait for the lock.
/// @return the status value the predecessor handed over, or @p empty_value when the queue
///         was empty (the caller owns the lock at once).
inline std::uint32_t mcs_enqueue(std::atomic<mcs_qnode *> &tail, mcs_qnode *node,
                                 std::uint32_t empty_value = mcs_qnode::k_granted) noexcept
{
    node->next_.store(nullptr, std::memory_order_relaxed);
    node->status_.store(mcs_qnode::k_wait, std::memory_order_relaxed);
    // sync: acq_rel; release publishes the reset node to the successor, acquire pairs
    // with release in mcs_release() (CAS to null) and in the predecessor's enqueue
    mcs_qnode *pred = tail.exchange(node, std::memory_order_acq_rel);
    if (pred == nullptr) {
        return empty_value;
    }
    node->sleeper_ = park_token();
    // sync: release; pairs with acquire in mcs_release() (read of next_), and publishes
    // sleeper_ to the predecessor
    pred->next_.store(node, std::memory_order_release);
    backoff wait;
    for (;;) {
        // sync: acquire; pairs with release in mcs_pass() (hand-off store or exchange)
        std::uint32_t status = node->status_.load(std::memory_order_acquire);
        if (status != mcs_qnode::k_wait) {
            return status;
        }
        if (node->sleeper_ == 0 || !wait.spun_out()) {
            wait.pause();
            continue;
        }
        // sync: acquire on both outcomes; pairs with the release exchange in mcs_pass():
        // a failed CAS returns the hand-off value, a successful one is seen by it.
        if (!node->status_.compare_exchange_strong(status, mcs_qnode::k_parked,
                                                   std::memory_order_acquire,
                                                   std::memory_order_acquire)) {
            return status;
        }
        stats::add(stats::counter::ult_parks);
        do {
            park(); // until mcs_pass() unparks us; wake-ups may be spurious
            // sync: acquire; pairs with the release exchange in mcs_pass()
        } while ((status = node->status_.load(std::memory_order_acquire)) == mcs_qnode::k_parked);
        return status;
    }
}

/// Take the lock at @p tail with @p node if the queue is empty. @return success.
inline bool mcs_try_enqueue(std::atomic<mcs_qnode *> &tail, mcs_qnode *node) noexcept
{
    node->next_.store(nullptr, std::memory_order_relaxed);
    mcs_qnode *expected = nullptr;
    // sync: acq_rel; acquire pairs with release in mcs_release() (CAS to null), release
    // publishes the reset node to a later successor
    return tail.compare_exchange_strong(expected, node, std::memory_order_acq_rel,
                                        std::memory_order_relaxed);
}

/// Hand the lock to @p succ with status @p value.
inline void mcs_pass(mcs_qnode *succ, std::uint32_t value) noexcept
{
    // Read before the hand-off: after it the node may be reused (see the design note).
    const std::uint64_t sleeper = succ->sleeper_;
    if (sleeper == 0) {
        // sync: release; pairs with acquire in mcs_enqueue() (status poll)
        succ->status_.store(value, std::memory_order_release);
        return;
    }
    // sync: release; pairs with the acquire loads and CAS in mcs_enqueue()
    if (succ->status_.exchange(value, std::memory_order_release) == mcs_qnode::k_parked) {
        unpark(sleeper);
    }
}

/// Release the queue at @p tail owned through @p node: hand the lock to the successor
/// with status @p value, or leave the queue empty.
inline void mcs_release(std::atomic<mcs_qnode *> &tail, mcs_qnode *node,
                        std::uint32_t value) noexcept
{
    // sync: acquire; pairs with release in mcs_enqueue() (link store)
    mcs_qnode *succ = node->next_.load(std::memory_order_acquire);
    if (succ == nullptr) {
        mcs_qnode *expected = node;
        // sync: release; pairs with acquire in mcs_enqueue() / mcs_try_enqueue()
        if (tail.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                         std::memory_order_relaxed)) {
            return;
        }
        // A successor swapped tail_ but has not linked itself yet.
        backoff wait;
        // sync: acquire; pairs with release in mcs_enqueue() (link store)
        while ((succ = node->next_.load(std::memory_order_acquire)) == nullptr) {
            wait.pause();
        }
    }
    mcs_pass(succ, value);
}

/// True iff no thread has joined the queue at @p tail behind @p node (the last node).
inline bool mcs_alone(const std::atomic<mcs_qnode *> &tail, const mcs_qnode *node) noexcept
{
    return tail.load(std::memory_order_relaxed) == node;
}

} // namespace detail

class MPIV_TS_CAPABILITY("mutex") mcs_lock {
  public:
    /// Waiters enter in the order they swapped themselves into the queue.
    static constexpr bool is_fair = true;
    /// Waiting spins, then yields (see base::backoff).
    static constexpr bool may_yield = true;

    mcs_lock() noexcept = default;
    mcs_lock(const mcs_lock &) = delete;
    mcs_lock &operator=(const mcs_lock &) = delete;

    /// Acquire the lock, waiting in FIFO order.
    /// @context thread-safe; may yield the calling ULT or thread; allocates a queue node
    ///          the first time a thread needs one more than it has cached.
    void lock() noexcept MPIV_TS_ACQUIRE()
    {
        detail::mcs_qnode *node = detail::qnode_cache::get();
        detail::mcs_enqueue(tail_, node);
        holder_ = node;
    }

    /// Acquire the lock if it is free. @return true iff the caller now owns it.
    /// @context thread-safe; never waits.
    [[nodiscard]] bool try_lock() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        // Cheap pre-check: do not take a node from the cache for a lock that is held.
        if (tail_.load(std::memory_order_relaxed) != nullptr) {
            return false;
        }
        detail::mcs_qnode *node = detail::qnode_cache::get();
        if (!detail::mcs_try_enqueue(tail_, node)) {
            detail::qnode_cache::put(node);
            return false;
        }
        holder_ = node;
        return true;
    }

    /// Release the lock to the next waiter; the caller must own it.
    /// @context owner only; may yield while a successor finishes joining the queue.
    void unlock() noexcept MPIV_TS_RELEASE()
    {
        detail::mcs_qnode *node = holder_;
        detail::mcs_release(tail_, node, detail::mcs_qnode::k_granted);
        detail::qnode_cache::put(node);
    }

    /// True iff no other thread has joined the queue. Exact at the time of the call (a
    /// thread that swapped itself into tail_ counts even before it links itself); a thread
    /// arriving later is not seen. @context owner only.
    [[nodiscard]] bool no_waiters() const noexcept { return detail::mcs_alone(tail_, holder_); }

  private:
    // Last node of the queue; swapped by every arriving thread.
    alignas(k_false_sharing) std::atomic<detail::mcs_qnode *> tail_{nullptr};
    // The owner's node: written after acquiring, read by unlock(); ordered by the lock.
    alignas(k_false_sharing) detail::mcs_qnode *holder_ = nullptr;
};

} // namespace mpiv::base
