/*
 * pml_mpiv.c: the module: the PML entries of Open MPI 4.1 for messages (sends, receives,
 * probes, matched receives, persistent start) over the engine. Requests are in
 * pml_mpiv_request.c, peers and communicators in pml_mpiv_peers.c, waits in
 * pml_mpiv_wait.c.
 *
 * Datatypes. A contiguous layout goes to the engine as (buffer + true lower bound,
 * bytes). Other layouts go through an opal_convertor. A send above the eager limit whose
 * layout has ranges of MPIV_GATHER_MIN_RANGE bytes or more on average hands the engine
 * its list of ranges (opal_convertor_raw; mpiv_p2p_isend_gather): the receiver reads them
 * straight from this process, with no packing. Other sends are packed into a temporary
 * buffer at start; above the eager limit part by part (MPIV_PACK_PART bytes) after the
 * rendezvous is sent (mpiv_p2p_isend_streamed), the receiver reading each part as soon as
 * it is packed. Receives are unpacked piece by piece as the engine delivers the bytes
 * (mpiv_p2p_irecv_sink: a rendezvous message is read and unpacked 64 KiB at a time, with
 * no buffer the size of the message).
 *
 * Buffered sends pack into the attached buffer (mca_pml_base_bsend_request_alloc_buf),
 * complete the user's request at once and send from the copy with an internal request
 * that frees the copy when the engine is done with it.
 */
#include "pml_mpiv.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "opal/datatype/opal_convertor.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "ompi/mca/pml/base/pml_base_bsend.h"
#include "ompi/message/message.h"

#include <mpiv/mpiv.h>

static int mpiv_isend_init(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                           mca_pml_base_send_mode_t mode, ompi_communicator_t *comm,
                           ompi_request_t **request);
static int mpiv_isend(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                      mca_pml_base_send_mode_t mode, ompi_communicator_t *comm,
                      ompi_request_t **request);
static int mpiv_send(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                     mca_pml_base_send_mode_t mode, ompi_communicator_t *comm);
static int mpiv_irecv_init(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                           ompi_communicator_t *comm, ompi_request_t **request);
static int mpiv_irecv(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                      ompi_communicator_t *comm, ompi_request_t **request);
static int mpiv_recv(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                     ompi_communicator_t *comm, ompi_status_public_t *status);
static int mpiv_iprobe(int src, int tag, ompi_communicator_t *comm, int *matched,
                       ompi_status_public_t *status);
static int mpiv_probe(int src, int tag, ompi_communicator_t *comm, ompi_status_public_t *status);
static int mpiv_improbe(int src, int tag, ompi_communicator_t *comm, int *matched,
                        ompi_message_t **message, ompi_status_public_t *status);
static int mpiv_mprobe(int src, int tag, ompi_communicator_t *comm, ompi_message_t **message,
                       ompi_status_public_t *status);
static int mpiv_imrecv(void *buf, size_t count, ompi_datatype_t *dt, ompi_message_t **message,
                       ompi_request_t **request);
static int mpiv_mrecv(void *buf, size_t count, ompi_datatype_t *dt, ompi_message_t **message,
                      ompi_status_public_t *status);
int mca_pml_mpiv_start(size_t count, ompi_request_t **requests);
static int mpiv_dump(ompi_communicator_t *comm, int verbose);

mca_pml_base_module_t mca_pml_mpiv_module = {
    .pml_add_procs = mca_pml_mpiv_add_procs,
    .pml_del_procs = mca_pml_mpiv_del_procs,
    .pml_enable = mca_pml_mpiv_enable,
    .pml_progress = mca_pml_mpiv_progress,
    .pml_add_comm = mca_pml_mpiv_add_comm,
    .pml_del_comm = mca_pml_mpiv_del_comm,
    .pml_irecv_init = mpiv_irecv_init,
    .pml_irecv = mpiv_irecv,
    .pml_recv = mpiv_recv,
    .pml_isend_init = mpiv_isend_init,
    .pml_isend = mpiv_isend,
    .pml_send = mpiv_send,
    .pml_iprobe = mpiv_iprobe,
    .pml_probe = mpiv_probe,
    .pml_start = mca_pml_mpiv_start,
    .pml_improbe = mpiv_improbe,
    .pml_mprobe = mpiv_mprobe,
    .pml_imrecv = mpiv_imrecv,
    .pml_mrecv = mpiv_mrecv,
    .pml_dump = mpiv_dump,
    .pml_ft_event = NULL,
    .pml_max_contextid = 65535, /* the engine's context ids are 16 bits */
    .pml_max_tag = INT_MAX,
    .pml_flags = 0,
};

