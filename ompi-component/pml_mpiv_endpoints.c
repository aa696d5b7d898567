/*
 * pml_mpiv_endpoints.c: MPIX_Comm_create_endpoints (the MPI endpoints proposal) inside
 * Open MPI 4.1: a communicator of sum(my_num_ep) ranks whose ranks of one process are
 * distinct MPI_Comm handles, each with its own matching state in the engine
 * (mpiv_p2p_comm_create_endpoints). libmpiv-mpix (mpix_endpoints.c) forwards to
 * mca_pml_mpiv_create_endpoints when mpiv is the selected PML. This file builds handles
 * (for creation and for every constructor), keeps the registry and frees them; the
 * constructors called on a handle (dup, dup_with_info, split, split_type, and
 * MPIX_Comm_create_endpoints with a handle as the parent) are in pml_mpiv_endpoints_ops.c.
 *
 * How a communicator's handles are built (mca_pml_mpiv_ep_build; Open MPI's own
 * structures stay consistent):
 * - A communicator is described by proc_comm, an ordinary communicator of its processes
 *   (one rank each), and a map rank -> process. A process's handles are its ranks in
 *   increasing order, endpoint index 0, 1, ... (the engine numbers every peer's endpoints
 *   so). Creation: the parent's processes, ranks ordered by parent rank then handle index
 *   (an endpoints parent: by its endpoint rank, pml_mpiv_endpoints_ops.c); a split: any
 *   order (by key).
 * - A handle's group lists the process of every rank (a process appears once per endpoint
 *   it owns), with grp_my_rank = the handle's rank; ompi_comm_set over proc_comm.
 * - One context id for all handles of the communicator, agreed over proc_comm by mpiv's
 *   Gropp-Thakur agreement (mpiv_cid_agree: the mask of free ids, a process gate, the AND
 *   of the masks, retry; one participant per process, the handles having met first);
 *   Open MPI's table holds one handle of this process for it (the anchor), moved to a live
 *   sibling when the anchor is freed (del_comm), and released with the last handle.
 * - Collectives run over point-to-point (coll components basic, libnbc, tuned: the info key
 *   ompi_comm_coll_preference excludes sm, han and adapt, which treat ranks as processes).
 * - Last, the processes agree over proc_comm that every one has its handles (the barrier of
 *   ompi_comm_activate, and a failure after the context-id agreement fails everywhere).
 *
 * Invariants: the registry maps a context id to the shared state of this process's handles
 * (mca_pml_mpiv_ep_shared_t); a handle is live while shared->handles lists it. A shared
 * state is complete before it is registered; after that, its (ep_lock) fields change only
 * under mca_pml_mpiv_ep_lock. Handles are freed one by one, by any thread, in any order
 * (the proposal allows one thread to free them all in turn): the last one frees the shared
 * state and proc_comm. Memory per communicator and process: a group of `total` process
 * pointers per handle, the rank map (`total` ints), the engine's state.
 * Not for: an inter-communicator parent (refused), a program below
 * MPI_THREAD_MULTIPLE (refused: the handles' collectives run concurrently).
 */
#include "pml_mpiv_endpoints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/attribute/attribute.h"
#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errcode-internal.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/group/group.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/runtime/params.h"
#include "opal/class/opal_pointer_array.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/info.h"
#include "opal/util/output.h"

#include <mpiv/mpiv.h>
#include <mpiv/mpiv_cid.h>

#include "pml_mpiv_mpix.h"

opal_mutex_t mca_pml_mpiv_ep_lock = OPAL_MUTEX_STATIC_INIT;
static mca_pml_mpiv_ep_shared_t *ep_by_cid[1 << 16]; /* mca_pml_mpiv_ep_lock */

int mca_pml_mpiv_create_endpoints(ompi_communicator_t *parent, int my_num_ep,
                                  opal_info_t *info, ompi_communicator_t **out)
    __attribute__((visibility("default")));
