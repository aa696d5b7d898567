// engine: waiting (ULT waits with poller ULTs, pthread waits as progress owner or parked,
// yielding waits) and the communication-server thread. See engine.hpp for the design.
#include <chrono>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <hwloc.h>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "base/membarrier.hpp"
#include "base/stats.hpp"
#include "sched/runtime.hpp"
#include "sched/worker.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

namespace {
// A pthread's waiter (one wait at a time per thread). It is not thread-local storage: a
// waker may still read it (owner, asleep) after the decrement that let the wait return,
// and the thread may exit right then. Waiters of exited threads are recycled through a
// process-wide free list and never freed; a late access then meets a reused waiter and
// costs at most a spurious wake-up.
struct waiter_pool {
    std::mutex mu;
    std::vector<waiter *> free;
    std::vector<std::unique_ptr<waiter>> all; // owns every pthread waiter ever made
};
waiter_pool &pthread_waiters()
{
    static waiter_pool *pool = new waiter_pool; // never destroyed: threads may outlive exit()
    return *pool;
}
thread_local waiter *tl_waiter __attribute__((tls_model("initial-exec"))) = nullptr;

// The waits of ULTs: a waiter and its sync, made together and kept for reuse in a list of
// their worker's thread (ULTs never change workers), up to k_ult_waits_kept of them. A
// completer's last access to them is the signal that lets the wait end (sched::sync's
// lifetime rule), so they may be reused at once, like freed.
struct ult_wait : waiter {
    sched::sync s;
    ult_wait *next = nullptr;
};
constexpr unsigned k_ult_waits_kept = 64;
thread_local ult_wait *tl_ult_waits __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local unsigned tl_ult_waits_kept __attribute__((tls_model("initial-exec"))) = 0;

// Makes sure this thread's waiter_release (below) runs at its exit.
void register_thread_exit() noexcept;

// Out of line: the thread-local list is read where the call runs, never through an
// address computed before a context switch.
[[gnu::noinline]] ult_wait *take_ult_wait() noexcept
{
    ult_wait *u = tl_ult_waits;
    if (u != nullptr) {
        tl_ult_waits = u->next;
        --tl_ult_waits_kept;
        return u;
    }
    u = new (std::nothrow) ult_wait;
    if (u == nullptr) {
        base::log(base::log_level::error, "mpiv: out of memory starting a wait; aborting");
        std::abort();
    }
    u->ult_sync = &u->s;
    register_thread_exit(); // it comes back to this thread's list, freed at its exit
    return u;
}

[[gnu::noinline]] void give_ult_wait(ult_wait *u) noexcept
{
    if (tl_ult_waits_kept == k_ult_waits_kept) {
        delete u;
        return;
    }
    u->next = tl_ult_waits;
    tl_ult_waits = u;
    ++tl_ult_waits_kept;
}

struct waiter_release {
    ~waiter_release()
    {
        while (ult_wait *u = tl_ult_waits) {
            tl_ult_waits = u->next;
            delete u;
        }
        tl_ult_waits_kept = 0;
        if (tl_waiter != nullptr) {
            waiter_pool &p = pthread_waiters();
            std::lock_guard<std::mutex> guard(p.mu);
            p.free.push_back(tl_waiter); // capacity reserved when the waiter was made
            tl_waiter = nullptr;
        }
    }
};
thread_local waiter_release tl_waiter_release;

void register_thread_exit() noexcept
{
    (void)&tl_waiter_release; // its first use registers the destructor
}

waiter &my_pthread_waiter()
{
    if (tl_waiter == nullptr) {
        waiter_pool &p = pthread_waiters();
        std::lock_guard<std::mutex> guard(p.mu);
        if (!p.free.empty()) {
            tl_waiter = p.free.back();
            p.free.pop_back();
        } else {
            try {
                p.all.push_back(std::make_unique<waiter>());
                p.free.reserve(p.all.size());
                tl_waiter = p.all.back().get();
            } catch (const std::bad_alloc &) {
                base::log(base::log_level::error, "mpiv: out of memory starting a wait; aborting");
                std::abort();
            }
        }
        register_thread_exit(); // the hand-back of the waiter
    }
    return *tl_waiter;
}
// A poller that finds nothing this many times in a row yields its PU to the kernel once:
// a pthread sharing the PU (the main thread spawning ULTs, a second worker) then runs
// while the ULTs wait. Measured (2 processes, one PU each, 100,000 ULTs spawned from
// main, each with one round trip): 4.9 s without, 2.9 s with; the ping-pong rate of 1
// and 16 ULTs per process did not change (ABBA).
constexpr unsigned k_poller_polls_per_os_yield = 256;
constexpr long k_park_timeout_ns = 10000000;     // parked: re-check ownership every 10 ms
constexpr int k_idle_clock_polls = 256;          // idle polls between two looks at the clock
constexpr long k_doorbell_timeout_ns = 1000000;  // safety net: re-poll every 1 ms

// Idle polls of a progress loop, and whether params_.idle_us have passed without an event
// (the clock is read once every k_idle_clock_polls polls).
class idle_timer {
  public:
    explicit idle_timer(std::uint32_t idle_us) noexcept : budget_(idle_us) {}
    void busy() noexcept { polls_ = 0; }
    // One idle poll; true once the budget is spent (counting then starts over).
    bool spent() noexcept
    {
        if (++polls_ == 1) {
            since_ = std::chrono::steady_clock::now();
        }
        if (polls_ % k_idle_clock_polls != 0 ||
            std::chrono::steady_clock::now() - since_ < budget_) {
            return false;
        }
        polls_ = 0;
        return true;
    }
    unsigned polls() const noexcept { return polls_; }

