/*
 * pml_mpiv_endpoints_meet.c: communicator constructors called on an endpoints handle:
 * MPI_Comm_dup, MPI_Comm_dup_with_info, MPI_Comm_split and MPI_Comm_split_type
 * (libmpiv-mpix sends them here, mca_pml_mpiv_endpoint_construct), MPI_Comm_idup
 * (mca_pml_mpiv_endpoint_idup), and
 * MPIX_Comm_create_endpoints with a handle as the parent (mca_pml_mpiv_create_endpoints
 * sends it here, mca_pml_mpiv_ep_create_on_handle). Every endpoint rank
 * calls them, several threads or ULTs of a process at once; Open MPI's own would run the
 * context-id agreement once per handle, with a process's handles competing against each
 * other for ids, and never agree.
 *
 * The meeting: the n-th constructor call on every handle of a process is the same
 * collective call (MPI orders a rank's collective calls; each handle counts its own). Each
 * handle leaves its arguments in the call's record (mca_pml_mpiv_ep_op_t, made by the first
 * to arrive); the last to arrive does the work for all of this process's handles, one call
 * at a time per communicator (op_lock); the others wait (a ULT yields, a pthread drives
 * progress) and take their result; the last to take it frees the record. A last arrival
 * that is an mpiv ULT has a pthread of its own do the work and yields meanwhile: Open MPI's
 * waits inside (ompi_comm_nextcid's) hold the worker without yielding to its other ULTs,
 * and with two communicators in construction at once (a split of each part of a split)
 * one process's worker would spin on one while a peer's spins on the other.
 * MPI_Comm_idup is local: each handle's call leaves its arguments and a generalized request
 * and returns; the last arrival has a pthread of its own do the work (itself only when no
 * thread can be made), which then writes each idup handle's new handle, takes its result
 * for it and, last, completes its request. A request retains its handle until it is freed
 * (a free of the handle meanwhile takes effect then). The work threads are joined as they
 * end and at finalize. Calls run in call order (shared->ran): an idup's work may still
 * wait for the PU when the next call's last arrival comes, and every process must run the
 * collectives over proc_comm in one order. A failed idup raises its error class at the
 * wait on MPI_COMM_WORLD's error handler (Open MPI's generalized requests belong to it),
 * and its reason is printed.
 *
 * Ordering: a handle writes its arguments under mca_pml_mpiv_ep_lock before it counts its
 * arrival, so the last arrival (counting under the same lock) sees them all; the results
 * are published by the release store of op->done that waiters load with acquire.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_tryjoin_np */
#endif
#include "pml_mpiv_endpoints_ops.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/request/grequest.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

#include <mpiv/mpiv.h>

int mca_pml_mpiv_endpoint_construct(ompi_communicator_t *comm, int call, int arg, int key,
                                    ompi_info_t *info, ompi_communicator_t **newcomm)
    __attribute__((visibility("default")));
int mca_pml_mpiv_endpoint_idup(ompi_communicator_t *comm, ompi_communicator_t **newcomm,
                               ompi_request_t **request) __attribute__((visibility("default")));

/* Wait until @p flag is set: a ULT yields to the others of its worker, a pthread drives
 * progress and yields its PU (a sibling that waits here may be a ULT of this worker). */
static void wait_flag(const int *flag)
{
    const bool in_ult = mca_pml_mpiv_in_ult();
    /* sync: acquire; pairs with the release store in work(). */
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        if (in_ult) {
            (void) mpiv_yield();
        } else {
            opal_progress();
            sched_yield();
        }
    }
}

/* Handle @p k has its result: the last of @p op's handles frees it (under ep_lock). */
static void take(mca_pml_mpiv_ep_op_t *op)
{
    mca_pml_mpiv_ep_shared_t *shared = op->shared;
    if (++op->taken == shared->count) {
        mca_pml_mpiv_ep_op_t **pp;
        for (pp = &shared->pending; *pp != op; pp = &(*pp)->next) {
        }
        *pp = op->next;
        free(op->args);
        free(op->infos);
        free(op->results);
        free(op);
    }
}

/* The state of an MPI_Comm_idup's generalized request: its error class, and the handle it
 * was called on, retained until the request is freed (idup_free): a free of the handle
 * while its idup is pending takes effect then. */
typedef struct idup_state {
    int rc;
    ompi_communicator_t *handle;
    /* Its attributes' table, retained too: a free of the handle meanwhile deletes the
     * attributes (the work then copies none) but must not free the table under the copy. */
    opal_hash_table_t *keyhash;
} idup_state_t;