int mca_pml_mpiv_is_endpoint(ompi_communicator_t *comm) __attribute__((visibility("default")));

/* Context ids (mpiv_cid_agree, Gropp and Thakur's algorithm): the host's side. An id is
 * free when Open MPI's communicator table has nothing at it; reserving it puts the anchor
 * handle there (opal_pointer_array_test_and_set_item, the same step by which Open MPI's
 * own agreement takes an id, so the two never hand out one id twice); the collectives run
 * over proc_comm, where each process takes part once. */
typedef struct {
    ompi_communicator_t *proc_comm, *anchor;
} cid_ctx_t;

static int cid_is_free(void *ctx, uint32_t id)
{
    (void) ctx;
    return NULL == opal_pointer_array_get_item(&ompi_mpi_communicators, (int) id);
}

static int cid_reserve(void *ctx, uint32_t id)
{
    return opal_pointer_array_test_and_set_item(&ompi_mpi_communicators, (int) id,
                                                ((cid_ctx_t *) ctx)->anchor);
}

static void cid_release(void *ctx, uint32_t id)
{
    (void) ctx;
    (void) opal_pointer_array_set_item(&ompi_mpi_communicators, (int) id, NULL);
}

static int cid_band(void *ctx, uint64_t *words, size_t count)
{
    return PMPI_Allreduce(MPI_IN_PLACE, words, (int) count, MPI_UINT64_T, MPI_BAND,
                          ((cid_ctx_t *) ctx)->proc_comm);
}

static int cid_min(void *ctx, int *value)
{
    return PMPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_INT, MPI_MIN,
                          ((cid_ctx_t *) ctx)->proc_comm);
}

static void cid_idle(void *ctx)
{
    (void) ctx;
    opal_progress();
}

/* Agree on the context id of a new endpoints communicator over @p proc_comm and give it to
 * @p anchor (in Open MPI's table too). Returns an MPI error code. */
static int agree_cid(ompi_communicator_t *proc_comm, ompi_communicator_t *anchor)
{
    cid_ctx_t ctx = {proc_comm, anchor};
    mpiv_cid_ops_t ops = {0};
    uint32_t id = 0;
    mpiv_status_t st;
    ops.ctx = &ctx;
    ops.first = 1; /* 0 is MPI_COMM_WORLD's (the predefined ones are in the table anyway) */
    ops.limit = mca_pml_mpiv_module.pml_max_contextid + 1u;
    ops.key = proc_comm->c_contextid; /* the same on every process */
    ops.is_free = cid_is_free;
    ops.reserve = cid_reserve;
    ops.release = cid_release;
    ops.allreduce_band = cid_band;
    ops.allreduce_min = cid_min;
    ops.idle = cid_idle;
    st = mpiv_cid_agree(&ops, &id);
    if (MPIV_OK != st) {
        return MPIV_ERR_CAPACITY == st ? MPI_ERR_NO_MEM : MPI_ERR_INTERN;
    }
    anchor->c_contextid = id;
    return MPI_SUCCESS;
}

mca_pml_mpiv_ep_shared_t *mca_pml_mpiv_ep_lookup(ompi_communicator_t *comm, int *k_p)
{
    mca_pml_mpiv_ep_shared_t *shared;
    int k;
    if (comm->c_contextid >= (1 << 16)) {
        return NULL;
    }
    shared = ep_by_cid[comm->c_contextid];
    for (k = 0; NULL != shared && k < shared->count && shared->handles[k] != comm; ++k) {
    }
    if (NULL == shared || k == shared->count) {
        return NULL;
    }
    *k_p = k;
    return shared;
}

/* Whether @p comm is a handle of an endpoints communicator (for libmpiv-mpix). */
int mca_pml_mpiv_is_endpoint(ompi_communicator_t *comm)
{
    int k;
    OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
    const int found = NULL != mca_pml_mpiv_ep_lookup(comm, &k);
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    return found;
}

