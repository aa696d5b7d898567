/*
 * endpoints: MPIX_Comm_create_endpoints under pml mpiv (np 3; processes ask for 1, 3 and
 * 7 endpoints: 11 ranks).
 *
 * Rank 0 creates its handles with the info key mpiv_worker = "0" (all receive through
 * worker endpoint 0; with "wide" both processes do), the others without it. Each handle
 * is driven by a pthread of its own, all at once:
 *   - MPI_Comm_rank is the process's first rank plus the handle index, MPI_Comm_size 11;
 *   - every rank sends every rank (itself and ranks of its own process included) a
 *     message of 8 B, 2 KiB or 64 KiB whose bytes name the pair, and receives each from
 *     its sender by rank: data and status checked;
 *   - a ring message received with MPI_ANY_SOURCE and MPI_ANY_TAG comes from the rank
 *     before (a handle sees only its own rank's messages);
 *   - MPI_Barrier and MPI_Allreduce (sum of the ranks) on the handles, by every thread;
 *   - MPI_Comm_dup of every handle at once, and of the dups: rank, size, placement,
 *     traffic, collectives and a copied attribute; the dups freed in any order;
 *   - MPI_Comm_create_group on a handle fails with MPI_ERR_COMM (not supported yet: Open
 *     MPI's own would never agree on a context id; split and the others:
 *     endpoints_split.c, idup: endpoints_idup.c);
 *   - each thread frees its handle.
 * Before the threads start, MPI_Comm_get_info reports each handle's worker endpoint
 * (mpiv_worker: 0 where asked, else the default map), which MPI_Comm_set_info does not
 * change; and each handle takes mpi_assert_no_any_source through
 * MPI_Comm_set_info (an MPI_ANY_SOURCE receive then fails with MPI_ERR_ARG), and drops it.
 * With the argument "wide": np 2, 16 endpoints (threads) per process, the same checks.
 * With "churn": np 2, 4 threads per process, each on its own parent (a dup of
 * MPI_COMM_WORLD), create an endpoints communicator of 2 endpoints per process, pass a
 * message around its 4 ranks and free it, 50 times, all threads at once.
 * Then the error cases, through the parent's error handler (set to return): my_num_ep 0
 * (MPI_ERR_ARG), mpiv_worker "0,x" on rank 1 only and "0,256" everywhere
 * (MPI_ERR_INFO_VALUE on every process), an inter-communicator parent (MPI_ERR_COMM).
 * With the argument "single" MPI is initialized below MPI_THREAD_MULTIPLE: MPI_ERR_OTHER. Under another PML than mpiv
 * (OMPI_MCA_pml, as mpirun --mca pml sets it) the call fails with
 * MPI_ERR_UNSUPPORTED_OPERATION, and that is all this program checks.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "mpi_test.h"

#include <pthread.h>
#include <sched.h>

#include <mpiv/mpix_endpoints.h>

enum { MAX_EP = 16, SIZES = 3 };
static const int wanted[3] = {1, 3, 7}; /* np 3; with "wide", np 2 and 16 each */
static const size_t sizes[SIZES] = {8, 2048, 65536};

struct endpoint {
    MPI_Comm comm;
    int first, total, index;
    int worker; /* the worker endpoint the handle receives through */
    pthread_t thread;
};

/* This process's worker endpoints (inbound queues): pml_mpiv_workers, or when it is 0 the
 * PUs of the process's binding, as the PML counts them. */
static int endpoint_count(void)
{
    int provided = 0, index = -1, count = 0, workers = 0;
    MPI_T_cvar_handle handle;
    MT_CHECK(MPI_SUCCESS == MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided), "MPI_T_init_thread");
    MT_CHECK(MPI_SUCCESS == MPI_T_cvar_get_index("pml_mpiv_workers", &index),
             "no control variable pml_mpiv_workers");
    MT_CHECK(MPI_SUCCESS == MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) && 1 == count,
             "MPI_T_cvar_handle_alloc(pml_mpiv_workers)");
    MT_CHECK(MPI_SUCCESS == MPI_T_cvar_read(handle, &workers), "MPI_T_cvar_read(pml_mpiv_workers)");
    MPI_T_cvar_handle_free(&handle);
    MPI_T_finalize();
    if (workers > 0) {
        return workers;
    }
    cpu_set_t set;
    MT_CHECK(0 == sched_getaffinity(0, sizeof set, &set), "sched_getaffinity");
    return CPU_COUNT(&set);
}

