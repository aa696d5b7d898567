/*
 * pml_mpiv_request.c: mpiv's requests: allocation and set-up, completion by the engine
 * (mca_pml_mpiv_complete, any thread), free and cancel.
 *
 * A request embeds ompi_request_t and the engine's operation. The engine reports
 * completion through mca_pml_mpiv_complete (any thread), or at once through the return
 * value of the call that started the operation (then the glue calls the same function
 * itself). Freeing may come before completion (MPI_Request_free): the engine's side sets
 * MPIV_REQ_DONE after completing the request, the request's free sets MPIV_REQ_FREED, and
 * whichever sets the second bit returns the request to the free list (both bits are set
 * with one atomic fetch-or, so exactly one side sees the other's bit).
 */
#include "pml_mpiv.h"

#include "opal/util/output.h"
#include "ompi/mca/pml/base/pml_base_bsend.h"
#include "ompi/runtime/mpiruntime.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <mpiv/mpiv.h>

static int req_cancel(ompi_request_t *request, int complete);

/* ------------------------------------------------------------------ per-thread cache
 *
 * Requests come from the free list mca_pml_mpiv.requests through a small cache per
 * thread: taking from and giving back to the shared list are an atomic each (a 16-byte
 * compare-and-swap for the take), twice per message on the path of a message-rate loop.
 * The cache holds up to MPIV_REQ_CACHE requests; a thread that frees more than it takes
 * (the completer of freed requests) gives the surplus back to the list, one that takes
 * more takes from it.
 *
 * Lifetime: a thread's cache is made on its first take, linked in a list under
 * cache_lock, and given back by a thread-specific-data destructor when the thread exits.
 * Finalize (mca_pml_mpiv_req_cache_fini) gives back and frees the caches of the threads
 * still alive and deletes the key, so no destructor runs after the component is gone;
 * the thread-local pointers they leave are not used again (no MPI call follows
 * MPI_Finalize). A destructor that races with finalize gives back only a cache it still
 * finds in the list (it compares pointers, so it never reads one finalize freed). */
#define MPIV_REQ_CACHE 32

typedef struct req_cache {
    struct req_cache *next;
    unsigned n;
    opal_free_list_item_t *items[MPIV_REQ_CACHE];
} req_cache_t;

/* Initial-exec: one word of static TLS, read without a call on every take and give. */
static __thread req_cache_t *tl_cache __attribute__((tls_model("initial-exec")));
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static req_cache_t *caches;      /* under cache_lock */
static pthread_key_t cache_key;
static bool cache_key_made;

static void cache_flush(req_cache_t *c)
{
    while (c->n > 0) {
        opal_free_list_return(&mca_pml_mpiv.requests, c->items[--c->n]);
    }
}