static void shared_free(mca_pml_mpiv_ep_shared_t *shared)
{
    if (NULL != shared) {
        free(shared->ops);
        free(shared->handles);
        free(shared->my_ranks);
        free(shared->proc_counts);
        free(shared->rank_proc);
        free(shared->rank_queue);
        free(shared);
    }
}

/* The handle's group: every rank's process, this handle's rank as its own. */
static ompi_group_t *endpoint_group(ompi_communicator_t *proc_comm, const int *rank_proc,
                                    int total, int my_rank)
{
    ompi_proc_t **procs = malloc(sizeof(ompi_proc_t *) * (size_t) total);
    ompi_group_t *group;
    if (NULL == procs) {
        return NULL;
    }
    for (int r = 0; r < total; ++r) {
        procs[r] = ompi_group_get_proc_ptr_raw(proc_comm->c_local_group, rank_proc[r]);
    }
    group = ompi_group_allocate_plist_w_procs(procs, total); /* takes procs */
    if (NULL == group) {
        free(procs);
        return NULL;
    }
    group->grp_my_rank = my_rank;
    return group;
}

/* The worker endpoint @p h receives through, in its info as the key mpiv_worker: a setting
 * of the system (no saved request beside it, which Open MPI 4.1's MPI_Comm_get_info would
 * report instead), so MPI_Comm_get_info reports the endpoint of every handle, dups and
 * splits included, whatever hints it was made with. It is fixed at creation (every
 * process's senders use it): MPI_Comm_set_info cannot move it (Open MPI then treats the
 * key as an ignored hint and no longer reports it). */
static void report_worker(ompi_communicator_t *h)
{
    char text[12];
    uint32_t queue;
    if (NULL == h->super.s_info ||
        MPIV_OK != mpiv_p2p_comm_queue((const mpiv_p2p_comm_t *) h->c_pml_comm, &queue)) {
        return;
    }
    snprintf(text, sizeof(text), "%u", (unsigned) queue);
    (void) opal_info_set(h->super.s_info, "mpiv_worker", text);
    (void) opal_info_delete(h->super.s_info, OPAL_INFO_SAVE_PREFIX "mpiv_worker");
}

/* Make handle @p h usable: its engine state, hints, attributes, collectives. Returns an
 * MPI error class (the handle is registered either way). */
static int finish_handle(ompi_communicator_t *h, mpiv_p2p_comm_t *engine_handle,
                         ompi_communicator_t *like, bool copy_attrs, opal_info_t *hints)
{
    int rc = MPI_SUCCESS;
    h->c_pml_comm = (struct mca_pml_comm_t *) engine_handle;
    OMPI_COMM_SET_PML_ADDED(h);
    h->super.s_info = OBJ_NEW(opal_info_t);
    if (NULL != h->super.s_info) {
        /* As ompi_comm_dup_with_info: the hints replace what the old handle had. */
        if (NULL != hints) {
            (void) opal_info_dup(hints, &h->super.s_info);
        }
        (void) opal_info_set(h->super.s_info, "ompi_comm_coll_preference", "^sm,han,adapt");
    }
    /* The MPI-4 assertions among the hints apply to the handle's own matching now, and
     * MPI_Comm_set_info changes them later, as on any communicator. */
    mca_pml_mpiv_subscribe_assertions(h);
    report_worker(h);
    if (copy_attrs && NULL != like && NULL != like->c_keyhash) {
        int ret = ompi_attr_hash_init(&h->c_keyhash);
        if (OMPI_SUCCESS == ret) {
            ret = ompi_attr_copy_all(COMM_ATTR, like, h, like->c_keyhash, h->c_keyhash);
        }
        if (OMPI_SUCCESS != ret) {
            rc = ompi_errcode_get_mpi_code(ret);
        }
    }
    if (OMPI_SUCCESS != mca_coll_base_comm_select(h)) {
        opal_output(0, "pml mpiv: no collective component for endpoints communicator %u",
                    h->c_contextid);
    }
    return rc;
}

