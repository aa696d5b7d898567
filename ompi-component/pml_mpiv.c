/*
 * pml_mpiv.c: the module: every PML entry of Open MPI 4.1 over the engine.
 *
 * Requests. A request embeds ompi_request_t and the engine's operation. The engine
 * reports completion through mca_pml_mpiv_complete (any thread), or at once through the
 * return value of the call that started the operation (then the glue calls the same
 * function itself). Freeing may come before completion (MPI_Request_free): the engine's
 * side sets MPIV_REQ_DONE after completing the request, req_free sets MPIV_REQ_FREED,
 * and whichever sets the second bit returns the request to the free list (both bits
 * are set with one atomic fetch-or, so exactly one side sees the other's bit).
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
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "ompi/mca/pml/base/base.h"
#include "ompi/mca/pml/base/pml_base_bsend.h"
#include "ompi/message/message.h"
#include "ompi/proc/proc.h"
#include "ompi/runtime/mpiruntime.h"

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
static int mpiv_start(size_t count, ompi_request_t **requests);
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
    .pml_start = mpiv_start,
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

/* ------------------------------------------------------------------ requests */

static int req_free(ompi_request_t **request);
static int req_cancel(ompi_request_t *request, int complete);
static void install_wait_functions(void);
static void restore_wait_functions(void);

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

static inline void unpacker_release(mca_pml_mpiv_request_t *req)
{
    if (NULL != req->unpacker) {
        OBJ_RELEASE(req->unpacker);
        req->unpacker = NULL;
    }
}

static void request_construct(mca_pml_mpiv_request_t *req)
{
    req->ompi.req_type = OMPI_REQUEST_PML;
    req->ompi.req_start = mpiv_start;
    req->ompi.req_free = req_free;
    req->ompi.req_cancel = req_cancel;
    req->pack_buf = NULL;
    req->unpacker = NULL;
    req->gather = NULL;
}

OBJ_CLASS_INSTANCE(mca_pml_mpiv_request_t, ompi_request_t, request_construct, NULL);

static int map_status(int s)
{
    switch (s) {
    case MPIV_OK:
        return OMPI_SUCCESS;
    case MPIV_ERR_INVALID_ARG:
        return OMPI_ERR_BAD_PARAM;
    case MPIV_ERR_NOMEM:
        return OMPI_ERR_OUT_OF_RESOURCE;
    default:
        return OMPI_ERROR;
    }
}

static void req_init(mca_pml_mpiv_request_t *req, mca_pml_mpiv_req_kind_t kind, bool persistent,
                     void *buf, size_t count, ompi_datatype_t *dt, int peer, int tag,
                     mca_pml_base_send_mode_t mode, ompi_communicator_t *comm);

/* A request from the free list, holding references on comm and dt. */
static mca_pml_mpiv_request_t *req_alloc(mca_pml_mpiv_req_kind_t kind, bool persistent,
                                         void *buf, size_t count, ompi_datatype_t *dt, int peer,
                                         int tag, mca_pml_base_send_mode_t mode,
                                         ompi_communicator_t *comm)
{
    mca_pml_mpiv_request_t *req =
        (mca_pml_mpiv_request_t *) opal_free_list_get(&mca_pml_mpiv.requests);
    if (NULL == req) {
        return NULL;
    }
    req_init(req, kind, persistent, buf, count, dt, peer, tag, mode, comm);
    if (NULL != comm) {
        OBJ_RETAIN(comm);
    }
    if (NULL != dt) {
        OMPI_DATATYPE_RETAIN(dt);
    }
    return req;
}

/* Set up a request for one operation (references to comm and dt are the caller's). */
static void req_init(mca_pml_mpiv_request_t *req, mca_pml_mpiv_req_kind_t kind, bool persistent,
                     void *buf, size_t count, ompi_datatype_t *dt, int peer, int tag,
                     mca_pml_base_send_mode_t mode, ompi_communicator_t *comm)
{
    OMPI_REQUEST_INIT(&req->ompi, persistent);
    req->ompi.req_mpi_object.comm = comm;
    req->ompi.req_status.MPI_SOURCE = MPI_ANY_SOURCE;
    req->ompi.req_status.MPI_TAG = MPI_ANY_TAG;
    req->ompi.req_status.MPI_ERROR = OMPI_SUCCESS;
    req->ompi.req_status._ucount = 0;
    req->ompi.req_status._cancelled = 0;
    req->kind = kind;
    /* A persistent request that was never started counts as done. */
    req->pml_state = persistent ? MPIV_REQ_DONE : 0;
    req->waiter = NULL;
    req->buf = buf;
    req->count = count;
    req->datatype = dt;
    req->comm = comm;
    req->peer = peer;
    req->tag = tag;
    req->mode = mode;
    req->pack_buf = NULL;
    req->pack_size = 0;
    req->pack_bsend = false;
}