/* The placement MPI_Comm_get_info reports on this process's @p mine handles: worker
 * endpoint 0 for all when @p placed, else handle k on k mod the endpoint count. Kept in
 * @p ep[k].worker for the dups. A value asked later through MPI_Comm_set_info is not
 * applied (the senders of every process use the placement of the creation): the key is
 * then an ignored hint, which Open MPI no longer reports, but never the value asked. */
static void check_placement(const MPI_Comm *h, struct endpoint *ep, int mine, int placed)
{
    const int count = endpoint_count();
    for (int k = 0; k < mine; ++k) {
        ep[k].worker = placed ? 0 : k % count;
        MT_EXPECT_EQ("mpiv_worker reported on a handle", ep[k].worker, mt_reported_worker(h[k]));
    }
    if (count < 2) {
        return; /* no other endpoint to ask for */
    }
    const int before = ep[mine - 1].worker;
    MPI_Info info;
    MT_CALL(MPI_Info_create(&info));
    MT_CALL(MPI_Info_set(info, "mpiv_worker", before > 0 ? "0" : "1"));
    MT_CALL(MPI_Comm_set_info(h[mine - 1], info));
    MT_CALL(MPI_Info_free(&info));
    const int after = mt_reported_worker(h[mine - 1]);
    MT_EXPECT_EQ("mpiv_worker after MPI_Comm_set_info (not applied)", 1, -1 == after || before == after);
}

static int keyval = MPI_KEYVAL_INVALID; /* an attribute copied by MPI_Comm_dup */

static unsigned char byte_of(int from, int to, size_t i)
{
    return (unsigned char) (from * 31 + to * 7 + i);
}