  private:
    std::chrono::microseconds budget_;
    std::chrono::steady_clock::time_point since_{};
    unsigned polls_ = 0;
};
} // namespace

template <class Still> void engine::doze(Still still) noexcept
{
    std::atomic<std::uint32_t> &doorbell = shm_.doorbell();
    std::atomic<std::uint32_t> &sleeping = shm_.sleeping();
    const std::uint32_t seen = doorbell.load(std::memory_order_relaxed);
    sleeping.fetch_add(1, std::memory_order_relaxed);
    // seq_cst fence: Dekker with shm::ring() (see there); with light rings the heavy
    // barrier is the senders' half, and without it this wait does not sleep.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if ((!shm_.light_ring() || base::heavy_barrier()) && inbound_idle() && still()) {
        base::futex_wait_for(doorbell, seen, k_doorbell_timeout_ns, true);
    }
    sleeping.fetch_sub(1, std::memory_order_relaxed);
}

waiter *engine::wait_begin(std::int32_t count) noexcept
{
    if (sched::worker::current_ult() != nullptr) {
        ult_wait *u = take_ult_wait();
        if (u->s.reset(count) != status::ok) { // count >= 1, and no wait is under way
            base::log(base::log_level::error, "mpiv: a ULT wait for %d completions cannot start",
                      static_cast<int>(count));
            std::abort();
        }
        return u;
    }
    waiter &w = my_pthread_waiter();
    w.begun = count;
    // Release: pairs with the acquire in wake(); the count is set before any registration.
    w.remaining.store(count, std::memory_order_release);
    return &w;
}

void engine::wait_settle(waiter *w, std::int32_t total) noexcept
{
    // The completers still to come took w before the wait ended and wake it at once;
    // nothing here depends on progress.
    base::backoff wait;
    // Acquire: pairs with the acq_rel decrement in wake().
    while (w->begun - w->remaining.load(std::memory_order_acquire) < total) {
        wait.pause();
    }
}

