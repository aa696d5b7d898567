#include "sched/worker.hpp"

#include <cerrno>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "sched/runtime.hpp"

namespace mpiv::sched {
namespace {

bool yield_hook() noexcept
{
    if (worker::current_ult() == nullptr) {
        return false;
    }
    worker::yield_current();
    return true;
}

// Parking for queue-lock waiters (base::park_ops): the token is the ULT's handle, so a
// stale token wakes nothing or, if its id was reused, spuriously.
std::uint64_t park_token() noexcept
{
    const ult *u = worker::current_ult();
    return u != nullptr ? u->handle : 0;
}

void park_current() noexcept { worker::block_current(); }

void unpark_handle(std::uint64_t token) noexcept { worker::wake_handle(token); }

constexpr base::park_ops k_park_ops{park_token, park_current, unpark_handle};

/// Tiny lock for the allocation state: held for a few loads and stores.
class alloc_guard {
  public:
    explicit alloc_guard(std::atomic<bool> &l) noexcept : l_(l)
    {
        base::backoff b;
        // sync: acquire; pairs with the release store in the destructor.
        while (l_.exchange(true, std::memory_order_acquire)) {
            while (l_.load(std::memory_order_relaxed)) {
                b.pause();
            }
        }
    }
    ~alloc_guard() { l_.store(false, std::memory_order_release); }

  private:
    std::atomic<bool> &l_;
};

} // namespace

worker::worker(std::uint32_t id, std::uint32_t capacity, stack_pool &stacks, hwloc_topology_t topo,
               hwloc_const_cpuset_t pu, std::uint32_t scratch_ults, std::uint32_t prefetch_ults)
    : id_(id), capacity_(capacity), stacks_(stacks), topo_(topo), pu_(hwloc_bitmap_dup(pu)),
      slots_(nullptr), slots_bytes_(sizeof(slot) * capacity), scratch_ults_(scratch_ults),
      prefetch_ults_(prefetch_ults),
      runset_(capacity)
{
    void *p = mmap(nullptr, slots_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        slots_ = static_cast<slot *>(p);
    }
    stack_cache_.reserve(k_stack_cache);
    local_stacks_.reserve(k_stack_cache);
}

worker::~worker()
{
    stop();
    const std::uint32_t n = fresh_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < n; ++i) {
        slots_[i].~slot();
    }
    if (slots_ != nullptr) {
        munmap(slots_, slots_bytes_);
    }
    for (const stack_region &s : stack_cache_) {
        stacks_.put(s);
    }
    for (const stack_region &s : local_stacks_) {
        stacks_.put(s);
    }
    hwloc_bitmap_free(pu_);
}

status worker::start()
{
    if (slots_ == nullptr || pu_ == nullptr) {
        base::log(base::log_level::error, "worker %u: cannot reserve %zu bytes for its ULT table",
                  id_, slots_bytes_);
        return status::nomem;
    }
    try {
        thread_ = std::thread([this] { main(); });
    } catch (const std::system_error &e) {
        base::log(base::log_level::error, "worker %u: cannot start its thread: %s", id_, e.what());
        return status::system;
    }
    // sync: acquire; pairs with the release store in main(): the thread is in its loop.
    while (!running_.load(std::memory_order_acquire)) {
        std::this_thread::yield();
    }
    return status::ok;
}

void worker::stop()
{
    if (!thread_.joinable()) {
        return;
    }
    // sync: release; pairs with the acquire load in main()'s loop condition.
    stop_.store(true, std::memory_order_release);
    sleeping_.store(0, std::memory_order_seq_cst);
    base::futex_wake(sleeping_);
    thread_.join();
}

void worker::main()
{
    if (hwloc_set_cpubind(topo_, pu_, HWLOC_CPUBIND_THREAD) != 0) {
        char *s = nullptr;
        hwloc_bitmap_list_asprintf(&s, pu_);
        base::log(base::log_level::warn, "worker %u: cannot bind to PU set %s: %s", id_,
                  s != nullptr ? s : "?", std::strerror(errno));
        std::free(s);
    }
    t_worker_ = this;
    base::set_thread_yield_hook(yield_hook);
    base::set_park_ops(&k_park_ops);
    adopt_thread(sched_ctx_);
    if (scratch_ults_ != UINT32_MAX && stacks_.get(scratch_) != status::ok) {
        scratch_ = stack_region{}; // on_scratch() calls run in place
        base::log(base::log_level::warn, "worker %u: no scratch stack; engine calls of its "
                                         "ULTs run on their own stacks", id_);
    }
    // sync: release; pairs with the acquire load in start().
    running_.store(true, std::memory_order_release);
    // sync: acquire; pairs with the release store in stop().
    while (!stop_.load(std::memory_order_acquire)) {
        acknowledge();
        const std::uint32_t limit = fresh_.load(std::memory_order_relaxed);
        t_streak_ = 0;
        const auto run = [this](std::uint32_t id) { dispatch(id); };
        const auto ahead = [this](const std::uint32_t *next, std::uint32_t count) {
            prefetch_upcoming(next, count);
        };
        if (runset_.drain(limit, run, ahead) == 0) {
            idle();
        }
    }
    base::set_thread_yield_hook(nullptr);
    if (scratch_.lo != nullptr) {
        stacks_.put(scratch_); // no ULT runs any more: none holds it
        scratch_ = stack_region{};
    }
    t_worker_ = nullptr;
    // sync: release; pairs with the acquire load in quiesce(): no ULT runs here any more.
    running_.store(false, std::memory_order_release);
}

