// worker: one pinned pthread running the bit-vector scheduler over its ULTs.
//
// Design:
// - A worker owns up to `capacity` ULT ids Γ. Slot Γ of its slot table holds the
//   bookkeeping that outlives the ULT's stack (generation, state, return value, the
//   join sync); the ULT descriptor itself sits at the top of its own stack, on the page
//   the ULT touches anyway. The slot table is reserved with MAP_NORESERVE and slots are
//   constructed on first use, so unused capacity costs address space only.
// - Handles are (generation, ω, Γ). slot::tag_ = generation << 1 | claimed-bit; join
//   claims a ULT with one CAS on the exact (generation, unclaimed) value, so a stale or
//   doubled join fails cleanly even if Γ was reused meanwhile.
// - Spawn may be called from any thread: it takes an id and a cached stack under the
//   worker's small alloc lock, builds the context, publishes the slot (state = live,
//   release) and sets the id in the runset.
// - The scheduler loop (only on the worker's thread) drains the runset and switches to
//   each id whose slot is live; stale ids are skipped. A ULT returns control with a
//   transfer value: k_exit when it finished, so the scheduler frees its stack (it can't
//   free the stack it runs on) and then signals the join sync.
// - Idle: spin, then yield, then sleep on sleeping_ (futex). wake() after a runset set
//   checks sleeping_; the seq_cst pair set()/any() vs sleeping_ is a Dekker handshake.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <hwloc.h>
#include <mpiv/mpiv.h>

#include "base/cacheline.hpp"
#include "base/futex.hpp"
#include "base/status.hpp"
#include "sched/context.hpp"
#include "sched/runset.hpp"
#include "sched/stack_pool.hpp"
#include "sched/sync.hpp"

namespace mpiv::sched {

class worker;

/// A ULT while it is alive; placed at the top of its stack.
struct alignas(64) ult {
    context ctx;
    mpiv_ult_func_t func;
    void *arg;
    stack_region stack;
    worker *owner;
    std::uint32_t id;
};

enum class slot_state : std::uint32_t { free = 0, live = 1, exited = 2 };

/// Per-id bookkeeping that outlives the ULT's stack until it is joined.
struct slot {
    std::atomic<std::uint64_t> tag{std::uint64_t{1} << 1}; ///< generation << 1 | claimed
    std::atomic<slot_state> state{slot_state::free};
    ult *u = nullptr;         ///< valid while live; written by the spawner before state = live
    void *retval = nullptr;   ///< written by the ULT before it exits; read by the joiner
    bool detached = false;    ///< reclaimed at exit; never joined
    sync done{1};             ///< signalled once the ULT has exited
};

class worker {
  public:
    worker(std::uint32_t id, std::uint32_t capacity, stack_pool &stacks, hwloc_topology_t topo,
           hwloc_const_cpuset_t pu);
    ~worker();
    worker(const worker &) = delete;
    worker &operator=(const worker &) = delete;

    /// Start the worker's thread (waits until it runs its scheduler loop).
    [[nodiscard]] status start();
    /// Stop the scheduler loop and join the thread. Live ULTs are abandoned: the caller
    /// checks live() first.
    void stop();

    [[nodiscard]] status spawn(mpiv_ult_func_t func, void *arg, bool detached, std::uint64_t &handle);
    [[nodiscard]] status join(std::uint64_t handle, void **ret);

    /// Mark @p id runnable and wake the worker if it sleeps. Any thread.
    void wake(std::uint32_t id) noexcept
    {
        runset_.set(id);
        // seq_cst: after the runset's seq_cst level-2 OR (Dekker pair with idle()).
        if (sleeping_.load(std::memory_order_seq_cst) != 0 &&
            sleeping_.exchange(0, std::memory_order_relaxed) != 0) {
            base::futex_wake(sleeping_);
        }
    }

    std::uint32_t id() const noexcept { return id_; }
    /// Live (not yet exited) ULTs: a scan of the slot table, so spawn and exit pay no
    /// shared counter. Exact only while no ULT is spawned or exits concurrently.
    std::uint32_t live() const noexcept;
    /// Ids of live ULTs, at most @p max (diagnostics; racy by nature).
    std::vector<std::uint32_t> live_ids(std::size_t max) const;
    /// ULTs switched to so far (owner-written; racy read for tests and statistics).
    std::uint64_t dispatches() const noexcept { return dispatches_.load(std::memory_order_relaxed); }

    static std::uint64_t make_handle(std::uint32_t gen, std::uint32_t worker, std::uint32_t id) noexcept
    {
        return static_cast<std::uint64_t>(gen) << 32 | static_cast<std::uint64_t>(worker) << 20 | id;
    }
    static std::uint32_t handle_worker(std::uint64_t h) noexcept { return (h >> 20) & 0xfff; }

    /// The worker running the calling thread, or nullptr.
    static worker *current() noexcept;
    /// The ULT running on the calling thread, or nullptr.
    static ult *current_ult() noexcept;
    /// Handle of @p u (a live ULT of this worker).
    std::uint64_t handle_of(const ult &u) const noexcept;

    /// Yield the calling ULT (it runs again within a bounded number of dispatches).
    static void yield_current() noexcept;
    /// Suspend the calling ULT until its id is woken. Returns after a wake-up, which may
    /// be spurious: callers re-check their condition.
    static void block_current() noexcept;

  private:
    static constexpr std::uint32_t k_stack_cache = 64;
    static void entry(void *transfer, void *arg);
    void main();
    void dispatch(std::uint32_t id);
    void idle();
    void release_id(std::uint32_t id);
    slot &slot_at(std::uint32_t id) const noexcept { return slots_[id]; }

    const std::uint32_t id_;
    const std::uint32_t capacity_;
    stack_pool &stacks_;
    hwloc_topology_t topo_;
    hwloc_bitmap_t pu_;
    slot *slots_;          ///< capacity_ slots, MAP_NORESERVE
    std::size_t slots_bytes_;
    std::thread thread_;
    context sched_ctx_;

    runset runset_;
    alignas(k_false_sharing) std::atomic<std::uint32_t> sleeping_{0};
    std::atomic<bool> stop_{false};
    std::atomic<bool> running_{false};
    alignas(k_false_sharing) std::atomic<std::uint64_t> dispatches_{0}; ///< owner-written

    // Allocation state, under alloc_lock_ (spawners on any thread, exits on the worker).
    alignas(k_false_sharing) std::atomic<bool> alloc_lock_{false};
    std::atomic<std::uint32_t> fresh_{0}; ///< ids [0, fresh_) have constructed slots
    std::vector<std::uint32_t> free_ids_;
    std::vector<stack_region> stack_cache_;
};

} // namespace mpiv::sched