/* ------------------------------------------------------------------ data layout */

/* The engine's sink for a non-contiguous receive: pieces come in order, and the
 * convertor keeps its own position. */
static void unpack_piece(void *ctx, size_t offset, const void *data, size_t len)
{
    struct iovec iov = {(void *) data, len};
    uint32_t iov_count = 1;
    size_t max_data = len;
    (void) offset;
    opal_convertor_unpack((opal_convertor_t *) ctx, &iov, &iov_count, &max_data);
}


/* Bytes of (dt, count) and, for a contiguous layout, where they start. */
static bool contiguous(ompi_datatype_t *dt, size_t count, const void *buf, char **start, size_t *bytes)
{
    size_t size;
    ptrdiff_t lb, extent;
    ompi_datatype_type_size(dt, &size);
    *bytes = size * count;
    if (0 == *bytes) {
        *start = (char *) buf;
        return true;
    }
    if (!ompi_datatype_is_contiguous_memory_layout(dt, count)) {
        return false;
    }
    ompi_datatype_get_true_extent(dt, &lb, &extent);
    *start = (char *) buf + lb;
    return true;
}

static void pack_into(ompi_datatype_t *dt, size_t count, const void *buf, void *dest, size_t bytes)
{
    opal_convertor_t conv;
    struct iovec iov = {dest, bytes};
    uint32_t iov_count = 1;
    size_t max_data = bytes;
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor, &dt->super, count, buf, 0, &conv);
    opal_convertor_pack(&conv, &iov, &iov_count, &max_data);
    OBJ_DESTRUCT(&conv);
}

/* ------------------------------------------------------------------ sends */

/* Start a new non-persistent request (NULL: allocation failed) and hand it out. */
static int start_new(mca_pml_mpiv_request_t *req, int (*start)(mca_pml_mpiv_request_t *),
                     ompi_request_t **request)
{
    int rc;
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = start(req);
    if (OMPI_SUCCESS != rc) {
        mca_pml_mpiv_req_release(req);
        return rc;
    }
    *request = &req->ompi;
    return OMPI_SUCCESS;
}

/* What the engine said when an operation started: done at once (complete the request
 * now), in progress (the completion callback follows), or an error (undo the packing). */
static int started(mca_pml_mpiv_request_t *req, int rc, const mpiv_p2p_status_t *st)
{
    if (MPIV_OK == rc) {
        mca_pml_mpiv_complete(req, st);
    } else if (MPIV_INPROGRESS != rc) {
        free(req->pack_buf);
        req->pack_buf = NULL;
        free(req->gather);
        req->gather = NULL;
        mca_pml_mpiv_unpacker_release(req);
        return mca_pml_mpiv_map_status(rc);
    }
    return OMPI_SUCCESS;
}

