// extern "C" entry points of <mpiv/mpiv_p2p.h>: argument checks and the mapping between
// the opaque C handles and the engine's objects (endpoints/engine.hpp).
#include <mpiv/mpiv_p2p.h>

#include <memory>
#include <new>

#include "base/log.hpp"
#include "endpoints/engine.hpp"
#include "sched/worker.hpp"

namespace {

using mpiv::status;
using mpiv::to_c;
namespace ep = mpiv::ep;

static_assert(sizeof(ep::send_op) <= sizeof(mpiv_p2p_op_t), "a send fits in mpiv_p2p_op_t");
static_assert(sizeof(ep::recv_op) <= sizeof(mpiv_p2p_op_t), "a receive fits in mpiv_p2p_op_t");
static_assert(alignof(ep::send_op) <= alignof(mpiv_p2p_op_t) &&
                  alignof(ep::recv_op) <= alignof(mpiv_p2p_op_t),
              "mpiv_p2p_op_t is aligned enough for both operations");

ep::engine *eng(mpiv_p2p_t *e) { return reinterpret_cast<ep::engine *>(e); }
ep::comm_state *cm(mpiv_p2p_comm_t *c) { return reinterpret_cast<ep::comm_state *>(c); }

// The engine calls a ULT makes between its blocks (a send, a receive's post) run on its
// worker's scratch stack once it has many ULTs: their frames stay in the cache however
// many ULTs take turns (sched/worker.hpp, "Scratch stack"). Called once
// worker::scratch_wanted() said so; out of line and with the arguments by value: a closure
// over the entry point's own parameters makes the compiler spill them on the direct path
// too (its frame grew from 40 to 152 bytes).
using mpiv::sched::worker;

[[gnu::noinline]] status isend_on_scratch(ep::engine &e, ep::comm_state &c, uint32_t peer,
                                          int32_t self_rank, int32_t dest, int32_t tag,
                                          const void *buf, size_t bytes, unsigned flags,
                                          void *user, ep::send_op &op, mpiv_p2p_status_t &st)
{
    status rc = status::ok;
    worker::run_on_scratch(
        [&] { rc = e.isend(c, peer, self_rank, dest, tag, buf, bytes, flags, user, op, st); });
    return rc;
}

[[gnu::noinline]] status irecv_on_scratch(ep::engine &e, ep::comm_state &c, int32_t source,
                                          int32_t tag, void *buf, size_t bytes, void *user,
                                          ep::recv_op &op, mpiv_p2p_status_t &st)
{
    status rc = status::ok;
    worker::run_on_scratch([&] { rc = e.irecv(c, source, tag, buf, bytes, user, op, st); });
    return rc;
}

mpiv_status_t null_arg(const char *fn, const char *name)
{
    mpiv::base::log(mpiv::base::log_level::error, "%s: argument %s is NULL", fn, name);
    return MPIV_ERR_INVALID_ARG;
}

} // namespace

