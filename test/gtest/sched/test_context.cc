// The hand-written context switch: transfer values, callee-saved state, FP control state.
#include <gtest/gtest.h>

#include <cfenv>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "sched/context.hpp"

namespace {

using mpiv::sched::context;

struct fixture {
    context main_ctx;
    context fiber;
    std::vector<char> stack = std::vector<char>(64 * 1024);
    std::vector<std::uintptr_t> seen;
};

void counting_entry(void *transfer, void *arg)
{
    auto *f = static_cast<fixture *>(arg);
    mpiv::sched::enter(f->fiber);
    auto v = reinterpret_cast<std::uintptr_t>(transfer);
    for (;;) {
        f->seen.push_back(v);
        v = reinterpret_cast<std::uintptr_t>(mpiv::sched::jump(f->fiber, f->main_ctx, reinterpret_cast<void *>(v * 2)));
    }
}

TEST(context, transfer_values_round_trip)
{
    fixture f;
    mpiv::sched::adopt_thread(f.main_ctx);
    mpiv::sched::make(f.fiber, f.stack.data(), f.stack.size(), counting_entry, &f);
    for (std::uintptr_t i = 1; i <= 100; ++i) {
        void *r = mpiv::sched::jump(f.main_ctx, f.fiber, reinterpret_cast<void *>(i));
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(r), i * 2);
    }
    ASSERT_EQ(f.seen.size(), 100u);
    for (std::uintptr_t i = 0; i < 100; ++i) {
        EXPECT_EQ(f.seen[i], i + 1);
    }
    mpiv::sched::retire(f.fiber);
}

// A fiber that sets its own rounding mode; each side must keep its own across switches.
struct fp_fixture {
    context main_ctx;
    context fiber;
    std::vector<char> stack = std::vector<char>(64 * 1024);
    int fiber_round_seen = -1;
};

void fp_entry(void *, void *arg)
{
    auto *f = static_cast<fp_fixture *>(arg);
    mpiv::sched::enter(f->fiber);
    std::fesetround(FE_UPWARD);
    for (;;) {
        mpiv::sched::jump(f->fiber, f->main_ctx, nullptr);
        f->fiber_round_seen = std::fegetround();
    }
}

TEST(context, floating_point_control_state_is_per_context)
{
    fp_fixture f;
    mpiv::sched::adopt_thread(f.main_ctx);
    std::fesetround(FE_TOWARDZERO);
    mpiv::sched::make(f.fiber, f.stack.data(), f.stack.size(), fp_entry, &f);
    mpiv::sched::jump(f.main_ctx, f.fiber, nullptr); // fiber switches to FE_UPWARD
    EXPECT_EQ(std::fegetround(), FE_TOWARDZERO) << "the fiber's rounding mode leaked back";
    mpiv::sched::jump(f.main_ctx, f.fiber, nullptr);
    EXPECT_EQ(f.fiber_round_seen, FE_UPWARD) << "the fiber lost its rounding mode";
    EXPECT_EQ(std::fegetround(), FE_TOWARDZERO);
    std::fesetround(FE_TONEAREST);
    mpiv::sched::retire(f.fiber);
}

// Status flags (FE_INEXACT, ...) belong to the thread, not to a context: a flag a fiber
// raises under another rounding mode is still raised after switching back (x86-64 keeps
// MXCSR bits 0-5 when it reloads the control bits; AArch64 never switches FPSR).
void flags_entry(void *, void *arg)
{
    auto *f = static_cast<fp_fixture *>(arg);
    mpiv::sched::enter(f->fiber);
    std::fesetround(FE_UPWARD);
    volatile double third = 1.0;
    third = third / 3.0; // inexact
    for (;;) {
        mpiv::sched::jump(f->fiber, f->main_ctx, nullptr);
    }
}

