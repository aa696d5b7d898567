/*
 * pml_mpiv_endpoints.c: MPIX_Comm_create_endpoints (the MPI endpoints proposal) inside
 * Open MPI 4.1: a communicator of sum(my_num_ep) ranks whose ranks of one process are
 * distinct MPI_Comm handles, each with its own matching state in the engine
 * (mpiv_p2p_comm_create_endpoints). libmpiv-mpix (mpix_endpoints.c) forwards to
 * mca_pml_mpiv_create_endpoints when mpiv is the selected PML.
 *
 * How a handle is built (Open MPI's own structures stay consistent):
 * - Its group lists the process of every endpoint rank (a process appears once per
 *   endpoint it owns), with grp_my_rank = the handle's rank; ompi_comm_set over proc_comm,
 *   a duplicate of the parent with one rank per process.
 * - One context id for all handles of the communicator, agreed over proc_comm by Open MPI's
 *   own algorithm (ompi_comm_nextcid, one participant per process); Open MPI's table holds
 *   one handle of this process for it (the anchor), moved to a live sibling when the anchor
 *   is freed (del_comm), and released with the last handle.
 * - Collectives run over point-to-point (coll components basic, libnbc, tuned: the info key
 *   ompi_comm_coll_preference excludes sm, han and adapt, which treat ranks as processes).
 * - MPI_Comm_dup of a handle (libmpiv-mpix sends it here): the handles of a process meet
 *   by the number of the call on each (the n-th dup of every handle is one collective
 *   call); the last to arrive builds the new communicator for all of them over proc_comm,
 *   the process taking part once in the context-id agreement (Gropp and Thakur's rule
 *   that a process's participants must not compete for ids with themselves), one
 *   operation at a time per communicator; the others wait (a ULT yields, a pthread drives
 *   progress) and take their handle. Attributes are copied with their callbacks.
 */
#include "pml_mpiv.h"

#include <stdlib.h>
#include <string.h>

#include "ompi/attribute/attribute.h"
#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/group/group.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/runtime/params.h"
#include "opal/util/info.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

#include <sched.h>

#include <mpiv/mpiv.h>

/* What the handles of one endpoints communicator of this process share. */
/* A constructor call (MPI_Comm_dup) on the handles of one endpoints communicator: the
 * n-th call on each handle of this process (ep_lock, but done and the results). */
typedef struct mca_pml_mpiv_ep_op {
    uint64_t seq;                       /* n */
    int arrived, taken;                 /* handles that called, that took their result */
    int done;                           /* the results are there (release/acquire) */
    int rc;
    const char *why;
    ompi_communicator_t **results;      /* by endpoint index */
    struct mca_pml_mpiv_ep_op *next;
} mca_pml_mpiv_ep_op_t;

typedef struct mca_pml_mpiv_ep_shared {
    int live;                           /* handles not freed yet (ep_lock) */
    ompi_communicator_t *proc_comm;     /* one rank per process */
    ompi_communicator_t **handles;      /* by endpoint index; NULL once freed */
    int count;
    uint64_t *ops;                      /* constructor calls per handle (ep_lock) */
    mca_pml_mpiv_ep_op_t *pending;      /* calls not taken by every handle yet (ep_lock) */
    opal_mutex_t op_lock;               /* one operation at a time on proc_comm */
} mca_pml_mpiv_ep_shared_t;

static opal_mutex_t ep_lock = OPAL_MUTEX_STATIC_INIT;
static mca_pml_mpiv_ep_shared_t *ep_by_cid[1 << 16]; /* ep_lock */

static int fail(ompi_communicator_t *parent, int code, const char *message)
{
    return OMPI_ERRHANDLER_INVOKE(parent, code, message);
}