static void *drive(void *arg)
{
    struct endpoint *e = arg;
    int rank = -1, size = -1;
    MT_CALL(MPI_Comm_rank(e->comm, &rank));
    MT_CALL(MPI_Comm_size(e->comm, &size));
    MT_EXPECT_EQ("MPI_Comm_rank of a handle", e->first + e->index, rank);
    MT_EXPECT_EQ("MPI_Comm_size of a handle", e->total, size);

    const int n = size;
    unsigned char *out = mt_malloc((size_t) n * 65536), *in = mt_malloc((size_t) n * 65536);
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * (size_t) n);
    MT_CHECK(NULL != req, "out of memory");
    for (int to = 0; to < n; ++to) {
        const size_t len = sizes[(rank + to) % SIZES];
        for (size_t i = 0; i < len; ++i) {
            out[(size_t) to * 65536 + i] = byte_of(rank, to, i);
        }
        MT_CALL(MPI_Isend(out + (size_t) to * 65536, (int) len, MPI_BYTE, to, 3, e->comm, &req[to]));
    }
    for (int from = 0; from < n; ++from) {
        MT_CALL(MPI_Irecv(in + (size_t) from * 65536, 65536, MPI_BYTE, from, 3, e->comm,
                          &req[n + from]));
    }
    MPI_Status *st = malloc(sizeof(MPI_Status) * 2 * (size_t) n);
    MT_CHECK(NULL != st, "out of memory");
    MT_CALL(MPI_Waitall(2 * n, req, st));
    for (int from = 0; from < n; ++from) {
        const size_t len = sizes[(from + rank) % SIZES];
        int count = -1;
        MT_CALL(MPI_Get_count(&st[n + from], MPI_BYTE, &count));
        MT_EXPECT_EQ("status source", from, st[n + from].MPI_SOURCE);
        MT_EXPECT_EQ("bytes received", (long) len, count);
        for (size_t i = 0; i < len; ++i) {
            if (in[(size_t) from * 65536 + i] != byte_of(from, rank, i)) {
                MT_FAIL("rank %d: byte %zu from rank %d is wrong", rank, i, from);
            }
        }
    }
    /* A ring: the wildcard receive of each handle takes the message to its own rank. */
    int token = rank, got = -1;
    MPI_Status status;
    MT_CALL(MPI_Isend(&token, 1, MPI_INT, (rank + 1) % n, 40 + rank, e->comm, &req[0]));
    MT_CALL(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, e->comm, &status));
    MT_CALL(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
    MT_EXPECT_EQ("wildcard receive: the rank before", (rank + n - 1) % n, got);
    MT_EXPECT_EQ("wildcard receive: its source", (rank + n - 1) % n, status.MPI_SOURCE);
    MT_EXPECT_EQ("wildcard receive: its tag", 40 + (rank + n - 1) % n, status.MPI_TAG);

    MT_CALL(MPI_Barrier(e->comm));
    long sum = 0, mine = rank;
    MT_CALL(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, e->comm));
    MT_EXPECT_EQ("MPI_Allreduce of the ranks", (long) n * (n - 1) / 2, sum);
    /* MPI_Comm_dup of every handle at once, twice in a row: same rank and size, its own
     * messages, the attribute copied (its copy callback ran), freed in any order. */
    MPI_Comm dup[2];
    int *attr = NULL, flag = 0;
    MT_CALL(MPI_Comm_set_attr(e->comm, keyval, &rank));
    for (int d = 0; d < 2; ++d) {
        int drank = -1, dsize = -1;
        MT_CALL(MPI_Comm_dup(d == 0 ? e->comm : dup[0], &dup[d]));
        MT_CALL(MPI_Comm_rank(dup[d], &drank));
        MT_CALL(MPI_Comm_size(dup[d], &dsize));
        MT_EXPECT_EQ("MPI_Comm_rank of a dup", rank, drank);
        MT_EXPECT_EQ("MPI_Comm_size of a dup", n, dsize);
        MT_EXPECT_EQ("mpiv_worker of a dup", e->worker, mt_reported_worker(dup[d]));
        MT_CALL(MPI_Isend(&token, 1, MPI_INT, (rank + 1) % n, 5, dup[d], &req[0]));
        MT_CALL(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 5, dup[d], &status));
        MT_CALL(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
        MT_EXPECT_EQ("a dup's wildcard receive", (rank + n - 1) % n, got);
        MT_CALL(MPI_Comm_get_attr(dup[d], keyval, &attr, &flag));
        MT_CHECK(flag && NULL != attr && *attr == rank, "the attribute was not copied to a dup");
        MT_CALL(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, dup[d]));
        MT_EXPECT_EQ("MPI_Allreduce on a dup", (long) n * (n - 1) / 2, sum);
    }
    MT_CALL(MPI_Comm_free(&dup[rank % 2]));
    MT_CALL(MPI_Comm_free(&dup[1 - rank % 2]));

    /* Constructors mpiv cannot run on a handle yet fail at once (no hang). */
    MPI_Comm other = MPI_COMM_NULL;
    int cls = -1;
    MT_CALL(MPI_Comm_set_errhandler(e->comm, MPI_ERRORS_RETURN));
    MPI_Group group;
    MT_CALL(MPI_Comm_group(e->comm, &group));
    MPI_Error_class(MPI_Comm_create_group(e->comm, group, 0, &other), &cls);
    MT_EXPECT_EQ("MPI_Comm_create_group on a handle: MPI_ERR_COMM", MPI_ERR_COMM, cls);
    MT_CALL(MPI_Group_free(&group));
    MT_CALL(MPI_Comm_free(&e->comm));
    free(st);
    free(req);
    free(in);
    free(out);
    return NULL;
}

