/*
 * endpoints_idup: MPI_Comm_idup on the handles of an endpoints communicator (np 2, 3
 * endpoints per process). MPI_Comm_idup is local: it returns before the other ranks call
 * it, so one thread may start it on several handles in turn.
 *   - One thread per process drives all its handles: MPI_Comm_idup on each in turn (a
 *     call that waited for its siblings would never return), messages exchanged on the old
 *     handles meanwhile (a ring, nonblocking), MPI_Waitall; the new handles have the old
 *     ranks and size, an attribute was copied, and a ring of nonblocking messages on them
 *     arrives by source and value. Then an idup started by one process only after it has
 *     received a message that the other sends after its own idup (blocking until the
 *     siblings of every process called would deadlock there).
 *   - A pthread per handle: MPI_Comm_idup, a blocking ring on the old handle, MPI_Wait,
 *     MPI_Allreduce and MPI_Barrier on the new handle, freed while the siblings still use
 *     theirs; then MPI_Comm_idup and MPI_Comm_dup as the same collective call (rank 1 calls
 *     dup): every rank fails, MPI_ERR_COMM, the idup ones through their request, no hang;
 *     and an idup after that works;
 *   - the old handles freed right after their idups started, before they complete.
 * Under another PML than mpiv only the refusal of MPIX_Comm_create_endpoints is checked.
 */
#include "mpi_test.h"

#include <pthread.h>

#include <mpiv/mpix_endpoints.h>

enum { EPS = 3, TOTAL = 2 * EPS };

static int keyval = MPI_KEYVAL_INVALID;

/* Nonblocking ring on the handles @p h of this process: each sends its rank to the next
 * rank and receives from the previous (by source). */
static void ring_nb(MPI_Comm *h, int tag)
{
    MPI_Request req[2 * EPS];
    int out[EPS], in[EPS], me[EPS];
    MPI_Status st[2 * EPS];
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_rank(h[k], &me[k]));
        out[k] = 100 * me[k] + tag;
        in[k] = -1;
        MT_CALL(MPI_Irecv(&in[k], 1, MPI_INT, (me[k] + TOTAL - 1) % TOTAL, tag, h[k], &req[2 * k]));
        MT_CALL(MPI_Isend(&out[k], 1, MPI_INT, (me[k] + 1) % TOTAL, tag, h[k], &req[2 * k + 1]));
    }
    MT_CALL(MPI_Waitall(2 * EPS, req, st));
    for (int k = 0; k < EPS; ++k) {
        const int from = (me[k] + TOTAL - 1) % TOTAL;
        MT_CHECK_STATUS(&st[2 * k], from, tag, MPI_INT, 1, "a ring message");
        MT_EXPECT_EQ("a ring message", 100 * from + tag, in[k]);
    }
}

/* The new handles @p n are like the old @p h: rank, size, the copied attribute. */
static void check_like(MPI_Comm *h, MPI_Comm *n)
{
    for (int k = 0; k < EPS; ++k) {
        int r0, r1, s1, flag = 0;
        int *value = NULL;
        MT_CHECK(MPI_COMM_NULL != n[k], "MPI_Comm_idup gave MPI_COMM_NULL");
        MT_CALL(MPI_Comm_rank(h[k], &r0));
        MT_CALL(MPI_Comm_rank(n[k], &r1));
        MT_CALL(MPI_Comm_size(n[k], &s1));
        MT_EXPECT_EQ("rank on the idup", r0, r1);
        MT_EXPECT_EQ("size of the idup", TOTAL, s1);
        MT_CALL(MPI_Comm_get_attr(n[k], keyval, &value, &flag));
        MT_CHECK(flag && NULL != value && *value == 42, "the attribute was not copied");
    }
}

static void one_thread(MPI_Comm *h)
{
    MPI_Comm n[EPS];
    MPI_Request req[EPS];
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_idup(h[k], &n[k], &req[k]));
    }
    ring_nb(h, 1); /* the old handles work meanwhile */
    MT_CALL(MPI_Waitall(EPS, req, MPI_STATUSES_IGNORE));
    check_like(h, n);
    ring_nb(n, 2);

    /* Process 1 calls its idups only once it has a message process 0 sends after its
     * own idups: process 0's must return before process 1 took part. */
    MPI_Comm m[EPS];
    int word = 7;
    if (0 == mt_rank) {
        for (int k = 0; k < EPS; ++k) {
            MT_CALL(MPI_Comm_idup(n[k], &m[k], &req[k]));
        }
        MT_CALL(MPI_Send(&word, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
    } else {
        MT_CALL(MPI_Recv(&word, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int k = 0; k < EPS; ++k) {
            MT_CALL(MPI_Comm_idup(n[k], &m[k], &req[k]));
        }
    }
    MT_CALL(MPI_Waitall(EPS, req, MPI_STATUSES_IGNORE));
    ring_nb(m, 3);
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_free(&m[k]));
        MT_CALL(MPI_Comm_free(&n[k]));
    }
}

