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
 */
#include "pml_mpiv.h"

#include <stdlib.h>
#include <string.h>

#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/group/group.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/runtime/params.h"
#include "opal/util/info.h"
#include "opal/util/output.h"

#include <mpiv/mpiv.h>

/* What the handles of one endpoints communicator of this process share. */
typedef struct mca_pml_mpiv_ep_shared {
    int live;                           /* handles not freed yet (ep_lock) */
    ompi_communicator_t *proc_comm;     /* one rank per process */
    ompi_communicator_t **handles;      /* by endpoint index; NULL once freed */
    int count;
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

int mca_pml_mpiv_create_endpoints(ompi_communicator_t *parent, int my_num_ep,
                                  opal_info_t *info, ompi_communicator_t **out)
{
    const int nprocs = ompi_comm_size(parent), me = ompi_comm_rank(parent);
    int *counts = NULL, total = 0, offset = 0, bad = 0, rc;
    uint32_t *rank_peer = NULL;
    uint16_t *rank_ep = NULL;
    mpiv_p2p_comm_t **engine_handles = NULL;
    ompi_communicator_t *proc_comm = MPI_COMM_NULL;
    mca_pml_mpiv_ep_shared_t *shared = NULL;
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
    /* Every process learns every count first: a bad one fails the call everywhere. */
    counts = malloc(sizeof(int) * (size_t) nprocs);
    if (NULL == counts) {
        return fail(parent, MPI_ERR_NO_MEM, "MPIX_Comm_create_endpoints: out of memory");
    }
    rc = PMPI_Allgather(&my_num_ep, 1, MPI_INT, counts, 1, MPI_INT, parent);
    if (MPI_SUCCESS != rc) {
        free(counts);
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
        return fail(parent, MPI_ERR_ARG,
                    "MPIX_Comm_create_endpoints: my_num_ep must be at least 1 (and at most "
                    "65535) on every process");
    }
    rank_peer = malloc(sizeof(uint32_t) * (size_t) total);
    rank_ep = malloc(sizeof(uint16_t) * (size_t) total);
    engine_handles = calloc((size_t) my_num_ep, sizeof(*engine_handles));
    shared = calloc(1, sizeof(*shared));
    if (NULL != shared) {
        shared->handles = calloc((size_t) my_num_ep, sizeof(*shared->handles));
    }
    if (NULL == rank_peer || NULL == rank_ep || NULL == engine_handles || NULL == shared ||
        NULL == shared->handles) {
        rc = MPI_ERR_NO_MEM;
        goto err_free;
    }
    for (int p = 0, r = 0; p < nprocs; ++p) {
        uint32_t peer = 0;
        rc = mca_pml_mpiv_peer_index(parent, p, &peer);
        if (OMPI_SUCCESS != rc) {
            rc = MPI_ERR_OTHER;
            goto err_free;
        }
        for (int j = 0; j < counts[p]; ++j, ++r) {
            rank_peer[r] = peer;
            rank_ep[r] = (uint16_t) j;
        }
    }
    rc = PMPI_Comm_dup(parent, &proc_comm);
    if (MPI_SUCCESS != rc) {
        goto err_free;
    }
    shared->proc_comm = proc_comm;
    shared->count = my_num_ep;
    for (int k = 0; k < my_num_ep; ++k) {
        ompi_group_t *group = endpoint_group(parent, counts, total, offset + k);
        ompi_communicator_t *h = NULL;
        if (NULL == group) {
            rc = MPI_ERR_NO_MEM;
            goto err_handles;
        }
        rc = ompi_comm_set(&h, proc_comm, 0, NULL, 0, NULL, NULL, parent->error_handler, false,
                           group, NULL);
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
        goto err_cid;
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
        rc = mca_coll_base_comm_select(h);
        if (OMPI_SUCCESS != rc) {
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

err_cid:
    /* Open MPI's table holds the anchor under the agreed id: its release clears it. */
err_handles:
    for (int k = 0; k < my_num_ep; ++k) {
        if (NULL != shared->handles[k]) {
            if (k > 0) {
                shared->handles[k]->c_contextid = MPI_UNDEFINED; /* the anchor's to clear */
            }
            OBJ_RELEASE(shared->handles[k]);
        }
    }
    (void) PMPI_Comm_free(&proc_comm);
err_free:
    if (NULL != shared) {
        free(shared->handles);
    }
    free(shared);
    free(engine_handles);
    free(rank_ep);
    free(rank_peer);
    free(counts);
    return fail(parent, rc, "MPIX_Comm_create_endpoints: cannot create the communicator");
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
    free(shared->handles);
    free(shared);
    (void) ompi_comm_free(&proc_comm);
    return true;
}