void worker::idle()
{
    for (int round = 0; round < 256; ++round) {
        for (int i = 0; i < 8; ++i) {
            base::cpu_relax();
        }
        if (runset_.any() || stop_.load(std::memory_order_relaxed) ||
            ack_req_.load(std::memory_order_relaxed) != ack_seen_) {
            return;
        }
        if ((round & 31) == 31) {
            std::this_thread::yield();
        }
    }
    // seq_cst: Dekker handshake with wake() and quiesce(): either the checks below see
    // the new bit or request, or the waker sees sleeping_ == 1 and wakes us.
    sleeping_.store(1, std::memory_order_seq_cst);
    if (runset_.any() || stop_.load(std::memory_order_seq_cst) ||
        ack_req_.load(std::memory_order_seq_cst) != ack_seen_) {
        sleeping_.store(0, std::memory_order_relaxed);
        return;
    }
    base::futex_wait(sleeping_, 1);
    sleeping_.store(0, std::memory_order_relaxed);
}

void worker::prefetch_upcoming(const std::uint32_t *next, std::uint32_t count) noexcept
{
    if (count == 0 || !prefetches()) {
        return;
    }
    // The loads below are the owner's: a live ULT of this worker is suspended now (its
    // worker runs this) and exits, or saves a new stack pointer, only on this thread. The
    // state is checked first, as dispatch() does: a stale id's slot may be respawned.
    if (count > 3) {
        base::prefetch(&slot_at(next[3]));
    }
    if (count > 1) {
        const slot &s = slot_at(next[1]);
        // sync: acquire; pairs with the release store of state in spawn(): u is set.
        if (s.state.load(std::memory_order_acquire) == slot_state::live) {
            base::prefetch(s.u);
        }
    }
    const slot &s = slot_at(next[0]);
    // sync: acquire; pairs with the release store of state in spawn(): u is set.
    if (s.state.load(std::memory_order_acquire) != slot_state::live) {
        return;
    }
    const char *sp = static_cast<const char *>(s.u->ctx.sp);
    const char *const top = reinterpret_cast<const char *>(s.u + 1);
    // A ULT blocked inside a call on the worker's scratch stack (on_scratch) saved its
    // stack pointer there: its frames there are the scratch stack's, hot anyway.
    if (sp < static_cast<const char *>(s.u->stack.lo) || sp >= top) {
        return;
    }
    const char *const end = top - sp > std::ptrdiff_t{k_prefetch_lines * k_cacheline}
                                ? sp + k_prefetch_lines * k_cacheline
                                : top;
    for (const char *line = sp; line < end; line += k_cacheline) {
        base::prefetch(line);
    }
    base::stats::add(base::stats::counter::stack_prefetches);
}

void worker::dispatch(std::uint32_t id)
{
    const slot &s = slot_at(id);
    // sync: acquire; pairs with the release store of state in spawn(): u is complete.
    // Ids above fresh_ never get a bit, so the slot is constructed.
    if (s.state.load(std::memory_order_acquire) != slot_state::live) {
        return; // stale wake-up of an exited or free id
    }
    ult *u = s.u;
    do {
        t_current_ = u;
        count_dispatch();
        // The ULT that comes back may be another one (direct switches in between).
        void *exited = jump(sched_ctx_, u->ctx, k_suspended);
        t_current_ = nullptr;
        if (exited != k_suspended) {
            reap(*static_cast<ult *>(exited));
        }
    } while ((u = take_next()) != nullptr);
}

void worker::suspend(ult &u) noexcept
{
    if (ult *next = take_next()) {
        t_current_ = next;
        count_dispatch();
        (void)jump(u.ctx, next->ctx, k_suspended);
        return;
    }
    (void)jump(u.ctx, sched_ctx_, k_suspended);
}