static int start_bsend(mca_pml_mpiv_request_t *req, uint32_t peer)
{
    mpiv_p2p_status_t st;
    size_t bytes;
    char *start;
    void *copy;
    int rc;
    mca_pml_mpiv_request_t *inner;

    (void) contiguous(req->datatype, req->count, req->buf, &start, &bytes);
    copy = mca_pml_base_bsend_request_alloc_buf(bytes > 0 ? bytes : 1);
    if (NULL == copy) {
        return OMPI_ERR_BUFFER;
    }
    pack_into(req->datatype, req->count, req->buf, copy, bytes);
    /* The copy's request holds the communicator too: freeing it must wait for the send. */
    inner = mca_pml_mpiv_req_alloc(MPIV_REQ_BSEND_COPY, false, NULL, 0, NULL, req->peer, req->tag,
                      MCA_PML_BASE_SEND_STANDARD, req->comm);
    if (NULL == inner) {
        mca_pml_base_bsend_request_free(copy);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    inner->pack_buf = copy;
    rc = mpiv_p2p_isend(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(req->comm), peer, req->comm->c_my_rank,
                        req->peer, req->tag, copy, bytes, 0, inner, &inner->op, &st);
    if (MPIV_OK == rc) {
        mca_pml_mpiv_complete(inner, &st);
    } else if (MPIV_INPROGRESS != rc) {
        mca_pml_mpiv_complete(inner, &st);
        return mca_pml_mpiv_map_status(rc);
    }
    /* The user's request is done: its data lives in the attached buffer. */
    st.source = req->peer;
    st.tag = req->tag;
    st.bytes = st.sent = bytes;
    st.error = MPIV_OK;
    mca_pml_mpiv_complete(req, &st);
    return OMPI_SUCCESS;
}

/* Ranges of at least this many bytes on average make a send worth reading in place. */
#define MPIV_GATHER_MIN_RANGE 256

/* The raw ranges of a send's layout (opal_convertor_raw), or NULL when they are too many
 * (shorter than MPIV_GATHER_MIN_RANGE bytes on average) or memory is short: pack then. */
static struct iovec *gather_list(mca_pml_mpiv_request_t *req, size_t bytes, size_t *ranges)
{
    const size_t most = bytes / MPIV_GATHER_MIN_RANGE;
    opal_convertor_t conv;
    struct iovec *list = NULL;
    size_t capacity = 0, n = 0;
    int done = 0;
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor, &req->datatype->super,
                                             req->count, req->buf, 0, &conv);
    while (!done && n <= most) {
        uint32_t got;
        size_t length = 0;
        if (n == capacity) {
            struct iovec *grown;
            capacity = capacity > 0 ? 2 * capacity : 64;
            grown = realloc(list, capacity * sizeof(*list));
            if (NULL == grown) {
                n = most + 1;
                break;
            }
            list = grown;
        }
        got = (uint32_t) (capacity - n);
        done = opal_convertor_raw(&conv, list + n, &got, &length);
        n += got;
    }
    OBJ_DESTRUCT(&conv);
    if (n > most) {
        free(list);
        return NULL;
    }
    *ranges = n;
    return list;
}

/* Bytes packed between two publications of a streamed send's progress. */
#define MPIV_PACK_PART (256 * 1024)

/* Pack a streamed send into req->pack_buf part by part, publishing the count after each. */
static void pack_streamed(mca_pml_mpiv_request_t *req, size_t bytes)
{
    opal_convertor_t conv;
    size_t done = 0;
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor, &req->datatype->super,
                                             req->count, req->buf, 0, &conv);
    while (done < bytes) {
        struct iovec iov = {(char *) req->pack_buf + done, bytes - done};
        uint32_t iov_count = 1;
        size_t got;
        if (iov.iov_len > MPIV_PACK_PART) {
            iov.iov_len = MPIV_PACK_PART;
        }
        got = iov.iov_len;
        opal_convertor_pack(&conv, &iov, &iov_count, &got);
        if (0 == got) { /* cannot happen for a committed type; never leave the reader waiting */
            opal_output(0, "pml mpiv: packing a send stopped at %zu of %zu bytes", done, bytes);
            done = bytes;
        } else {
            done += got;
        }
        /* sync: release; pairs with the receiver's acquire fence after it reads the count
         * (engine.cpp, read_streamed): the bytes counted are there. The last store lets the
         * receiver finish, and the request complete and free pack_buf: nothing touches
         * them after it. */
        __atomic_store_n(&req->packed, done, __ATOMIC_RELEASE);
    }
    OBJ_DESTRUCT(&conv);
}