static int idup_query(void *extra, MPI_Status *status)
{
    const idup_state_t *st = extra;
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    status->MPI_ERROR = st->rc;
    (void) PMPI_Status_set_elements(status, MPI_BYTE, 0);
    (void) PMPI_Status_set_cancelled(status, 0);
    return st->rc;
}

static int idup_free(void *extra)
{
    idup_state_t *st = extra;
    if (NULL != st->keyhash) {
        OBJ_RELEASE(st->keyhash);
    }
    if (NULL != st->handle) {
        OBJ_RELEASE(st->handle);
    }
    free(st);
    return MPI_SUCCESS;
}

static int idup_cancel(void *extra, int complete)
{
    (void) extra;
    (void) complete;
    return MPI_SUCCESS; /* a collective in progress: not cancelled (status says so) */
}

/* Do call @p op for this process's handles and publish the results: @p op must not be
 * touched after (its handles take their results and the last frees it; the idup handles'
 * are taken here). Calls run in call order. */
static void work(mca_pml_mpiv_ep_op_t *op)
{
    mca_pml_mpiv_ep_shared_t *shared = op->shared;
    const int n = shared->count;
    /* The idup requests, completed last: op may go once they are taken, and completing a
     * request whose caller freed it already frees it, and with it its handle's last
     * reference (idup_free) and possibly shared. */
    ompi_request_t **reqs = calloc((size_t) n, sizeof(*reqs));
    int idups = 0;
    OPAL_THREAD_LOCK(&shared->op_lock);
    while (shared->ran != op->seq) {
        /* An earlier call's work (an idup's thread) has not run yet. */
        OPAL_THREAD_UNLOCK(&shared->op_lock);
        opal_progress();
        sched_yield();
        OPAL_THREAD_LOCK(&shared->op_lock);
    }
    mca_pml_mpiv_ep_run(shared, op);
    ++shared->ran;
    OPAL_THREAD_UNLOCK(&shared->op_lock);
    for (int k = 0; k < n; ++k) {
        ompi_request_t *req = op->args[k].req;
        if (NULL == req) {
            continue;
        }
        if (NULL != op->args[k].newcomm) {
            *op->args[k].newcomm = NULL != op->results[k] ? op->results[k] : MPI_COMM_NULL;
        }
        ((idup_state_t *) ((ompi_grequest_t *) req)->greq_state)->rc = op->rc;
        if (MPI_SUCCESS != op->rc && 0 == idups) {
            /* (The request reports only the error class.) */
            opal_output(0, "pml mpiv: MPI_Comm_idup on an endpoints communicator: %s", op->why);
        }
        if (NULL != reqs) {
            reqs[idups] = req;
        } else {
            /* No memory to keep them aside: completed now (see above for the risk, which
             * needs every handle and request freed before the idup completes). */
            (void) ompi_grequest_complete(req);
        }
        ++idups;
    }
    /* sync: release; pairs with the acquire load in wait_flag(): the results are set. */
    __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
    if (idups > 0) {
        /* (The blocking handles cannot all have taken theirs before these are taken.) */
        OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
        for (int i = 0; i < idups; ++i) {
            take(op); /* the last may free op */
        }
        OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    }
    for (int i = 0; NULL != reqs && i < idups; ++i) {
        (void) ompi_grequest_complete(reqs[i]);
    }
    free(reqs);
}

/* The work threads (work_elsewhere), joined as they end and at finalize
 * (mca_pml_mpiv_ep_join_workers), under mca_pml_mpiv_ep_lock. */
static pthread_t *workers;
static size_t workers_n, workers_cap;

static void *work_thread(void *arg)
{
    work(arg);
    return NULL;
}

void mca_pml_mpiv_ep_join_workers(void)
{
    OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
    pthread_t *all = workers;
    const size_t n = workers_n;
    workers = NULL;
    workers_n = workers_cap = 0;
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    for (size_t i = 0; i < n; ++i) {
        (void) pthread_join(all[i], NULL);
    }
    free(all);
}