/* Thread exit (in the exiting thread): its requests go back to the list. */
static void cache_exit(void *p)
{
    req_cache_t *c = p;
    tl_cache = NULL; /* a later destructor of this thread that calls MPI makes a new one */
    pthread_mutex_lock(&cache_lock);
    for (req_cache_t **l = &caches; NULL != *l; l = &(*l)->next) {
        if (*l == c) {
            *l = c->next;
            cache_flush(c);
            free(c);
            break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
}

int mca_pml_mpiv_req_cache_init(void)
{
    if (0 != pthread_key_create(&cache_key, cache_exit)) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    cache_key_made = true;
    return OMPI_SUCCESS;
}

void mca_pml_mpiv_req_cache_fini(void)
{
    if (!cache_key_made) {
        return;
    }
    pthread_mutex_lock(&cache_lock);
    while (NULL != caches) {
        req_cache_t *c = caches;
        caches = c->next;
        cache_flush(c);
        free(c);
    }
    pthread_mutex_unlock(&cache_lock);
    (void) pthread_key_delete(cache_key);
    cache_key_made = false;
}

/* This thread's cache, made on first use; NULL when it cannot be made (then the list
 * serves the thread directly). */
static req_cache_t *my_cache(void)
{
    req_cache_t *c = tl_cache;
    if (OPAL_LIKELY(NULL != c)) {
        return c;
    }
    c = calloc(1, sizeof *c);
    if (NULL == c) {
        return NULL;
    }
    pthread_mutex_lock(&cache_lock);
    c->next = caches;
    caches = c;
    pthread_mutex_unlock(&cache_lock);
    if (0 != pthread_setspecific(cache_key, c)) {
        cache_exit(c);
        return NULL;
    }
    tl_cache = c;
    return c;
}

static mca_pml_mpiv_request_t *req_take(void)
{
    req_cache_t *c = my_cache();
    if (NULL != c && c->n > 0) {
        return (mca_pml_mpiv_request_t *) c->items[--c->n];
    }
    return (mca_pml_mpiv_request_t *) opal_free_list_get(&mca_pml_mpiv.requests);
}

static void req_give(mca_pml_mpiv_request_t *req)
{
    req_cache_t *c = my_cache();
    if (NULL != c && c->n < MPIV_REQ_CACHE) {
        c->items[c->n++] = &req->ompi.super;
        return;
    }
    opal_free_list_return(&mca_pml_mpiv.requests, &req->ompi.super);
}

void mca_pml_mpiv_unpacker_release(mca_pml_mpiv_request_t *req)
{
    if (NULL != req->unpacker) {
        OBJ_RELEASE(req->unpacker);
        req->unpacker = NULL;
    }
}

static void request_construct(mca_pml_mpiv_request_t *req)
{
    req->ompi.req_type = OMPI_REQUEST_PML;
    req->ompi.req_start = mca_pml_mpiv_start;
    req->ompi.req_free = mca_pml_mpiv_req_free;
    req->ompi.req_cancel = req_cancel;
    req->pack_buf = NULL;
    req->unpacker = NULL;
    req->gather = NULL;
}

OBJ_CLASS_INSTANCE(mca_pml_mpiv_request_t, ompi_request_t, request_construct, NULL);

int mca_pml_mpiv_map_status(int s)
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

/* Whether a request must hold a reference on @p comm. MPI_COMM_WORLD and MPI_COMM_SELF
 * (intrinsic) live until MPI_Finalize, which may not come before the requests complete:
 * a reference, two locked instructions on a line every thread of the process shares,
 * would keep nothing alive. */
static bool holds_comm(const ompi_communicator_t *comm)
{
    return NULL != comm && !OMPI_COMM_IS_INTRINSIC(comm);
}

/* A request from the free list, holding references on comm (unless intrinsic) and dt. */
mca_pml_mpiv_request_t *mca_pml_mpiv_req_alloc(mca_pml_mpiv_req_kind_t kind, bool persistent,
                                         void *buf, size_t count, ompi_datatype_t *dt, int peer,
                                         int tag, mca_pml_base_send_mode_t mode,
                                         ompi_communicator_t *comm)
{
    mca_pml_mpiv_request_t *req = req_take();
    if (NULL == req) {
        return NULL;
    }
    mca_pml_mpiv_req_init(req, kind, persistent, buf, count, dt, peer, tag, mode, comm);
    if (holds_comm(comm)) {
        OBJ_RETAIN(comm);
    }
    if (NULL != dt) {
        OMPI_DATATYPE_RETAIN(dt);
    }
    return req;
}

/* Set up a request for one operation (references to comm and dt are the caller's). */
void mca_pml_mpiv_req_init(mca_pml_mpiv_request_t *req, mca_pml_mpiv_req_kind_t kind, bool persistent,
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
    req->preset_waiter = false;
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

void mca_pml_mpiv_req_release(mca_pml_mpiv_request_t *req)
{
    if (holds_comm(req->comm)) {
        OBJ_RELEASE(req->comm);
    }
    req->comm = NULL;
    if (NULL != req->datatype) {
        OMPI_DATATYPE_RELEASE(req->datatype);
        req->datatype = NULL;
    }
    OMPI_REQUEST_FINI(&req->ompi);
    req_give(req);
}

/* MPI completion of a request the engine is done with (see the file comment). */
static void req_done(mca_pml_mpiv_request_t *req)
{
    /* Serial mode: nobody else runs MPI code now, so the words below need no atomics, and
     * Open MPI's completion signals only when one of its own waits registered a sync. */
    const bool serial = mca_pml_mpiv.serial;
    int32_t prev;
    void *waiter;
    if (req->preset_waiter) {
        ompi_request_complete(&req->ompi, false);
        mpiv_p2p_wake(mca_pml_mpiv.engine, (mpiv_p2p_waiter_t *) req->waiter);
        /* Release: pairs with the acquire load in mpiv_recv; the last access. */
        __atomic_store_n(&req->pml_state, MPIV_REQ_DONE, __ATOMIC_RELEASE);
        return;
    }
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
        mca_pml_mpiv_req_release(req);
    }
}

int mca_pml_mpiv_req_free(ompi_request_t **request)
{
    mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) *request;
    /* Acquire: pairs with req_done's fetch-or; once MPIV_REQ_DONE shows, req_done has
     * made its choice (it saw no MPIV_REQ_FREED) and will not touch the request again,
     * so the usual free after completion needs no atomic of its own. */
    int32_t prev = __atomic_load_n(&req->pml_state, __ATOMIC_ACQUIRE);
    if (!(prev & MPIV_REQ_DONE)) {
        prev = opal_atomic_fetch_or_32(&req->pml_state, MPIV_REQ_FREED);
    }
    if (prev & MPIV_REQ_DONE) {
        mca_pml_mpiv_req_release(req);
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
        mca_pml_mpiv_unpacker_release(req);
        req->ompi.req_status._cancelled = 1;
        req->ompi.req_status.MPI_ERROR = OMPI_SUCCESS;
        req_done(req);
    }
    return OMPI_SUCCESS;
}


void mca_pml_mpiv_prefetch(void *user)
{
    /* The completion below and req_done read and write the Open MPI request (status,
     * completion word, callback) and the fields up to preset_waiter; the rest (the
     * engine's op, the arguments) is not touched. */
    enum { line_bytes = 64 }; /* a hint: a machine with other lines only prefetches less well */
    const uintptr_t first = (uintptr_t) user & ~(uintptr_t) (line_bytes - 1);
    const uintptr_t last = (uintptr_t) user + offsetof(mca_pml_mpiv_request_t, preset_waiter);
    for (uintptr_t line = first; line <= last; line += line_bytes) {
        __builtin_prefetch((const void *) line);
    }
}

void mca_pml_mpiv_complete(void *user, const mpiv_p2p_status_t *st)
{
    mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) user;
    switch (req->kind) {
    case MPIV_REQ_BSEND_COPY:
        mca_pml_base_bsend_request_free(req->pack_buf);
        req->pack_buf = NULL;
        mca_pml_mpiv_req_release(req);
        return;
    case MPIV_REQ_SEND:
        free(req->pack_buf);
        req->pack_buf = NULL;
        free(req->gather);
        req->gather = NULL;
        break;
    case MPIV_REQ_RECV:
        mca_pml_mpiv_unpacker_release(req);
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
        opal_output(0, "pml mpiv: invalid data from a process that cannot be named: %s; "
                       "aborting the job", what);
    } else {
        unsigned via = MPIV_P2P_TRANSPORT_SHM;
        (void) mpiv_p2p_peer_transport(mca_pml_mpiv.engine, peer, &via);
        if (MPIV_P2P_TRANSPORT_UCX == via &&
            ompi_mpi_state >= OMPI_MPI_STATE_FINALIZE_STARTED) {
            /* Past MPI_Finalize's fence a peer may be gone already (its connections
             * close as it exits): no communication is left that could depend on it. */
            opal_output_verbose(1, mca_pml_mpiv.output,
                                "pml mpiv: process %u over UCX during MPI_Finalize: %s "
                                "(ignored: no communication is left)", peer, what);
            return;
        }
        opal_output(0, "pml mpiv: process %u (rank %u of MPI_COMM_WORLD) %s: %s; aborting the job",
                    peer, peer,
                    MPIV_P2P_TRANSPORT_UCX == via ? "over UCX" : "wrote invalid data into shared memory",
                    what);
    }
    ompi_mpi_abort(&ompi_mpi_comm_world.comm, 1);
}