TEST(context, floating_point_status_flags_belong_to_the_thread)
{
    fp_fixture f;
    mpiv::sched::adopt_thread(f.main_ctx);
    std::feclearexcept(FE_ALL_EXCEPT);
    mpiv::sched::make(f.fiber, f.stack.data(), f.stack.size(), flags_entry, &f);
    mpiv::sched::jump(f.main_ctx, f.fiber, nullptr);
    EXPECT_EQ(std::fegetround(), FE_TONEAREST) << "the fiber's rounding mode leaked back";
    EXPECT_NE(std::fetestexcept(FE_INEXACT), 0) << "the flag raised in the fiber was lost";
    std::feclearexcept(FE_ALL_EXCEPT);
    mpiv::sched::retire(f.fiber);
}

// Many live values across a switch: the compiler keeps them in callee-saved registers.
struct reg_fixture {
    context main_ctx;
    context fiber;
    std::vector<char> stack = std::vector<char>(64 * 1024);
};

void clobber_entry(void *, void *arg)
{
    auto *f = static_cast<reg_fixture *>(arg);
    mpiv::sched::enter(f->fiber);
    for (;;) {
        volatile std::uint64_t sink = 0;
        std::uint64_t a = 0x1111, b = 0x2222, c = 0x3333, d = 0x4444, e = 0x5555, g = 0x6666;
        for (int i = 0; i < 8; ++i) {
            a = a * 3 + b;
            b = b * 5 + c;
            c = c * 7 + d;
            d = d * 11 + e;
            e = e * 13 + g;
            g = g * 17 + a;
        }
        sink = a ^ b ^ c ^ d ^ e ^ g;
        (void)sink;
        mpiv::sched::jump(f->fiber, f->main_ctx, nullptr);
    }
}

TEST(context, callee_saved_values_survive_switches)
{
    reg_fixture f;
    mpiv::sched::adopt_thread(f.main_ctx);
    mpiv::sched::make(f.fiber, f.stack.data(), f.stack.size(), clobber_entry, &f);
    std::uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, g = 6;
    for (int i = 0; i < 1000; ++i) {
        a += 1;
        b += 2;
        c += 3;
        d += 4;
        e += 5;
        g += 6;
        mpiv::sched::jump(f.main_ctx, f.fiber, nullptr);
    }
    EXPECT_EQ(a, 1001u);
    EXPECT_EQ(b, 2002u);
    EXPECT_EQ(c, 3003u);
    EXPECT_EQ(d, 4004u);
    EXPECT_EQ(e, 5005u);
    EXPECT_EQ(g, 6006u);
    mpiv::sched::retire(f.fiber);
}

// call_on(): a call whose frames go to another stack, and back to the caller's.
struct call_probe {
    std::uintptr_t frame = 0;
    int depth = 0;
};

int burn(int n)
{
    volatile char pad[256]; // about 300 bytes of stack per level
    pad[0] = static_cast<char>(n);
    return n == 0 ? pad[0] : burn(n - 1) + 1;
}

void probe_call(void *arg)
{
    auto *p = static_cast<call_probe *>(arg);
    p->frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    p->depth = burn(100); // about 30 KiB deep
}

TEST(context, call_on_runs_on_the_given_stack_and_returns_to_the_caller)
{
    context self;
    mpiv::sched::adopt_thread(self);
    constexpr std::size_t size = 64 * 1024;
    void *lo = std::aligned_alloc(4096, size);
    ASSERT_NE(lo, nullptr);
    const auto base = reinterpret_cast<std::uintptr_t>(lo);
    volatile int before = 12345;
    const auto caller_frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    for (int i = 0; i < 3; ++i) {
        call_probe p;
        mpiv::sched::call_on(self, lo, size, probe_call, &p);
        EXPECT_GE(p.frame, base) << "the call ran on the caller's stack";
        EXPECT_LT(p.frame, base + size) << "the call ran on the caller's stack";
        EXPECT_EQ(p.frame % 16, 0u) << "the ABI's 16-byte stack alignment is lost";
        EXPECT_EQ(p.depth, 100);
    }
    EXPECT_EQ(before, 12345) << "the caller's frame was overwritten";
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)), caller_frame);
    EXPECT_FALSE(caller_frame >= base && caller_frame < base + size);
    std::free(lo);
}

} // namespace
