/*
 * pml_mpiv_endpoints_ops.c: the work of a communicator constructor called on the handles of
 * an endpoints communicator (the meeting of the handles, MPI_Comm_idup's requests and the
 * entry points are in pml_mpiv_endpoints_meet.c): mca_pml_mpiv_ep_run, by the last handle
 * of a process to arrive, for all of them.
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
 * Memory: a record per call in flight (arguments and results per handle); the work's
 * scratch is O(ranks + processes) (create: O(new ranks) more). Cost: dup takes one
 * Allgatherv more than Open MPI's, create two; split takes one PMPI_Comm_split (a
 * context-id agreement over proc_comm) per round, as many as the most colors one process
 * has ranks in, and each color one agreement over its processes. A
 * process that runs out of memory before an exchange leaves the others waiting, as Open
 * MPI's own constructors do.
 */
#include "pml_mpiv_endpoints_ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/info/info.h"
#include "ompi/proc/proc.h"

#include <mpiv/mpiv.h>

/* One rank's record in the exchange: call, color (or an argument error), key. */
enum { REC = 3 };

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

const char *mca_pml_mpiv_ep_call_name(int call)
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
void mca_pml_mpiv_ep_run(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op)
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
                      mca_pml_mpiv_ep_call_name(s.recs[0]), mca_pml_mpiv_ep_call_name(s.recs[REC * r]), r);
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