/* The handle's group: every rank's process, this handle's rank as its own. */
static ompi_group_t *endpoint_group(ompi_communicator_t *parent, const int *counts, int total,
                                    int my_rank)
{
    ompi_proc_t **procs = malloc(sizeof(ompi_proc_t *) * (size_t) total);
    ompi_group_t *group;
    int r = 0;
    if (NULL == procs) {
        return NULL;
    }
    for (int p = 0; p < ompi_comm_size(parent); ++p) {
        for (int j = 0; j < counts[p]; ++j) {
            procs[r++] = ompi_group_get_proc_ptr_raw(parent->c_local_group, p);
        }
    }
    group = ompi_group_allocate_plist_w_procs(procs, total); /* takes procs */
    if (NULL == group) {
        free(procs);
        return NULL;
    }
    group->grp_my_rank = my_rank;
    return group;
}

int mca_pml_mpiv_create_endpoints(ompi_communicator_t *parent, int my_num_ep,
                                  opal_info_t *info, ompi_communicator_t **out)
    __attribute__((visibility("default")));
int mca_pml_mpiv_is_endpoint(ompi_communicator_t *comm) __attribute__((visibility("default")));
int mca_pml_mpiv_endpoint_dup(ompi_communicator_t *comm, ompi_communicator_t **newcomm)
    __attribute__((visibility("default")));

/* Whether @p comm is a handle of an endpoints communicator (for libmpiv-mpix). */
int mca_pml_mpiv_is_endpoint(ompi_communicator_t *comm)
{
    int found = 0;
    if (comm->c_contextid >= (1 << 16)) {
        return 0;
    }
    OPAL_THREAD_LOCK(&ep_lock);
    const mca_pml_mpiv_ep_shared_t *shared = ep_by_cid[comm->c_contextid];
    for (int k = 0; NULL != shared && k < shared->count && !found; ++k) {
        found = shared->handles[k] == comm;
    }
    OPAL_THREAD_UNLOCK(&ep_lock);
    return found;
}

/* Build this process's @p my_num_ep handles of a new endpoints communicator over the
 * processes of @p parent (ordered as in it; for a dup, the old communicator's proc_comm):
 * collective over @p parent, one call per process. With @p like (a dup), handle k takes
 * like[k]'s error handler and attributes (copy callbacks run); else @p errh. Returns an
 * MPI error code and sets *why_p; on error nothing is left behind. */
