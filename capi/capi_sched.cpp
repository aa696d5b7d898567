// extern "C" implementation of the ULT and sync part of <mpiv/mpiv.h>.
#include <mpiv/mpiv.h>

#include <new>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "sched/runtime.hpp"
#include "sched/sync.hpp"
#include "sched/worker.hpp"

using mpiv::status;
using mpiv::to_c;
using mpiv::sched::runtime;
using mpiv::sched::worker;

/// What an mpiv_sync_h points to: the magic lets us reject pointers we never made.
struct mpiv_sync {
    static constexpr std::uint64_t k_magic = 0x6d7069762d73796eULL; // "mpiv-syn"
    std::uint64_t magic = k_magic;
    mpiv::sched::sync s;
    explicit mpiv_sync(std::int64_t count) : s(count) {}
};

namespace {

bool valid(mpiv_sync_h h) { return h != nullptr && h->magic == mpiv_sync::k_magic; }

mpiv_status_t bad_sync(const char *fn)
{
    mpiv::base::log(mpiv::base::log_level::warn, "%s: invalid sync handle", fn);
    return MPIV_ERR_INVALID_HANDLE;
}

mpiv_status_t not_initialized(const char *fn)
{
    mpiv::base::log(mpiv::base::log_level::warn, "%s: the mpiv runtime is not initialized", fn);
    return MPIV_ERR_NOT_INITIALIZED;
}

} // namespace

extern "C" {

MPIV_API mpiv_status_t mpiv_init(const mpiv_params_t *params)
{
    try {
        return to_c(runtime::init(params));
    } catch (...) {
        return MPIV_ERR_NOMEM;
    }
}

MPIV_API mpiv_status_t mpiv_finalize(void) { return to_c(runtime::finalize()); }

MPIV_API mpiv_status_t mpiv_num_workers(unsigned *count_p)
{
    runtime *rt = runtime::get();
    if (rt == nullptr) {
        return not_initialized("mpiv_num_workers");
    }
    if (count_p == nullptr) {
        return MPIV_ERR_INVALID_ARG;
    }
    *count_p = rt->num_workers();
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_spawn(mpiv_ult_func_t func, void *arg, int worker, mpiv_ult_h *ult_p)
{
    if (func == nullptr) {
        mpiv::base::log(mpiv::base::log_level::warn, "mpiv_spawn: func is NULL");
        return MPIV_ERR_INVALID_ARG;
    }
    runtime *rt = runtime::get();
    if (rt == nullptr) {
        return not_initialized("mpiv_spawn");
    }
    std::uint64_t h = 0;
    try {
        const status s = rt->spawn(func, arg, worker, ult_p == nullptr, h);
        if (s == status::ok && ult_p != nullptr) {
            *ult_p = h;
        }
        return to_c(s);
    } catch (...) {
        return MPIV_ERR_NOMEM;
    }
}

MPIV_API mpiv_status_t mpiv_join(mpiv_ult_h ult, void **ret_p)
{
    runtime *rt = runtime::get();
    if (rt == nullptr) {
        return not_initialized("mpiv_join");
    }
    try {
        return to_c(rt->join(ult, ret_p));
    } catch (...) {
        return MPIV_ERR_NOMEM;
    }
}

MPIV_API mpiv_status_t mpiv_yield(void)
{
    mpiv::base::yield_thread();
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_self(mpiv_ult_h *ult_p)
{
    if (ult_p == nullptr) {
        return MPIV_ERR_INVALID_ARG;
    }
    const mpiv::sched::ult *u = worker::current_ult();
    if (u == nullptr) {
        return MPIV_ERR_NOT_ULT;
    }
    *ult_p = u->handle;
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_call_on_scratch(void (*fn)(void *), void *arg, int *on_scratch_p)
{
    if (fn == nullptr) {
        mpiv::base::log(mpiv::base::log_level::error, "mpiv_call_on_scratch: argument fn is NULL");
        return MPIV_ERR_INVALID_ARG;
    }
    const bool scratch = worker::scratch_wanted();
    if (scratch) {
        worker::current()->call_on_scratch(fn, arg);
    } else {
        fn(arg);
    }
    if (on_scratch_p != nullptr) {
        *on_scratch_p = scratch ? 1 : 0;
    }
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_self_worker(int *worker_p)
{
    if (worker_p == nullptr) {
        return MPIV_ERR_INVALID_ARG;
    }
    const worker *w = worker::current();
    if (w == nullptr) {
        return MPIV_ERR_NOT_ULT;
    }
    *worker_p = static_cast<int>(w->id());
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_sync_create(int64_t count, mpiv_sync_h *sync_p)
{
    if (count < 1 || sync_p == nullptr) {
        mpiv::base::log(mpiv::base::log_level::warn, "mpiv_sync_create: %s",
                        sync_p == nullptr ? "sync_p is NULL" : "count must be >= 1");
        return MPIV_ERR_INVALID_ARG;
    }
    auto *s = new (std::nothrow) mpiv_sync(count);
    if (s == nullptr) {
        return MPIV_ERR_NOMEM;
    }
    *sync_p = s;
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_sync_destroy(mpiv_sync_h sync)
{
    if (!valid(sync)) {
        return bad_sync("mpiv_sync_destroy");
    }
    if (sync->s.has_waiter()) {
        return MPIV_ERR_BUSY;
    }
    sync->magic = 0;
    delete sync;
    return MPIV_OK;
}

MPIV_API mpiv_status_t mpiv_sync_reset(mpiv_sync_h sync, int64_t count)
{
    if (!valid(sync)) {
        return bad_sync("mpiv_sync_reset");
    }
    return to_c(sync->s.reset(count));
}

MPIV_API mpiv_status_t mpiv_sync_signal(mpiv_sync_h sync)
{
    if (!valid(sync)) {
        return bad_sync("mpiv_sync_signal");
    }
    return to_c(sync->s.signal());
}

MPIV_API mpiv_status_t mpiv_sync_wait(mpiv_sync_h sync)
{
    if (!valid(sync)) {
        return bad_sync("mpiv_sync_wait");
    }
    return to_c(sync->s.wait());
}

MPIV_API mpiv_status_t mpiv_sync_test(mpiv_sync_h sync, int *done_p)
{
    if (!valid(sync)) {
        return bad_sync("mpiv_sync_test");
    }
    if (done_p == nullptr) {
        return MPIV_ERR_INVALID_ARG;
    }
    *done_p = sync->s.test() ? 1 : 0;
    return MPIV_OK;
}

} // extern "C"
