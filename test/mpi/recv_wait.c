/*
 * recv_wait: blocking receives in pthreads, each completed by one of the three ways a
 * blocking receive can end (np 2, MPI_THREAD_MULTIPLE; 4 threads per process).
 *
 * Thread t of rank 1 receives from thread t of rank 0 on tag t of a duplicate of
 * MPI_COMM_WORLD of their own (sometimes with MPI_ANY_SOURCE or MPI_ANY_TAG). Round i uses
 * one of three timings:
 *   - early: the message is sent at once and the receiver posts its receive 2 ms later,
 *     so the message is already there (an unexpected message, matched as the receive
 *     starts);
 *   - soon: the receiver tells the sender it is about to wait and posts its receive; the
 *     sender sends after 20 us of spinning (the receive ends while its thread polls);
 *   - late: the same, but the sender sleeps 5 ms first (the receiving thread stops polling
 *     and waits to be woken).
 * Sizes rotate through 8 bytes, 4 KiB and 256 KiB. Each received message must carry its
 * round's pattern and its status the sender's rank, the tag and the byte count: a blocking
 * receive that returned before its message was delivered fails here.
 *
 * Rounds per thread: `--iters=N`, MPIV_TEST_ITERS or 24 x MPIV_TEST_TIME_MULTIPLIER.
 */
#include "mpi_test.h"

#include <pthread.h>

#define THREADS   4
#define READY_TAG 1000 /* receiver -> sender: "about to receive" */

#define MAX_BYTES (256 * 1024)

static const size_t sizes[] = {8, 4096, MAX_BYTES};
#define NSIZES (sizeof sizes / sizeof sizes[0])
static long rounds;
static MPI_Comm comms[THREADS]; /* thread t's */

enum timing { EARLY, SOON, LATE, TIMINGS };

static void spin_us(double us)
{
    const double end = mt_now() + us * 1e-6;
    while (mt_now() < end) {
    }
}

static uint32_t seed_of(int t, long i)
{
    return (uint32_t) (t * 100003 + i * 7 + 1);
}

static void *sender(void *arg)
{
    const int t = (int) (intptr_t) arg;
    char *buf = mt_malloc(MAX_BYTES);
    for (long i = 0; i < rounds; ++i) {
        const enum timing when = (enum timing) (i % TIMINGS);
        const size_t bytes = sizes[(i / TIMINGS) % NSIZES];
        mt_fill(buf, bytes, seed_of(t, i));
        if (EARLY != when) {
            char ready;
            MT_CALL(MPI_Recv(&ready, 1, MPI_CHAR, 1, READY_TAG, comms[t],
                             MPI_STATUS_IGNORE));
            if (SOON == when) {
                spin_us(20);
            } else {
                mt_sleep_ms(5);
            }
        }
        MT_CALL(MPI_Send(buf, (int) bytes, MPI_CHAR, 1, t, comms[t]));
    }
    free(buf);
    return NULL;
}

static void *receiver(void *arg)
{
    const int t = (int) (intptr_t) arg;
    char *buf = mt_malloc(MAX_BYTES);
    for (long i = 0; i < rounds; ++i) {
        const enum timing when = (enum timing) (i % TIMINGS);
        const size_t bytes = sizes[(i / TIMINGS) % NSIZES];
        /* Wildcards in some rounds (only thread t's sender uses comms[t] towards it). */
        const int source = 0 == i % 5 ? MPI_ANY_SOURCE : 0;
        const int tag = 0 == i % 7 ? MPI_ANY_TAG : t;
        MPI_Status st;
        if (EARLY == when) {
            mt_sleep_ms(2);
        } else {
            const char ready = 1;
            MT_CALL(MPI_Send(&ready, 1, MPI_CHAR, 0, READY_TAG, comms[t]));
        }
        memset(buf, 0, bytes);
        MT_CALL(MPI_Recv(buf, (int) bytes, MPI_CHAR, source, tag, comms[t], &st));
        MT_CHECK_STATUS(&st, 0, t, MPI_CHAR, (int) bytes, "a blocking receive's status");
        MT_VERIFY(buf, bytes, seed_of(t, i), "a blocking receive's message");
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "recv_wait", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    rounds = mt_iterations(argc, argv, 24);
    mt_watchdog_start(120);
    for (int t = 0; t < THREADS; ++t) {
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));
    }
    if (mt_rank < 2) {
        mt_run_threads(THREADS, 0 == mt_rank ? sender : receiver);
    }
    for (int t = 0; t < THREADS; ++t) {
        MT_CALL(MPI_Comm_free(&comms[t]));
    }
    return mt_finish();
}