static int send_start(mca_pml_mpiv_request_t *req)
{
    mpiv_p2p_status_t st;
    uint32_t peer;
    size_t bytes;
    char *start;
    unsigned flags;
    int rc = mca_pml_mpiv_peer_index(req->comm, req->peer, &peer);
    if (OMPI_SUCCESS != rc) {
        return rc;
    }
    req->ompi.req_state = OMPI_REQUEST_ACTIVE;
    if (MCA_PML_BASE_SEND_BUFFERED == req->mode) {
        return start_bsend(req, peer);
    }
    flags = MCA_PML_BASE_SEND_SYNCHRONOUS == req->mode ? MPIV_P2P_SEND_SYNC : 0;
    if (!contiguous(req->datatype, req->count, req->buf, &start, &bytes)) {
        size_t ranges = 0;
        if (bytes > (size_t) mca_pml_mpiv.eager_limit &&
            NULL != (req->gather = gather_list(req, bytes, &ranges))) {
            rc = mpiv_p2p_isend_gather(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(req->comm), peer,
                                       req->comm->c_my_rank, req->peer, req->tag, req->gather,
                                       ranges, flags, req, &req->op, &st);
            return started(req, rc, &st);
        }
        req->pack_buf = malloc(bytes);
        if (NULL == req->pack_buf) {
            return OMPI_ERR_OUT_OF_RESOURCE;
        }
        if (bytes > (size_t) mca_pml_mpiv.eager_limit) {
            req->packed = 0;
            rc = mpiv_p2p_isend_streamed(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(req->comm), peer,
                                         req->comm->c_my_rank, req->peer, req->tag,
                                         req->pack_buf, bytes, &req->packed, flags, req,
                                         &req->op, &st);
            if (MPIV_INPROGRESS == rc) {
                pack_streamed(req, bytes);
            }
            return started(req, rc, &st);
        }
        pack_into(req->datatype, req->count, req->buf, req->pack_buf, bytes);
        start = req->pack_buf;
    }
    rc = mpiv_p2p_isend(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(req->comm), peer, req->comm->c_my_rank,
                        req->peer, req->tag, start, bytes, flags, req, &req->op, &st);
    return started(req, rc, &st);
}

static int mpiv_isend_init(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                           mca_pml_base_send_mode_t mode, ompi_communicator_t *comm,
                           ompi_request_t **request)
{
    mca_pml_mpiv_request_t *req =
        mca_pml_mpiv_req_alloc(MPIV_REQ_SEND, true, (void *) buf, count, dt, dst, tag, mode, comm);
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    *request = &req->ompi;
    return OMPI_SUCCESS;
}

/* Small standard sends travel inside the queue slot and complete at once: no request
 * (as ob1's send-inline path). Returns false when the send does not qualify, or when it
 * cannot complete at once (the peer's queues are full, or earlier sends to it wait for
 * room): nothing was sent, and the caller sends it with a request. */
static bool send_inline(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                        mca_pml_base_send_mode_t mode, ompi_communicator_t *comm, int *rc)
{
    mpiv_p2p_op_t op;
    mpiv_p2p_status_t st;
    uint32_t peer;
    size_t bytes;
    char *start;
    if (MCA_PML_BASE_SEND_SYNCHRONOUS == mode || MCA_PML_BASE_SEND_BUFFERED == mode ||
        !contiguous(dt, count, buf, &start, &bytes) || bytes > mca_pml_mpiv.inline_max) {
        return false;
    }
    *rc = mca_pml_mpiv_peer_index(comm, dst, &peer);
    if (OMPI_SUCCESS == *rc) {
        const int s = mpiv_p2p_isend(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(comm), peer,
                                     comm->c_my_rank, dst, tag, start, bytes, 0, NULL, &op, &st);
        if (MPIV_ERR_RETRY_NOMEM == s) {
            return false;
        }
        *rc = mca_pml_mpiv_map_status(s);
    }
    return true;
}

/* send_inline() on the scratch stack of a ULT's worker that runs many ULTs (see
 * mpiv_call_on_scratch): its frame, with the operation, then stays in the cache. */
struct inline_send {
    const void *buf;
    size_t count;
    ompi_datatype_t *dt;
    int dst;
    int tag;
    mca_pml_base_send_mode_t mode;
    ompi_communicator_t *comm;
    int rc;
    bool sent;
};

static void inline_send_call(void *arg)
{
    struct inline_send *a = (struct inline_send *) arg;
    a->sent = send_inline(a->buf, a->count, a->dt, a->dst, a->tag, a->mode, a->comm, &a->rc);
}

static bool send_inline_scratch(const void *buf, size_t count, ompi_datatype_t *dt, int dst,
                                int tag, mca_pml_base_send_mode_t mode,
                                ompi_communicator_t *comm, int *rc)
{
    struct inline_send a = {buf, count, dt, dst, tag, mode, comm, OMPI_SUCCESS, false};
    (void) mpiv_call_on_scratch(inline_send_call, &a, NULL);
    *rc = a.rc;
    return a.sent;
}

