// The exported C ABI of libmpiv.so: life cycle, every documented error path, logging.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <mpiv/mpiv.h>
#include <mpiv/mpiv_cid.h>
#include <mpiv/mpiv_p2p.h>

#include "config.h"

namespace {

void *add_one(void *arg) { return reinterpret_cast<void *>(reinterpret_cast<std::uintptr_t>(arg) + 1); }

struct log_capture {
    std::vector<std::string> lines;
    static void handler(int, const char *msg, void *ctx) { static_cast<log_capture *>(ctx)->lines.emplace_back(msg); }
};

TEST(api, calls_before_init_and_after_finalize_fail_cleanly)
{
    mpiv_ult_h h = MPIV_ULT_NULL;
    unsigned n = 0;
    EXPECT_EQ(mpiv_spawn(add_one, nullptr, MPIV_WORKER_ANY, &h), MPIV_ERR_NOT_INITIALIZED);
    EXPECT_EQ(mpiv_join(1, nullptr), MPIV_ERR_NOT_INITIALIZED);
    EXPECT_EQ(mpiv_num_workers(&n), MPIV_ERR_NOT_INITIALIZED);
    EXPECT_EQ(mpiv_finalize(), MPIV_ERR_NOT_INITIALIZED);
    ASSERT_EQ(mpiv_init(nullptr), MPIV_OK);
    ASSERT_EQ(mpiv_finalize(), MPIV_OK);
    EXPECT_EQ(mpiv_spawn(add_one, nullptr, MPIV_WORKER_ANY, &h), MPIV_ERR_NOT_INITIALIZED);
    EXPECT_EQ(h, MPIV_ULT_NULL) << "outputs are written only on success";
}

TEST(api, spawn_join_yield_self)
{
    ASSERT_EQ(mpiv_init(nullptr), MPIV_OK);
    unsigned n = 0;
    ASSERT_EQ(mpiv_num_workers(&n), MPIV_OK);
    EXPECT_GE(n, 1u);
    std::vector<mpiv_ult_h> hs;
    for (std::uintptr_t i = 0; i < 100; ++i) {
        mpiv_ult_h h = MPIV_ULT_NULL;
        ASSERT_EQ(mpiv_spawn([](void *a) -> void * {
            for (int k = 0; k < 10; ++k) {
                EXPECT_EQ(mpiv_yield(), MPIV_OK);
            }
            mpiv_ult_h me = MPIV_ULT_NULL;
            int w = -1;
            EXPECT_EQ(mpiv_self(&me), MPIV_OK);
            EXPECT_NE(me, MPIV_ULT_NULL);
            EXPECT_EQ(mpiv_self_worker(&w), MPIV_OK);
            EXPECT_GE(w, 0);
            return add_one(a);
        }, reinterpret_cast<void *>(i), static_cast<int>(i % n), &h), MPIV_OK);
        hs.push_back(h);
    }
    for (std::uintptr_t i = 0; i < 100; ++i) {
        void *r = nullptr;
        ASSERT_EQ(mpiv_join(hs[i], &r), MPIV_OK);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r), i + 1);
    }
    mpiv_ult_h me = 42;
    int w = 42;
    EXPECT_EQ(mpiv_self(&me), MPIV_ERR_NOT_ULT);
    EXPECT_EQ(me, 42u);
    EXPECT_EQ(mpiv_self_worker(&w), MPIV_ERR_NOT_ULT);
    EXPECT_EQ(mpiv_yield(), MPIV_OK) << "outside a ULT, yield yields the kernel thread";
    ASSERT_EQ(mpiv_finalize(), MPIV_OK);
}