static int build(ompi_communicator_t *parent, int my_num_ep, ompi_communicator_t *const *like,
                 ompi_errhandler_t *errh, ompi_communicator_t **out, const char **why_p)
{
    const int nprocs = ompi_comm_size(parent), me = ompi_comm_rank(parent);
    int *counts = NULL, total = 0, offset = 0, bad = 0, rc;
    uint32_t *rank_peer = NULL;
    uint16_t *rank_ep = NULL;
    mpiv_p2p_comm_t **engine_handles = NULL;
    ompi_communicator_t *proc_comm = MPI_COMM_NULL;
    mca_pml_mpiv_ep_shared_t *shared = NULL;

    *why_p = "out of memory";
    /* Every process learns every count first: a bad one fails the call everywhere. */
    counts = malloc(sizeof(int) * (size_t) nprocs);
    if (NULL == counts) {
        return MPI_ERR_NO_MEM;
    }
    rc = PMPI_Allgather(&my_num_ep, 1, MPI_INT, counts, 1, MPI_INT, parent);
    if (MPI_SUCCESS != rc) {
        free(counts);
        *why_p = "the exchange of the counts failed";
        return rc;
    }
    for (int p = 0; p < nprocs; ++p) {
        if (counts[p] < 1 || counts[p] > UINT16_MAX || total > INT32_MAX - counts[p]) {
            bad = 1;
        } else {
            total += counts[p];
            offset += p < me ? counts[p] : 0;
        }
    }
    if (bad) {
        free(counts);
        *why_p = "my_num_ep must be at least 1 (and at most 65535) on every process";
        return MPI_ERR_ARG;
    }
    rank_peer = malloc(sizeof(uint32_t) * (size_t) total);
    rank_ep = malloc(sizeof(uint16_t) * (size_t) total);
    engine_handles = calloc((size_t) my_num_ep, sizeof(*engine_handles));
    shared = calloc(1, sizeof(*shared));
    if (NULL != shared) {
        shared->handles = calloc((size_t) my_num_ep, sizeof(*shared->handles));
        shared->ops = calloc((size_t) my_num_ep, sizeof(*shared->ops));
    }
    if (NULL == rank_peer || NULL == rank_ep || NULL == engine_handles || NULL == shared ||
        NULL == shared->handles || NULL == shared->ops) {
        rc = MPI_ERR_NO_MEM;
        goto err_free;
    }
    for (int p = 0, r = 0; p < nprocs; ++p) {
        uint32_t peer = 0;
        if (OMPI_SUCCESS != mca_pml_mpiv_peer_index(parent, p, &peer)) {
            rc = MPI_ERR_OTHER;
            *why_p = "a process of the parent cannot be reached";
            goto err_free;
        }
        for (int j = 0; j < counts[p]; ++j, ++r) {
            rank_peer[r] = peer;
            rank_ep[r] = (uint16_t) j;
        }
    }
    *why_p = "cannot create the communicator";
    rc = PMPI_Comm_dup(parent, &proc_comm);
    if (MPI_SUCCESS != rc) {
        goto err_free;
    }
    OBJ_CONSTRUCT(&shared->op_lock, opal_mutex_t);
    shared->proc_comm = proc_comm;
    shared->count = my_num_ep;
    for (int k = 0; k < my_num_ep; ++k) {
        ompi_group_t *group = endpoint_group(parent, counts, total, offset + k);
        ompi_communicator_t *h = NULL;
        if (NULL == group) {
            rc = MPI_ERR_NO_MEM;
            goto err_handles;
        }
        rc = ompi_comm_set(&h, proc_comm, 0, NULL, 0, NULL, NULL,
                           NULL != like ? like[k]->error_handler : errh, false, group, NULL);
        OBJ_RELEASE(group); /* the communicator holds it */
        if (OMPI_SUCCESS != rc) {
            rc = MPI_ERR_NO_MEM;
            goto err_handles;
        }
        shared->handles[k] = h;
    }
    /* One context id, agreed by the processes (one participant each) over proc_comm. */
    rc = ompi_comm_nextcid(shared->handles[0], proc_comm, NULL, NULL, NULL, false,
                           OMPI_COMM_CID_INTRA);
    if (OMPI_SUCCESS != rc) {
        rc = MPI_ERR_INTERN;
        goto err_handles;
    }
    for (int k = 1; k < my_num_ep; ++k) {
        shared->handles[k]->c_contextid = shared->handles[0]->c_contextid;
    }
    rc = mpiv_p2p_comm_create_endpoints(mca_pml_mpiv.engine,
                                        (uint16_t) shared->handles[0]->c_contextid, total,
                                        rank_peer, rank_ep, (uint32_t) my_num_ep, engine_handles);
    if (MPIV_OK != rc) {
        rc = mca_pml_mpiv_map_status(rc);
        goto err_handles;
    }
    OPAL_THREAD_LOCK(&ep_lock);
    shared->live = my_num_ep;
    ep_by_cid[shared->handles[0]->c_contextid] = shared;
    OPAL_THREAD_UNLOCK(&ep_lock);
    for (int k = 0; k < my_num_ep; ++k) {
        ompi_communicator_t *h = shared->handles[k];
        h->c_pml_comm = (struct mca_pml_comm_t *) engine_handles[k];
        OMPI_COMM_SET_PML_ADDED(h);
        h->super.s_info = OBJ_NEW(opal_info_t);
        if (NULL != h->super.s_info) {
            (void) opal_info_set(h->super.s_info, "ompi_comm_coll_preference", "^sm,han,adapt");
        }
        if (NULL != like && NULL != like[k]->c_keyhash &&
            OMPI_SUCCESS == ompi_attr_hash_init(&h->c_keyhash)) {
            (void) ompi_attr_copy_all(COMM_ATTR, like[k], h, like[k]->c_keyhash, h->c_keyhash);
        }
        if (OMPI_SUCCESS != mca_coll_base_comm_select(h)) {
            opal_output(0, "pml mpiv: no collective component for endpoints communicator %u",
                        h->c_contextid);
        }
        out[k] = h;
    }
    opal_output_verbose(2, mca_pml_mpiv.output,
                        "pml mpiv: endpoints communicator %u: %d ranks, here %d-%d",
                        shared->handles[0]->c_contextid, total, offset, offset + my_num_ep - 1);
    free(counts);
    free(rank_peer);
    free(rank_ep);
    free(engine_handles);
    /* Every process has its handles before any of them is used (as ompi_comm_activate). */
    return PMPI_Barrier(proc_comm);

err_handles:
    /* The anchor (handle 0) holds Open MPI's table entry if an id was agreed: its release
     * clears it; the others must leave it alone. */
    for (int k = 0; k < my_num_ep; ++k) {
        if (NULL != shared->handles[k]) {
            if (k > 0) {
                shared->handles[k]->c_contextid = MPI_UNDEFINED;
            }
            OBJ_RELEASE(shared->handles[k]);
        }
    }
    OBJ_DESTRUCT(&shared->op_lock);
    (void) PMPI_Comm_free(&proc_comm);
err_free:
    if (NULL != shared) {
        free(shared->ops);
        free(shared->handles);
    }
    free(shared);
    free(engine_handles);
    free(rank_ep);
    free(rank_peer);
    free(counts);
    return rc;
}

