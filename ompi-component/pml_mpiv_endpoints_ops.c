/*
 * pml_mpiv_endpoints_ops.c: communicator constructors called on an endpoints handle:
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
 * The work (run) always starts with one exchange over proc_comm (Allgatherv; counts =
 * endpoints per process) of every endpoint rank's (call, color or argument error, key), so
 * every process decides the same and nobody waits for a process that gave up:
 * - different calls for the same n, on this process or another, fail every rank with
 *   MPI_ERR_COMM naming two of them; a bad argument on any rank fails every rank
 *   (MPI_ERR_ARG; MPI_ERR_INFO for an invalid info);
 * - dup, dup_with_info: a new communicator over a dup of proc_comm, same rank map;
 *   attributes copied (callbacks run), error handlers kept; dup_with_info gives each new
 *   handle the info its old handle passed, replacing the inherited hints (as Open MPI's);
 * - split, split_type: the distinct colors (MPI_UNDEFINED excepted) in ascending order, the
 *   same on every process, in rounds: a color goes to the first round after those of the
 *   colors before it that share a process with it; every process takes part in one
 *   PMPI_Comm_split(proc_comm, its color's index in the round or MPI_UNDEFINED, proc rank)
 *   per round, and those with a rank build the new communicator over its result, ranks
 *   ordered by key, then by old rank; no attributes, the old handle's error handler; MPI_UNDEFINED gets
 *   MPI_COMM_NULL. A last Allreduce over proc_comm makes the call all-or-nothing.
 *   split_type MPI_COMM_TYPE_SHARED: color = the lowest proc_comm rank of the processes
 *   on this node (Open MPI's locality, OPAL_PROC_ON_LOCAL_NODE); any other type but
 *   MPI_UNDEFINED is an argument error (its info, as dup_with_info's, becomes the hints).
 * - create (MPIX_Comm_create_endpoints, arg = my_num_ep, exchanged in place of the color;
 *   below 1 or a bad mpiv_worker: an argument error): sum(my_num_ep) ranks over a dup of
 *   proc_comm, by parent rank, then by index in the caller's array, so a process's new
 *   endpoints are its handles' in handle order; parent handle k's go straight into its
 *   caller's array (the caller waits until done). Queues: each handle's info's mpiv_worker
 *   for its own (entry j mod the list's length), else new endpoint e of the process takes
 *   e mod the queue count; every process learns every rank's by one more Allgatherv over
 *   proc_comm. The new handles take their parent handle's error handler, no attributes,
 *   no hints (as MPIX_Comm_create_endpoints on any parent).
 *
 * Ordering: a handle writes its arguments under mca_pml_mpiv_ep_lock before it counts its
 * arrival, so the last arrival (counting under the same lock) sees them all; the results
 * are published by the release store of op->done that waiters load with acquire.
 * Memory: a record per call in flight (arguments and results per handle); the work's
 * scratch is O(ranks + processes) (create: O(new ranks) more). Cost: dup takes one
 * Allgatherv more than Open MPI's, create two; split takes one PMPI_Comm_split (a
 * context-id agreement over proc_comm) per round, as many as the most colors one process
 * has ranks in, and each color one agreement over its processes. A
 * process that runs out of memory before an exchange leaves the others waiting, as Open
 * MPI's own constructors do.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_tryjoin_np */
#endif
#include "pml_mpiv_endpoints.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/info/info.h"
#include "ompi/proc/proc.h"
#include "ompi/request/grequest.h"
#include "opal/runtime/opal_progress.h"

#include <mpiv/mpiv.h>

#include "pml_mpiv_mpix.h"

int mca_pml_mpiv_endpoint_construct(ompi_communicator_t *comm, int call, int arg, int key,
                                    ompi_info_t *info, ompi_communicator_t **newcomm)
    __attribute__((visibility("default")));
int mca_pml_mpiv_endpoint_idup(ompi_communicator_t *comm, ompi_communicator_t **newcomm,
                               ompi_request_t **request) __attribute__((visibility("default")));

/* Argument errors, exchanged in place of the color or count (valid colors: >= 0,
 * MPI_UNDEFINED; valid counts: 1 .. 65535). */
enum {
    BAD_COLOR = -1,
    BAD_SPLIT_TYPE = -2,
    BAD_NEWCOMM = -3,
    BAD_INFO = -4,
    BAD_NUM_EP = -5,
    BAD_WORKER = -6,
    BAD_REQUEST = -7
};