TEST(api, bad_arguments_return_errors)
{
    ASSERT_EQ(mpiv_init(nullptr), MPIV_OK);
    mpiv_ult_h h = MPIV_ULT_NULL;
    EXPECT_EQ(mpiv_spawn(nullptr, nullptr, MPIV_WORKER_ANY, &h), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_spawn(add_one, nullptr, 1 << 20, &h), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_join(MPIV_ULT_NULL, nullptr), MPIV_ERR_INVALID_HANDLE);
    EXPECT_EQ(mpiv_join(0xdeadbeefcafeULL, nullptr), MPIV_ERR_INVALID_HANDLE);
    ASSERT_EQ(mpiv_spawn(add_one, nullptr, MPIV_WORKER_ANY, &h), MPIV_OK);
    ASSERT_EQ(mpiv_join(h, nullptr), MPIV_OK);
    EXPECT_EQ(mpiv_join(h, nullptr), MPIV_ERR_ALREADY_JOINED);
    EXPECT_EQ(mpiv_num_workers(nullptr), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_self(nullptr), MPIV_ERR_INVALID_ARG);

    mpiv_sync_h s = nullptr;
    EXPECT_EQ(mpiv_sync_create(0, &s), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_sync_create(1, nullptr), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_sync_signal(nullptr), MPIV_ERR_INVALID_HANDLE);
    EXPECT_EQ(mpiv_sync_wait(nullptr), MPIV_ERR_INVALID_HANDLE);
    EXPECT_EQ(mpiv_sync_destroy(nullptr), MPIV_ERR_INVALID_HANDLE);
    alignas(64) unsigned char junk[64] = {};
    EXPECT_EQ(mpiv_sync_signal(reinterpret_cast<mpiv_sync_h>(junk)), MPIV_ERR_INVALID_HANDLE);
    ASSERT_EQ(mpiv_finalize(), MPIV_OK);
}

TEST(api, sync_counts_and_wakes_across_threads)
{
    ASSERT_EQ(mpiv_init(nullptr), MPIV_OK);
    mpiv_sync_h s = nullptr;
    ASSERT_EQ(mpiv_sync_create(3, &s), MPIV_OK);
    int done = -1;
    ASSERT_EQ(mpiv_sync_test(s, &done), MPIV_OK);
    EXPECT_EQ(done, 0);
    EXPECT_EQ(mpiv_sync_test(s, nullptr), MPIV_ERR_INVALID_ARG);
    mpiv_ult_h waiter = MPIV_ULT_NULL;
    ASSERT_EQ(mpiv_spawn([](void *a) -> void * {
        return reinterpret_cast<void *>(static_cast<std::intptr_t>(mpiv_sync_wait(static_cast<mpiv_sync_h>(a))));
    }, s, 0, &waiter), MPIV_OK);
    std::thread t1([&] { EXPECT_EQ(mpiv_sync_signal(s), MPIV_OK); });
    std::thread t2([&] { EXPECT_EQ(mpiv_sync_signal(s), MPIV_OK); });
    t1.join();
    t2.join();
    ASSERT_EQ(mpiv_sync_test(s, &done), MPIV_OK);
    EXPECT_EQ(done, 0);
    EXPECT_EQ(mpiv_sync_signal(s), MPIV_OK);
    void *r = nullptr;
    ASSERT_EQ(mpiv_join(waiter, &r), MPIV_OK);
    EXPECT_EQ(static_cast<int>(reinterpret_cast<std::intptr_t>(r)), MPIV_OK);
    EXPECT_EQ(mpiv_sync_signal(s), MPIV_ERR_OVERSIGNALED);
    ASSERT_EQ(mpiv_sync_reset(s, 1), MPIV_OK);
    ASSERT_EQ(mpiv_sync_signal(s), MPIV_OK);
    EXPECT_EQ(mpiv_sync_wait(s), MPIV_OK);
    EXPECT_EQ(mpiv_sync_reset(s, 0), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_sync_destroy(s), MPIV_OK);
    ASSERT_EQ(mpiv_finalize(), MPIV_OK);
}

// Where the calls of a ULT's mpiv_call_on_scratch ran.
struct scratch_probe {
    std::uintptr_t own = 0;    // a local of the ULT
    std::uintptr_t outer = 0;  // a local of the call
    std::uintptr_t nested = 0; // a local of a call made inside it
    int on_outer = -1;
    int on_nested = -1;
};

void probe_nested(void *arg)
{
    volatile char here = 0;
    static_cast<scratch_probe *>(arg)->nested = reinterpret_cast<std::uintptr_t>(&here);
}