static int mpiv_isend(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                      mca_pml_base_send_mode_t mode, ompi_communicator_t *comm,
                      ompi_request_t **request)
{
    int rc;
    if (send_inline(buf, count, dt, dst, tag, mode, comm, &rc)) {
        if (OMPI_SUCCESS == rc) {
            *request = &ompi_request_empty;
        }
        return rc;
    }
    return start_new(mca_pml_mpiv_req_alloc(MPIV_REQ_SEND, false, (void *) buf, count, dt, dst, tag, mode, comm),
                     send_start, request);
}

/* Wait for a request started by a blocking call, take its error, free it. */
static int wait_and_free(mca_pml_mpiv_request_t *req, ompi_status_public_t *status)
{
    ompi_request_t *r = &req->ompi;
    int rc;
    (void) mca_pml_mpiv_wait_own(1, &r);
    rc = r->req_status.MPI_ERROR;
    if (NULL != status) {
        /* MPI-3.1 3.2.5: a single-completion call leaves the error field alone. */
        OMPI_COPY_STATUS(status, r->req_status, false);
    }
    ompi_request_free(&r);
    return rc;
}

static int mpiv_send(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                     mca_pml_base_send_mode_t mode, ompi_communicator_t *comm)
{
    ompi_request_t *r = NULL;
    int rc;
    if (send_inline_scratch(buf, count, dt, dst, tag, mode, comm, &rc)) {
        return rc;
    }
    rc = start_new(mca_pml_mpiv_req_alloc(MPIV_REQ_SEND, false, (void *) buf, count, dt, dst, tag, mode, comm),
                   send_start, &r);
    if (OMPI_SUCCESS != rc) {
        return rc;
    }
    return wait_and_free((mca_pml_mpiv_request_t *) r, NULL);
}

/* ------------------------------------------------------------------ receives */

/* Where a receive's bytes go: a contiguous layout's start, or (false) an unpacker for
 * the sink; *bytes is the capacity either way. */
static int recv_target(mca_pml_mpiv_request_t *req, char **start, size_t *bytes)
{
    if (contiguous(req->datatype, req->count, req->buf, start, bytes)) {
        return OMPI_SUCCESS;
    }
    req->unpacker = OBJ_NEW(opal_convertor_t);
    if (NULL == req->unpacker) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    opal_convertor_copy_and_prepare_for_recv(ompi_mpi_local_convertor, &req->datatype->super,
                                             req->count, req->buf, 0, req->unpacker);
    return OMPI_SUCCESS;
}

static int recv_start(mca_pml_mpiv_request_t *req)
{
    mpiv_p2p_status_t st;
    size_t bytes;
    char *start;
    int rc = recv_target(req, &start, &bytes);
    if (OMPI_SUCCESS != rc) {
        return rc;
    }
    req->ompi.req_state = OMPI_REQUEST_ACTIVE;
    if (NULL == req->unpacker) {
        rc = mpiv_p2p_irecv(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(req->comm), req->peer, req->tag,
                            start, bytes, req, &req->op, &st);
    } else {
        rc = mpiv_p2p_irecv_sink(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(req->comm), req->peer,
                                 req->tag, unpack_piece, req->unpacker, bytes, req, &req->op,
                                 &st);
    }
    if (MPIV_ERR_INVALID_ARG == rc) {
        const unsigned a = mpiv_p2p_comm_assertions(mca_pml_mpiv_engine_comm(req->comm));
        const bool source = MPI_ANY_SOURCE == req->peer && (a & MPIV_P2P_ASSERT_NO_ANY_SOURCE);
        if (source || (MPI_ANY_TAG == req->tag && (a & MPIV_P2P_ASSERT_NO_ANY_TAG))) {
            opal_output(0, "pml mpiv: a receive with %s on communicator %u, which has the "
                           "assertion %s: MPI_ERR_ARG",
                        source ? "MPI_ANY_SOURCE" : "MPI_ANY_TAG", req->comm->c_contextid,
                        source ? "mpi_assert_no_any_source" : "mpi_assert_no_any_tag");
        }
    }
    return started(req, rc, &st);
}

static int mpiv_irecv_init(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                           ompi_communicator_t *comm, ompi_request_t **request)
{
    mca_pml_mpiv_request_t *req =
        mca_pml_mpiv_req_alloc(MPIV_REQ_RECV, true, buf, count, dt, src, tag, MCA_PML_BASE_SEND_STANDARD, comm);
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    *request = &req->ompi;
    return OMPI_SUCCESS;
}