/* One rank's record in the exchange: call, color (or an argument error), key. */
enum { REC = 3 };

/* A constructor call on the handles of one endpoints communicator: the n-th call on each
 * handle of this process (mca_pml_mpiv_ep_lock, but done and what it publishes). */
typedef struct mca_pml_mpiv_ep_op {
    uint64_t seq;                       /* n */
    int arrived, taken;                 /* handles that called, that took their result */
    int done;                           /* the results are there (release/acquire) */
    int rc;                             /* MPI error class */
    char why[224];                      /* what failed */
    struct {
        int call, arg, key, bad;        /* bad: 0 or an argument error */
        ompi_communicator_t **out;      /* MPIX_Comm_create_endpoints: the caller's array */
        ompi_communicator_t **newcomm;  /* MPI_Comm_idup: where its new handle goes, */
        ompi_request_t *req;            /*   and its request (NULL: a blocking call) */
    } *args;                            /* by endpoint index */
    /* By endpoint index: hints passed, or MPIX_Comm_create_endpoints's info (NULL: none) */
    opal_info_t **infos;
    /* By endpoint index (NULL: MPI_COMM_NULL); MPIX_Comm_create_endpoints's arg handles
     * go straight to args[k].out, its caller waiting until done */
    ompi_communicator_t **results;
    mca_pml_mpiv_ep_shared_t *shared;   /* the communicator's */
    struct mca_pml_mpiv_ep_op *next;
} mca_pml_mpiv_ep_op_t;

/* Scratch of one call's work, allocated before the exchange. */
typedef struct scratch {
    int *mine, *all, *counts, *displs, *next; /* the exchange */
    int *recs;                                /* records by rank */
    struct member {
        int color, key, rank;
    } *members;                               /* ranks of some color, sorted */
    int *old_ep;                              /* rank -> endpoint index here, or -1 */
    int *has, *sub_rank, *rank_proc;          /* a round: processes, the new map */
    int *round, *next_round;                  /* split: rounds (run_split); a process's next */
    uint16_t *rank_queue;                     /* a round: the new ranks' queues (kept) */
    int *eps;                                 /* a round: new endpoint -> old endpoint */
    ompi_communicator_t **like, **made;
    opal_info_t **infos;
} scratch_t;

static const char *call_name(int call)
{
    switch (call) {
    case MCA_PML_MPIV_EP_DUP:
        return "MPI_Comm_dup";
    case MCA_PML_MPIV_EP_DUP_WITH_INFO:
        return "MPI_Comm_dup_with_info";
    case MCA_PML_MPIV_EP_SPLIT:
        return "MPI_Comm_split";
    case MCA_PML_MPIV_EP_SPLIT_TYPE:
        return "MPI_Comm_split_type";
    case MCA_PML_MPIV_EP_CREATE:
        return "MPIX_Comm_create_endpoints";
    case MCA_PML_MPIV_EP_IDUP:
        return "MPI_Comm_idup";
    default:
        return "an unknown constructor";
    }
}

static void set_error(mca_pml_mpiv_ep_op_t *op, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_error(mca_pml_mpiv_ep_op_t *op, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    op->rc = rc;
    vsnprintf(op->why, sizeof(op->why), fmt, ap);
    va_end(ap);
}

static void scratch_free(scratch_t *s)
{
    free(s->mine);
    free(s->all);
    free(s->counts);
    free(s->displs);
    free(s->next);
    free(s->recs);
    free(s->members);
    free(s->old_ep);
    free(s->has);
    free(s->sub_rank);
    free(s->rank_proc);
    free(s->rank_queue);
    free(s->eps);
    free(s->like);
    free(s->made);
    free(s->infos);
    free(s->round);
    free(s->next_round);
}

static bool scratch_alloc(scratch_t *s, int n, int total, int nprocs)
{
    const size_t t = (size_t) total, p = (size_t) nprocs, h = (size_t) n;
    memset(s, 0, sizeof(*s));
    s->mine = malloc(sizeof(int) * REC * h);
    s->all = malloc(sizeof(int) * REC * t);
    s->counts = malloc(sizeof(int) * p);
    s->displs = malloc(sizeof(int) * p);
    s->next = malloc(sizeof(int) * p);
    s->recs = malloc(sizeof(int) * REC * t);
    s->members = malloc(sizeof(*s->members) * t);
    s->old_ep = malloc(sizeof(int) * t);
    s->has = malloc(sizeof(int) * p);
    s->sub_rank = malloc(sizeof(int) * p);
    s->rank_proc = malloc(sizeof(int) * t);
    s->rank_queue = malloc(sizeof(uint16_t) * t);
    s->eps = malloc(sizeof(int) * h);
    s->like = malloc(sizeof(*s->like) * h);
    s->made = malloc(sizeof(*s->made) * h);
    s->infos = malloc(sizeof(*s->infos) * h);
    s->round = malloc(sizeof(int) * 3 * (t + 1));
    s->next_round = malloc(sizeof(int) * p);
    return NULL != s->round && NULL != s->next_round && NULL != s->mine && NULL != s->all &&
           NULL != s->counts && NULL != s->displs &&
           NULL != s->next && NULL != s->recs && NULL != s->members && NULL != s->old_ep &&
           NULL != s->has && NULL != s->sub_rank && NULL != s->rank_proc &&
           NULL != s->rank_queue && NULL != s->eps && NULL != s->like && NULL != s->made && NULL != s->infos;
}

/* MPI_COMM_TYPE_SHARED's color: the lowest proc_comm rank of the processes on this node. */
static int node_color(ompi_communicator_t *proc_comm)
{
    const int me = ompi_comm_rank(proc_comm);
    for (int p = 0; p < me; ++p) {
        const ompi_proc_t *proc = ompi_comm_peer_lookup(proc_comm, p);
        if (NULL != proc && OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags)) {
            return p;
        }
    }
    return me;
}