static void req_release(mca_pml_mpiv_request_t *req)
{
    if (NULL != req->comm) {
        OBJ_RELEASE(req->comm);
        req->comm = NULL;
    }
    if (NULL != req->datatype) {
        OMPI_DATATYPE_RELEASE(req->datatype);
        req->datatype = NULL;
    }
    OMPI_REQUEST_FINI(&req->ompi);
    opal_free_list_return(&mca_pml_mpiv.requests, &req->ompi.super);
}

/* MPI completion of a request the engine is done with (see the file comment). */
static void req_done(mca_pml_mpiv_request_t *req)
{
    /* Serial mode: nobody else runs MPI code now, so the words below need no atomics, and
     * Open MPI's completion signals only when one of its own waits registered a sync. */
    const bool serial = mca_pml_mpiv.serial;
    int32_t prev;
    void *waiter;
    ompi_request_complete(&req->ompi, !serial || REQUEST_PENDING != req->ompi.req_complete);
    /* An mpiv wait registered on the request (see wait_mpiv) is woken exactly once. */
    if (serial) {
        waiter = req->waiter;
        req->waiter = MPIV_WAITER_DONE;
    } else {
        waiter = __atomic_exchange_n(&req->waiter, MPIV_WAITER_DONE, __ATOMIC_ACQ_REL);
    }
    if (NULL != waiter && MPIV_WAITER_DONE != waiter) {
        mpiv_p2p_wake(mca_pml_mpiv.engine, (mpiv_p2p_waiter_t *) waiter);
    }
    if (serial) {
        prev = req->pml_state;
        req->pml_state = prev | MPIV_REQ_DONE;
    } else {
        prev = opal_atomic_fetch_or_32(&req->pml_state, MPIV_REQ_DONE);
    }
    if (prev & MPIV_REQ_FREED) {
        req_release(req);
    }
}

static int req_free(ompi_request_t **request)
{
    mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) *request;
    int32_t prev = opal_atomic_fetch_or_32(&req->pml_state, MPIV_REQ_FREED);
    if (prev & MPIV_REQ_DONE) {
        req_release(req);
    }
    *request = MPI_REQUEST_NULL;
    return OMPI_SUCCESS;
}

static int req_cancel(ompi_request_t *request, int complete)
{
    mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) request;
    (void) complete;
    /* Sends are not cancelled (as in ob1): they complete normally. */
    if (MPIV_REQ_RECV != req->kind || OMPI_REQUEST_ACTIVE != req->ompi.req_state ||
        (req->pml_state & MPIV_REQ_DONE) || REQUEST_COMPLETE(&req->ompi)) {
        return OMPI_SUCCESS;
    }
    if (MPIV_OK == mpiv_p2p_cancel(mca_pml_mpiv.engine, &req->op)) {
        unpacker_release(req);
        req->ompi.req_status._cancelled = 1;
        req->ompi.req_status.MPI_ERROR = OMPI_SUCCESS;
        req_done(req);
    }
    return OMPI_SUCCESS;
}


void mca_pml_mpiv_complete(void *user, const mpiv_p2p_status_t *st)
{
    mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) user;
    switch (req->kind) {
    case MPIV_REQ_BSEND_COPY:
        mca_pml_base_bsend_request_free(req->pack_buf);
        req->pack_buf = NULL;
        req_release(req);
        return;
    case MPIV_REQ_SEND:
        free(req->pack_buf);
        req->pack_buf = NULL;
        free(req->gather);
        req->gather = NULL;
        break;
    case MPIV_REQ_RECV:
        unpacker_release(req);
        req->ompi.req_status.MPI_SOURCE = st->source;
        req->ompi.req_status.MPI_TAG = st->tag;
        req->ompi.req_status._ucount = st->bytes;
        req->ompi.req_status.MPI_ERROR = MPIV_OK == st->error ? OMPI_SUCCESS
                                         : MPIV_ERR_TRUNCATE == st->error ? MPI_ERR_TRUNCATE
                                                                          : MPI_ERR_OTHER;
        break;
    }
    req_done(req);
}