static int mpiv_irecv(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                      ompi_communicator_t *comm, ompi_request_t **request)
{
    return start_new(mca_pml_mpiv_req_alloc(MPIV_REQ_RECV, false, buf, count, dt, src, tag,
                               MCA_PML_BASE_SEND_STANDARD, comm),
                     recv_start, request);
}

/* The start of a ULT's blocking receive, on its worker's scratch stack when the worker
 * runs many ULTs (mpiv_call_on_scratch). The ULT registers its wait before the start (no
 * CAS against the completion), and the completion then takes no atomics either
 * (req_done). */
struct ult_recv {
    mca_pml_mpiv_request_t *req;
    int rc;
};

static void ult_recv_start(void *arg)
{
    struct ult_recv *a = (struct ult_recv *) arg;
    mpiv_p2p_waiter_t *w = mpiv_p2p_wait_begin(mca_pml_mpiv.engine, 1);
    a->req->waiter = w;
    a->req->preset_waiter = true;
    a->rc = recv_start(a->req);
    if (OMPI_SUCCESS != a->rc) {
        mpiv_p2p_wake(mca_pml_mpiv.engine, w); /* nothing started: nothing will wake it */
    }
}

/* A blocking receive uses a request of its own: no free list, no references (the call
 * outlives the operation). Before the call returns the engine's side must be done with it:
 * it sets MPIV_REQ_DONE last. In serial mode that request is one constructed once and
 * reused (as ob1 does below MPI_THREAD_MULTIPLE) instead of one constructed and
 * destructed on the stack per call; recv_cache is NULL while it is in use, so a blocking
 * receive nested in another (from a callback) takes a stack request. */
static mca_pml_mpiv_request_t recv_cached;
static mca_pml_mpiv_request_t *recv_cache;

static int mpiv_recv(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                     ompi_communicator_t *comm, ompi_status_public_t *status)
{
    mca_pml_mpiv_request_t local;
    mca_pml_mpiv_request_t *req = mca_pml_mpiv.serial ? recv_cache : NULL;
    ompi_request_t *r;
    int rc;
    if (NULL != req) {
        recv_cache = NULL;
    } else {
        OBJ_CONSTRUCT(&local, mca_pml_mpiv_request_t);
        req = &local;
    }
    r = &req->ompi;
    mca_pml_mpiv_req_init(req, MPIV_REQ_RECV, false, buf, count, dt, src, tag, MCA_PML_BASE_SEND_STANDARD,
             comm);
    if (!mca_pml_mpiv.serial && mca_pml_mpiv_in_ult()) {
        struct ult_recv a = {req, OMPI_SUCCESS};
        (void) mpiv_call_on_scratch(ult_recv_start, &a, NULL);
        rc = a.rc;
        mpiv_p2p_wait_end(mca_pml_mpiv.engine, (mpiv_p2p_waiter_t *) req->waiter);
    } else {
        rc = recv_start(req);
        if (OMPI_SUCCESS == rc) {
            (void) mca_pml_mpiv_wait_own(1, &r);
        }
    }
    if (OMPI_SUCCESS == rc) {
        while (!(__atomic_load_n(&req->pml_state, __ATOMIC_ACQUIRE) & MPIV_REQ_DONE)) {
            sched_yield();
        }
        rc = req->ompi.req_status.MPI_ERROR;
        if (NULL != status) {
            /* MPI-3.1 3.2.5: a single-completion call leaves the error field alone. */
            OMPI_COPY_STATUS(status, req->ompi.req_status, false);
        }
    }
    OMPI_REQUEST_FINI(&req->ompi);
    if (req == &local) {
        OBJ_DESTRUCT(&local);
    } else {
        recv_cache = req;
    }
    return rc;
}

/* ------------------------------------------------------------------ persistent start */