static int by_color_key_rank(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    if (x->color != y->color) {
        return x->color < y->color ? -1 : 1;
    }
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static void run_dup(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op)
{
    mca_pml_mpiv_ep_spec_t spec = {.total = sh->total,
                                   .rank_proc = sh->rank_proc,
                                   .rank_queue = sh->rank_queue,
                                   .like = sh->handles,
                                   .copy_attrs = true,
                                   .infos = op->infos};
    const char *why = "cannot duplicate the communicator of the processes";
    int rc = PMPI_Comm_dup(sh->proc_comm, &spec.proc_comm);
    if (MPI_SUCCESS == rc) {
        rc = mca_pml_mpiv_ep_build(&spec, op->results, &why);
    }
    if (MPI_SUCCESS != rc) {
        set_error(op, rc, "%s", why);
    }
}

/* The split by the colors in s->recs: one round per color (see the top of the file). */
static void run_split(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op, scratch_t *s)
{
    ompi_communicator_t *proc_comm = sh->proc_comm;
    const int total = sh->total, nprocs = ompi_comm_size(proc_comm);
    const int me = ompi_comm_rank(proc_comm);
    int nm = 0, ok = 1, all_ok = 0;
    for (int r = 0; r < total; ++r) {
        s->old_ep[r] = -1;
        if (MPI_UNDEFINED != s->recs[REC * r + 1]) {
            s->members[nm].color = s->recs[REC * r + 1];
            s->members[nm].key = s->recs[REC * r + 2];
            s->members[nm].rank = r;
            ++nm;
        }
    }
    for (int k = 0; k < sh->count; ++k) {
        s->old_ep[sh->my_ranks[k]] = k;
    }
    qsort(s->members, (size_t) nm, sizeof(*s->members), by_color_key_rank);
    /* The colors are runs of members. A color's round is the first after the rounds of the
     * colors before it that share a process with it, so that a process is in at most one
     * color per round and one PMPI_Comm_split makes the processes of all the colors of a
     * round (colors on disjoint sets of processes share a round: where every rank is
     * alone, as many rounds as the most endpoints of a process, not one per rank). Every
     * process computes the same rounds from the same records. */
    int *const run_round = s->round, *const run_first = s->round + (total + 1),
               *const my_run = s->round + 2 * (total + 1);
    int runs = 0, rounds = 0;
    memset(s->next_round, 0, sizeof(int) * (size_t) nprocs);
    for (int first = 0, end; first < nm; first = end) {
        int r = 0;
        for (end = first; end < nm && s->members[end].color == s->members[first].color; ++end) {
            const int p = sh->rank_proc[s->members[end].rank];
            r = s->next_round[p] > r ? s->next_round[p] : r;
        }
        for (int i = first; i < end; ++i) {
            s->next_round[sh->rank_proc[s->members[i].rank]] = r + 1;
        }
        run_round[runs] = r;
        run_first[runs++] = first;
        rounds = r + 1 > rounds ? r + 1 : rounds;
    }
    run_first[runs] = nm;
    for (int r = 0; r < rounds; ++r) {
        my_run[r] = -1;
    }
    for (int g = 0; g < runs; ++g) {
        for (int i = run_first[g]; i < run_first[g + 1]; ++i) {
            if (sh->rank_proc[s->members[i].rank] == me) {
                my_run[run_round[g]] = g;
                break;
            }
        }
    }
    for (int round = 0; round < rounds; ++round) {
        ompi_communicator_t *sub = MPI_COMM_NULL;
        const int g = my_run[round];
        int j = 0, rc;
        /* Every process takes part, with the color's run (or MPI_UNDEFINED: none here). */
        rc = PMPI_Comm_split(proc_comm, g >= 0 ? g : MPI_UNDEFINED, me, &sub);
        if (MPI_SUCCESS != rc) {
            if (ok) {
                set_error(op, rc, "cannot split the communicator of the processes");
            }
            ok = 0;
            continue;
        }
        if (g < 0) {
            continue;
        }
        const int first = run_first[g], end = run_first[g + 1];
        memset(s->has, 0, sizeof(int) * (size_t) nprocs);
        for (int i = first; i < end; ++i) {
            s->has[sh->rank_proc[s->members[i].rank]] = 1;
        }
        for (int p = 0, q = 0; p < nprocs; ++p) {
            s->sub_rank[p] = q;
            q += s->has[p];
        }
        for (int i = first; i < end; ++i) {
            const int r = s->members[i].rank, p = sh->rank_proc[r];
            s->rank_proc[i - first] = s->sub_rank[p];
            s->rank_queue[i - first] = sh->rank_queue[r]; /* an endpoint keeps its queue */
            if (p == me) {
                /* This process's ranks of the color, by new rank: endpoint 0, 1, ... */
                s->eps[j] = s->old_ep[r];
                s->like[j] = sh->handles[s->eps[j]];
                s->infos[j] = op->infos[s->eps[j]];
                ++j;
            }
        }
        const mca_pml_mpiv_ep_spec_t spec = {.proc_comm = sub,
                                             .total = end - first,
                                             .rank_proc = s->rank_proc,
                                             .rank_queue = s->rank_queue,
                                             .like = s->like,
                                             .infos = s->infos};
        const char *why = NULL;
        rc = mca_pml_mpiv_ep_build(&spec, s->made, &why);
        if (MPI_SUCCESS != rc) {
            if (ok) {
                set_error(op, rc, "color %d: %s", s->members[first].color, why);
            }
            ok = 0;
            continue;
        }
        for (int i = 0; i < j; ++i) {
            op->results[s->eps[i]] = s->made[i];
        }
    }
    if (MPI_SUCCESS != PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, proc_comm)) {
        all_ok = 0;
    }
    if (!all_ok) {
        for (int k = 0; k < sh->count; ++k) {
            if (NULL != op->results[k]) {
                (void) ompi_comm_free(&op->results[k]);
                op->results[k] = NULL;
            }
        }
        if (ok) {
            set_error(op, MPI_ERR_OTHER, "another process failed to make its communicators");
        }
    }
}

