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
//   release) and wakes the id. A ULT's stack returns to the cache its spawner draws
//   from: owner-only local_stacks_ (no lock) if it was spawned on the worker's own
//   thread, the shared cache otherwise; so both spawn patterns keep reusing hot stacks.
// - The scheduler loop (only on the worker's thread) drains the runset and switches to
//   each id whose slot is live; stale ids are skipped. An exiting ULT switches to the
//   scheduler with its own ult* as transfer value (nullptr means "suspended"), so the
//   scheduler frees its stack (it can't free the stack it runs on) and then signals the
//   join sync.
// - Direct hand-off: a wake-up issued on the worker's own thread (a ULT or the scheduler
//   signalling a ULT of the same worker, or spawning one there) does not touch the
//   runset: the ULT goes to t_next_, a thread-local pointer. Whenever the running ULT
//   blocks, yields or exits, t_next_ runs first: a blocking or yielding ULT switches
//   straight to it (one switch, no scheduler pass, no slot lookup: the waker checked the
//   slot), the scheduler runs it right after the ULT that came back. A second local
//   wake-up while t_next_ is taken goes to the runset. Wake-ups from other threads
//   always go through the runset (they need its atomics). Only suspended ULTs are put
//   in t_next_ (a ULT waking itself is ignored), and t_next_ is consumed at the next
//   switch, before anything else runs there: the ULT it names cannot exit meanwhile.
// - Fairness: direct switches bypass the runset, so each scheduling pass allows at most
//   k_max_streak of them (t_streak_, reset by the pass); past that, t_next_ goes to the
//   runset. An id set in the runset thus runs within two passes, each at most
//   (ids set) + k_max_streak dispatches long.
// - Quiescence handshake (for sync's owned mode): a thread that must know that every
//   ULT run of this worker which started before its request has ended calls quiesce():
//   it bumps ack_req_ and waits for ack_, which the scheduler stores between two passes
//   (acknowledge()) and before it sleeps. Nothing on the ULT switch path pays for it.
// - Scratch stack (on_scratch): a worker keeps one stack of the pool's size on which its
//   ULTs run the calls that do not outlive their caller (a send, the post of a receive,
//   a poll of the engine's progress). A ULT that resumes after thousands of others finds
//   its own stack cold: every frame those calls push below its blocked frames costs a
//   cache miss, one after another. Their frames on the worker's one scratch stack stay
//   hot. With few ULTs their stacks stay in the cache anyway and the switch (a few ns a
//   call) would be a loss: the scratch stack is used from scratch_ults_ live ULTs on.
//   It is lent, not shared: a ULT takes it (scratch_ empty) for the duration of the call
//   and gives it back after; meanwhile the calls of its worker's other ULTs (it may block
//   inside, a nested call may come) run on their own stacks. So a call may block, yield
//   or park inside like any other. scratch_ is owner-only (no atomics).
// - Stack prefetch (prefetch_upcoming): a resumed ULT's first instructions load its saved
//   registers and return through its blocked frames, lines cold once thousands of ULTs
//   take turns, each miss waiting for the one before (the saved stack pointer comes from
//   the descriptor, the descriptor from the slot). The scheduler knows which ids come
//   next (runset::drain's look-ahead: the rest of the 64-id word a pass took), so before
//   each dispatch it asks for the lines of the ones after it, a stage of the chain per
//   distance: the slot of the fourth next, the descriptor of the second, the frames of
//   the next one, from its saved stack pointer up to its descriptor (at most
//   k_prefetch_lines; none when the ULT is blocked on the scratch stack). The first id of
//   each word and direct hand-offs (t_next_) go without. Only the owner reads a ULT's
//   descriptor and stack (a suspended ULT of this worker changes only on this thread);
//   a slot's u is written by spawners on any thread while the slot is not live, so the
//   state is checked first (acquire), as dispatch() does. It runs only from
//   prefetch_ults_ live ULTs on: with fewer, the stacks stay in the cache and the
//   prefetches are pure cost. Each prefetched turn counts in base::stats
//   (stack_prefetches).
// - Idle: spin, then yield, then sleep on sleeping_ (futex). wake() after a runset set
//   checks sleeping_; the seq_cst pair set()/any() vs sleeping_ is a Dekker handshake.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include <hwloc.h>
#include <mpiv/mpiv.h>