int mca_pml_mpiv_start(size_t count, ompi_request_t **requests)
{
    for (size_t i = 0; i < count; ++i) {
        mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) requests[i];
        int rc;
        if (NULL == req || OMPI_REQUEST_PML != req->ompi.req_type) {
            continue;
        }
        /* The previous round is MPI-complete; wait until the engine's side has let go
         * too (it sets DONE right after completing). */
        while (!(req->pml_state & MPIV_REQ_DONE)) {
            sched_yield();
        }
        req->pml_state = 0;
        req->waiter = NULL;
        req->ompi.req_complete = REQUEST_PENDING;
        req->ompi.req_status._cancelled = 0;
        req->ompi.req_status.MPI_ERROR = OMPI_SUCCESS;
        rc = MPIV_REQ_SEND == req->kind ? send_start(req) : recv_start(req);
        if (OMPI_SUCCESS != rc) {
            req->pml_state = MPIV_REQ_DONE;
            req->ompi.req_complete = REQUEST_COMPLETED;
            return rc;
        }
    }
    return OMPI_SUCCESS;
}

/* ------------------------------------------------------------------ probes */

static void probe_status(ompi_status_public_t *status, const mpiv_p2p_status_t *st)
{
    if (NULL != status) {
        status->MPI_SOURCE = st->source;
        status->MPI_TAG = st->tag;
        status->_ucount = st->sent;
        status->_cancelled = 0;
    }
}

static int mpiv_iprobe(int src, int tag, ompi_communicator_t *comm, int *matched,
                       ompi_status_public_t *status)
{
    mpiv_p2p_status_t st;
    int rc = mpiv_p2p_iprobe(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(comm), src, tag, &st);
    if (MPIV_ERR_NOT_FOUND == rc) {
        opal_progress();
        rc = mpiv_p2p_iprobe(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(comm), src, tag, &st);
    }
    if (MPIV_OK == rc) {
        *matched = 1;
        probe_status(status, &st);
        return OMPI_SUCCESS;
    }
    *matched = 0;
    return MPIV_ERR_NOT_FOUND == rc ? OMPI_SUCCESS : mca_pml_mpiv_map_status(rc);
}

/* Between polls of a blocking probe: a ULT lets the others of its worker run (the
 * message may come from one of them); a pthread just polls again. */
static void probe_pause(void)
{
    if (mca_pml_mpiv_in_ult()) {
        mpiv_yield();
    }
}

static int mpiv_probe(int src, int tag, ompi_communicator_t *comm, ompi_status_public_t *status)
{
    int matched = 0, rc;
    while (OMPI_SUCCESS == (rc = mpiv_iprobe(src, tag, comm, &matched, status)) && !matched) {
        probe_pause();
    }
    return rc;
}