/* MPIX_Comm_create_endpoints on @p parent must fail with error class @p want. */
static void expect_error_info(MPI_Comm parent, int my_num_ep, MPI_Info info, int want,
                              const char *what)
{
    MPI_Comm handles[MAX_EP];
    int cls = -1;
    MT_CALL(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
    MPI_Error_class(MPIX_Comm_create_endpoints(parent, my_num_ep, info, handles), &cls);
    MT_EXPECT_EQ(what, want, cls);
}

static void expect_error(MPI_Comm parent, int my_num_ep, int want, const char *what)
{
    expect_error_info(parent, my_num_ep, MPI_INFO_NULL, want, what);
}

/* An info with mpiv_worker = @p value (NULL: MPI_INFO_NULL). */
static MPI_Info worker_info(const char *value)
{
    MPI_Info info = MPI_INFO_NULL;
    if (NULL != value) {
        MT_CALL(MPI_Info_create(&info));
        MT_CALL(MPI_Info_set(info, "mpiv_worker", value));
    }
    return info;
}

/* The MPI-4 assertions on a handle (MPI_Comm_set_info, local in Open MPI): with
 * mpi_assert_no_any_source an MPI_ANY_SOURCE receive fails with MPI_ERR_ARG, and
 * MPI_Comm_get_info reports the hint; lifted, the wildcard works again. */
static void check_assertions(MPI_Comm h)
{
    MPI_Info info, got;
    MPI_Request req;
    char value[16] = "";
    int flag = 0, rank = -1, v = 7, in = 0, cls = -1;
    MT_CALL(MPI_Comm_rank(h, &rank));
    MT_CALL(MPI_Info_create(&info));
    MT_CALL(MPI_Info_set(info, "mpi_assert_no_any_source", "true"));
    MT_CALL(MPI_Comm_set_info(h, info));
    MT_CALL(MPI_Comm_get_info(h, &got));
    MT_CALL(MPI_Info_get(got, "mpi_assert_no_any_source", (int) sizeof(value) - 1, value, &flag));
    MT_CALL(MPI_Info_free(&got));
    MT_EXPECT_EQ("mpi_assert_no_any_source reported", 1, flag && 0 == strcmp(value, "true"));
    MT_CALL(MPI_Comm_set_errhandler(h, MPI_ERRORS_RETURN));
    const int rc = MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 5, h, &req);
    MPI_Error_class(rc, &cls);
    MT_EXPECT_EQ("MPI_ANY_SOURCE under mpi_assert_no_any_source", MPI_ERR_ARG, cls);
    if (MPI_SUCCESS == rc) { /* (the assertion was not applied: take the receive back) */
        MT_CALL(MPI_Cancel(&req));
        MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    MT_CALL(MPI_Comm_set_errhandler(h, MPI_ERRORS_ARE_FATAL));
    MT_CALL(MPI_Info_set(info, "mpi_assert_no_any_source", "false"));
    MT_CALL(MPI_Comm_set_info(h, info));
    MT_CALL(MPI_Info_free(&info));
    MT_CALL(MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 5, h, &req));
    MT_CALL(MPI_Send(&v, 1, MPI_INT, rank, 5, h));
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MT_EXPECT_EQ("MPI_ANY_SOURCE once the assertion is lifted", v, in);
}

enum { CHURN_THREADS = 4, CHURN_ROUNDS = 50 };