/* Messages that depended on what the peer wrote may never complete: end the job with a
 * message rather than leave it hanging or use the data. */
void mca_pml_mpiv_fault(uint32_t peer, const char *what)
{
    if (MPIV_P2P_PEER_UNKNOWN == peer) {
        opal_output(0, "pml mpiv: invalid data in shared memory, from a process that cannot "
                       "be named: %s; aborting the job", what);
    } else {
        opal_output(0, "pml mpiv: process %u (rank %u of MPI_COMM_WORLD) wrote invalid data "
                       "into shared memory: %s; aborting the job", peer, peer, what);
    }
    ompi_mpi_abort(&ompi_mpi_comm_world.comm, 1);
}

/* ------------------------------------------------------------------ peers */

static int connect_proc(ompi_proc_t *proc)
{
    uint32_t vpid = proc->super.proc_name.vpid;
    void *addr = NULL;
    size_t len = 0;
    int rc = OMPI_SUCCESS;

    if (proc->super.proc_name.jobid != OMPI_PROC_MY_NAME->jobid ||
        vpid >= orte_process_info.num_procs) {
        opal_output(0, "pml mpiv: process %s is not in this job: mpiv does not support "
                       "dynamic processes (use --mca pml ob1)", OMPI_NAME_PRINT(&proc->super.proc_name));
        return OMPI_ERR_NOT_SUPPORTED;
    }
    OPAL_THREAD_LOCK(&mca_pml_mpiv.connect_lock);
    if (!mca_pml_mpiv.connected[vpid]) {
        OPAL_MODEX_RECV(rc, &mca_pml_mpiv_component.pmlm_version, &proc->super.proc_name,
                        &addr, &len);
        if (OPAL_SUCCESS != rc) {
            opal_output(0, "pml mpiv: no mpiv address for %s in the modex (%s)",
                        OMPI_NAME_PRINT(&proc->super.proc_name), opal_strerror(rc));
        } else {
            int s = mpiv_p2p_connect(mca_pml_mpiv.engine, vpid, addr, len);
            if (MPIV_OK != s) {
                opal_output(0, "pml mpiv: cannot map the segment of %s: %s",
                            OMPI_NAME_PRINT(&proc->super.proc_name), mpiv_status_string(s));
                rc = OMPI_ERR_UNREACH;
            } else {
                mca_pml_mpiv.connected[vpid] = true;
            }
            free(addr);
        }
    }
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv.connect_lock);
    return rc;
}

static int peer_index(ompi_communicator_t *comm, int rank, uint32_t *peer)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    uint32_t vpid;
    if (NULL == proc) {
        return OMPI_ERR_BAD_PARAM;
    }
    vpid = proc->super.proc_name.vpid;
    if (vpid >= orte_process_info.num_procs || !mca_pml_mpiv.connected[vpid]) {
        int rc = connect_proc(proc);
        if (OMPI_SUCCESS != rc) {
            return rc;
        }
    }
    *peer = vpid;
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_add_procs(struct ompi_proc_t **procs, size_t nprocs)
{
    for (size_t i = 0; i < nprocs; ++i) {
        int rc = connect_proc(procs[i]);
        if (OMPI_SUCCESS != rc) {
            return rc;
        }
    }
    return mca_pml_base_pml_check_selected("mpiv", procs, nprocs);
}