void engine::wake(waiter *w) noexcept
{
    if (sched::sync *s = w->ult_sync) {
        // The waiting ULT may free w and s as soon as the last signal lands.
        (void)s->signal();
        return;
    }
    // acq_rel: the completion's writes happen before the waiter sees remaining <= 0.
    // Serial: the waiter is this thread (or one that takes over through the caller's own
    // synchronization), so a plain decrement does.
    std::int32_t before;
    if (serial_) {
        before = w->remaining.load(std::memory_order_relaxed);
        w->remaining.store(before - 1, std::memory_order_release);
    } else {
        before = w->remaining.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (before == 1) {
        // seq_cst: Dekker with owner_loop() (its owner store, then its remaining check).
        const bool owner = w->owner.load(std::memory_order_seq_cst);
        // seq_cst: Dekker with sleep_on_word() (its asleep store, then its remaining
        // check): a waiter that is not asleep sees the completion without a system call.
        if (w->asleep.load(std::memory_order_seq_cst)) {
            w->word.fetch_add(1, std::memory_order_release);
            base::futex_wake(w->word, 1);
        }
        // seq_cst (the decrement above is the RMW half of the Dekker with the sleeping
        // increment + fence in doze()): ring only an owner asleep on the doorbell.
        if (owner && shm_.sleeping().load(std::memory_order_seq_cst) != 0) {
            shm_.doorbell().fetch_add(1, std::memory_order_relaxed);
            base::futex_wake_shared(shm_.doorbell(), 1);
        }
    }
}

void engine::wait_end(waiter *w) noexcept
{
    if (sched::sync *s = w->ult_sync) {
        // Inline progress: the waiting ULTs poll, yielding between polls; with a server
        // thread they block until the completion signals them.
        if (!s->test() && params_.progress != MPIV_P2P_PROGRESS_SERVER) {
            // On the worker's scratch stack: this ULT's own is cold when many take turns.
            sched::worker::on_scratch([this] { progress(); });
            if (!s->test()) {
                // This worker's count, on its own thread: no switch between the count and
                // the look for the poller, nor in the poller between its last look at the
                // count and its exit (see ult_poll_state).
                const std::uint32_t worker = sched::worker::current()->id();
                ult_poll_state &ws = ult_poll_[worker];
                ++ws.waiters;
                ensure_poller(ws, worker);
                (void)s->wait();
                --ws.waiters;
            }
        } else {
            (void)s->wait();
        }
        give_ult_wait(static_cast<ult_wait *>(w)); // made by take_ult_wait()
        return;
    }
    pthread_wait(*w);
}

struct engine::poller_arg {
    engine *e;
    std::uint32_t worker;
};

void engine::ensure_poller(ult_poll_state &ws, std::uint32_t worker) noexcept
{
    if (ws.poller_on) {
        return;
    }
    ws.poller_on = true;
    // Pollers are ULTs of the application's runtime: hold a reference on it so that it
    // outlives them (released by the destructor once they are gone).
    std::call_once(runtime_ref_once_, [this] { runtime_ref_ = sched::runtime::init(nullptr) == status::ok; });
    auto *arg = new (std::nothrow) poller_arg{this, worker};
    sched::runtime *rt = sched::runtime::get();
    std::uint64_t handle = 0;
    // Relaxed: the destructor waits for the count to drop back to zero.
    pollers_live_.fetch_add(1, std::memory_order_relaxed);
    if (arg == nullptr || rt == nullptr ||
        rt->spawn(&engine::poller_main, arg, static_cast<int>(worker), true, handle) != status::ok) {
        base::log(base::log_level::error, "mpiv: cannot start the progress ULT on worker %u; aborting",
                  worker);
        std::abort();
    }
}

// A worker's poller: drives progress while ULTs of its worker wait, yielding to them
// between polls (and to the kernel after a run of empty polls); it ends when none waits
// any more.
void *engine::poller_main(void *raw) noexcept
{
    auto *arg = static_cast<poller_arg *>(raw);
    engine &e = *arg->e;
    const std::uint32_t worker = arg->worker;
    delete arg;
    unsigned empty = 0; // polls in a row that found nothing
    for (;;) {
        if (e.progress() != 0) {
            empty = 0;
        } else if (++empty % k_poller_polls_per_os_yield == 0) {
            std::this_thread::yield();
        }
        ult_poll_state &ws = e.ult_poll_[worker];
        if (ws.waiters == 0) {
            ws.poller_on = false; // the next waiter of this worker starts a poller
            break;
        }
        sched::worker::yield_current();
    }
    // Release: the destructor's acquire load sees this poller's last accesses done.
    e.pollers_live_.fetch_sub(1, std::memory_order_release);
    return nullptr;
}

bool engine::inbound_idle() noexcept
{
    // Relaxed: hints, as in progress(). UCX arrivals do not ring the doorbell: with UCX
    // peers a waiter keeps polling.
    return shm_.inbound_idle() && outbound_count_.load(std::memory_order_relaxed) == 0 &&
           !ucx_up_.load(std::memory_order_relaxed);
}

bool engine::poll_alone(int polls, int (*done)(void *), void *arg) noexcept
{
    if (params_.progress == MPIV_P2P_PROGRESS_SERVER || sched::worker::current_ult() != nullptr) {
        return false;
    }
    // Relaxed: the count only sizes waits (see pthread_wait); this poller counts in it, so
    // that a thread coming to wait meanwhile sees a crowd. UCX peers: a poll is a system
    // call. Serial mode keeps no count (nothing else runs).
    waiter *crowd = nullptr;
    if (!serial_) {
        if (ucx_up_.load(std::memory_order_relaxed)) {
            return false;
        }
        if (pthread_waiters_.fetch_add(1, std::memory_order_relaxed) != 0) {
            // Other pthreads wait: poll for this thread's learned crowd budget instead
            // (see pthread_wait), and tell its wait, if it comes to one, that the budget
            // was spent here.
            crowd = &my_pthread_waiter();
            polls = static_cast<int>(crowd->crowd_spin.next());
        }
    }
    int i = 0;
    for (; i < polls; ++i) {
        if (done(arg) != 0) {
            break;
        }
        // More processes than PUs: the peer this wait depends on may need this PU.
        if (progress() == 0 && params_.yield_when_idle != 0) {
            std::this_thread::yield();
        }
    }
    const bool ok = i < polls;
    if (crowd != nullptr) {
        if (ok) {
            crowd->crowd_spin.ended_within(static_cast<std::uint32_t>(i));
        } else {
            crowd->crowd_spin.outlasted();
            crowd->prepolled = true;
        }
    }
    if (!serial_) {
        pthread_waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
    return ok;
}

void engine::pthread_wait(waiter &w) noexcept
{
    if (serial_) {
        (void)pthread_wait_slow(w, static_cast<int>(k_spin_polls_alone), false); // the only waiter
        return;
    }
    // Relaxed: only sizes the spin. With UCX peers a poll costs system calls (UCX's TCP
    // progress is an epoll_wait per call), so the spins are shorter: a lone waiter's 4096
    // polls would hold the PU for ~10 ms, and in a crowd every poll by a waiter competes
    // with the progress owner for the PU it needs to complete the others' receives
    // (measured, 16 threads per process over UCX on one node: 64 polls each, 21k round
    // trips/s; 4, 39k; none, 50k; none and then watching, 67k).
    const bool crowd = pthread_waiters_.fetch_add(1, std::memory_order_relaxed) != 0;
    const bool costly = ucx_up_.load(std::memory_order_relaxed);
    const bool prepolled = w.prepolled;
    w.prepolled = false;
    if (crowd && !costly) {
        // Over shared memory a waiter in a crowd polls for its own budget (adaptive_spin):
        // its completion often comes from the peer process within a round trip, and then
        // polling on saves a kernel switch per message (msgrate --regime latency, 16 client
        // threads on 2 PUs, against a fixed 64 polls: 0.94M against 0.44M round trips/s in
        // one set of runs, 0.85M against 0.79M in another), while a thread whose completion
        // needs another thread of its process falls back to 64 polls within a few waits.
        // A wait whose poll_alone() already spent the budget goes on without spinning.
        if (prepolled) {
            (void)pthread_wait_slow(w, 0, true);
        } else {
            const int ended = pthread_wait_slow(w, static_cast<int>(w.crowd_spin.next()), true);
            if (ended < 0) {
                w.crowd_spin.outlasted();
            } else {
                w.crowd_spin.ended_within(static_cast<std::uint32_t>(ended));
            }
        }
    } else {
        const std::uint32_t spins = crowd ? 0 : (costly ? k_spin_polls_crowd : k_spin_polls_alone);
        (void)pthread_wait_slow(w, static_cast<int>(spins), crowd);
    }
    pthread_waiters_.fetch_sub(1, std::memory_order_relaxed);
}

int engine::pthread_wait_slow(waiter &w, int spins, bool crowd) noexcept
{
    const bool inline_progress = params_.progress != MPIV_P2P_PROGRESS_SERVER;
    // One look (and one poll), then the PU handed on; true when the wait is over.
    const auto look_then_yield = [&] {
        // Acquire: pairs with the acq_rel decrement in wake().
        if (w.remaining.load(std::memory_order_acquire) <= 0 ||
            (inline_progress && progress() > 0 &&
             w.remaining.load(std::memory_order_acquire) <= 0)) {
            return true;
        }
        std::this_thread::yield();
        return false;
    };
    if (params_.yield_when_idle != 0) {
        // More processes than PUs: the peer this wait depends on may need this PU. Poll
        // once, then yield it, for as long as the wait lasts: no spin (it would hold the
        // PU for the rest of the time slice) and no sleep (a futex wake-up per message).
        while (!look_then_yield()) {
        }
        return -1;
    }
    for (int i = 0; i < spins; ++i) {
        // Acquire: pairs with the acq_rel decrement in wake().
        if (w.remaining.load(std::memory_order_acquire) <= 0) {
            return i;
        }
        if (inline_progress) {
            progress();
        }
    }
    // Watch phase, for up to params_.idle_us: a waiter in a crowd (and any waiter when a
    // server thread drives progress) keeps looking but yields the PU between looks, so
    // that the thread whose message just came in, or the server, runs at once. Parking
    // instead costs a futex wake-up per message, tens of microseconds on a virtual
    // machine: with 16 threads per core the ping-pong rate is several times lower.
    if (crowd || !inline_progress) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::microseconds(params_.idle_us);
        do {
            if (look_then_yield()) {
                return -1;
            }
        } while (std::chrono::steady_clock::now() < deadline);
    }
    if (!inline_progress) {
        // The server drives progress: sleep until the completions arrive.
        for (;;) {
            const std::uint32_t seen = w.word.load(std::memory_order_acquire);
            if (w.remaining.load(std::memory_order_acquire) <= 0) {
                return -1;
            }
            sleep_on_word(w, seen);
        }
    }
    for (;;) {
        bool own = false;
        {
            std::lock_guard<std::mutex> guard(park_mu_);
            if (w.promoted.load(std::memory_order_relaxed) || !owner_taken_) {
                own = true;
                owner_taken_ = true;
                w.promoted.store(false, std::memory_order_relaxed);
                unpark_locked(w);
            } else if (!w.parked) {
                w.next = parked_;
                parked_ = &w;
                w.parked = true;
            }
        }
        if (own) {
            owner_loop(w);
            leave_owner();
            return -1;
        }
        // Parked: woken by our completion or by a promotion.
        const std::uint32_t seen = w.word.load(std::memory_order_acquire);
        if (w.remaining.load(std::memory_order_acquire) <= 0) {
            std::lock_guard<std::mutex> guard(park_mu_);
            unpark_locked(w);
            if (!w.promoted.load(std::memory_order_relaxed)) {
                return -1;
            }
            // Promoted while completing: pass ownership on.
            w.promoted.store(false, std::memory_order_relaxed);
            promote_next_locked();
            return -1;
        }
        if (!w.promoted.load(std::memory_order_acquire)) {
            sleep_on_word(w, seen);
        }
    }
}

void engine::sleep_on_word(waiter &w, std::uint32_t seen) noexcept
{
    // seq_cst: Dekker with wake() (see there); promotions always call futex_wake.
    w.asleep.store(true, std::memory_order_seq_cst);
    if (w.remaining.load(std::memory_order_seq_cst) > 0 &&
        !w.promoted.load(std::memory_order_seq_cst)) {
        base::stats::add(base::stats::counter::waits_slept);
        base::futex_wait_for(w.word, seen, k_park_timeout_ns, false);
    }
    w.asleep.store(false, std::memory_order_relaxed);
}

void engine::owner_loop(waiter &w) noexcept
{
    // seq_cst: Dekker with wake() (its decrement, then its load of owner).
    w.owner.store(true, std::memory_order_seq_cst);
    // The owner sleeps only after params_.idle_us without an event. A shorter bound (a
    // count of polls) traps two processes in a slow mode: waking a sleeper takes tens of
    // microseconds on a virtual machine, during which its peer runs out of polls and falls
    // asleep too, and so on, one sleep per message.
    idle_timer idle(params_.idle_us);
    // With UCX peers the owner of a crowd hands the PU on after polls that found work: the
    // threads whose receives it completed need it to go on, and would otherwise wait for
    // the end of its time slice of busy polls (measured, 16 threads per process: without
    // it 4k round trips/s, with it 67k).
    const bool hand_on = ucx_up_.load(std::memory_order_relaxed);
    while (w.remaining.load(std::memory_order_seq_cst) > 0) {
        if (progress() > 0) {
            idle.busy();
            // Relaxed: a hint.
            if (hand_on && pthread_waiters_.load(std::memory_order_relaxed) > 1) {
                std::this_thread::yield();
            }
        } else if (idle.spent()) {
            base::stats::add(base::stats::counter::waits_slept);
            doze([&w] { return w.remaining.load(std::memory_order_seq_cst) > 0; });
        }
    }
    w.owner.store(false, std::memory_order_relaxed);
}

void engine::leave_owner() noexcept
{
    std::lock_guard<std::mutex> guard(park_mu_);
    promote_next_locked();
}

void engine::unpark_locked(waiter &w) noexcept
{
    if (!w.parked) {
        return;
    }
    for (waiter **pp = &parked_; *pp != nullptr; pp = &(*pp)->next) {
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    }
    w.parked = false;
}

void engine::promote_next_locked() noexcept
{
    waiter *p = parked_;
    if (p == nullptr) {
        owner_taken_ = false;
        return;
    }
    parked_ = p->next;
    p->parked = false;
    // Release: the promoted thread reads promoted with acquire after its futex wake.
    p->promoted.store(true, std::memory_order_release);
    p->word.fetch_add(1, std::memory_order_release);
    base::futex_wake(p->word, 1);
}

void engine::server_loop() noexcept
{
    if (params_.server_cpu >= 0) {
        hwloc_topology_t topo;
        if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0) {
            hwloc_bitmap_t set = hwloc_bitmap_alloc();
            hwloc_bitmap_only(set, static_cast<unsigned>(params_.server_cpu));
            if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0) {
                base::log(base::log_level::warn, "mpiv: cannot pin the server thread to PU %d",
                          params_.server_cpu);
            }
            hwloc_bitmap_free(set);
            hwloc_topology_destroy(topo);
        }
    }
    // Polls while events come (yielding the PU after 64 idle polls); after
    // params_.idle_us without one it sleeps on the doorbell, as a progress owner does
    // (owner_loop()): senders and local posters ring it.
    idle_timer idle(params_.idle_us);
    // Relaxed: stop_ only ends the loop; join() in the destructor provides the ordering
    // (and the destructor rings the doorbell).
    const auto running = [this] { return !stop_.load(std::memory_order_relaxed); };
    while (running()) {
        base::stats::add(base::stats::counter::server_polls);
        if (progress() > 0) {
            base::stats::add(base::stats::counter::server_polls_with_work);
            idle.busy();
        } else if (idle.spent()) {
            doze(running);
        } else if (idle.polls() > 64) {
            std::this_thread::yield();
        }
    }
}

} // namespace mpiv::ep