int mca_pml_mpiv_ep_build(const mca_pml_mpiv_ep_spec_t *spec, ompi_communicator_t **out,
                          const char **why_p)
{
    ompi_communicator_t *proc_comm = spec->proc_comm;
    const int nprocs = ompi_comm_size(proc_comm), me = ompi_comm_rank(proc_comm);
    const int total = spec->total;
    int mine = 0, bad = total < 1, rc, ok = 1, all_ok = 0, registered = 0;
    uint32_t *rank_peer = NULL, *proc_peer = NULL;
    uint16_t *rank_ep = NULL, *next = NULL;
    mpiv_p2p_comm_t **engine_handles = NULL;
    mca_pml_mpiv_ep_shared_t *shared = calloc(1, sizeof(*shared));

    *why_p = "out of memory";
    rc = MPI_ERR_NO_MEM;
    if (NULL == shared || NULL == (shared->proc_counts = calloc((size_t) nprocs, sizeof(int))) ||
        NULL == (shared->rank_proc = malloc(sizeof(int) * (size_t) (total > 0 ? total : 1))) ||
        NULL == (shared->rank_queue =
                     malloc(sizeof(uint16_t) * (size_t) (total > 0 ? total : 1)))) {
        goto err_free;
    }
    /* The same map on every process: a bad one fails everywhere. */
    for (int r = 0; r < total && !bad; ++r) {
        const int p = spec->rank_proc[r];
        bad = p < 0 || p >= nprocs || ++shared->proc_counts[p] > UINT16_MAX;
        shared->rank_proc[r] = p;
    }
    for (int p = 0; p < nprocs && !bad; ++p) {
        bad = 0 == shared->proc_counts[p];
    }
    if (bad) {
        rc = MPI_ERR_INTERN;
        *why_p = "a rank map with a process of no rank (or over 65535)";
        goto err_free;
    }
    mine = shared->proc_counts[me];
    shared->handles = calloc((size_t) mine, sizeof(*shared->handles));
    shared->ops = calloc((size_t) mine, sizeof(*shared->ops));
    shared->my_ranks = calloc((size_t) mine, sizeof(*shared->my_ranks));
    rank_peer = malloc(sizeof(*rank_peer) * (size_t) total);
    rank_ep = malloc(sizeof(*rank_ep) * (size_t) total);
    proc_peer = malloc(sizeof(*proc_peer) * (size_t) nprocs);
    next = calloc((size_t) nprocs, sizeof(*next));
    engine_handles = calloc((size_t) mine, sizeof(*engine_handles));
    if (NULL == shared->handles || NULL == shared->ops || NULL == shared->my_ranks ||
        NULL == rank_peer || NULL == rank_ep || NULL == proc_peer || NULL == next ||
        NULL == engine_handles) {
        goto err_free;
    }
    for (int p = 0; p < nprocs; ++p) {
        if (OMPI_SUCCESS != mca_pml_mpiv_peer_index(proc_comm, p, &proc_peer[p])) {
            rc = MPI_ERR_OTHER;
            *why_p = "a process of the communicator cannot be reached";
            goto err_free;
        }
    }
    for (int r = 0; r < total; ++r) {
        const int p = shared->rank_proc[r];
        rank_peer[r] = proc_peer[p];
        rank_ep[r] = next[p]++;
        shared->rank_queue[r] = NULL != spec->rank_queue ? spec->rank_queue[r] : rank_ep[r];
        if (p == me) {
            shared->my_ranks[rank_ep[r]] = r;
        }
    }
    OBJ_CONSTRUCT(&shared->op_lock, opal_mutex_t);
    shared->proc_comm = proc_comm;
    shared->count = mine;
    shared->total = total;
    *why_p = "cannot create the communicator";
    for (int k = 0; k < mine; ++k) {
        ompi_group_t *group = endpoint_group(proc_comm, shared->rank_proc, total,
                                             shared->my_ranks[k]);
        ompi_communicator_t *h = NULL;
        if (NULL == group) {
            rc = MPI_ERR_NO_MEM;
            goto err_handles;
        }
        rc = ompi_comm_set(&h, proc_comm, 0, NULL, 0, NULL, NULL,
                           NULL != spec->like ? spec->like[k]->error_handler : spec->errh,
                           false, group, NULL);
        OBJ_RELEASE(group); /* the communicator holds it */
        if (OMPI_SUCCESS != rc) {
            rc = MPI_ERR_NO_MEM;
            goto err_handles;
        }
        shared->handles[k] = h;
    }
    /* One context id, agreed by the processes (one participant each) over proc_comm. */
    rc = agree_cid(proc_comm, shared->handles[0]);
    if (MPI_SUCCESS != rc) {
        goto err_handles;
    }
    for (int k = 1; k < mine; ++k) {
        shared->handles[k]->c_contextid = shared->handles[0]->c_contextid;
    }
    /* From here on every process reaches the agreement below. */
    rc = mpiv_p2p_comm_create_endpoints(mca_pml_mpiv.engine,
                                        (uint16_t) shared->handles[0]->c_contextid, total,
                                        rank_peer, rank_ep, shared->rank_queue, (uint32_t) mine,
                                        engine_handles);
    if (MPIV_OK != rc) {
        rc = ompi_errcode_get_mpi_code(mca_pml_mpiv_map_status(rc));
        ok = 0;
    } else {
        rc = MPI_SUCCESS;
        OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
        shared->live = mine;
        ep_by_cid[shared->handles[0]->c_contextid] = shared;
        OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
        registered = 1;
        for (int k = 0; k < mine; ++k) {
            const int ret = finish_handle(shared->handles[k], engine_handles[k],
                                          NULL != spec->like ? spec->like[k] : NULL,
                                          spec->copy_attrs,
                                          NULL != spec->infos ? spec->infos[k] : NULL);
            if (MPI_SUCCESS != ret && ok) {
                rc = ret;
                *why_p = "an attribute copy callback failed";
                ok = 0;
            }
            out[k] = shared->handles[k];
        }
    }
    if (MPI_SUCCESS != PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, proc_comm)) {
        all_ok = 0;
    }
    free(rank_peer);
    free(rank_ep);
    free(proc_peer);
    free(next);
    free(engine_handles);
    engine_handles = NULL;
    if (all_ok) {
        if (opal_output_get_verbosity(mca_pml_mpiv.output) >= 2) {
            char queues[128] = "";
            for (int k = 0, at = 0; k < mine && at < (int) sizeof(queues) - 8; ++k) {
                at += snprintf(queues + at, sizeof(queues) - (size_t) at, "%s%u", k ? "," : "",
                               shared->rank_queue[shared->my_ranks[k]] % mca_pml_mpiv.queues);
            }
            opal_output(mca_pml_mpiv.output,
                        "pml mpiv: endpoints communicator %u: %d ranks, %d here (first %d), "
                        "receiving through worker endpoints %s",
                        out[0]->c_contextid, total, mine, shared->my_ranks[0], queues);
        }
        return MPI_SUCCESS;
    }
    if (ok) {
        rc = MPI_ERR_OTHER;
        *why_p = "another process failed to make its handles";
    }
    if (registered) {
        /* Registered: freed as MPI_Comm_free does (the last takes shared and proc_comm). */
        for (int k = 0; k < mine; ++k) {
            ompi_communicator_t *h = out[k];
            out[k] = MPI_COMM_NULL;
            (void) ompi_comm_free(&h);
        }
        return rc;
    }