void probe_outer(void *arg)
{
    auto *p = static_cast<scratch_probe *>(arg);
    volatile char here = 0;
    p->outer = reinterpret_cast<std::uintptr_t>(&here);
    EXPECT_EQ(mpiv_call_on_scratch(probe_nested, p, &p->on_nested), MPIV_OK);
}

void *probe_ult(void *arg)
{
    auto *p = static_cast<scratch_probe *>(arg);
    volatile char here = 0;
    p->own = reinterpret_cast<std::uintptr_t>(&here);
    EXPECT_EQ(mpiv_call_on_scratch(probe_outer, p, &p->on_outer), MPIV_OK);
    return nullptr;
}

std::uintptr_t distance(std::uintptr_t a, std::uintptr_t b) { return a > b ? a - b : b - a; }

TEST(api, call_on_scratch_runs_a_ults_call_on_its_workers_scratch_stack)
{
    constexpr std::size_t k_stack = 64 * 1024;
    for (const std::uint32_t threshold : {0u, UINT32_MAX}) {
        SCOPED_TRACE(threshold);
        mpiv_params_t params{};
        params.field_mask = MPIV_PARAM_FIELD_STACK_SIZE | MPIV_PARAM_FIELD_SCRATCH_ULTS;
        params.stack_size = k_stack;
        params.scratch_ults = threshold;
        ASSERT_EQ(mpiv_init(&params), MPIV_OK);
        scratch_probe p;
        mpiv_ult_h h = MPIV_ULT_NULL;
        ASSERT_EQ(mpiv_spawn(probe_ult, &p, 0, &h), MPIV_OK);
        ASSERT_EQ(mpiv_join(h, nullptr), MPIV_OK);
        EXPECT_EQ(distance(p.nested, p.outer) < k_stack, true) << "the nested call runs in place";
        EXPECT_EQ(p.on_nested, 0) << "the scratch stack is lent to the outer call";
        if (threshold == 0) {
            EXPECT_EQ(p.on_outer, 1);
            EXPECT_GE(distance(p.outer, p.own), k_stack) << "the call left the ULT's stack";
        } else {
            EXPECT_EQ(p.on_outer, 0) << "scratch_ults UINT32_MAX: never";
            EXPECT_LT(distance(p.outer, p.own), k_stack);
        }
        // A pthread's call runs in place; a missing function is refused.
        scratch_probe q;
        volatile char here = 0;
        q.own = reinterpret_cast<std::uintptr_t>(&here);
        EXPECT_EQ(mpiv_call_on_scratch(probe_outer, &q, &q.on_outer), MPIV_OK);
        EXPECT_EQ(q.on_outer, 0);
        EXPECT_LT(distance(q.outer, q.own), k_stack);
        EXPECT_EQ(mpiv_call_on_scratch(probe_outer, &q, nullptr), MPIV_OK);
        int on = 7;
        EXPECT_EQ(mpiv_call_on_scratch(nullptr, nullptr, &on), MPIV_ERR_INVALID_ARG);
        EXPECT_EQ(on, 7) << "outputs are written only on success";
        ASSERT_EQ(mpiv_finalize(), MPIV_OK);
    }
}

TEST(api, finalize_reports_live_ults_and_logs_them)
{
    log_capture cap;
    ASSERT_EQ(mpiv_set_log_handler(log_capture::handler, &cap), MPIV_OK);
    ASSERT_EQ(mpiv_init(nullptr), MPIV_OK);
    mpiv_sync_h s = nullptr;
    ASSERT_EQ(mpiv_sync_create(1, &s), MPIV_OK);
    mpiv_ult_h h = MPIV_ULT_NULL;
    ASSERT_EQ(mpiv_spawn([](void *a) -> void * {
        EXPECT_EQ(mpiv_sync_wait(static_cast<mpiv_sync_h>(a)), MPIV_OK);
        return nullptr;
    }, s, MPIV_WORKER_ANY, &h), MPIV_OK);
    EXPECT_EQ(mpiv_finalize(), MPIV_ERR_BUSY);
    ASSERT_FALSE(cap.lines.empty());
    EXPECT_NE(cap.lines.back().find("1 ULTs are still alive"), std::string::npos) << cap.lines.back();
    ASSERT_EQ(mpiv_sync_signal(s), MPIV_OK);
    ASSERT_EQ(mpiv_join(h, nullptr), MPIV_OK);
    EXPECT_EQ(mpiv_sync_destroy(s), MPIV_OK);
    ASSERT_EQ(mpiv_finalize(), MPIV_OK);
    ASSERT_EQ(mpiv_set_log_handler(nullptr, nullptr), MPIV_OK);
}