static int mpiv_improbe(int src, int tag, ompi_communicator_t *comm, int *matched,
                        ompi_message_t **message, ompi_status_public_t *status)
{
    mpiv_p2p_status_t st;
    mpiv_p2p_msg_t *m = NULL;
    /* The handle first: a message taken from the matching state must always be handed
     * out. */
    ompi_message_t *msg = ompi_message_alloc();
    int rc;
    if (NULL == msg) {
        *matched = 0;
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = mpiv_p2p_improbe(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(comm), src, tag, &m, &st);
    if (MPIV_ERR_NOT_FOUND == rc) {
        opal_progress();
        rc = mpiv_p2p_improbe(mca_pml_mpiv.engine, mca_pml_mpiv_engine_comm(comm), src, tag, &m, &st);
    }
    if (MPIV_OK != rc) {
        ompi_message_return(msg);
        *matched = 0;
        return MPIV_ERR_NOT_FOUND == rc ? OMPI_SUCCESS : mca_pml_mpiv_map_status(rc);
    }
    msg->comm = comm;
    msg->req_ptr = m;
    msg->peer = st.source;
    msg->count = st.sent;
    *message = msg;
    *matched = 1;
    probe_status(status, &st);
    return OMPI_SUCCESS;
}

static int mpiv_mprobe(int src, int tag, ompi_communicator_t *comm, ompi_message_t **message,
                       ompi_status_public_t *status)
{
    int matched = 0, rc;
    while (OMPI_SUCCESS == (rc = mpiv_improbe(src, tag, comm, &matched, message, status)) &&
           !matched) {
        probe_pause();
    }
    return rc;
}

static int mpiv_imrecv(void *buf, size_t count, ompi_datatype_t *dt, ompi_message_t **message,
                       ompi_request_t **request)
{
    ompi_message_t *msg = *message;
    mpiv_p2p_status_t st;
    size_t bytes;
    char *start;
    int rc;
    mca_pml_mpiv_request_t *req = mca_pml_mpiv_req_alloc(MPIV_REQ_RECV, false, buf, count, dt, msg->peer,
                                            MPI_ANY_TAG, MCA_PML_BASE_SEND_STANDARD, msg->comm);
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = recv_target(req, &start, &bytes);
    if (OMPI_SUCCESS != rc) {
        mca_pml_mpiv_req_release(req);
        return rc;
    }
    req->ompi.req_state = OMPI_REQUEST_ACTIVE;
    if (NULL == req->unpacker) {
        rc = mpiv_p2p_mrecv(mca_pml_mpiv.engine, (mpiv_p2p_msg_t *) msg->req_ptr, start, bytes,
                            req, &st);
    } else {
        rc = mpiv_p2p_mrecv_sink(mca_pml_mpiv.engine, (mpiv_p2p_msg_t *) msg->req_ptr,
                                 unpack_piece, req->unpacker, bytes, req, &st);
    }
    /* MPIV_INPROGRESS: the bytes are in and the sender's ACK or FIN waits for room in
     * its queue, or the bytes come in two copies (no CMA); the completion follows. */
    if (MPIV_OK == rc) {
        mca_pml_mpiv_complete(req, &st);
    }
    ompi_message_return(msg);
    *message = MPI_MESSAGE_NULL;
    *request = &req->ompi;
    return OMPI_SUCCESS;
}

static int mpiv_mrecv(void *buf, size_t count, ompi_datatype_t *dt, ompi_message_t **message,
                      ompi_status_public_t *status)
{
    ompi_request_t *r = NULL;
    int rc = mpiv_imrecv(buf, count, dt, message, &r);
    if (OMPI_SUCCESS != rc) {
        return rc;
    }
    return wait_and_free((mca_pml_mpiv_request_t *) r, status);
}

static int mpiv_dump(ompi_communicator_t *comm, int verbose)
{
    (void) verbose;
    opal_output(0, "pml mpiv: communicator %u, %d ranks, engine %p", comm->c_contextid,
                mca_pml_mpiv_remote_size(comm), (void *) mca_pml_mpiv.engine);
    return OMPI_SUCCESS;
}

/* ------------------------------------------------------------------ module state */

int mca_pml_mpiv_module_init(void)
{
    int rc;
    mca_pml_mpiv.connected = calloc(orte_process_info.num_procs, sizeof(bool));
    if (NULL == mca_pml_mpiv.connected) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    OBJ_CONSTRUCT(&mca_pml_mpiv.connect_lock, opal_mutex_t);
    OBJ_CONSTRUCT(&mca_pml_mpiv.requests, opal_free_list_t);
    rc = opal_free_list_init(&mca_pml_mpiv.requests, sizeof(mca_pml_mpiv_request_t),
                             opal_cache_line_size, OBJ_CLASS(mca_pml_mpiv_request_t), 0,
                             opal_cache_line_size, 64, -1, 64, NULL, 0, NULL, NULL, NULL);
    if (OMPI_SUCCESS == rc) {
        rc = mca_pml_mpiv_req_cache_init();
    }
    if (OMPI_SUCCESS != rc) {
        OBJ_DESTRUCT(&mca_pml_mpiv.requests);
        OBJ_DESTRUCT(&mca_pml_mpiv.connect_lock);
        free(mca_pml_mpiv.connected);
        mca_pml_mpiv.connected = NULL;
        return rc;
    }
    OBJ_CONSTRUCT(&recv_cached, mca_pml_mpiv_request_t);
    recv_cache = &recv_cached;
    mca_pml_mpiv.requests_built = true;
    return OMPI_SUCCESS;
}

void mca_pml_mpiv_module_fini(void)
{
    mca_pml_mpiv_restore_wait_functions();
    if (mca_pml_mpiv.requests_built) {
        recv_cache = NULL;
        OBJ_DESTRUCT(&recv_cached);
        mca_pml_mpiv_req_cache_fini();
        OBJ_DESTRUCT(&mca_pml_mpiv.requests);
        OBJ_DESTRUCT(&mca_pml_mpiv.connect_lock);
        mca_pml_mpiv.requests_built = false;
    }
    free(mca_pml_mpiv.connected);
    mca_pml_mpiv.connected = NULL;
}