static void *churn(void *arg)
{
    MPI_Comm parent = *(MPI_Comm *) arg;
    for (int round = 0; round < CHURN_ROUNDS; ++round) {
        MPI_Comm h[2];
        MPI_Request req[4];
        int out[2], in[2] = {-1, -1}, rank[2];
        MT_CALL(MPIX_Comm_create_endpoints(parent, 2, MPI_INFO_NULL, h));
        for (int k = 0; k < 2; ++k) {
            MT_CALL(MPI_Comm_rank(h[k], &rank[k]));
            out[k] = 1000 * round + rank[k];
            MT_CALL(MPI_Irecv(&in[k], 1, MPI_INT, (rank[k] + 3) % 4, round, h[k], &req[k]));
        }
        for (int k = 0; k < 2; ++k) {
            MT_CALL(MPI_Isend(&out[k], 1, MPI_INT, (rank[k] + 1) % 4, round, h[k], &req[2 + k]));
        }
        MT_CALL(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
        for (int k = 0; k < 2; ++k) {
            MT_EXPECT_EQ("churn: the rank before", 1000 * round + (rank[k] + 3) % 4, in[k]);
        }
        MT_CALL(MPI_Comm_free(&h[round % 2]));
        MT_CALL(MPI_Comm_free(&h[1 - round % 2]));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct endpoint ep[MAX_EP];
    MPI_Comm handles[MAX_EP], parent, inter;
    const char *pml = getenv("OMPI_MCA_pml");
    const int single = argc > 1 && 0 == strcmp(argv[1], "single");
    const int wide = argc > 1 && 0 == strcmp(argv[1], "wide");
    const int churning = argc > 1 && 0 == strcmp(argv[1], "churn");
    mt_init(&argc, &argv, "endpoints", single ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE);
    MT_CHECK((wide || churning ? 2 : 3) == mt_size, "runs on %d processes, not %d",
             wide || churning ? 2 : 3, mt_size);
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &parent));
    if (NULL == pml || 0 != strncmp(pml, "mpiv", 4)) {
        expect_error(parent, 1, MPI_ERR_UNSUPPORTED_OPERATION, "a PML other than mpiv");
        MT_CALL(MPI_Comm_free(&parent));
        return mt_finish();
    }
    if (churning) {
        MPI_Comm parents[CHURN_THREADS];
        pthread_t threads[CHURN_THREADS];
        for (int t = 0; t < CHURN_THREADS; ++t) {
            MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &parents[t]));
        }
        for (int t = 0; t < CHURN_THREADS; ++t) {
            MT_CHECK(0 == pthread_create(&threads[t], NULL, churn, &parents[t]), "pthread_create");
        }
        for (int t = 0; t < CHURN_THREADS; ++t) {
            MT_CHECK(0 == pthread_join(threads[t], NULL), "pthread_join");
            MT_CALL(MPI_Comm_free(&parents[t]));
        }
        MT_CALL(MPI_Comm_free(&parent));
        return mt_finish();
    }
    if (single) {
        expect_error(parent, 1, MPI_ERR_OTHER, "below MPI_THREAD_MULTIPLE: MPI_ERR_OTHER");
        MT_CALL(MPI_Comm_free(&parent));
        return mt_finish();
    }
    const int mine = wide ? 16 : wanted[mt_rank];
    int first = 0;
    for (int p = 0; p < mt_rank; ++p) {
        first += wide ? 16 : wanted[p];
    }
    MT_CALL(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &keyval, NULL));
    /* Worker endpoint 0 for every handle of rank 0 (and of both processes with "wide"):
     * the info key mpiv_worker places where a handle receives; the others by default. */
    MPI_Info placed = worker_info(0 == mt_rank || wide ? "0" : NULL);
    MT_CALL(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, mine, placed, handles));
    if (MPI_INFO_NULL != placed) {
        MT_CALL(MPI_Info_free(&placed));
    }
    check_placement(handles, ep, mine, 0 == mt_rank || wide);
    for (int k = 0; k < mine; ++k) {
        check_assertions(handles[k]);
    }
    for (int k = 0; k < mine; ++k) {
        ep[k].comm = handles[k];
        ep[k].first = first;
        ep[k].total = wide ? 32 : 11;
        ep[k].index = k;
        MT_CHECK(0 == pthread_create(&ep[k].thread, NULL, drive, &ep[k]), "pthread_create");
    }
    for (int k = 0; k < mine; ++k) {
        MT_CHECK(0 == pthread_join(ep[k].thread, NULL), "pthread_join");
    }

    /* Errors come back through the parent's error handler. */
    expect_error(parent, 0, MPI_ERR_ARG, "my_num_ep 0: MPI_ERR_ARG");
    /* A bad mpiv_worker on one process fails the call on every process. */
    MPI_Info bad = worker_info(1 == mt_rank ? "0,x" : "0");
    expect_error_info(parent, 2, bad, MPI_ERR_INFO_VALUE, "mpiv_worker 0,x on rank 1");
    MT_CALL(MPI_Info_free(&bad));
    bad = worker_info("0,256");
    expect_error_info(parent, 1, bad, MPI_ERR_INFO_VALUE, "mpiv_worker 256");
    MT_CALL(MPI_Info_free(&bad));
    MPI_Comm half;
    MT_CALL(MPI_Comm_split(MPI_COMM_WORLD, 0 == mt_rank, mt_rank, &half));
    MT_CALL(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 0 == mt_rank ? 1 : 0, 9, &inter));
    expect_error(inter, 1, MPI_ERR_COMM, "an inter-communicator parent: MPI_ERR_COMM");
    MT_CALL(MPI_Comm_free(&inter));
    MT_CALL(MPI_Comm_free(&half));
    MT_CALL(MPI_Comm_free(&parent));
    return mt_finish();
}