/* MPIX_Comm_create_endpoints's new endpoints here (the sum of the handles' counts, 0 when
 * one is bad) and their queues (mpiv_worker on each handle's info, else the default map:
 * new endpoint e of this process queue e): a bad mpiv_worker marks its handle's record.
 * False: out of memory. */
static bool create_queues(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op,
                          uint16_t **queues_p, int *mine_p)
{
    int mine = 0;
    *queues_p = NULL;
    *mine_p = 0;
    for (int k = 0; k < sh->count; ++k) {
        /* Another call, or a bad argument: refused after the exchange. */
        if (MCA_PML_MPIV_EP_CREATE != op->args[k].call || 0 != op->args[k].bad) {
            return true;
        }
        mine += op->args[k].arg;
        if (mine > UINT16_MAX) {
            return true; /* refused after the exchange */
        }
    }
    *queues_p = malloc(sizeof(uint16_t) * (size_t) mine);
    if (NULL == *queues_p) {
        return false;
    }
    for (int k = 0, e = 0; k < sh->count; e += op->args[k++].arg) {
        if (!mca_pml_mpiv_ep_parse_workers(op->infos[k], op->args[k].arg, e, *queues_p + e)) {
            op->args[k].bad = BAD_WORKER;
        }
    }
    *mine_p = mine;
    return true;
}

/* MPIX_Comm_create_endpoints on the handles: s->recs[REC * r + 1] is rank r's my_num_ep,
 * @p queues (@p mine) this process's new endpoints' queues. */