extern "C" MPIV_API mpiv_status_t mpiv_p2p_params_default(mpiv_p2p_params_t *params)
{
    if (params == nullptr) {
        return null_arg(__func__, "params");
    }
    params->self = 0;
    params->num_peers = 1;
    params->endpoints = 4;
    params->queue_slots = 1024;
    params->eager_limit = 4096;
    params->packet_count = 512;
    params->progress = MPIV_P2P_PROGRESS_INLINE;
    params->server_cpu = -1;
    params->lock = MPIV_P2P_LOCK_MCS;
    params->complete = nullptr;
    params->idle_us = 1000;
    params->serialized = 0;
    params->fault = nullptr;
    params->connect = nullptr;
    params->yield_when_idle = 0;
    params->single_copy = MPIV_P2P_SINGLE_COPY_AUTO;
    params->transports = MPIV_P2P_TRANSPORT_SHM;
    params->ucx_copy_max = 2048;
    params->prefetch = nullptr;
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_create(const mpiv_p2p_params_t *params,
                                                  mpiv_p2p_t **engine_p)
{
    if (params == nullptr || engine_p == nullptr) {
        return null_arg(__func__, params == nullptr ? "params" : "engine_p");
    }
    std::unique_ptr<ep::engine> e;
    const status s = ep::engine::create(*params, e);
    if (s == status::ok) {
        *engine_p = reinterpret_cast<mpiv_p2p_t *>(e.release());
    }
    return to_c(s);
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_destroy(mpiv_p2p_t *engine)
{
    delete eng(engine);
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_address(mpiv_p2p_t *engine, const void **addr_p,
                                                   size_t *len_p)
{
    if (engine == nullptr || addr_p == nullptr || len_p == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "addr_p/len_p");
    }
    eng(engine)->address(*addr_p, *len_p);
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_connect(mpiv_p2p_t *engine, uint32_t peer,
                                                   const void *addr, size_t len)
{
    if (engine == nullptr) {
        return null_arg(__func__, "engine");
    }
    return to_c(eng(engine)->connect(peer, addr, len, true));
}

extern "C" MPIV_API int mpiv_p2p_have_ucx(void)
{
#if MPIV_HAVE_UCX
    return 1;
#else
    return 0;
#endif
}

extern "C" MPIV_API const char *mpiv_p2p_ucx_unavailable(void)
{
#if MPIV_HAVE_UCX
    const char *why = nullptr;
    return ep::ucx::transport::available(&why) ? nullptr : why;
#else
    return "this mpiv was built without UCX";
#endif
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_connect_peer(mpiv_p2p_t *engine, uint32_t peer,
                                                        const void *addr, size_t len,
                                                        int same_node)
{
    if (engine == nullptr) {
        return null_arg(__func__, "engine");
    }
    return to_c(eng(engine)->connect(peer, addr, len, same_node != 0));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_peer_transport(mpiv_p2p_t *engine, uint32_t peer,
                                                         unsigned *transport_p)
{
    if (engine == nullptr || transport_p == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "transport_p");
    }
    return to_c(eng(engine)->peer_transport(peer, *transport_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_peer_single_copy(mpiv_p2p_t *engine, uint32_t peer,
                                                            int *single_copy_p, int *error_p)
{
    if (engine == nullptr || single_copy_p == nullptr || error_p == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "single_copy_p/error_p");
    }
    bool single = false;
    int error = 0;
    const status s = eng(engine)->peer_single_copy(peer, single, error);
    if (s == status::ok) {
        *single_copy_p = single ? 1 : 0;
        *error_p = error;
    }
    return to_c(s);
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_levels(mpiv_p2p_t *engine, mpiv_p2p_levels_t *levels_p)
{
    if (engine == nullptr || levels_p == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "levels_p");
    }
    eng(engine)->levels(*levels_p);
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_comm_stats_read(mpiv_p2p_comm_t *comm, size_t index,
                                                           uint64_t *value_p)
{
    namespace stats = mpiv::base::stats;
    if (comm == nullptr || value_p == nullptr || index >= stats::k_comm_counters) {
        mpiv::base::log(mpiv::base::log_level::error,
                        "mpiv_p2p_comm_stats_read: index %zu out of range (%zu counters) or a "
                        "NULL argument",
                        index, stats::k_comm_counters);
        return MPIV_ERR_INVALID_ARG;
    }
    *value_p = stats::read_comm(cm(comm)->stats_key, static_cast<stats::comm_counter>(index));
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_track_posted(mpiv_p2p_t *engine, int on)
{
    if (engine == nullptr) {
        return null_arg(__func__, "engine");
    }
    eng(engine)->track_posted(on != 0);
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_comm_create(mpiv_p2p_t *engine, uint16_t cid,
                                                       int32_t size, unsigned assertions,
                                                       mpiv_p2p_comm_t **comm_p)
{
    if (engine == nullptr || comm_p == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "comm_p");
    }
    ep::comm_state *c = nullptr;
    const status s = eng(engine)->comm_create(cid, size, assertions, c);
    if (s == status::ok) {
        *comm_p = reinterpret_cast<mpiv_p2p_comm_t *>(c);
    }
    return to_c(s);
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_comm_create_endpoints(
    mpiv_p2p_t *engine, uint16_t cid, int32_t size, const uint32_t *rank_peer,
    const uint16_t *rank_ep, const uint16_t *rank_queue, uint32_t capacity,
    mpiv_p2p_comm_t **handles_p)
{
    if (engine == nullptr || handles_p == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "handles_p");
    }
    static_assert(sizeof(mpiv_p2p_comm_t *) == sizeof(ep::comm_state *), "handles are pointers");
    return to_c(eng(engine)->comm_create_endpoints(
        cid, size, rank_peer, rank_ep, rank_queue, reinterpret_cast<ep::comm_state **>(handles_p),
        capacity));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_comm_destroy(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm)
{
    if (engine == nullptr || comm == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "comm");
    }
    return to_c(eng(engine)->comm_destroy(cm(comm)));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_comm_queue(const mpiv_p2p_comm_t *comm,
                                                      uint32_t *queue_p)
{
    if (queue_p == nullptr) {
        return null_arg(__func__, "queue_p");
    }
    const auto *c = reinterpret_cast<const ep::comm_state *>(comm);
    if (c == nullptr || c->priv == nullptr) {
        return MPIV_ERR_INVALID_ARG; // a query: no log (any communicator may be asked)
    }
    *queue_p = c->queue;
    return MPIV_OK;
}

extern "C" MPIV_API unsigned mpiv_p2p_comm_assertions(mpiv_p2p_comm_t *comm)
{
    return comm == nullptr ? 0U : ep::engine::comm_assertions(*cm(comm));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_comm_set_assertions(mpiv_p2p_comm_t *comm,
                                                               unsigned assertions)
{
    if (comm == nullptr) {
        return null_arg(__func__, "comm");
    }
    return to_c(ep::engine::comm_set_assertions(*cm(comm), assertions));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_isend(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                                 uint32_t peer, int32_t self_rank, int32_t dest,
                                                 int32_t tag, const void *buf, size_t bytes,
                                                 unsigned flags, void *user, mpiv_p2p_op_t *op,
                                                 mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || op == nullptr || status_p == nullptr) {
        return null_arg(__func__, "engine/comm/op/status_p");
    }
    auto *s = new (op->bytes) ep::send_op;
    if (worker::scratch_wanted()) {
        return to_c(isend_on_scratch(*eng(engine), *cm(comm), peer, self_rank, dest, tag, buf,
                                     bytes, flags, user, *s, *status_p));
    }
    return to_c(eng(engine)->isend(*cm(comm), peer, self_rank, dest, tag, buf, bytes, flags, user,
                                   *s, *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_isend_gather(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                                        uint32_t peer, int32_t self_rank,
                                                        int32_t dest, int32_t tag,
                                                        const struct iovec *iov, size_t iovcnt,
                                                        unsigned flags, void *user,
                                                        mpiv_p2p_op_t *op,
                                                        mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || op == nullptr || status_p == nullptr) {
        return null_arg(__func__, "engine/comm/op/status_p");
    }
    auto *s = new (op->bytes) ep::send_op;
    return to_c(eng(engine)->isend_gather(*cm(comm), peer, self_rank, dest, tag, iov, iovcnt,
                                          flags, user, *s, *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_isend_streamed(mpiv_p2p_t *engine,
                                                          mpiv_p2p_comm_t *comm, uint32_t peer,
                                                          int32_t self_rank, int32_t dest,
                                                          int32_t tag, const void *buf,
                                                          size_t bytes, const size_t *ready,
                                                          unsigned flags, void *user,
                                                          mpiv_p2p_op_t *op,
                                                          mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || ready == nullptr || op == nullptr ||
        status_p == nullptr) {
        return null_arg(__func__, "engine/comm/ready/op/status_p");
    }
    auto *s = new (op->bytes) ep::send_op;
    return to_c(eng(engine)->isend_streamed(*cm(comm), peer, self_rank, dest, tag, buf, bytes,
                                            ready, flags, user, *s, *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_irecv(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                                 int32_t source, int32_t tag, void *buf,
                                                 size_t bytes, void *user, mpiv_p2p_op_t *op,
                                                 mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || op == nullptr || status_p == nullptr) {
        return null_arg(__func__, "engine/comm/op/status_p");
    }
    auto *r = new (op->bytes) ep::recv_op;
    if (worker::scratch_wanted()) {
        return to_c(irecv_on_scratch(*eng(engine), *cm(comm), source, tag, buf, bytes, user, *r,
                                     *status_p));
    }
    return to_c(eng(engine)->irecv(*cm(comm), source, tag, buf, bytes, user, *r, *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_irecv_sink(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                                      int32_t source, int32_t tag,
                                                      mpiv_p2p_sink_fn sink, void *ctx,
                                                      size_t bytes, void *user, mpiv_p2p_op_t *op,
                                                      mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || sink == nullptr || op == nullptr ||
        status_p == nullptr) {
        return null_arg(__func__, "engine/comm/sink/op/status_p");
    }
    auto *r = new (op->bytes) ep::recv_op;
    const ep::recv_target to{nullptr, bytes, sink, ctx};
    return to_c(eng(engine)->irecv(*cm(comm), source, tag, to, user, *r, *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_cancel(mpiv_p2p_t *engine, mpiv_p2p_op_t *op)
{
    if (engine == nullptr || op == nullptr) {
        return null_arg(__func__, engine == nullptr ? "engine" : "op");
    }
    auto *r = reinterpret_cast<ep::recv_op *>(op->bytes);
    if (r->type != ep::op_type::recv) {
        return MPIV_ERR_INVALID_ARG;
    }
    return to_c(eng(engine)->cancel(*r));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_iprobe(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                                  int32_t source, int32_t tag,
                                                  mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || status_p == nullptr) {
        return null_arg(__func__, "engine/comm/status_p");
    }
    return to_c(eng(engine)->iprobe(*cm(comm), source, tag, *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_improbe(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                                   int32_t source, int32_t tag,
                                                   mpiv_p2p_msg_t **msg_p,
                                                   mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || comm == nullptr || msg_p == nullptr || status_p == nullptr) {
        return null_arg(__func__, "engine/comm/msg_p/status_p");
    }
    ep::inmsg *m = nullptr;
    const status s = eng(engine)->improbe(*cm(comm), source, tag, m, *status_p);
    if (s == status::ok) {
        *msg_p = reinterpret_cast<mpiv_p2p_msg_t *>(m);
    }
    return to_c(s);
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_mrecv(mpiv_p2p_t *engine, mpiv_p2p_msg_t *msg,
                                                 void *buf, size_t bytes, void *user,
                                                 mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || msg == nullptr || status_p == nullptr || (buf == nullptr && bytes != 0)) {
        return null_arg(__func__, "engine/msg/buf/status_p");
    }
    return to_c(eng(engine)->mrecv(*reinterpret_cast<ep::inmsg *>(msg), buf, bytes, user,
                                   *status_p));
}

extern "C" MPIV_API mpiv_status_t mpiv_p2p_mrecv_sink(mpiv_p2p_t *engine, mpiv_p2p_msg_t *msg,
                                                      mpiv_p2p_sink_fn sink, void *ctx,
                                                      size_t bytes, void *user,
                                                      mpiv_p2p_status_t *status_p)
{
    if (engine == nullptr || msg == nullptr || sink == nullptr || status_p == nullptr) {
        return null_arg(__func__, "engine/msg/sink/status_p");
    }
    return to_c(eng(engine)->mrecv(*reinterpret_cast<ep::inmsg *>(msg),
                                   ep::recv_target{nullptr, bytes, sink, ctx}, user, *status_p));
}

extern "C" MPIV_API size_t mpiv_p2p_inline_max(const mpiv_p2p_t *engine)
{
    return engine == nullptr ? 0 : reinterpret_cast<const ep::engine *>(engine)->inline_max();
}

extern "C" MPIV_API int mpiv_p2p_progress(mpiv_p2p_t *engine)
{
    return engine == nullptr ? 0 : eng(engine)->progress();
}

extern "C" MPIV_API int mpiv_p2p_poll_alone(mpiv_p2p_t *engine, int polls,
                                            int (*done)(void *arg), void *arg)
{
    return engine != nullptr && done != nullptr && eng(engine)->poll_alone(polls, done, arg);
}

extern "C" MPIV_API mpiv_p2p_waiter_t *mpiv_p2p_wait_begin(mpiv_p2p_t *engine, int32_t count)
{
    return reinterpret_cast<mpiv_p2p_waiter_t *>(eng(engine)->wait_begin(count < 1 ? 1 : count));
}

extern "C" MPIV_API void mpiv_p2p_wake(mpiv_p2p_t *engine, mpiv_p2p_waiter_t *waiter)
{
    eng(engine)->wake(reinterpret_cast<ep::waiter *>(waiter));
}

extern "C" MPIV_API void mpiv_p2p_wait_end(mpiv_p2p_t *engine, mpiv_p2p_waiter_t *waiter)
{
    eng(engine)->wait_end(reinterpret_cast<ep::waiter *>(waiter));
}

extern "C" MPIV_API void mpiv_p2p_wait_settle(mpiv_p2p_t *engine, mpiv_p2p_waiter_t *waiter,
                                              int32_t total)
{
    eng(engine)->wait_settle(reinterpret_cast<ep::waiter *>(waiter), total);
}
