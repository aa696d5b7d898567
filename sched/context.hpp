// Execution contexts: a stack pointer plus the sanitizer bookkeeping a stack switch needs.
//
// jump() and call_on() are the only ways mpiv switches stacks. jump() tells
// AddressSanitizer which stack becomes current (__sanitizer_start/finish_switch_fiber) and
// ThreadSanitizer which fiber runs (__tsan_switch_to_fiber), so both keep working across
// ULT switches. call_on() runs one call on another stack within the same fiber: only
// AddressSanitizer needs telling (ThreadSanitizer tracks calls, not stack pointers).
#pragma once

#include <cstddef>

#include "base/stats.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define MPIV_ASAN_FIBERS 1
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define MPIV_TSAN_FIBERS 1
#include <sanitizer/tsan_interface.h>
#endif

extern "C" {
// Implemented per ISA in sched/arch/<isa>/mpiv_ctx_<isa>_<abi>.S.
void *mpiv_ctx_jump(void **save_sp, void *next_sp, void *transfer);
void *mpiv_ctx_make(void *stack_top, void (*entry)(void *transfer, void *arg), void *arg);
void mpiv_ctx_call(void *arg, void (*fn)(void *arg), void *stack_top);
}

namespace mpiv::sched {

struct context {
    void *sp = nullptr; ///< saved stack pointer while suspended
#if MPIV_ASAN_FIBERS
    const void *stack_lo = nullptr; ///< the stack's lowest address
    std::size_t stack_size = 0;
    void *fake_stack = nullptr; ///< ASan's fake-stack handle while suspended
#endif
#if MPIV_TSAN_FIBERS
    void *tsan_fiber = nullptr;
#endif

    /// Describe the stack [lo, lo + size) this context runs on (ASan needs it).
    void set_stack(void *lo, std::size_t size) noexcept
    {
#if MPIV_ASAN_FIBERS
        stack_lo = lo;
        stack_size = size;
#else
        (void)lo;
        (void)size;
#endif
    }
};

/// Prepare @p ctx, whose stack is [lo, lo + size), to run entry(transfer, arg) when first
/// jumped to. entry must call enter() first and must leave with jump(..., exiting=true).
inline void make(context &ctx, void *lo, std::size_t size, void (*entry)(void *, void *), void *arg)
{
    ctx.set_stack(lo, size);
    ctx.sp = mpiv_ctx_make(static_cast<char *>(lo) + size, entry, arg);
#if MPIV_TSAN_FIBERS
    if (ctx.tsan_fiber == nullptr) {
        ctx.tsan_fiber = __tsan_create_fiber(0);
    }
#endif
}

/// Free the sanitizer state of a context that will never run again. Call it from
/// another context.
inline void retire(context &ctx)
{
#if MPIV_TSAN_FIBERS
    if (ctx.tsan_fiber != nullptr) {
        __tsan_destroy_fiber(ctx.tsan_fiber);
        ctx.tsan_fiber = nullptr;
    }
#else
    (void)ctx;
#endif
}

/// Adopt the running kernel thread's own stack as @p ctx (a worker's scheduler context).
void adopt_thread(context &ctx);

/// First call in a fresh context's entry function.
inline void enter(context &self)
{
#if MPIV_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#else
    (void)self;
#endif
}

/// Suspend @p from and resume @p to, passing @p transfer. Returns, once @p from is resumed,
/// the transfer value of the jump that resumed it. With @p exiting, @p from never runs
/// again (its ASan fake stack is released) and the call does not return.
inline void *jump(context &from, context &to, void *transfer, bool exiting = false)
{
#if MPIV_ASAN_FIBERS
    __sanitizer_start_switch_fiber(exiting ? nullptr : &from.fake_stack, to.stack_lo, to.stack_size);
#else
    (void)exiting;
#endif
#if MPIV_TSAN_FIBERS
    __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
    base::stats::add(base::stats::counter::ult_switches);
    void *r = mpiv_ctx_jump(&from.sp, to.sp, transfer);
#if MPIV_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
    return r;
}

/// Call fn(arg) on the stack [lo, lo + size) and return once it returns. @p self is the
/// running context: while the call runs, its stack is that one, so that a jump() away
/// from inside the call and back tells AddressSanitizer the right stack. The caller owns
/// [lo, lo + size) until the call returns (lo and size page-aligned).
inline void call_on(context &self, void *lo, std::size_t size, void (*fn)(void *), void *arg)
{
    void *const top = static_cast<char *>(lo) + size;
#if MPIV_ASAN_FIBERS
    struct hop {
        void (*fn)(void *);
        void *arg;
        const void *own_lo;
        std::size_t own_size;
    } h{fn, arg, self.stack_lo, self.stack_size};
    self.set_stack(lo, size);
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, lo, size);
    mpiv_ctx_call(&h, [](void *p) {
        const hop &on = *static_cast<hop *>(p);
        __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
        on.fn(on.arg);
        __sanitizer_start_switch_fiber(nullptr, on.own_lo, on.own_size); // this stack's frames end
    }, top);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
    self.set_stack(const_cast<void *>(h.own_lo), h.own_size);
#else
    (void)self;
    mpiv_ctx_call(arg, fn, top);
#endif
}

} // namespace mpiv::sched