err_handles:
    /* The anchor (handle 0) holds Open MPI's table entry if an id was agreed: its release
     * clears it; the others must leave it alone. */
    for (int k = 0; k < mine; ++k) {
        if (NULL != shared->handles[k]) {
            if (k > 0) {
                shared->handles[k]->c_contextid = MPI_UNDEFINED;
            }
            OBJ_RELEASE(shared->handles[k]);
        }
    }
    OBJ_DESTRUCT(&shared->op_lock);
err_free:
    (void) PMPI_Comm_free(&proc_comm);
    shared_free(shared);
    free(engine_handles);
    free(next);
    free(proc_peer);
    free(rank_ep);
    free(rank_peer);
    return rc;
}

/* The info key mpiv_worker: a comma-separated list of engine endpoints (inbound queues),
 * handle k's being entry k mod (the list's length); without it handle k takes queue
 * (first + k) mod (the queue count). */
bool mca_pml_mpiv_ep_parse_workers(opal_info_t *info, int n, int first, uint16_t *queues)
{
    char value[OPAL_MAX_INFO_VAL + 1];
    long list[256];
    int flag = 0, len = 0;
    if (NULL != info) {
        (void) opal_info_get(info, "mpiv_worker", OPAL_MAX_INFO_VAL, value, &flag);
    }
    if (flag) {
        char *p = value, *end = NULL;
        do {
            if (len == (int) (sizeof(list) / sizeof(list[0]))) {
                return false;
            }
            list[len] = strtol(p, &end, 10);
            if (end == p || list[len] < 0 || list[len] >= (long) mca_pml_mpiv.queues) {
                return false;
            }
            ++len;
            while (' ' == *end) {
                ++end;
            }
            p = end + 1;
        } while (',' == *end);
        if ('\0' != *end) {
            return false;
        }
    }
    for (int k = 0; k < n; ++k) {
        queues[k] = (uint16_t) (flag ? list[k % len] : (first + k) % (int) mca_pml_mpiv.queues);
    }
    return true;
}