void worker::quiesce() noexcept
{
    // seq_cst: the request comes before the load of sleeping_ (Dekker with idle()).
    // Its release half pairs with the acquire load in acknowledge().
    const std::uint32_t ticket = ack_req_.fetch_add(1, std::memory_order_seq_cst) + 1;
    if (sleeping_.load(std::memory_order_seq_cst) != 0 &&
        sleeping_.exchange(0, std::memory_order_relaxed) != 0) {
        base::futex_wake(sleeping_);
    }
    base::backoff wait(256);
    // sync: acquire; pairs with the release store in acknowledge().
    while (static_cast<std::int32_t>(ack_.load(std::memory_order_acquire) - ticket) < 0) {
        // sync: acquire; pairs with the release store at the end of main().
        if (!running_.load(std::memory_order_acquire)) {
            return;
        }
        wait.pause();
    }
}

void worker::call_on_scratch(void (*fn)(void *), void *arg) noexcept
{
    const stack_region s = scratch_;
    scratch_ = stack_region{}; // lent to the running ULT (ULTs stay on their worker)
    call_on(t_current_->ctx, s.lo, s.size, fn, arg);
    scratch_ = s;
    base::stats::add(base::stats::counter::scratch_calls);
}

void worker::reap(ult &u)
{
    retire(u.ctx);
    live_count_.fetch_sub(1, std::memory_order_relaxed);
    const std::uint32_t id = u.id;
    const stack_region stack = u.stack;
    if (u.local_stack && local_stacks_.size() < k_stack_cache) {
        local_stacks_.push_back(stack); // where its spawner's next spawn looks first
    } else {
        alloc_guard g(alloc_lock_);
        if (stack_cache_.size() < k_stack_cache) {
            stack_cache_.push_back(stack);
        } else {
            stacks_.put(stack);
        }
    }
    slot &s = slot_at(id);
    if (s.detached) {
        release_id(id); // nobody joins it
        return;
    }
    // sync: release; pairs with the acquire load in live().
    s.state.store(slot_state::exited, std::memory_order_release);
    (void)s.done.signal(); // the joiner may free the slot from here on: no more access
}

void worker::entry(void *, void *arg)
{
    ult *u = static_cast<ult *>(arg);
    enter(u->ctx);
    worker *w = u->owner;
    void *r = u->func(u->arg);
    w->slot_at(u->id).retval = r;
    jump(u->ctx, w->sched_ctx_, u, true);
    __builtin_unreachable();
}

void worker::wake_remote(unsigned w, std::uint32_t id) noexcept
{
    worker *target = runtime::find_worker(w);
    if (target == nullptr) {
        base::log(base::log_level::warn, "sync: signal for ULT %u of worker %u after the runtime ended",
                  id, w);
        return;
    }
    target->wake_remote(id);
}

void worker::wake_remote(std::uint32_t id) noexcept
{
    base::stats::add(base::stats::counter::ult_wakeups);
    runset_.set(id);
    // seq_cst: after the runset's seq_cst level-2 OR (Dekker pair with idle()).
    if (sleeping_.load(std::memory_order_seq_cst) != 0 &&
        sleeping_.exchange(0, std::memory_order_relaxed) != 0) {
        base::futex_wake(sleeping_);
    }
}