static void *per_thread(void *arg)
{
    MPI_Comm h = *(MPI_Comm *) arg, n = MPI_COMM_NULL;
    MPI_Request req;
    MPI_Status st;
    int me, in = -1, sum = 0, cls = -1;
    MT_CALL(MPI_Comm_rank(h, &me));
    MT_CALL(MPI_Comm_idup(h, &n, &req));
    MT_CALL(MPI_Sendrecv(&me, 1, MPI_INT, (me + 1) % TOTAL, 5, &in, 1, MPI_INT,
                         (me + TOTAL - 1) % TOTAL, 5, h, &st));
    MT_EXPECT_EQ("a blocking ring on the old handle", (me + TOTAL - 1) % TOTAL, in);
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MT_CALL(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, n));
    MT_EXPECT_EQ("MPI_Allreduce on the idup", TOTAL * (TOTAL - 1) / 2, sum);
    MT_CALL(MPI_Barrier(n));
    MT_CALL(MPI_Comm_free(&n));

    /* idup and dup as one collective call: every rank fails, none hangs. */
    MT_CALL(MPI_Comm_set_errhandler(h, MPI_ERRORS_RETURN));
    if (1 == me) {
        MPI_Error_class(MPI_Comm_dup(h, &n), &cls);
    } else {
        MT_CALL(MPI_Comm_idup(h, &n, &req));
        MPI_Error_class(MPI_Wait(&req, &st), &cls);
    }
    MT_EXPECT_EQ("idup and dup as one call", MPI_ERR_COMM, cls);
    MT_CALL(MPI_Comm_idup(h, &n, &req));
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MT_CALL(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, n));
    MT_EXPECT_EQ("MPI_Allreduce on an idup after the failed one", TOTAL * (TOTAL - 1) / 2, sum);
    MT_CALL(MPI_Comm_free(&n));
    return NULL;
}

/* The old handles freed while their idups are pending (the free takes effect once the
 * requests are freed): the new handles work. */
static void freed_while_pending(void)
{
    static int value = 42;
    MPI_Comm h[EPS], n[EPS];
    MPI_Request req[EPS];
    MT_CALL(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, EPS, MPI_INFO_NULL, h));
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_set_attr(h[k], keyval, &value));
        MT_CALL(MPI_Comm_idup(h[k], &n[k], &req[k]));
        MT_CALL(MPI_Comm_free(&h[k]));
    }
    MT_CALL(MPI_Waitall(EPS, req, MPI_STATUSES_IGNORE));
    ring_nb(n, 4);
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_free(&n[k]));
    }
}

int main(int argc, char **argv)
{
    MPI_Comm h[EPS];
    pthread_t threads[EPS];
    static int value = 42;
    const char *pml = getenv("OMPI_MCA_pml");
    mt_init(&argc, &argv, "endpoints_idup", MPI_THREAD_MULTIPLE);
    MT_CHECK(2 == mt_size, "runs on 2 processes, not %d", mt_size);
    if (NULL == pml || 0 != strncmp(pml, "mpiv", 4)) {
        int cls = -1;
        MT_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_Error_class(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, EPS, MPI_INFO_NULL, h), &cls);
        MT_EXPECT_EQ("another PML", MPI_ERR_UNSUPPORTED_OPERATION, cls);
        return mt_finish();
    }
    /* The failed idups report through MPI_Wait, whose errors go to MPI_COMM_WORLD's handler. */
    MT_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MT_CALL(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &keyval, NULL));
    MT_CALL(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, EPS, MPI_INFO_NULL, h));
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_set_attr(h[k], keyval, &value));
    }
    one_thread(h);
    for (int k = 0; k < EPS; ++k) {
        MT_CHECK(0 == pthread_create(&threads[k], NULL, per_thread, &h[k]), "pthread_create");
    }
    for (int k = 0; k < EPS; ++k) {
        MT_CHECK(0 == pthread_join(threads[k], NULL), "pthread_join");
    }
    for (int k = 0; k < EPS; ++k) {
        MT_CALL(MPI_Comm_free(&h[k]));
    }
    freed_while_pending();
    MT_CALL(MPI_Comm_free_keyval(&keyval));
    return mt_finish();
}