int mca_pml_mpiv_create_endpoints(ompi_communicator_t *parent, int my_num_ep,
                                  opal_info_t *info, ompi_communicator_t **out)
{
    const char *why = NULL;
    char message[192];
    int rc;
    (void) info;
    if (mca_pml_mpiv_is_endpoint(parent)) {
        return fail(parent, MPI_ERR_COMM,
                    "MPIX_Comm_create_endpoints: the parent is an endpoints communicator "
                    "(not supported yet)");
    }
    if (OMPI_COMM_IS_INTER(parent)) {
        return fail(parent, MPI_ERR_COMM,
                    "MPIX_Comm_create_endpoints: the parent is an inter-communicator");
    }
    if (!ompi_mpi_thread_multiple) {
        return fail(parent, MPI_ERR_OTHER,
                    "MPIX_Comm_create_endpoints: needs MPI_THREAD_MULTIPLE (the program "
                    "initialized MPI at a lower thread level)");
    }
    rc = build(parent, my_num_ep, NULL, parent->error_handler, out, &why);
    if (MPI_SUCCESS != rc) {
        snprintf(message, sizeof(message), "MPIX_Comm_create_endpoints: %s", why);
        return fail(parent, rc, message);
    }
    return MPI_SUCCESS;
}

/* Wait until @p flag is set: a ULT yields to the others of its worker, a pthread drives
 * progress and yields its PU (a sibling that waits here may be a ULT of this worker). */
static void wait_flag(const int *flag)
{
    mpiv_ult_h self;
    const int in_ult = MPIV_OK == mpiv_self(&self);
    /* sync: acquire; pairs with the release store in mca_pml_mpiv_endpoint_dup(). */
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        if (in_ult) {
            (void) mpiv_yield();
        } else {
            opal_progress();
            sched_yield();
        }
    }
}

