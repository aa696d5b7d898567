/*
 * fig2: seed 001's Fig. 2, the deadlock a library lock held across a blocking call causes
 * (np 2, MPI_THREAD_MULTIPLE).
 *
 * In each process, a receiver thread does blocking MPI_Recv from the other process while a
 * sender thread does MPI_Send to it.  If a blocked MPI_Recv kept a lock that MPI_Send needs,
 * both processes would wait for each other forever.  Many iterations; every 16th message is
 * 64 KiB (rendezvous) so the send also blocks on the peer; the rest are 8 bytes.  Checks the
 * values and order of the messages; a watchdog ends the process with a message on a hang.
 * Iterations: `--iters=N`, MPIV_TEST_ITERS or 2000 x MPIV_TEST_TIME_MULTIPLIER.
 */
#include "mpi_test.h"

#include <pthread.h>

#define BIG_BYTES (64 * 1024)

static long iterations;
static int peer;

static size_t message_bytes(long i) { return (0 == i % 16) ? BIG_BYTES : 8; }

static void *receiver_main(void *arg)
{
    uint8_t *buf = mt_malloc(BIG_BYTES);
    (void) arg;
    for (long i = 0; i < iterations; ++i) {
        MPI_Status status;
        char what[64];
        const size_t bytes = message_bytes(i);
        MT_CALL(MPI_Recv(buf, BIG_BYTES, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &status));
        snprintf(what, sizeof(what), "message %ld", i);
        MT_CHECK_STATUS(&status, peer, 0, MPI_BYTE, (int) bytes, what);
        MT_VERIFY(buf, bytes, (uint32_t) i, what);
    }
    free(buf);
    return NULL;
}

static void *sender_main(void *arg)
{
    uint8_t *buf = mt_malloc(BIG_BYTES);
    (void) arg;
    for (long i = 0; i < iterations; ++i) {
        const size_t bytes = message_bytes(i);
        mt_fill(buf, bytes, (uint32_t) i);
        MT_CALL(MPI_Send(buf, (int) bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD));
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "fig2", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    iterations = mt_iterations(argc, argv, 2000);
    peer = 1 - mt_rank;
    /* well above the default run time; longer runs (more iterations) get more */
    mt_watchdog_start((unsigned) (90 + 90 * iterations / 2000));

    if (mt_rank < 2) {
        pthread_t receiver, sender;
        /* the receiver starts first so its MPI_Recv is usually blocked when the send begins */
        MT_CHECK(0 == pthread_create(&receiver, NULL, receiver_main, NULL), "pthread_create");
        mt_sleep_ms(1);
        MT_CHECK(0 == pthread_create(&sender, NULL, sender_main, NULL), "pthread_create");
        pthread_join(sender, NULL);
        pthread_join(receiver, NULL);
    }
    alarm(0);
    if (0 == mt_rank) {
        printf("fig2: %ld messages each way\n", iterations);
    }
    return mt_finish();
}
