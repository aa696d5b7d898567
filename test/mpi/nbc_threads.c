/*
 * nbc_threads: non-blocking collectives from several threads at once, with communicators
 * created while traffic flows (np 4 or more, MPI_THREAD_MULTIPLE; 3 threads per process).
 *
 * Thread t owns three communicators made before the threads start: par[t] (a duplicate of
 * MPI_COMM_WORLD), dup[t] (a duplicate of par[t]) and ring[t] (a periodic 1-D cartesian
 * communicator over par[t]). Each round it starts MPI_Comm_idup(par[t]) and, while that
 * runs, MPI_Iscan and MPI_Iallreduce on dup[t] and MPI_Ibcast, MPI_Ibarrier and
 * MPI_Ineighbor_allgather on ring[t]; it waits for all, checks every result, runs
 * MPI_Iallreduce and MPI_Iscan on the new communicator and frees it. Context ids are
 * allocated and reused all the time while other communicators carry messages, and
 * collectives' internal (negative) tags meet on many communicators at once.
 *
 * Nothing else runs on par[t] while its MPI_Comm_idup is pending: Open MPI 4.1 starts the
 * idup's internal collectives on the parent from progress, after the call, so another
 * collective started on the parent meanwhile may take the same internal tag in a
 * different order on different ranks (open-mpi/ompi#2025; ob1 fails that too).
 *
 * Rounds: `--iters=N`, MPIV_TEST_ITERS or 50 x MPIV_TEST_TIME_MULTIPLIER.
 */
#include "mpi_test.h"

#include <pthread.h>

#define THREADS 3
#define NSCAN   64
#define NBCAST  1000
#define NRED    7

static long rounds;
static MPI_Comm par[THREADS], dupc[THREADS], ring[THREADS];

static void check_reduce(const int *out, const char *what)
{
    for (int i = 0; i < NRED; ++i) {
        MT_EXPECT_EQ(what, 10 * mt_size * (mt_size - 1) / 2 + mt_size * i, out[i]);
    }
}

static void check_scan(const int *out, long r, const char *what)
{
    for (int i = 0; i < NSCAN; ++i) {
        long want = 0;
        for (int p = 0; p <= mt_rank; ++p) {
            want += p + i + r;
        }
        MT_EXPECT_EQ(what, want, out[i]);
    }
}

static void *thread_main(void *raw)
{
    const int t = (int) (intptr_t) raw;
    int scan_in[NSCAN], scan_out[NSCAN], bc[NBCAST], red_in[NRED], red_out[NRED];
    int me[1], nbrs[2];
    for (long r = 0; r < rounds; ++r) {
        MPI_Request reqs[6];
        MPI_Comm fresh;
        const int root = (int) (r % mt_size);
        for (int i = 0; i < NSCAN; ++i) {
            scan_in[i] = mt_rank + i + (int) r;
        }
        for (int i = 0; i < NBCAST; ++i) {
            bc[i] = mt_rank == root ? i * 3 + (int) r + t : -1;
        }
        for (int i = 0; i < NRED; ++i) {
            red_in[i] = mt_rank * 10 + i;
        }
        me[0] = mt_rank;
        MT_CALL(MPI_Comm_idup(par[t], &fresh, &reqs[0]));
        MT_CALL(MPI_Iscan(scan_in, scan_out, NSCAN, MPI_INT, MPI_SUM, dupc[t], &reqs[1]));
        MT_CALL(MPI_Ibcast(bc, NBCAST, MPI_INT, root, ring[t], &reqs[2]));
        MT_CALL(MPI_Iallreduce(red_in, red_out, NRED, MPI_INT, MPI_SUM, dupc[t], &reqs[3]));
        MT_CALL(MPI_Ibarrier(ring[t], &reqs[4]));
        MT_CALL(MPI_Ineighbor_allgather(me, 1, MPI_INT, nbrs, 1, MPI_INT, ring[t], &reqs[5]));
        MT_CALL(MPI_Waitall(6, reqs, MPI_STATUSES_IGNORE));
        check_scan(scan_out, r, "MPI_Iscan");
        for (int i = 0; i < NBCAST; ++i) {
            MT_EXPECT_EQ("MPI_Ibcast", i * 3 + (int) r + t, bc[i]);
        }
        check_reduce(red_out, "MPI_Iallreduce");
        MT_EXPECT_EQ("left neighbour", (mt_rank + mt_size - 1) % mt_size, nbrs[0]);
        MT_EXPECT_EQ("right neighbour", (mt_rank + 1) % mt_size, nbrs[1]);
        MT_CALL(MPI_Iallreduce(red_in, red_out, NRED, MPI_INT, MPI_SUM, fresh, &reqs[0]));
        MT_CALL(MPI_Iscan(scan_in, scan_out, NSCAN, MPI_INT, MPI_SUM, fresh, &reqs[1]));
        MT_CALL(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
        check_reduce(red_out, "MPI_Iallreduce on the new communicator");
        check_scan(scan_out, r, "MPI_Iscan on the new communicator");
        MT_CALL(MPI_Comm_free(&fresh));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "nbc_threads", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    mt_watchdog_start(240);
    rounds = mt_iterations(argc, argv, 50);
    for (int t = 0; t < THREADS; ++t) {
        int dims[1] = {mt_size}, periods[1] = {1};
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &par[t]));
        MT_CALL(MPI_Comm_dup(par[t], &dupc[t]));
        MT_CALL(MPI_Cart_create(par[t], 1, dims, periods, 0, &ring[t]));
    }
    mt_run_threads(THREADS, thread_main);
    for (int t = 0; t < THREADS; ++t) {
        MT_CALL(MPI_Comm_free(&ring[t]));
        MT_CALL(MPI_Comm_free(&dupc[t]));
        MT_CALL(MPI_Comm_free(&par[t]));
    }
    return mt_finish();
}
