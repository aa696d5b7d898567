/*
 * comm_churn: memory comes back when communicators are freed (np 2).
 *
 * ITERS rounds (`--iters=N`, MPIV_TEST_ITERS, or 100,000 x MPIV_TEST_TIME_MULTIPLIER) of
 * MPI_Comm_dup + MPI_Comm_free; every 16th dup carries a message each way (eager, or
 * rendezvous every 64th) before it is freed, and every 128th is freed while a receive on
 * it is still pending (the request keeps the communicator alive until MPI_Wait). The
 * resident set size after the first tenth of the rounds (allocators warmed up) and at the
 * end may differ by at most 16 MiB: a PML that keeps each freed communicator's matching
 * state (about 2 KiB or more) grows by 200 MB over 100,000 rounds.
 */
#include "mpi_test.h"

#define LARGE       (64 * 1024)
#define GROWTH_MAX  (16L << 20)

static long rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    MT_CHECK(NULL != f, "cannot open /proc/self/statm");
    MT_CHECK(2 == fscanf(f, "%ld %ld", &pages, &resident), "cannot read /proc/self/statm");
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    long iters, warm = 0;
    char *buf, *got;
    mt_init(&argc, &argv, "comm_churn", MPI_THREAD_SINGLE);
    mt_require_size(2);
    mt_watchdog_start(300);
    iters = mt_iterations(argc, argv, 100000);
    buf = mt_malloc(LARGE);
    got = mt_malloc(LARGE);
    mt_fill(buf, LARGE, 5);
    for (long i = 0; i < iters; ++i) {
        MPI_Comm c;
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        if (mt_rank < 2 && 0 == i % 16) {
            const int peer = 1 - mt_rank;
            const int n = 0 == i % 64 ? LARGE : 64;
            MPI_Request r;
            MT_CALL(MPI_Irecv(got, n, MPI_CHAR, peer, 1, c, &r));
            MT_CALL(MPI_Send(buf, n, MPI_CHAR, peer, 1, c));
            if (0 == i % 128) {
                MT_CALL(MPI_Comm_free(&c)); /* the pending receive keeps it alive */
                MT_CALL(MPI_Wait(&r, MPI_STATUS_IGNORE));
            } else {
                MT_CALL(MPI_Wait(&r, MPI_STATUS_IGNORE));
                MT_CALL(MPI_Comm_free(&c));
            }
            MT_VERIFY(got, (size_t) n, 5, "message on a dup");
        } else {
            MT_CALL(MPI_Comm_free(&c));
        }
        if (i == iters / 10) {
            warm = rss_bytes();
        }
    }
    {
        const long end = rss_bytes();
        MT_CHECK(end - warm <= GROWTH_MAX,
                 "resident memory grew by %ld KiB over %ld dup/free rounds (from %ld KiB at "
                 "round %ld)", (end - warm) >> 10, iters - iters / 10, warm >> 10, iters / 10);
    }
    free(got);
    free(buf);
    return mt_finish();
}