/* Run work(@p op) on a pthread of its own (false: none could be made). */
static bool work_elsewhere(mca_pml_mpiv_ep_op_t *op)
{
    pthread_t thread;
    bool started = false;
    OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
    /* Join the ones that ended; room for one more. */
    for (size_t i = 0; i < workers_n;) {
        if (0 == pthread_tryjoin_np(workers[i], NULL)) {
            workers[i] = workers[--workers_n];
        } else {
            ++i;
        }
    }
    if (workers_n == workers_cap) {
        const size_t cap = 0 == workers_cap ? 8 : 2 * workers_cap;
        pthread_t *more = realloc(workers, cap * sizeof(*more));
        if (NULL != more) {
            workers = more;
            workers_cap = cap;
        }
    }
    if (workers_n < workers_cap && 0 == pthread_create(&thread, NULL, work_thread, op)) {
        workers[workers_n++] = thread;
        started = true;
    }
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    return started;
}

/* The record of call @p seq on @p shared, made if it is the first (NULL: out of memory).
 * Caller holds mca_pml_mpiv_ep_lock. */
static mca_pml_mpiv_ep_op_t *op_get(mca_pml_mpiv_ep_shared_t *shared, uint64_t seq)
{
    mca_pml_mpiv_ep_op_t **pp, *op;
    for (pp = &shared->pending; NULL != *pp && (*pp)->seq != seq; pp = &(*pp)->next) {
    }
    if (NULL != *pp) {
        return *pp;
    }
    op = calloc(1, sizeof(*op));
    if (NULL == op) {
        return NULL;
    }
    op->args = calloc((size_t) shared->count, sizeof(*op->args));
    op->infos = calloc((size_t) shared->count, sizeof(*op->infos));
    op->results = calloc((size_t) shared->count, sizeof(*op->results));
    if (NULL == op->args || NULL == op->infos || NULL == op->results) {
        free(op->args);
        free(op->infos);
        free(op->results);
        free(op);
        return NULL;
    }
    op->seq = seq;
    op->shared = shared;
    *pp = op;
    return op;
}

/* Constructor @p call on the handle @p comm: the handles of this process meet, the last
 * does the work; @p bad: an argument error found by the caller; @p info: the hints
 * (MPIX_Comm_create_endpoints: its info); the result in *@p newcomm, or (CREATE) @p out.
 * With @p request (MPI_Comm_idup): a generalized request in *@p request that completes
 * once *@p newcomm is set, and no wait here.
 * @context collective over every endpoint rank; any thread or ULT; without @p request
 * blocks until every handle of this process called, and while the work runs. */
static int meet(ompi_communicator_t *comm, int call, int arg, int key, int bad,
                opal_info_t *info, ompi_communicator_t **newcomm, ompi_communicator_t **out,
                ompi_request_t **request)
{
    const char *name = mca_pml_mpiv_ep_call_name(call);
    mca_pml_mpiv_ep_shared_t *shared;
    mca_pml_mpiv_ep_op_t *op;
    ompi_communicator_t *result;
    char message[288];
    int k = 0, last, rc;
    if (NULL != request) {
        *request = MPI_REQUEST_NULL; /* until there is one */
    }
    OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
    shared = mca_pml_mpiv_ep_lookup(comm, &k);
    if (NULL == shared) {
        OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
        snprintf(message, sizeof(message), "%s: not an endpoints handle", name);
        return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_COMM, message);
    }
    /* The handles of this process meet by the number of the call on each. */
    op = op_get(shared, shared->ops[k]);
    if (NULL == op) {
        OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
        snprintf(message, sizeof(message), "%s: out of memory", name);
        return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_NO_MEM, message);
    }
    if (NULL != request) {
        idup_state_t *state = calloc(1, sizeof(*state));
        if (NULL == state ||
            OMPI_SUCCESS != ompi_grequest_start(idup_query, idup_free, idup_cancel, state,
                                                request)) {
            free(state);
            OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
            snprintf(message, sizeof(message), "%s: out of memory", name);
            return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_NO_MEM, message);
        }
        OBJ_RETAIN(comm); /* until the request is freed (idup_free) */
        state->handle = comm;
        if (NULL != comm->c_keyhash) {
            OBJ_RETAIN(comm->c_keyhash);
            state->keyhash = comm->c_keyhash;
        }
        op->args[k].req = *request;
        op->args[k].newcomm = newcomm;
    }
    ++shared->ops[k];
    op->args[k].call = call;
    op->args[k].arg = arg;
    op->args[k].key = key;
    op->args[k].bad = bad;
    op->args[k].out = out;
    op->infos[k] = 0 == bad ? info : NULL;
    last = ++op->arrived == shared->count;
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    if (NULL != request) {
        /* Local: a pthread does the work (this call only if none can be made); op is not
         * touched again here. */
        if (last && !work_elsewhere(op)) {
            opal_output(0, "pml mpiv: %s: no thread for the work, done in the call (it waits "
                           "for the other processes)", name);
            work(op);
        }
        return MPI_SUCCESS;
    }
    if (last) {
        /* The last handle of this process to arrive takes part for all of them. A ULT has
         * a pthread do it: Open MPI's own waits inside (the context-id agreement) hold the
         * worker without yielding, and the ULT of another communicator's call that a peer
         * waits for may be queued behind it on this worker. */
        if (!mca_pml_mpiv_in_ult() || !work_elsewhere(op)) {
            work(op);
        }
    }
    wait_flag(&op->done);
    rc = op->rc;
    result = op->results[k];
    if (MPI_SUCCESS != rc) {
        snprintf(message, sizeof(message), "%s: %s", name, op->why);
    }
    OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
    take(op);
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    if (NULL != newcomm) {
        *newcomm = NULL != result ? result : MPI_COMM_NULL;
    }
    if (MPI_SUCCESS != rc) {
        return OMPI_ERRHANDLER_INVOKE(comm, rc, message);
    }
    return MPI_SUCCESS;
}