static void run_create(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op, scratch_t *s,
                       const uint16_t *queues, int mine)
{
    const int nprocs = ompi_comm_size(sh->proc_comm);
    mca_pml_mpiv_ep_spec_t spec = {0};
    int *rank_proc = NULL, total = 0, rc;
    uint16_t *all = NULL, *rank_queue = NULL;
    ompi_communicator_t **like = NULL, **made = NULL;
    const char *why = "out of memory";
    /* The same records everywhere: every process refuses the same. */
    memset(s->counts, 0, sizeof(int) * (size_t) nprocs);
    for (int r = 0; r < sh->total; ++r) {
        const int n = s->recs[REC * r + 1], p = sh->rank_proc[r];
        if (total > INT32_MAX - n || s->counts[p] > UINT16_MAX - n) {
            set_error(op, MPI_ERR_ARG,
                      "the new communicator would have over 65535 endpoints in a process "
                      "(or over 2^31 ranks)");
            return;
        }
        total += n;
        s->counts[p] += n;
    }
    rc = MPI_ERR_NO_MEM;
    rank_proc = malloc(sizeof(int) * (size_t) total);
    all = malloc(sizeof(uint16_t) * (size_t) total);
    rank_queue = malloc(sizeof(uint16_t) * (size_t) total);
    like = malloc(sizeof(*like) * (size_t) mine);
    made = malloc(sizeof(*made) * (size_t) mine);
    if (NULL == rank_proc || NULL == all || NULL == rank_queue || NULL == like || NULL == made) {
        goto out;
    }
    /* Every rank's queue in its process, which its senders use. */
    for (int p = 0, d = 0; p < nprocs; ++p) {
        s->displs[p] = d;
        s->next[p] = 0;
        d += s->counts[p];
    }
    rc = PMPI_Allgatherv(queues, mine, MPI_UINT16_T, all, s->counts, s->displs, MPI_UINT16_T,
                         sh->proc_comm);
    if (MPI_SUCCESS != rc) {
        why = "the exchange of the endpoints' queues failed";
        goto out;
    }
    /* New ranks by parent rank, then index; a process's in that order (its parent ranks
     * increase with the handle index): new endpoint e belongs to the handle that asked. */
    for (int r = 0, nr = 0; r < sh->total; ++r) {
        const int p = sh->rank_proc[r];
        for (int j = 0; j < s->recs[REC * r + 1]; ++j, ++nr) {
            rank_proc[nr] = p;
            rank_queue[nr] = all[s->displs[p] + s->next[p]++];
        }
    }
    for (int k = 0, e = 0; k < sh->count; ++k) {
        for (int j = 0; j < op->args[k].arg; ++j) {
            like[e++] = sh->handles[k]; /* its error handler */
        }
    }
    why = "cannot duplicate the communicator of the processes";
    rc = PMPI_Comm_dup(sh->proc_comm, &spec.proc_comm);
    if (MPI_SUCCESS != rc) {
        goto out;
    }
    spec.total = total;
    spec.rank_proc = rank_proc;
    spec.rank_queue = rank_queue;
    spec.like = like;
    rc = mca_pml_mpiv_ep_build(&spec, made, &why);
    if (MPI_SUCCESS == rc) {
        for (int k = 0, e = 0; k < sh->count; ++k) {
            for (int j = 0; j < op->args[k].arg; ++j) {
                op->args[k].out[j] = made[e++];
            }
        }
    }
out:
    if (MPI_SUCCESS != rc) {
        set_error(op, rc, "%s", why);
    }
    free(made);
    free(like);
    free(rank_queue);
    free(all);
    free(rank_proc);
}

