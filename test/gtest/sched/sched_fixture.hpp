// Test fixture for the scheduler suites: a runtime per test, finalized at the end.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "sched/runtime.hpp"

namespace mpiv::test {

class sched_test : public ::testing::Test {
  protected:
    /// @param scratch_ults mpiv_params_t::scratch_ults, or -1 for the runtime's default
    /// @param prefetch_ults mpiv_params_t::prefetch_ults, or -1 for the runtime's default
    void start(unsigned workers = 2, std::uint32_t max_ults = 1u << 20,
               mpiv_guard_pages_t guards = MPIV_GUARD_PAGES_AUTO, std::int64_t scratch_ults = -1,
               std::int64_t prefetch_ults = -1)
    {
        mpiv_params_t p{};
        p.field_mask = MPIV_PARAM_FIELD_NUM_WORKERS | MPIV_PARAM_FIELD_MAX_ULTS |
                       MPIV_PARAM_FIELD_GUARD_PAGES | MPIV_PARAM_FIELD_STACK_SIZE;
        p.num_workers = workers;
        p.max_ults_per_worker = max_ults;
        p.guard_pages = guards;
        p.stack_size = 32 * 1024;
        if (scratch_ults >= 0) {
            p.field_mask |= MPIV_PARAM_FIELD_SCRATCH_ULTS;
            p.scratch_ults = static_cast<std::uint32_t>(scratch_ults);
        }
        if (prefetch_ults >= 0) {
            p.field_mask |= MPIV_PARAM_FIELD_PREFETCH_ULTS;
            p.prefetch_ults = static_cast<std::uint32_t>(prefetch_ults);
        }
        ASSERT_EQ(sched::runtime::init(&p), status::ok);
        rt_ = sched::runtime::get();
        ASSERT_NE(rt_, nullptr);
    }
    void TearDown() override
    {
        if (sched::runtime::get() != nullptr) {
            EXPECT_EQ(sched::runtime::finalize(), status::ok);
        }
    }
    std::uint64_t spawn(mpiv_ult_func_t f, void *arg, int worker = MPIV_WORKER_ANY)
    {
        std::uint64_t h = 0;
        EXPECT_EQ(rt_->spawn(f, arg, worker, false, h), status::ok);
        return h;
    }
    sched::runtime *rt_ = nullptr;
};

} // namespace mpiv::test