/* Constructor @p call on the handle @p comm (see mca_pml_mpiv_endpoint_construct_fn_t).
 * @context collective over every endpoint rank; any thread or ULT; blocks until every
 * handle of this process called, and while the work runs. */
int mca_pml_mpiv_endpoint_construct(ompi_communicator_t *comm, int call, int arg, int key,
                                    ompi_info_t *info, ompi_communicator_t **newcomm)
{
    const int with_info = MCA_PML_MPIV_EP_DUP_WITH_INFO == call ||
                          MCA_PML_MPIV_EP_SPLIT_TYPE == call;
    int bad = 0;
    if (call < MCA_PML_MPIV_EP_DUP || call > MCA_PML_MPIV_EP_SPLIT_TYPE) {
        return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_ARG, "mpiv: an unknown constructor");
    }
    /* Argument errors are found here and reported by every rank after the exchange. */
    if (NULL == newcomm) {
        bad = BAD_NEWCOMM;
    } else if (MCA_PML_MPIV_EP_SPLIT == call && arg < 0 && MPI_UNDEFINED != arg) {
        bad = BAD_COLOR;
    } else if (MCA_PML_MPIV_EP_SPLIT_TYPE == call && MPI_COMM_TYPE_SHARED != arg &&
               MPI_UNDEFINED != arg) {
        bad = BAD_SPLIT_TYPE;
    } else if (with_info && (NULL == info || (MPI_INFO_NULL != info && ompi_info_is_freed(info)))) {
        bad = BAD_INFO;
    }
    return meet(comm, call, arg, key, bad,
                with_info && 0 == bad && MPI_INFO_NULL != info ? &info->super : NULL, newcomm,
                NULL, NULL);
}

int mca_pml_mpiv_endpoint_idup(ompi_communicator_t *comm, ompi_communicator_t **newcomm,
                               ompi_request_t **request)
{
    /* A NULL argument still takes part (its siblings and peers would wait for it), and
     * fails the call on every rank; without a request, through one of its own, freed. */
    ompi_request_t *own = MPI_REQUEST_NULL;
    const int bad = NULL == request ? BAD_REQUEST : NULL == newcomm ? BAD_NEWCOMM : 0;
    const int rc = meet(comm, MCA_PML_MPIV_EP_IDUP, 0, 0, bad, NULL, newcomm, NULL,
                        NULL != request ? request : &own);
    if (NULL == request) {
        if (MPI_REQUEST_NULL != own) {
            (void) ompi_request_free(&own); /* freed when it completes */
        }
        if (MPI_SUCCESS != rc) {
            return rc;
        }
        return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_REQUEST, "MPI_Comm_idup: request is NULL");
    }
    return rc;
}

int mca_pml_mpiv_ep_create_on_handle(ompi_communicator_t *parent, int my_num_ep,
                                     opal_info_t *info, ompi_communicator_t **out)
{
    int bad = 0;
    if (my_num_ep < 1 || my_num_ep > UINT16_MAX) {
        bad = BAD_NUM_EP;
    } else if (NULL == out) {
        bad = BAD_NEWCOMM;
    }
    return meet(parent, MCA_PML_MPIV_EP_CREATE, my_num_ep, 0, bad, info, NULL, out, NULL);
}