TEST(api, status_strings)
{
    for (int c = -300; c <= 2; ++c) {
        const char *s = mpiv_status_string(static_cast<mpiv_status_t>(c));
        ASSERT_NE(s, nullptr);
        EXPECT_GT(std::strlen(s), 0u);
    }
    EXPECT_STREQ(mpiv_status_string(MPIV_OK), "success");
    EXPECT_STREQ(mpiv_status_string(static_cast<mpiv_status_t>(-12345)), "unknown mpiv status code");
    EXPECT_TRUE(MPIV_STATUS_IS_RETRY(MPIV_ERR_RETRY_NOPACKET));
    EXPECT_FALSE(MPIV_STATUS_IS_RETRY(MPIV_ERR_NOMEM));
}

// mpiv_p2p_ucx_unavailable: NULL exactly when this build has UCX and UCX's library loads
// here (checked with dlopen, by soname and then in configure's directory, as libmpiv
// opens it), a reason otherwise; the same answer on every call.
TEST(api, ucx_unavailable_says_why)
{
    const char *why = mpiv_p2p_ucx_unavailable();
    EXPECT_EQ(mpiv_p2p_ucx_unavailable(), why);
    if (mpiv_p2p_have_ucx() == 0) {
        ASSERT_NE(why, nullptr);
        EXPECT_NE(std::strstr(why, "built without UCX"), nullptr) << why;
        return;
    }
    void *ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
#ifdef MPIV_UCX_LIBDIR
    if (ucp == nullptr) {
        ucp = dlopen(MPIV_UCX_LIBDIR "/libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (ucp != nullptr) {
        EXPECT_EQ(why, nullptr) << why;
        dlclose(ucp);
    } else {
        ASSERT_NE(why, nullptr);
        EXPECT_NE(std::strstr(why, "libucp"), nullptr) << why;
    }
}

// mpiv_cid_agree with one participant (collectives are the identity): the lowest free id
// in range, reserved; NULL arguments refused.
TEST(api, cid_agree_with_one_participant)
{
    struct table {
        bool used[16] = {true, true, true, false, true};
    } t;
    mpiv_cid_ops_t ops{};
    ops.ctx = &t;
    ops.first = 1;
    ops.limit = 16;
    ops.key = 0;
    ops.is_free = [](void *ctx, uint32_t id) { return static_cast<table *>(ctx)->used[id] ? 0 : 1; };
    ops.reserve = [](void *ctx, uint32_t id) {
        auto *tb = static_cast<table *>(ctx);
        const int took = tb->used[id] ? 0 : 1;
        tb->used[id] = true;
        return took;
    };
    ops.release = [](void *ctx, uint32_t id) { static_cast<table *>(ctx)->used[id] = false; };
    ops.allreduce_band = [](void *, uint64_t *, size_t) { return 0; };
    ops.allreduce_min = [](void *, int *) { return 0; };
    uint32_t id = 0;
    ASSERT_EQ(mpiv_cid_agree(&ops, &id), MPIV_OK);
    EXPECT_EQ(id, 3u);
    EXPECT_TRUE(t.used[3]);
    ASSERT_EQ(mpiv_cid_agree(&ops, &id), MPIV_OK);
    EXPECT_EQ(id, 5u);
    EXPECT_EQ(mpiv_cid_agree(nullptr, &id), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_cid_agree(&ops, nullptr), MPIV_ERR_INVALID_ARG);
}

// mpiv_p2p_comm_queue: an endpoints handle's queue (the rank map's, modulo the queue
// count); an ordinary communicator, NULL and a NULL output are refused.
TEST(api, comm_queue_reports_a_handles_queue)
{
    mpiv_p2p_params_t params;
    ASSERT_EQ(mpiv_p2p_params_default(&params), MPIV_OK);
    params.self = 0;
    params.num_peers = 1;
    params.endpoints = 3;
    params.complete = [](void *, const mpiv_p2p_status_t *) {};
    mpiv_p2p_t *engine = nullptr;
    ASSERT_EQ(mpiv_p2p_create(&params, &engine), MPIV_OK);
    const void *addr = nullptr;
    size_t len = 0;
    ASSERT_EQ(mpiv_p2p_address(engine, &addr, &len), MPIV_OK);
    ASSERT_EQ(mpiv_p2p_connect(engine, 0, addr, len), MPIV_OK);
    const uint32_t rank_peer[3] = {0, 0, 0};
    const uint16_t rank_ep[3] = {0, 1, 2};
    const uint16_t rank_queue[3] = {2, 4, 0}; // 4 mod 3 queues: 1
    mpiv_p2p_comm_t *handles[3] = {};
    ASSERT_EQ(mpiv_p2p_comm_create_endpoints(engine, 7, 3, rank_peer, rank_ep, rank_queue, 3,
                                             handles),
              MPIV_OK);
    const uint32_t want[3] = {2, 1, 0};
    for (int k = 0; k < 3; ++k) {
        uint32_t q = 99;
        EXPECT_EQ(mpiv_p2p_comm_queue(handles[k], &q), MPIV_OK);
        EXPECT_EQ(q, want[k]) << "handle " << k;
    }
    mpiv_p2p_comm_t *plain = nullptr;
    ASSERT_EQ(mpiv_p2p_comm_create(engine, 8, 1, 0, &plain), MPIV_OK);
    uint32_t q = 99;
    EXPECT_EQ(mpiv_p2p_comm_queue(plain, &q), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_p2p_comm_queue(nullptr, &q), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(q, 99u) << "written on error";
    EXPECT_EQ(mpiv_p2p_comm_queue(handles[0], nullptr), MPIV_ERR_INVALID_ARG);
    EXPECT_EQ(mpiv_p2p_comm_destroy(engine, plain), MPIV_OK);
    for (auto *h : handles) {
        EXPECT_EQ(mpiv_p2p_comm_destroy(engine, h), MPIV_OK);
    }
    EXPECT_EQ(mpiv_p2p_destroy(engine), MPIV_OK);
}

} // namespace

// mpiv_p2p_poll_alone through the C API: a lone thread's check runs until it says done
// (with progress between checks); NULL for the engine or the check declines at once.
TEST(api, poll_alone_checks_until_done_and_refuses_null)
{
    mpiv_p2p_params_t params;
    ASSERT_EQ(mpiv_p2p_params_default(&params), MPIV_OK);
    params.self = 0;
    params.num_peers = 1;
    params.complete = [](void *, const mpiv_p2p_status_t *) {};
    mpiv_p2p_t *engine = nullptr;
    ASSERT_EQ(mpiv_p2p_create(&params, &engine), MPIV_OK);
    int calls = 0;
    const auto third = [](void *arg) { return ++*static_cast<int *>(arg) >= 3 ? 1 : 0; };
    EXPECT_NE(mpiv_p2p_poll_alone(engine, 10, third, &calls), 0);
    EXPECT_EQ(calls, 3);
    calls = 0;
    EXPECT_EQ(mpiv_p2p_poll_alone(engine, 2, third, &calls), 0) << "the budget ends first";
    EXPECT_EQ(calls, 2);
    calls = 0;
    EXPECT_EQ(mpiv_p2p_poll_alone(nullptr, 10, third, &calls), 0);
    EXPECT_EQ(mpiv_p2p_poll_alone(engine, 10, nullptr, &calls), 0);
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(mpiv_p2p_destroy(engine), MPIV_OK);
}
