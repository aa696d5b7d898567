/*
 * waitany_reuse: a thread's wait for any of several requests must not end one of its later
 * waits early (np 2, MPI_THREAD_MULTIPLE; 4 threads per rank by default, `--threads=N` or
 * MPIV_TEST_THREADS).
 *
 * Thread t of rank 0 posts two receives from thread t of rank 1, which sends both at once,
 * so that they complete together (often in one drain by another thread). It takes them with
 * MPI_Waitany (even rounds) or MPI_Waitsome (odd rounds), and right after the first one it
 * makes a blocking MPI_Send above the eager limit (a rendezvous: the receiver reads the
 * buffer in place) or an MPI_Ssend, then overwrites the buffer as soon as the call returns,
 * and only then waits for the second receive. A completion that took the thread's waiter
 * during the Waitany but wakes it later would end the MPI_Send's wait while the receiver is
 * still reading, and the receiver would see the overwritten bytes. Thread t of rank 1
 * checks every large message's pattern, and then rank 0's blocking MPI_Recv of a reply,
 * which a stale wake would leave spinning or returning before the reply arrived, is checked
 * the same way.
 *
 * Rounds per thread: `--iters=N`, MPIV_TEST_ITERS or 300 x MPIV_TEST_TIME_MULTIPLIER.
 */
#include "mpi_test.h"

#include <pthread.h>

#define MAX_THREADS 64
#define LARGE       (64 * 1024)

static int num_threads = 4;
static long rounds;

static uint32_t seed_of(int t, long r, int which)
{
    return (uint32_t) (t * 1000003 + r * 7 + which);
}

static void *thread_main(void *raw)
{
    const int t = (int) (intptr_t) raw;
    const int tag = 1000 + 4 * t;
    unsigned char *large = mt_malloc(LARGE);
    int small[2] = {0, 0};
    for (long r = 0; r < rounds; ++r) {
        if (0 == mt_rank) {
            MPI_Request reqs[2];
            MPI_Status st;
            int index = -1, outcount = 0, indices[2];
            MT_CALL(MPI_Irecv(&small[0], 1, MPI_INT, 1, tag, MPI_COMM_WORLD, &reqs[0]));
            MT_CALL(MPI_Irecv(&small[1], 1, MPI_INT, 1, tag + 1, MPI_COMM_WORLD, &reqs[1]));
            if (0 == r % 2) {
                MT_CALL(MPI_Waitany(2, reqs, &index, &st));
            } else {
                MT_CALL(MPI_Waitsome(2, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
                index = indices[0];
            }
            MT_CHECK(0 == index || 1 == index, "thread %d round %ld: index %d", t, r, index);
            mt_fill(large, LARGE, seed_of(t, r, 0));
            if (0 == r % 3) {
                MT_CALL(MPI_Ssend(large, LARGE, MPI_BYTE, 1, tag + 2, MPI_COMM_WORLD));
            } else {
                MT_CALL(MPI_Send(large, LARGE, MPI_BYTE, 1, tag + 2, MPI_COMM_WORLD));
            }
            memset(large, 0xEE, LARGE); /* the send is complete: the buffer is ours */
            MT_CALL(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
            MT_EXPECT_EQ("first small message", (int) r, small[0]);
            MT_EXPECT_EQ("second small message", (int) r + 1, small[1]);
            MT_CALL(MPI_Recv(large, LARGE, MPI_BYTE, 1, tag + 3, MPI_COMM_WORLD, &st));
            MT_VERIFY(large, LARGE, seed_of(t, r, 1), "reply");
        } else {
            MPI_Status st;
            small[0] = (int) r;
            small[1] = (int) r + 1;
            MT_CALL(MPI_Send(&small[0], 1, MPI_INT, 0, tag, MPI_COMM_WORLD));
            MT_CALL(MPI_Send(&small[1], 1, MPI_INT, 0, tag + 1, MPI_COMM_WORLD));
            MT_CALL(MPI_Recv(large, LARGE, MPI_BYTE, 0, tag + 2, MPI_COMM_WORLD, &st));
            MT_VERIFY(large, LARGE, seed_of(t, r, 0), "large message (was the send early?)");
            mt_fill(large, LARGE, seed_of(t, r, 1));
            MT_CALL(MPI_Send(large, LARGE, MPI_BYTE, 0, tag + 3, MPI_COMM_WORLD));
        }
    }
    free(large);
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "waitany_reuse", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    mt_watchdog_start(300);
    rounds = mt_iterations(argc, argv, 300);
    num_threads = (int) mt_env_long("MPIV_TEST_THREADS", num_threads);
    for (int i = 1; i < argc; ++i) {
        if (0 == strncmp(argv[i], "--threads=", 10)) {
            num_threads = atoi(argv[i] + 10);
        }
    }
    MT_CHECK(num_threads >= 1 && num_threads <= MAX_THREADS, "threads: %d", num_threads);
    if (mt_rank < 2) {
        mt_run_threads(num_threads, thread_main);
    }
    return mt_finish();
}