int mca_pml_mpiv_create_endpoints(ompi_communicator_t *parent, int my_num_ep,
                                  opal_info_t *info, ompi_communicator_t **out)
{
    const int nprocs = ompi_comm_size(parent);
    mca_pml_mpiv_ep_spec_t spec = {.errh = parent->error_handler};
    int *counts = NULL, *rank_proc = NULL, *pairs = NULL, *displs = NULL;
    int total = 0, bad = 0, bad_info = 0, rc, mine[2];
    uint16_t *my_queues = NULL, *rank_queue = NULL;
    const char *why = "out of memory";
    char message[256];
    if (OMPI_COMM_IS_INTER(parent)) {
        return OMPI_ERRHANDLER_INVOKE(parent, MPI_ERR_COMM,
                                      "MPIX_Comm_create_endpoints: the parent is an "
                                      "inter-communicator");
    }
    if (!ompi_mpi_thread_multiple) {
        return OMPI_ERRHANDLER_INVOKE(parent, MPI_ERR_OTHER,
                                      "MPIX_Comm_create_endpoints: needs MPI_THREAD_MULTIPLE "
                                      "(the program initialized MPI at a lower thread level)");
    }
    if (mca_pml_mpiv_is_endpoint(parent)) {
        /* Every endpoint rank of the parent calls: its handles meet (pml_mpiv_endpoints_ops.c). */
        return mca_pml_mpiv_ep_create_on_handle(parent, my_num_ep, info, out);
    }
    /* Every process learns every count and whether its info was good first: a bad one
     * fails the call everywhere. */
    rc = MPI_ERR_NO_MEM;
    counts = malloc(sizeof(int) * (size_t) nprocs);
    displs = malloc(sizeof(int) * (size_t) nprocs);
    pairs = malloc(sizeof(int) * 2 * (size_t) nprocs);
    my_queues = malloc(sizeof(uint16_t) * (size_t) (my_num_ep > 0 ? my_num_ep : 1));
    if (NULL == counts || NULL == displs || NULL == pairs || NULL == my_queues) {
        goto out;
    }
    mine[0] = my_num_ep;
    mine[1] = my_num_ep > 0 && my_num_ep <= UINT16_MAX &&
              !mca_pml_mpiv_ep_parse_workers(info, my_num_ep, 0, my_queues);
    rc = PMPI_Allgather(mine, 2, MPI_INT, pairs, 2, MPI_INT, parent);
    if (MPI_SUCCESS != rc) {
        why = "the exchange of the counts failed";
        goto out;
    }
    for (int p = 0; p < nprocs; ++p) {
        counts[p] = pairs[2 * p];
        bad_info |= pairs[2 * p + 1];
        if (counts[p] < 1 || counts[p] > UINT16_MAX || total > INT32_MAX - counts[p]) {
            bad = 1;
        } else {
            displs[p] = total;
            total += counts[p];
        }
    }
    if (bad) {
        rc = MPI_ERR_ARG;
        why = "my_num_ep must be at least 1 (and at most 65535) on every process";
        goto out;
    }
    if (bad_info) {
        rc = MPI_ERR_INFO_VALUE;
        snprintf(message, sizeof(message),
                 "the info key mpiv_worker must be a comma-separated list of worker endpoints, "
                 "each 0..%u, on every process (pml_mpiv_workers)",
                 mca_pml_mpiv.queues - 1);
        why = message;
        goto out;
    }
    /* Every rank's inbound queue in its process, which its senders use. */
    rc = MPI_ERR_NO_MEM;
    rank_queue = malloc(sizeof(uint16_t) * (size_t) total);
    if (NULL == rank_queue) {
        goto out;
    }
    rc = PMPI_Allgatherv(my_queues, my_num_ep, MPI_UINT16_T, rank_queue, counts, displs,
                         MPI_UINT16_T, parent);
    if (MPI_SUCCESS != rc) {
        why = "the exchange of the endpoints' queues failed";
        goto out;
    }
    /* Ranks by parent rank, then by handle index. */
    rc = MPI_ERR_NO_MEM;
    rank_proc = malloc(sizeof(int) * (size_t) total);
    if (NULL == rank_proc) {
        goto out;
    }
    for (int p = 0, r = 0; p < nprocs; ++p) {
        for (int j = 0; j < counts[p]; ++j) {
            rank_proc[r++] = p;
        }
    }
    why = "cannot create the communicator";
    rc = PMPI_Comm_dup(parent, &spec.proc_comm);
    if (MPI_SUCCESS != rc) {
        goto out;
    }
    spec.total = total;
    spec.rank_proc = rank_proc;
    spec.rank_queue = rank_queue;
    rc = mca_pml_mpiv_ep_build(&spec, out, &why);
out:
    free(rank_proc);
    free(rank_queue);
    free(my_queues);
    free(pairs);
    free(displs);
    free(counts);
    if (MPI_SUCCESS != rc) {
        char text[320];
        snprintf(text, sizeof(text), "MPIX_Comm_create_endpoints: %s", why);
        return OMPI_ERRHANDLER_INVOKE(parent, rc, text);
    }
    return MPI_SUCCESS;
}

bool mca_pml_mpiv_del_endpoint(ompi_communicator_t *comm)
{
    mca_pml_mpiv_ep_shared_t *shared;
    ompi_communicator_t *proc_comm = MPI_COMM_NULL;
    int k;
    OPAL_THREAD_LOCK(&mca_pml_mpiv_ep_lock);
    shared = mca_pml_mpiv_ep_lookup(comm, &k);
    if (NULL == shared) {
        OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
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
        OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
        return true;
    }
    ep_by_cid[comm->c_contextid] = NULL;
    proc_comm = shared->proc_comm;
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv_ep_lock);
    OBJ_DESTRUCT(&shared->op_lock);
    shared_free(shared);
    (void) ompi_comm_free(&proc_comm);
    return true;
}