status worker::spawn(mpiv_ult_func_t func, void *arg, bool detached, std::uint64_t &handle)
{
    std::uint32_t id;
    stack_region stack;
    bool have_stack = false;
    bool fresh = false;
    // A spawner on the worker's own thread (a ULT spawning a child there) takes a stack
    // from the owner-only cache without the lock; its ULT returns the stack there.
    const bool local = t_worker_ == this;
    if (local && !local_stacks_.empty()) {
        stack = local_stacks_.back();
        local_stacks_.pop_back();
        have_stack = true;
    }
    {
        alloc_guard g(alloc_lock_);
        if (!free_ids_.empty()) {
            id = free_ids_.back();
            free_ids_.pop_back();
        } else if (fresh_.load(std::memory_order_relaxed) < capacity_) {
            id = fresh_.load(std::memory_order_relaxed);
            fresh = true;
        } else {
            base::log(base::log_level::warn, "worker %u: %u ULTs alive or unjoined: capacity reached",
                      id_, capacity_);
            if (have_stack) {
                local_stacks_.push_back(stack);
            }
            return status::capacity;
        }
        if (!have_stack && !stack_cache_.empty()) {
            stack = stack_cache_.back();
            stack_cache_.pop_back();
            have_stack = true;
        }
        if (fresh) {
            new (&slots_[id]) slot();
            // sync: release; pairs with the acquire load in join(): the slot is constructed.
            fresh_.store(id + 1, std::memory_order_release);
        }
    }
    if (!have_stack) {
        if (status st = stacks_.get(stack); st != status::ok) {
            release_id(id);
            return st;
        }
    }
    char *top = static_cast<char *>(stack.lo) + stack.size;
    ult *u = reinterpret_cast<ult *>(reinterpret_cast<std::uintptr_t>(top - sizeof(ult)) & ~std::uintptr_t{63});
    new (u) ult{};
    u->func = func;
    u->arg = arg;
    u->stack = stack;
    u->owner = this;
    u->id = id;
    u->local_stack = local;
    make(u->ctx, stack.lo, static_cast<std::size_t>(reinterpret_cast<char *>(u) - static_cast<char *>(stack.lo)),
         entry, u);

    slot &s = slot_at(id);
    s.u = u;
    s.retval = nullptr;
    s.detached = detached;
    (void)s.done.reset(1);
    const std::uint64_t gen = s.tag.load(std::memory_order_relaxed) >> 1;
    if (detached) {
        s.tag.store(gen << 1 | 1, std::memory_order_relaxed);
    }
    handle = make_handle(static_cast<std::uint32_t>(gen), id_, id);
    u->handle = handle;
    live_count_.fetch_add(1, std::memory_order_relaxed);
    // sync: release; pairs with the acquire loads in dispatch(), prefetch_upcoming() and the
    // wake paths: u and its context are set.
    s.state.store(slot_state::live, std::memory_order_release);
    wake(id);
    return status::ok;
}

status worker::join(std::uint64_t handle, void **ret)
{
    const std::uint32_t id = handle & 0xfffff;
    const std::uint64_t gen = handle >> 32;
    // sync: acquire; pairs with the release store of fresh_ in spawn(): slot constructed.
    if (gen == 0 || id >= fresh_.load(std::memory_order_acquire)) {
        base::log(base::log_level::warn, "join: handle %#llx was never issued",
                  static_cast<unsigned long long>(handle));
        return status::invalid_handle;
    }
    slot &s = slot_at(id);
    const ult *self = t_current_;
    if (self != nullptr && self->owner == this && self->id == id &&
        (s.tag.load(std::memory_order_relaxed) >> 1) == gen) {
        base::log(base::log_level::warn, "join: a ULT cannot join itself");
        return status::deadlock;
    }
    std::uint64_t expected = gen << 1;
    // acq_rel: claim the exact (generation, unclaimed) ULT; a later spawn in this slot
    // has a higher generation, so a stale handle cannot claim it.
    if (!s.tag.compare_exchange_strong(expected, expected | 1, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
        if ((expected >> 1) < gen) {
            base::log(base::log_level::warn, "join: handle %#llx was never issued",
                      static_cast<unsigned long long>(handle));
            return status::invalid_handle;
        }
        base::log(base::log_level::warn, "join: ULT %#llx was already joined, is being joined, or is detached",
                  static_cast<unsigned long long>(handle));
        return status::already_joined;
    }
    if (status st = s.done.wait(); st != status::ok) {
        return st; // cannot happen: the claim makes us the only waiter
    }
    if (ret != nullptr) {
        *ret = s.retval;
    }
    release_id(id);
    return status::ok;
}

void worker::release_id(std::uint32_t id)
{
    slot &s = slot_at(id);
    const std::uint64_t gen = s.tag.load(std::memory_order_relaxed) >> 1;
    // sync: release; pairs with the acquire load in live(): the ULT's work is visible to
    // whoever sees it gone.
    s.state.store(slot_state::free, std::memory_order_release);
    // relaxed: the alloc lock below orders this for the next spawner.
    s.tag.store((gen + 1) << 1, std::memory_order_relaxed);
    alloc_guard g(alloc_lock_);
    free_ids_.push_back(id);
}

std::uint32_t worker::live() const noexcept
{
    std::uint32_t n = 0;
    const std::uint32_t ids = fresh_.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < ids; ++i) {
        // sync: acquire; pairs with the release stores of state in dispatch()/release_id().
        n += slots_[i].state.load(std::memory_order_acquire) == slot_state::live ? 1 : 0;
    }
    return n;
}

std::vector<std::uint32_t> worker::live_ids(std::size_t max) const
{
    std::vector<std::uint32_t> ids;
    const std::uint32_t n = fresh_.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < n && ids.size() < max; ++i) {
        if (slots_[i].state.load(std::memory_order_relaxed) == slot_state::live) {
            ids.push_back(i);
        }
    }
    return ids;
}


void worker::yield_current() noexcept
{
    ult *u = t_current_;
    worker *w = u->owner;
    w->runset_.set(u->id);
    w->suspend(*u);
}

} // namespace mpiv::sched