/* The work of one call, by the last handle of this process to arrive. */
static void run(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op)
{
    ompi_communicator_t *proc_comm = sh->proc_comm;
    const int n = sh->count, total = sh->total, nprocs = ompi_comm_size(proc_comm);
    int node = -1, rc, create_mine = 0;
    uint16_t *create_queues_here = NULL;
    scratch_t s;
    if (!scratch_alloc(&s, n, total, nprocs) ||
        (MCA_PML_MPIV_EP_CREATE == op->args[0].call &&
         !create_queues(sh, op, &create_queues_here, &create_mine))) {
        set_error(op, MPI_ERR_NO_MEM, "out of memory");
        goto out;
    }
    for (int k = 0; k < n; ++k) {
        int *rec = &s.mine[REC * k];
        rec[0] = op->args[k].call;
        rec[1] = 0;
        rec[2] = op->args[k].key;
        if (0 != op->args[k].bad) {
            rec[1] = op->args[k].bad;
        } else if (MCA_PML_MPIV_EP_SPLIT == op->args[k].call ||
                   MCA_PML_MPIV_EP_CREATE == op->args[k].call) {
            rec[1] = op->args[k].arg;
        } else if (MCA_PML_MPIV_EP_SPLIT_TYPE == op->args[k].call) {
            if (MPI_UNDEFINED == op->args[k].arg) {
                rec[1] = MPI_UNDEFINED;
            } else {
                rec[1] = node = node < 0 ? node_color(proc_comm) : node;
            }
        }
    }
    for (int p = 0, d = 0; p < nprocs; ++p) {
        s.counts[p] = REC * sh->proc_counts[p];
        s.displs[p] = d;
        s.next[p] = 0;
        d += s.counts[p];
    }
    rc = PMPI_Allgatherv(s.mine, REC * n, MPI_INT, s.all, s.counts, s.displs, MPI_INT,
                         proc_comm);
    if (MPI_SUCCESS != rc) {
        set_error(op, rc, "the exchange of the arguments failed");
        goto out;
    }
    for (int r = 0; r < total; ++r) {
        const int p = sh->rank_proc[r];
        memcpy(&s.recs[REC * r], &s.all[s.displs[p] + REC * s.next[p]++], sizeof(int) * REC);
    }
    /* Every process has the same records from here: all decide the same. */
    for (int r = 1; r < total; ++r) {
        if (s.recs[REC * r] != s.recs[0]) {
            set_error(op, MPI_ERR_COMM,
                      "the endpoint ranks called different constructors as the same "
                      "collective call (%s on rank 0, %s on rank %d)",
                      call_name(s.recs[0]), call_name(s.recs[REC * r]), r);
            goto out;
        }
    }
    for (int r = 0; r < total; ++r) {
        const int c = s.recs[REC * r + 1];
        if (c >= 0 || MPI_UNDEFINED == c) {
            continue;
        }
        switch (c) {
        case BAD_COLOR:
            set_error(op, MPI_ERR_ARG,
                      "rank %d passed a negative color other than MPI_UNDEFINED", r);
            break;
        case BAD_SPLIT_TYPE:
            set_error(op, MPI_ERR_ARG,
                      "rank %d passed a split_type other than MPI_COMM_TYPE_SHARED or "
                      "MPI_UNDEFINED (the only ones on an endpoints communicator)",
                      r);
            break;
        case BAD_NEWCOMM:
            set_error(op, MPI_ERR_ARG, "rank %d passed NULL for the new handle(s)", r);
            break;
        case BAD_REQUEST:
            set_error(op, MPI_ERR_REQUEST, "rank %d passed NULL for the request", r);
            break;
        case BAD_INFO:
            set_error(op, MPI_ERR_INFO, "rank %d passed an invalid info", r);
            break;
        case BAD_NUM_EP:
            set_error(op, MPI_ERR_ARG,
                      "rank %d passed my_num_ep < 1 or > 65535 (at least 1 on every rank)", r);
            break;
        case BAD_WORKER:
            set_error(op, MPI_ERR_INFO_VALUE,
                      "rank %d: the info key mpiv_worker must be a comma-separated list of "
                      "worker endpoints, each 0..%u (pml_mpiv_workers)",
                      r, mca_pml_mpiv.queues - 1);
            break;
        default:
            set_error(op, MPI_ERR_ARG, "rank %d passed a bad argument", r);
            break;
        }
        goto out;
    }
    switch (s.recs[0]) {
    case MCA_PML_MPIV_EP_DUP:
    case MCA_PML_MPIV_EP_DUP_WITH_INFO:
    case MCA_PML_MPIV_EP_IDUP:
        run_dup(sh, op);
        break;
    case MCA_PML_MPIV_EP_SPLIT:
    case MCA_PML_MPIV_EP_SPLIT_TYPE:
        run_split(sh, op, &s);
        break;
    case MCA_PML_MPIV_EP_CREATE:
        run_create(sh, op, &s, create_queues_here, create_mine);
        break;
    default:
        set_error(op, MPI_ERR_COMM, "an unknown constructor");
        break;
    }
out:
    free(create_queues_here);
    scratch_free(&s);
}

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
    run(shared, op);
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
    const char *name = call_name(call);
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