int mca_pml_mpiv_endpoint_dup(ompi_communicator_t *comm, ompi_communicator_t **newcomm)
{
    mca_pml_mpiv_ep_shared_t *shared = NULL;
    mca_pml_mpiv_ep_op_t *op = NULL, **pp;
    int k = 0, last = 0, rc;
    const char *why = NULL;
    OPAL_THREAD_LOCK(&ep_lock);
    if (comm->c_contextid < (1 << 16)) {
        shared = ep_by_cid[comm->c_contextid];
    }
    for (k = 0; NULL != shared && k < shared->count && shared->handles[k] != comm; ++k) {
    }
    if (NULL == shared || k == shared->count) {
        OPAL_THREAD_UNLOCK(&ep_lock);
        return fail(comm, MPI_ERR_COMM, "MPI_Comm_dup: not an endpoints handle");
    }
    /* The handles of this process meet by the number of the operation on each: the n-th
     * constructor call on every handle is the same collective call. */
    const uint64_t seq = shared->ops[k]++;
    for (pp = &shared->pending; NULL != *pp && (*pp)->seq != seq; pp = &(*pp)->next) {
    }
    if (NULL == *pp) {
        *pp = calloc(1, sizeof(**pp));
        if (NULL == *pp || NULL == ((*pp)->results = calloc((size_t) shared->count,
                                                             sizeof(*(*pp)->results)))) {
            free(*pp);
            *pp = NULL;
            OPAL_THREAD_UNLOCK(&ep_lock);
            return fail(comm, MPI_ERR_NO_MEM, "MPI_Comm_dup: out of memory");
        }
        (*pp)->seq = seq;
    }
    op = *pp;
    last = ++op->arrived == shared->count;
    OPAL_THREAD_UNLOCK(&ep_lock);
    if (last) {
        /* The last handle of this process to arrive takes part for all of them, one
         * operation at a time on proc_comm (in the same order on every process). */
        OPAL_THREAD_LOCK(&shared->op_lock);
        op->rc = build(shared->proc_comm, shared->count, shared->handles, NULL, op->results,
                       &why);
        op->why = why;
        OPAL_THREAD_UNLOCK(&shared->op_lock);
        /* sync: release; pairs with the acquire load in wait_flag(): the results are set. */
        __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
    } else {
        wait_flag(&op->done);
    }
    rc = op->rc;
    why = op->why;
    *newcomm = MPI_SUCCESS == rc ? op->results[k] : MPI_COMM_NULL;
    OPAL_THREAD_LOCK(&ep_lock);
    if (++op->taken == shared->count) {
        for (pp = &shared->pending; *pp != op; pp = &(*pp)->next) {
        }
        *pp = op->next;
        free(op->results);
        free(op);
    }
    OPAL_THREAD_UNLOCK(&ep_lock);
    if (MPI_SUCCESS != rc) {
        char message[192];
        snprintf(message, sizeof(message), "MPI_Comm_dup: %s", why);
        return fail(comm, rc, message);
    }
    return MPI_SUCCESS;
}

bool mca_pml_mpiv_del_endpoint(ompi_communicator_t *comm)
{
    mca_pml_mpiv_ep_shared_t *shared;
    ompi_communicator_t *proc_comm = MPI_COMM_NULL;
    int k;
    if (comm->c_contextid >= (1 << 16)) {
        return false;
    }
    OPAL_THREAD_LOCK(&ep_lock);
    shared = ep_by_cid[comm->c_contextid];
    for (k = 0; NULL != shared && k < shared->count && shared->handles[k] != comm; ++k) {
    }
    if (NULL == shared || k == shared->count) {
        OPAL_THREAD_UNLOCK(&ep_lock);
        return false;
    }
    shared->handles[k] = NULL;
    if (--shared->live > 0) {
        /* Siblings remain: the table entry must name a live one, and this handle's
         * destructor must leave the entry alone. */
        if (opal_pointer_array_get_item(&ompi_mpi_communicators, comm->c_contextid) == comm) {
            for (int j = 0; j < shared->count; ++j) {
                if (NULL != shared->handles[j]) {
                    opal_pointer_array_set_item(&ompi_mpi_communicators, comm->c_contextid,
                                                shared->handles[j]);
                    break;
                }
            }
        }
        comm->c_contextid = MPI_UNDEFINED;
        OPAL_THREAD_UNLOCK(&ep_lock);
        return true;
    }
    ep_by_cid[comm->c_contextid] = NULL;
    proc_comm = shared->proc_comm;
    OPAL_THREAD_UNLOCK(&ep_lock);
    OBJ_DESTRUCT(&shared->op_lock);
    free(shared->ops);
    free(shared->handles);
    free(shared);
    (void) ompi_comm_free(&proc_comm);
    return true;
}