int mca_pml_mpiv_del_procs(struct ompi_proc_t **procs, size_t nprocs)
{
    /* Segments stay mapped until finalize: a late ACK or FIN may still need them. */
    (void) procs;
    (void) nprocs;
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_enable(bool enable)
{
    if (enable) {
        install_wait_functions();
    }
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_progress(void)
{
    return mpiv_p2p_progress(mca_pml_mpiv.engine);
}

/* ------------------------------------------------------------------ communicators */

/* Ranks that can send to us: the remote group (the local group of an intracommunicator;
 * ompi_comm_remote_size is 0 for those). */
static int remote_size(ompi_communicator_t *comm)
{
    return comm->c_remote_group->grp_proc_count;
}

/* The MPI-4 assertions mpiv reads when it creates a communicator's state: info key,
 * Open MPI's flag (comm->c_assertions), mpiv's bit. */
static const struct {
    const char *key;
    int32_t ompi_flag;
    unsigned bit;
} assertion_keys[] = {
    {"mpi_assert_no_any_source", OMPI_COMM_ASSERT_NO_ANY_SOURCE, MPIV_P2P_ASSERT_NO_ANY_SOURCE},
    {"mpi_assert_no_any_tag", OMPI_COMM_ASSERT_NO_ANY_TAG, MPIV_P2P_ASSERT_NO_ANY_TAG},
    {"mpi_assert_allow_overtaking", OMPI_COMM_ASSERT_ALLOW_OVERTAKE,
     MPIV_P2P_ASSERT_ALLOW_OVERTAKING},
};
#define NUM_ASSERTION_KEYS (sizeof(assertion_keys) / sizeof(assertion_keys[0]))

/* Info subscriber (MPI_Comm_set_info on an existing communicator, and each subscription at
 * creation): applies a changed assertion to the communicator's matching state. Overtaking
 * is decided per message by its sender, so the processes need not change it at the same
 * time. Returns the value in effect, which MPI_Comm_get_info reports: the old one when mpiv
 * cannot apply the change (both wildcard assertions while a wildcard receive is posted),
 * which it says at verbose level 1. */
static char *assertion_changed(opal_infosubscriber_t *obj, char *key, char *value)
{
    ompi_communicator_t *comm = (ompi_communicator_t *) obj;
    mpiv_p2p_comm_t *c = (mpiv_p2p_comm_t *) comm->c_pml_comm;
    for (size_t i = 0; NULL != c && i < NUM_ASSERTION_KEYS; ++i) {
        if (0 != strcmp(key, assertion_keys[i].key)) {
            continue;
        }
        const unsigned now = mpiv_p2p_comm_assertions(c);
        const unsigned bit = assertion_keys[i].bit;
        const unsigned next = opal_str_to_bool(value) ? (now | bit) : (now & ~bit);
        if (next == now) {
            return value;
        }
        const int rc = mpiv_p2p_comm_set_assertions(c, next);
        if (MPIV_OK != rc) {
            opal_output_verbose(1, mca_pml_mpiv.output,
                                "pml mpiv: communicator %u: %s = %s not applied: %s",
                                comm->c_contextid, key, value,
                                MPIV_ERR_BUSY == rc ? "a wildcard receive is posted"
                                                    : mpiv_status_string(rc));
            return (now & bit) ? "true" : "false";
        }
        opal_output_verbose(2, mca_pml_mpiv.output,
                            "pml mpiv: communicator %u: %s = %s applied (assertions 0x%x)",
                            comm->c_contextid, key, value, next);
        return value;
    }
    return value;
}

int mca_pml_mpiv_add_comm(struct ompi_communicator_t *comm)
{
    mpiv_p2p_comm_t *c = NULL;
    unsigned assertions = 0;
    int rc;
    if (comm->c_contextid > mca_pml_mpiv_module.pml_max_contextid) {
        opal_output(0, "pml mpiv: context id %u exceeds %u", comm->c_contextid,
                    mca_pml_mpiv_module.pml_max_contextid);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    for (size_t i = 0; i < NUM_ASSERTION_KEYS; ++i) {
        ompi_comm_assert_subscribe(comm, assertion_keys[i].ompi_flag);
        if (OMPI_COMM_CHECK_ASSERT(comm, assertion_keys[i].ompi_flag)) {
            assertions |= assertion_keys[i].bit;
        }
    }
    rc = mpiv_p2p_comm_create(mca_pml_mpiv.engine, (uint16_t) comm->c_contextid,
                              remote_size(comm), assertions, &c);
    if (MPIV_OK != rc) {
        opal_output(0, "pml mpiv: cannot add communicator %u: %s", comm->c_contextid,
                    mpiv_status_string(rc));
        return map_status(rc);
    }
    opal_output_verbose(3, mca_pml_mpiv.output, "pml mpiv: communicator %u (%d ranks, assertions 0x%x)",
                        comm->c_contextid, remote_size(comm), assertions);
    comm->c_pml_comm = (struct mca_pml_comm_t *) c;
    for (size_t i = 0; i < NUM_ASSERTION_KEYS; ++i) {
        opal_infosubscribe_subscribe(&comm->super, (char *) assertion_keys[i].key, "false",
                                     assertion_changed);
    }
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_del_comm(struct ompi_communicator_t *comm)
{
    if (NULL != comm->c_pml_comm) {
        (void) mpiv_p2p_comm_destroy(mca_pml_mpiv.engine, (mpiv_p2p_comm_t *) comm->c_pml_comm);
        comm->c_pml_comm = NULL;
    }
    return OMPI_SUCCESS;
}

static mpiv_p2p_comm_t *engine_comm(ompi_communicator_t *comm)
{
    return (mpiv_p2p_comm_t *) comm->c_pml_comm;
}

/* ------------------------------------------------------------------ data layout */

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
        req_release(req);
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
        unpacker_release(req);
        return map_status(rc);
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
    inner = req_alloc(MPIV_REQ_BSEND_COPY, false, NULL, 0, NULL, req->peer, req->tag,
                      MCA_PML_BASE_SEND_STANDARD, req->comm);
    if (NULL == inner) {
        mca_pml_base_bsend_request_free(copy);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    inner->pack_buf = copy;
    rc = mpiv_p2p_isend(mca_pml_mpiv.engine, engine_comm(req->comm), peer, req->comm->c_my_rank,
                        req->peer, req->tag, copy, bytes, 0, inner, &inner->op, &st);
    if (MPIV_OK == rc) {
        mca_pml_mpiv_complete(inner, &st);
    } else if (MPIV_INPROGRESS != rc) {
        mca_pml_mpiv_complete(inner, &st);
        return map_status(rc);
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
    int rc = peer_index(req->comm, req->peer, &peer);
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
            rc = mpiv_p2p_isend_gather(mca_pml_mpiv.engine, engine_comm(req->comm), peer,
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
            rc = mpiv_p2p_isend_streamed(mca_pml_mpiv.engine, engine_comm(req->comm), peer,
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
    rc = mpiv_p2p_isend(mca_pml_mpiv.engine, engine_comm(req->comm), peer, req->comm->c_my_rank,
                        req->peer, req->tag, start, bytes, flags, req, &req->op, &st);
    return started(req, rc, &st);
}

static int mpiv_isend_init(const void *buf, size_t count, ompi_datatype_t *dt, int dst, int tag,
                           mca_pml_base_send_mode_t mode, ompi_communicator_t *comm,
                           ompi_request_t **request)
{
    mca_pml_mpiv_request_t *req =
        req_alloc(MPIV_REQ_SEND, true, (void *) buf, count, dt, dst, tag, mode, comm);
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
    *rc = peer_index(comm, dst, &peer);
    if (OMPI_SUCCESS == *rc) {
        const int s = mpiv_p2p_isend(mca_pml_mpiv.engine, engine_comm(comm), peer,
                                     comm->c_my_rank, dst, tag, start, bytes, 0, NULL, &op, &st);
        if (MPIV_ERR_RETRY_NOMEM == s) {
            return false;
        }
        *rc = map_status(s);
    }
    return true;
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
    return start_new(req_alloc(MPIV_REQ_SEND, false, (void *) buf, count, dt, dst, tag, mode, comm),
                     send_start, request);
}

/* ------------------------------------------------------------------ waiting
 *
 * MPI_Wait and friends go through ompi_request_functions; mpiv installs versions that
 * first wait for its own requests in its own way (a ULT blocks alone; a pthread drives
 * progress as the process's progress owner or sleeps until its completion or a hand-over
 * wakes it), then call Open MPI's default function, which finds the requests complete
 * and does the MPI bookkeeping (statuses, freeing, persistent requests). Sets that hold
 * an incomplete request of another kind (generalized, collective) go to the default
 * function directly; mpiv completes its requests with ompi_request_complete, so the
 * default waits work for them as well. */

static ompi_request_fns_t saved_fns;
static bool fns_installed;

static bool is_mpiv(const ompi_request_t *r)
{
    return r->req_free == req_free;
}

static bool waitable(const ompi_request_t *r)
{
    return MPI_REQUEST_NULL != r && OMPI_REQUEST_INACTIVE != r->req_state;
}

static bool in_ult(void)
{
    mpiv_ult_h self;
    return MPIV_OK == mpiv_self(&self);
}

/* Polls of a serial-mode wait before it registers a waiter (about 15 us here). */
#define MPIV_SERIAL_POLLS 1024

/* Whether a wait must register on reqs[i]: an mpiv request that may still complete later.
 * In serial mode a complete request stays so and needs no registration (nothing else runs
 * between the checks); otherwise registering on it only costs an immediate wake-up. */
static bool must_register(ompi_request_t *r)
{
    return waitable(r) && is_mpiv(r) && !(mca_pml_mpiv.serial && REQUEST_COMPLETE(r));
}

/* Wait until all of reqs[0..n) that are mpiv requests are complete; false (nothing
 * done) when another kind of request is still incomplete. */
static bool wait_mpiv_all(size_t n, ompi_request_t **reqs)
{
    int32_t pending = 0;
    mpiv_p2p_waiter_t *w;
    for (size_t i = 0; i < n; ++i) {
        if (waitable(reqs[i]) && !is_mpiv(reqs[i]) && !REQUEST_COMPLETE(reqs[i])) {
            return false;
        }
        pending += must_register(reqs[i]);
    }
    if (0 != pending && mca_pml_mpiv.serial && !in_ult()) {
        /* Serial mode: only this thread's progress completes the requests. A short wait
         * polls before it registers a waiter: registering, waking and unwinding the wait
         * cost more than the polls, on the path from an arrival back to the application. */
        for (int i = 0; i < MPIV_SERIAL_POLLS && 0 != pending; ++i) {
            /* More processes than PUs: let the peer run between polls. */
            if (0 == mpiv_p2p_progress(mca_pml_mpiv.engine) && mca_pml_mpiv.yielding) {
                sched_yield();
            }
            pending = 0;
            for (size_t j = 0; j < n; ++j) {
                pending += must_register(reqs[j]);
            }
        }
    }
    if (0 == pending) {
        return true;
    }
    w = mpiv_p2p_wait_begin(mca_pml_mpiv.engine, pending);
    for (size_t i = 0; i < n; ++i) {
        mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) reqs[i];
        void *expected = NULL;
        if (!must_register(reqs[i])) {
            continue;
        }
        if (!__atomic_compare_exchange_n(&req->waiter, &expected, w, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            mpiv_p2p_wake(mca_pml_mpiv.engine, w); /* already complete */
        }
    }
    mpiv_p2p_wait_end(mca_pml_mpiv.engine, w);
    return true;
}

/* Wait until at least one of the mpiv requests of reqs[0..n) completes, when all
 * incomplete ones are mpiv's. A ULT polls (yielding); a pthread registers once. */
static void wait_mpiv_any(size_t n, ompi_request_t **reqs)
{
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
        if (!waitable(reqs[i])) {
            continue;
        }
        if (REQUEST_COMPLETE(reqs[i]) || !is_mpiv(reqs[i])) {
            return;
        }
        any = true;
    }
    if (!any) {
        return;
    }
    if (in_ult()) {
        for (;;) {
            for (size_t i = 0; i < n; ++i) {
                if (waitable(reqs[i]) && REQUEST_COMPLETE(reqs[i])) {
                    return;
                }
            }
            mpiv_p2p_progress(mca_pml_mpiv.engine);
            mpiv_yield();
        }
    } else {
        /* A pthread registers its one waiter on each request, for one completion. Every
         * request whose completion takes the waiter (req_done's exchange) wakes it, maybe
         * after this wait ended: before the thread's next wait may begin, those wakes
         * must all have landed (wait_settle), or a late one would end that wait early. The
         * registrations still in place are taken back; each of the others is one wake. */
        mpiv_p2p_waiter_t *w = mpiv_p2p_wait_begin(mca_pml_mpiv.engine, 1);
        size_t registered = 0;
        int32_t wakes = 0;
        for (size_t i = 0; i < n; ++i) {
            mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) reqs[i];
            void *expected = NULL;
            if (!waitable(reqs[i])) {
                continue;
            }
            if (!__atomic_compare_exchange_n(&req->waiter, &expected, w, false,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                mpiv_p2p_wake(mca_pml_mpiv.engine, w); /* complete already */
                wakes = 1;
                break;
            }
            registered = i + 1;
        }
        mpiv_p2p_wait_end(mca_pml_mpiv.engine, w);
        for (size_t i = 0; i < registered; ++i) {
            mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) reqs[i];
            void *expected = w;
            if (waitable(reqs[i]) &&
                !__atomic_compare_exchange_n(&req->waiter, &expected, NULL, false,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                ++wakes; /* its completion took the waiter: its wake is due */
            }
        }
        mpiv_p2p_wait_settle(mca_pml_mpiv.engine, w, wakes);
    }
}

static int mpiv_wait(ompi_request_t **request, ompi_status_public_t *status)
{
    (void) wait_mpiv_all(1, request);
    return saved_fns.req_wait(request, status);
}

/* Whether requests[0..count) are all inactive (or MPI_REQUEST_NULL) or mpiv requests, and
 * at least one of them completed with an error. */
static bool mpiv_set_failed(size_t count, ompi_request_t **requests)
{
    bool failed = false;
    for (size_t i = 0; i < count; ++i) {
        const ompi_request_t *r = requests[i];
        if (OMPI_REQUEST_INACTIVE == r->req_state) {
            continue;
        }
        if (!is_mpiv(r)) {
            return false;
        }
        failed = failed || (REQUEST_COMPLETE(r) && MPI_SUCCESS != r->req_status.MPI_ERROR);
    }
    return failed;
}

/* The end of MPI_Waitall over complete requests, as Open MPI's default function does it:
 * statuses copied, persistent requests made inactive, the others freed unless they failed
 * (their handles stay, as the default leaves them), MPI_ERR_IN_STATUS when one failed. */
static int finish_all(size_t count, ompi_request_t **requests, ompi_status_public_t *statuses)
{
    int mpi_error = OMPI_SUCCESS;
    for (size_t i = 0; i < count; ++i) {
        ompi_request_t *r = requests[i];
        int rc;
        if (OMPI_REQUEST_INACTIVE == r->req_state) {
            if (MPI_STATUSES_IGNORE != statuses) {
                OMPI_COPY_STATUS(&statuses[i], ompi_status_empty, true);
            }
            continue;
        }
        rc = r->req_status.MPI_ERROR;
        if (MPI_STATUSES_IGNORE != statuses) {
            OMPI_COPY_STATUS(&statuses[i], r->req_status, true);
        }
        if (r->req_persistent) {
            r->req_state = OMPI_REQUEST_INACTIVE;
        } else if (MPI_SUCCESS == rc) {
            int tmp = ompi_request_free(&requests[i]);
            if (OMPI_SUCCESS == mpi_error && OMPI_SUCCESS != tmp) {
                mpi_error = tmp;
            }
        }
        if (OMPI_SUCCESS == mpi_error && OMPI_SUCCESS != rc) {
            mpi_error = MPI_ERR_IN_STATUS;
        }
    }
    return mpi_error;
}

static int mpiv_wait_all(size_t count, ompi_request_t **requests, ompi_status_public_t *statuses)
{
    /* Open MPI 4.1.4's default function, when it finds a request already complete with an
     * error, skips its wait and then, with threads (MPI_THREAD_MULTIPLE), spins for ever in
     * WAIT_SYNC_RELEASE: its sync stays "signaling". mpiv completes its requests before
     * calling it, so it finishes such a set itself. */
    if (wait_mpiv_all(count, requests) && opal_using_threads() &&
        mpiv_set_failed(count, requests)) {
        return finish_all(count, requests, statuses);
    }
    return saved_fns.req_wait_all(count, requests, statuses);
}

static int mpiv_wait_any(size_t count, ompi_request_t **requests, int *index,
                         ompi_status_public_t *status)
{
    wait_mpiv_any(count, requests);
    return saved_fns.req_wait_any(count, requests, index, status);
}

static int mpiv_wait_some(size_t count, ompi_request_t **requests, int *outcount, int *indices,
                          ompi_status_public_t *statuses)
{
    wait_mpiv_any(count, requests);
    return saved_fns.req_wait_some(count, requests, outcount, indices, statuses);
}

static void install_wait_functions(void)
{
    if (!fns_installed) {
        saved_fns = ompi_request_functions;
        ompi_request_functions.req_wait = mpiv_wait;
        ompi_request_functions.req_wait_all = mpiv_wait_all;
        ompi_request_functions.req_wait_any = mpiv_wait_any;
        ompi_request_functions.req_wait_some = mpiv_wait_some;
        fns_installed = true;
    }
}

static void restore_wait_functions(void)
{
    if (fns_installed) {
        ompi_request_functions = saved_fns;
        fns_installed = false;
    }
}

/* Wait for a request started by a blocking call, take its error, free it. */
static int wait_and_free(mca_pml_mpiv_request_t *req, ompi_status_public_t *status)
{
    ompi_request_t *r = &req->ompi;
    int rc;
    (void) wait_mpiv_all(1, &r);
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
    if (send_inline(buf, count, dt, dst, tag, mode, comm, &rc)) {
        return rc;
    }
    rc = start_new(req_alloc(MPIV_REQ_SEND, false, (void *) buf, count, dt, dst, tag, mode, comm),
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
        rc = mpiv_p2p_irecv(mca_pml_mpiv.engine, engine_comm(req->comm), req->peer, req->tag,
                            start, bytes, req, &req->op, &st);
    } else {
        rc = mpiv_p2p_irecv_sink(mca_pml_mpiv.engine, engine_comm(req->comm), req->peer,
                                 req->tag, unpack_piece, req->unpacker, bytes, req, &req->op,
                                 &st);
    }
    if (MPIV_ERR_INVALID_ARG == rc) {
        const unsigned a = mpiv_p2p_comm_assertions(engine_comm(req->comm));
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
        req_alloc(MPIV_REQ_RECV, true, buf, count, dt, src, tag, MCA_PML_BASE_SEND_STANDARD, comm);
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    *request = &req->ompi;
    return OMPI_SUCCESS;
}

static int mpiv_irecv(void *buf, size_t count, ompi_datatype_t *dt, int src, int tag,
                      ompi_communicator_t *comm, ompi_request_t **request)
{
    return start_new(req_alloc(MPIV_REQ_RECV, false, buf, count, dt, src, tag,
                               MCA_PML_BASE_SEND_STANDARD, comm),
                     recv_start, request);
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
    req_init(req, MPIV_REQ_RECV, false, buf, count, dt, src, tag, MCA_PML_BASE_SEND_STANDARD,
             comm);
    rc = recv_start(req);
    if (OMPI_SUCCESS == rc) {
        (void) wait_mpiv_all(1, &r);
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

static int mpiv_start(size_t count, ompi_request_t **requests)
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
    int rc = mpiv_p2p_iprobe(mca_pml_mpiv.engine, engine_comm(comm), src, tag, &st);
    if (MPIV_ERR_NOT_FOUND == rc) {
        opal_progress();
        rc = mpiv_p2p_iprobe(mca_pml_mpiv.engine, engine_comm(comm), src, tag, &st);
    }
    if (MPIV_OK == rc) {
        *matched = 1;
        probe_status(status, &st);
        return OMPI_SUCCESS;
    }
    *matched = 0;
    return MPIV_ERR_NOT_FOUND == rc ? OMPI_SUCCESS : map_status(rc);
}

/* Between polls of a blocking probe: a ULT lets the others of its worker run (the
 * message may come from one of them); a pthread just polls again. */
static void probe_pause(void)
{
    if (in_ult()) {
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
    rc = mpiv_p2p_improbe(mca_pml_mpiv.engine, engine_comm(comm), src, tag, &m, &st);
    if (MPIV_ERR_NOT_FOUND == rc) {
        opal_progress();
        rc = mpiv_p2p_improbe(mca_pml_mpiv.engine, engine_comm(comm), src, tag, &m, &st);
    }
    if (MPIV_OK != rc) {
        ompi_message_return(msg);
        *matched = 0;
        return MPIV_ERR_NOT_FOUND == rc ? OMPI_SUCCESS : map_status(rc);
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
    mca_pml_mpiv_request_t *req = req_alloc(MPIV_REQ_RECV, false, buf, count, dt, msg->peer,
                                            MPI_ANY_TAG, MCA_PML_BASE_SEND_STANDARD, msg->comm);
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = recv_target(req, &start, &bytes);
    if (OMPI_SUCCESS != rc) {
        req_release(req);
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
    /* MPIV_INPROGRESS: the bytes are in, the sender's ACK or FIN waits for room in its
     * queue; the completion follows once it is pushed. */
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
                remote_size(comm), (void *) mca_pml_mpiv.engine);
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
    restore_wait_functions();
    if (mca_pml_mpiv.requests_built) {
        recv_cache = NULL;
        OBJ_DESTRUCT(&recv_cached);
        OBJ_DESTRUCT(&mca_pml_mpiv.requests);
        OBJ_DESTRUCT(&mca_pml_mpiv.connect_lock);
        mca_pml_mpiv.requests_built = false;
    }
    free(mca_pml_mpiv.connected);
    mca_pml_mpiv.connected = NULL;
}