#include "base/cacheline.hpp"
#include "base/futex.hpp"
#include "base/stats.hpp"
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
    std::uint64_t handle; ///< (generation, ω, Γ): this incarnation of the id
    std::uint32_t id;
    bool local_stack; ///< spawned on the owner's thread: the stack goes back to local_stacks_
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
    /// Direct switches (t_next_) allowed per scheduling pass: the fairness bound's slack.
    static constexpr std::uint32_t k_max_streak = 32;

    /// Most lines of a ULT's stack prefetched before its turn (4 KiB with 64-byte lines,
    /// from its saved stack pointer up; a ULT blocked in a receive of Open MPI spans about
    /// 1.7 KiB).
    static constexpr std::uint32_t k_prefetch_lines = 64;

    /// @param scratch_ults live ULTs from which on_scratch() uses the scratch stack
    ///        (mpiv_params_t::scratch_ults; UINT32_MAX: never)
    /// @param prefetch_ults live ULTs from which the scheduler prefetches the stacks of
    ///        the ULTs that run next (mpiv_params_t::prefetch_ults; UINT32_MAX: never)
    worker(std::uint32_t id, std::uint32_t capacity, stack_pool &stacks, hwloc_topology_t topo,
           hwloc_const_cpuset_t pu, std::uint32_t scratch_ults, std::uint32_t prefetch_ults);
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

    /// Mark @p id runnable and wake the worker if it sleeps. Any thread; on the worker's
    /// own thread this is the direct hand-off (t_next_).
    void wake(std::uint32_t id) noexcept
    {
        if (t_worker_ == this) {
            wake_local(id);
        } else {
            wake_remote(id);
        }
    }
    /// wake(id) on worker @p w of the running runtime (a sync's waiter token).
    static void wake(unsigned w, std::uint32_t id) noexcept
    {
        worker *self = t_worker_;
        if (self != nullptr && self->id_ == w) {
            self->wake_local(id); // the hand-off path skips the runtime lookup
        } else {
            wake_remote(w, id);
        }
    }
    /// Wake the ULT @p handle (generation, ω, Γ) if it still lives: on its own worker's
    /// thread through the direct hand-off, after checking the slot's generation; from
    /// elsewhere through the runset (a reused id then gets a spurious wake-up).
    static void wake_handle(std::uint64_t handle) noexcept
    {
        worker *self = t_worker_;
        if (self != nullptr && self->id_ == handle_worker(handle)) {
            self->wake_own(handle);
        } else {
            wake_remote(handle_worker(handle), handle & 0xfffff);
        }
    }
    /// wake_handle() for a ULT of this worker, on its thread.
    void wake_own(std::uint64_t handle) noexcept
    {
        const slot &s = slot_at(handle & 0xfffff);
        // A ULT of this worker exits only on this thread, so while the caller runs here
        // the owner is either still suspended (generation and state match) or gone. A
        // respawn of the id from another thread may race with these loads: then s.u is
        // the new ULT, live and suspended, and gets a spurious wake-up, which is allowed.
        // relaxed: only compared. acquire: pairs with the release store of state in
        // spawn(): s.u is set.
        if ((s.tag.load(std::memory_order_relaxed) >> 1) == (handle >> 32) &&
            s.state.load(std::memory_order_acquire) == slot_state::live) {
            wake_local(s.u);
        }
    }

    std::uint32_t id() const noexcept { return id_; }
    /// Live ULTs from which on_scratch() uses the scratch stack.
    std::uint32_t scratch_ults() const noexcept { return scratch_ults_; }
    /// Live ULTs from which the scheduler prefetches the stacks of the next ULTs.
    std::uint32_t prefetch_ults() const noexcept { return prefetch_ults_; }
    /// Live (not yet exited) ULTs: a scan of the slot table (on_scratch() reads the
    /// running count live_count_ instead). Exact only while no ULT is spawned or exits
    /// concurrently.
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
    static worker *current() noexcept { return t_worker_; }
    /// The ULT running on the calling thread, or nullptr.
    static ult *current_ult() noexcept { return t_current_; }

    /// Whether the calling thread is a worker that prefetches: one with at least
    /// prefetch_ults live ULTs, as prefetch_upcoming() requires. Lines its ULTs last
    /// touched are then likely out of the cache; other layers use it to decide whether
    /// to gather work and prefetch its lines before doing it (engine::progress()).
    /// @context any thread (false off a worker's thread)
    static bool prefetching() noexcept
    {
        const worker *const w = t_worker_;
        return w != nullptr && w->prefetches();
    }

    /// Whether on_scratch() would switch stacks: the caller is a ULT whose worker has at
    /// least scratch_ults live ULTs and its scratch stack at hand (not lent out to a
    /// nested call, or to another ULT of the worker blocked inside one). For callers whose
    /// fast path must not build on_scratch()'s closure.
    /// @context any thread
    [[gnu::always_inline]] static bool scratch_wanted() noexcept
    {
        const worker *const w = t_worker_;
        // Relaxed: a hint; the count only chooses the stack.
        return w != nullptr && t_current_ != nullptr &&
               w->live_count_.load(std::memory_order_relaxed) >= w->scratch_ults_ &&
               w->scratch_.lo != nullptr;
    }

    /// Call @p f() (noexcept, void) on the calling ULT's worker's scratch stack when
    /// scratch_wanted() (see the design note), in place otherwise.
    /// @context any thread; the calling ULT may block inside @p f
    template <class F> static void on_scratch(F &&f) noexcept
    {
        if (__builtin_expect(!scratch_wanted(), 1)) {
            f();
            return;
        }
        run_on_scratch(f);
    }

    /// on_scratch()'s switch, for a caller that found scratch_wanted() true.
    template <class F> static void run_on_scratch(F &&f) noexcept
    {
        t_worker_->call_on_scratch([](void *o) { (*static_cast<std::remove_reference_t<F> *>(o))(); },
                                   &f);
    }

    /// on_scratch()'s switch: fn(arg) on scratch_, lent to the running ULT meanwhile. For
    /// a caller on this worker's thread that found scratch_wanted() true, with a plain
    /// function (mpiv_call_on_scratch) rather than a closure.
    void call_on_scratch(void (*fn)(void *), void *arg) noexcept;

    /// Yield the calling ULT (it runs again within a bounded number of dispatches).
    static void yield_current() noexcept;
    /// Suspend the calling ULT until its id is woken. Returns after a wake-up, which may
    /// be spurious: callers re-check their condition. Inline, so the switch happens in
    /// the caller's frame: a ULT handing off to one that blocked at the same call site
    /// then returns through a chain the return-stack predictor already holds (see
    /// mpiv_ctx_jump). The direct hand-off is the fast path: two thread-local loads,
    /// then the switch.
    static void block_current() noexcept
    {
        ult *const self = t_current_;
        ult *const next = t_next_;
        if (next != nullptr && t_streak_ < k_max_streak) {
            t_next_ = nullptr;
            ++t_streak_;
            t_current_ = next;
            t_worker_->count_dispatch();
            (void)jump(self->ctx, next->ctx, k_suspended);
            return;
        }
        self->owner->suspend(*self);
    }

    /// Wait until every ULT run of this worker that began before the call has ended
    /// (see the design note). Any thread but the worker's own; a ULT caller yields.
    void quiesce() noexcept;

  private:
    /// At least prefetch_ults_ live ULTs: their lines are likely out of the cache.
    bool prefetches() const noexcept
    {
        // Relaxed: a hint; the count only chooses whether to prefetch (as in scratch_wanted()).
        return live_count_.load(std::memory_order_relaxed) >= prefetch_ults_;
    }
    static constexpr std::uint32_t k_stack_cache = 64;
    /// Transfer value of a suspending switch; an exiting ULT passes its ult* instead.
    static constexpr void *k_suspended = nullptr;
    static void entry(void *transfer, void *arg);
    void main();
    void dispatch(std::uint32_t id);
    void reap(ult &u);
    /// wake() from the worker's own thread: it is awake and nothing else touches t_next_.
    void wake_local(std::uint32_t id) noexcept
    {
        const slot &s = slot_at(id);
        // sync: acquire; pairs with the release store of state in spawn(): u is set.
        if (s.state.load(std::memory_order_acquire) == slot_state::live) {
            wake_local(s.u);
        }
    }
    /// Make @p u (a suspended ULT of the calling thread's worker) run next.
    static void wake_local(ult *u) noexcept
    {
        if (u == t_current_) {
            return; // the running ULT woke itself: it is not waiting
        }
        base::stats::add(base::stats::counter::ult_wakeups);
        if (t_next_ == nullptr) {
            t_next_ = u;
        } else {
            u->owner->runset_.set(u->id);
        }
    }
    void wake_remote(std::uint32_t id) noexcept;
    static void wake_remote(unsigned w, std::uint32_t id) noexcept;
    ult *take_next() noexcept
    {
        ult *const u = t_next_;
        if (u == nullptr) {
            return nullptr;
        }
        t_next_ = nullptr;
        if (t_streak_ >= k_max_streak) {
            runset_.set(u->id); // fairness: let the runset's ids run first
            return nullptr;
        }
        ++t_streak_;
        return u;
    }
    /// runset::drain's look-ahead: prefetch for next[0 .. count), the ids that run after
    /// the one about to run (see the design note).
    void prefetch_upcoming(const std::uint32_t *next, std::uint32_t count) noexcept;
    void count_dispatch() noexcept
    {
        dispatches_.store(dispatches_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    /// Switch away from the running ULT @p u: to t_next_ if allowed, else to the
    /// scheduler. Returns when @p u is resumed (whoever resumes it sets t_current_).
    void suspend(ult &u) noexcept;
    /// Answer quiesce() requests: only between ULT runs, on the worker's thread.
    void acknowledge() noexcept
    {
        // sync: acquire; pairs with the fetch_add in quiesce(): what the requester wrote
        // before (a sync registration) is visible to every ULT run after this.
        const std::uint32_t req = ack_req_.load(std::memory_order_acquire);
        if (req != ack_seen_) {
            ack_seen_ = req;
            // sync: release; pairs with the acquire load in quiesce(): the writes of the
            // ULT runs so far (local completions) are visible to the requester.
            ack_.store(req, std::memory_order_release);
        }
    }
    void idle();
    void release_id(std::uint32_t id);
    slot &slot_at(std::uint32_t id) const noexcept { return slots_[id]; }

    // initial-exec: read on every switch; the general-dynamic model would call
    // __tls_get_addr each time. libmpiv.so is small enough for the static TLS surplus
    // glibc keeps for libraries loaded later (as when Open MPI dlopens the PML component).
    static inline thread_local worker *t_worker_ __attribute__((tls_model("initial-exec"))) = nullptr;
    static inline thread_local ult *t_current_ __attribute__((tls_model("initial-exec"))) = nullptr;
    /// Direct hand-off target of the worker running on this thread (see the design note).
    static inline thread_local ult *t_next_ __attribute__((tls_model("initial-exec"))) = nullptr;
    /// Direct switches in the current scheduling pass.
    static inline thread_local std::uint32_t t_streak_ __attribute__((tls_model("initial-exec"))) = 0;

    const std::uint32_t id_;
    const std::uint32_t capacity_;
    stack_pool &stacks_;
    hwloc_topology_t topo_;
    hwloc_bitmap_t pu_;
    slot *slots_;          ///< capacity_ slots, MAP_NORESERVE
    std::size_t slots_bytes_;
    std::thread thread_;
    context sched_ctx_;
    /// The scratch stack; empty while lent out, when scratch_ults_ is UINT32_MAX, or when
    /// the pool had none (owner-only).
    stack_region scratch_;
    const std::uint32_t scratch_ults_;
    const std::uint32_t prefetch_ults_;
    /// Live ULTs: spawned, not yet reaped. Any spawner adds, the owner subtracts (relaxed:
    /// it only chooses the stack of on_scratch() and whether to prefetch). On its own line: spawners on other
    /// threads write it, the owner reads the fields above on every switch.
    alignas(k_false_sharing) std::atomic<std::uint32_t> live_count_{0};

    runset runset_;
    alignas(k_false_sharing) std::atomic<std::uint32_t> sleeping_{0};
    std::atomic<bool> stop_{false};
    std::atomic<bool> running_{false};
    alignas(k_false_sharing) std::atomic<std::uint64_t> dispatches_{0}; ///< owner-written
    // Quiescence handshake: requests from any thread, acknowledgements by the owner.
    alignas(k_false_sharing) std::atomic<std::uint32_t> ack_req_{0};
    alignas(k_false_sharing) std::atomic<std::uint32_t> ack_{0};
    std::uint32_t ack_seen_ = 0; ///< owner-only: the last request acknowledged
    // Stacks of ULTs spawned on the worker's own thread; owner-only, so spawn and exit
    // there take no lock for the stack. Free ids stay in the shared list: a private id
    // cache would hide ids from other spawners and make the capacity limit inexact.
    std::vector<stack_region> local_stacks_;

    // Allocation state, under alloc_lock_ (spawners on any thread, exits on the worker).
    alignas(k_false_sharing) std::atomic<bool> alloc_lock_{false};
    std::atomic<std::uint32_t> fresh_{0}; ///< ids [0, fresh_) have constructed slots
    std::vector<std::uint32_t> free_ids_;
    std::vector<stack_region> stack_cache_;
};

// ------------------------------------------------ sync's hot paths (see sync.hpp)

inline void sync::arm(std::int64_t count) noexcept
{
    const ult *self = worker::current_ult();
    armed_ = count;
    if (self != nullptr && count <= k_owned_max) {
        owner_ = self->owner;
        owner_handle_ = self->handle;
        count_.store(0, std::memory_order_relaxed);
    } else {
        owner_ = nullptr;
        owner_handle_ = 0;
        count_.store(count, std::memory_order_relaxed);
    }
    waiter_.store(k_none, std::memory_order_relaxed);
}

inline status sync::reset(std::int64_t count) noexcept
{
    if (count < 1) {
        return status::invalid_arg;
    }
    if (has_waiter()) {
        return status::busy;
    }
    arm(count);
    return status::ok;
}

inline bool sync::test() const noexcept
{
    if (owner_ != nullptr) {
        // sync: acquire (both); pair with the release store of count_ in signal() and the
        // release CAS in signal_remote(): the completions' writes are visible.
        const std::int64_t local = count_.load(std::memory_order_acquire);
        return owned_done(local, waiter_.load(std::memory_order_acquire)) >= armed_;
    }
    // sync: acquire; pairs with the release store or exchange of DONE in complete().
    return waiter_.load(std::memory_order_acquire) == k_done;
}

inline status sync::signal() noexcept
{
    worker *const here = worker::current();
    if (owner_ == nullptr || owner_ != here) {
        return signal_slow();
    }
    // Local: only this thread writes count_. Everything the wake-up needs is read before
    // the store that may complete the sync (its waiter may free it at once).
    // sync: acquire; pairs with the release CASes of remote completions and of a foreign
    // registration (its token is valid).
    const std::uint64_t remote = waiter_.load(std::memory_order_acquire);
    const std::int64_t local = count_.load(std::memory_order_relaxed);
    const std::int64_t done = owned_done(local, remote);
    const std::int64_t armed = armed_;
    if (__builtin_expect(done >= armed, 0)) {
        return oversignaled();
    }
    if (__builtin_expect((remote & k_foreign_pthread) != 0, 0)) {
        return signal_remote(); // the sleeping pthread needs the futex word to change
    }
    const std::uint64_t owner = owner_handle_;
    // sync: release; pairs with the acquire loads in test() and wait(). Last access.
    count_.store(local + 1, std::memory_order_release);
    if (__builtin_expect((remote & k_foreign) != 0, 0)) {
        // A remote completion may have landed since the load above, making this the
        // last one, and the foreign waiter may have checked before this store: wake it
        // after every local completion (contrib/model/owned_sync.pml). The owner needs
        // no such care: it re-checks on this thread, after this ULT run.
        wake_owned(owner, remote, nullptr);
    } else if (done + 1 == armed) {
        here->wake_own(owner);
    }
    return status::ok;
}

inline status sync::wait() noexcept
{
    const ult *self = worker::current_ult();
    if (owner_ == nullptr || self == nullptr || self->handle != owner_handle_) {
        return wait_slow();
    }
    // The owner: every completion wakes it, so it only checks and blocks.
    // sync: acquire (both loads, here and in the loop); pair with the release store of
    // count_ in signal() and the release CAS in signal_remote().
    std::int64_t local = count_.load(std::memory_order_acquire);
    std::uint64_t remote = waiter_.load(std::memory_order_acquire);
    if (owned_done(local, remote) >= armed_) {
        return status::ok;
    }
    if (__builtin_expect((remote & k_foreign) != 0, 0)) {
        return second_waiter();
    }
    count_.store(local | k_waiting, std::memory_order_relaxed); // only this thread writes it
    do {
        worker::block_current();
        local = count_.load(std::memory_order_acquire);
        remote = waiter_.load(std::memory_order_acquire);
    } while (owned_done(local, remote) < armed_);
    count_.store(local & ~k_waiting, std::memory_order_relaxed);
    return status::ok;
}

} // namespace mpiv::sched

