// engine_detail.hpp: what the engine's source files share (engine.cpp: set-up, peers and
// communicators; engine_send.cpp: sends and the outbound lists; engine_recv.cpp: arrivals,
// matching hand-off, delivery and progress; engine_cma.cpp: rendezvous reads with CMA;
// engine_copy.cpp: rendezvous in two copies; engine_wait.cpp: waiting and the server
// thread). Not a public header: only those files include it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "base/backoff.hpp"
#include "base/copy.hpp"
#include "base/futex.hpp"
#include "endpoints/engine.hpp"
#include "sched/worker.hpp"

namespace mpiv::ep {

namespace detail {

// Thread-local state of the engine's files, defined here (inline, constant-initialized):
// a file that only declared an extern thread_local would reach it through a TLS wrapper
// call, whose null check GCC's UBSan miscompiles (a false "load of null pointer").
// initial-exec, as in sched/worker.hpp: no __tls_get_addr call on the data path of a
// library Open MPI loads with dlopen.
//
// Drains of inbound queues the calling thread is inside (see engine::reap()).
inline thread_local int tl_draining __attribute__((tls_model("initial-exec"))) = 0;
// Its address names the calling kernel thread while it runs no ULT (self()).
inline thread_local char tl_thread_mark __attribute__((tls_model("initial-exec"))) = 0;
// The calling thread's endpoint before the modulo (engine::this_endpoint()), UINT32_MAX
// until bound; one for every engine of the process (tests may create several).
inline thread_local std::uint32_t tl_endpoint __attribute__((tls_model("initial-exec"))) =
    UINT32_MAX;

// The receives one drain matched, completed after it ("Completions batched after a drain"
// in engine.hpp): their arrival records, each bound to its receive (matched_recv()). In
// the frame of the drain's progress() call; only that call's drain touches it.
struct completion_batch {
    static constexpr int k_size = 64; // a drain's messages (k_drain_batch)
    int n = 0;
    inmsg *msg[k_size];
};

// Who is calling, as the holder of a lock it must recognize from inside (a queue's
// consumer lock, a UCX worker's): the running ULT, or the kernel thread when it runs
// none. Never a thread-local "inside a drain of q" mark: ULTs of one thread that yield
// inside their drains (a lock's back-off, a park) interleave there, and would each see,
// and restore, the other's mark. Not 0 or mpsc_queue's anonymous holder (addresses).
[[gnu::always_inline]] inline std::uintptr_t self() noexcept
{
    const sched::ult *const u = sched::worker::current_ult();
    return u != nullptr ? reinterpret_cast<std::uintptr_t>(u)
                        : reinterpret_cast<std::uintptr_t>(&tl_thread_mark);
}

// A thread whose first call is on an endpoints handle @p c (a send, a receive or a probe:
// the data path, not a change of hints) is bound to the handle's queue,
// so that it sends through the endpoint it receives on and drains that queue first: a
// thread per handle then has an endpoint to itself whenever the handles do (the info key
// mpiv_worker, or the default map). A ULT worker keeps its worker number (bind_endpoint()).
[[gnu::always_inline]] inline void bind_to_handle(const comm_state &c) noexcept
{
    if (__builtin_expect(tl_endpoint == UINT32_MAX, 0) && c.priv != nullptr &&
        sched::worker::current() == nullptr) {
        tl_endpoint = c.queue;
    }
}

// ThreadSanitizer cannot see the queues' synchronization: a sender and the receiver reach
// one slot through two mappings at different addresses (two engines of one process in
// tests). One process-wide key stands for it: released before every push, acquired after
// every pop.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
inline char tsan_queue_key;
#endif
inline void tsan_pushing()
{
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&tsan_queue_key);
#endif
}
inline void tsan_popped()
{
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(&tsan_queue_key);
#endif
}

// Fill shared memory this process owns and a peer reads (a packet, a copy slot). TSan
// cannot order the previous reader (another engine, through its own mapping) before this
// write, so the copy is not instrumented; the queue's key orders it before the next read.
inline void copy_untracked(void *to, const void *from, std::size_t n)
{
    if (n == 0) {
        return; // from may be NULL (an empty synchronous send): memcpy forbids it
    }
#if defined(__SANITIZE_THREAD__)
    __tsan_ignore_thread_begin();
    std::memcpy(to, from, n);
    __tsan_ignore_thread_end();
#else
    std::memcpy(to, from, n);
#endif
}

// Holds the consumer lock of an endpoints handle's inbound queue: its private matching is
// touched only under it (drains hold it already). Waits with back-off while a drain holds
// it (a drain is bounded: k_drain_batch messages); a ULT yields its worker meanwhile.
// Nothing is taken in a serial engine (calls never overlap) or when the caller holds it
// already (a completion inside a drain of that very queue that posts on one of its
// handles).
class consumer_guard {
  public:
    explicit consumer_guard(shm::mpsc_queue<> *q) noexcept : q_(q)
    {
        if (q_ == nullptr) {
            return;
        }
        const std::uintptr_t me = self();
        if (q_->held_by(me)) {
            q_ = nullptr;
            return;
        }
        base::backoff wait;
        while (!q_->try_lock_consumer(me)) {
            wait.pause();
        }
    }
    ~consumer_guard()
    {
        if (q_ != nullptr) {
            q_->unlock_consumer();
        }
    }
    consumer_guard(const consumer_guard &) = delete;
    consumer_guard &operator=(const consumer_guard &) = delete;

  private:
    shm::mpsc_queue<> *q_;
};

// Hands bytes of a message to a receive's buffer or sink. Inline: delivering a small
// message is mostly this call.
[[gnu::always_inline]] inline void put(const recv_target &to, std::size_t offset,
                                       const void *data, std::size_t n) noexcept
{
    if (n == 0) {
        return;
    }
    if (to.sink != nullptr) {
        to.sink(to.ctx, offset, data, n);
    } else if (n <= base::k_copy_small_max) {
        base::copy_small(static_cast<char *>(to.buf) + offset, data, n);
    } else {
        std::memcpy(static_cast<char *>(to.buf) + offset, data, n);
    }
}

} // namespace detail

inline std::uint32_t engine::this_endpoint() noexcept
{
    std::uint32_t mine = detail::tl_endpoint;
    if (__builtin_expect(mine == UINT32_MAX, 0)) {
        mine = bind_endpoint();
    }
    // No division on the common path (one of the first `endpoints` threads).
    return mine < params_.endpoints ? mine : mine % params_.endpoints;
}

// Call @p f with @p c's matching engine: a handle's private one under the consumer lock
// of its queue.
template <class F> decltype(auto) locked_match(comm_state &c, F &&f) noexcept
{
    if (c.priv != nullptr) {
        detail::consumer_guard g(c.inbox);
        return f(*c.priv);
    }
    return c.match(std::forward<F>(f));
}

} // namespace mpiv::ep
