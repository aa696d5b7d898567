/*
 * thread_churn: nonblocking traffic from threads that come and go, and one that outlives
 * MPI_Finalize (np 2, MPI_THREAD_MULTIPLE).
 *
 * A PML may keep requests per thread (mpiv does: a small cache in front of its free
 * list). This test covers where such a cache can go wrong: threads exit holding requests
 * (they must go back, not be lost or freed twice), requests freed by MPI_Request_free
 * before completion are given back by whichever thread completes them, and a thread that
 * made requests is still alive when MPI_Finalize runs and exits after it (nothing may run
 * on its behalf then).
 *
 * Per round both ranks start THREADS threads; thread t exchanges PER messages with thread
 * t of the peer (tag t): PER Irecvs, PER Isends, every fourth send freed at once with
 * MPI_Request_free, then MPI_Waitall of the rest; each message carries a pattern
 * (round, thread, index) that the receiver checks. A barrier ends each round. ROUNDS rounds (`--iters=N`,
 * MPIV_TEST_ITERS or 20 x MPIV_TEST_TIME_MULTIPLIER). The lingering thread does one such
 * exchange (tag THREADS) before the rounds, then waits until main has finalized.
 */
#include "mpi_test.h"

#include <pthread.h>

#define THREADS 4
#define PER     48
#define BYTES   64

static long round_now;
static int peer;
/* Send buffers outlive the calls: a freed send's buffer is the sender's until the peer has
 * the message, which main's barrier after each round guarantees. */
static uint8_t sbufs[THREADS + 1][PER][BYTES];

static uint32_t seed_of(long round, int thread, int i)
{
    return (uint32_t) (round * 10000 + thread * 100 + i + 1);
}

static void exchange(long round, int t)
{
    static const int freed_every = 4;
    uint8_t (*sbuf)[BYTES] = sbufs[t];
    uint8_t rbuf[PER][BYTES];
    MPI_Request rreqs[PER];
    MPI_Request sreqs[PER];
    int nsend = 0;
    for (int i = 0; i < PER; ++i) {
        MT_CALL(MPI_Irecv(rbuf[i], BYTES, MPI_BYTE, peer, t, MPI_COMM_WORLD, &rreqs[i]));
    }
    for (int i = 0; i < PER; ++i) {
        MPI_Request r;
        mt_fill(sbuf[i], BYTES, seed_of(round, t, i));
        MT_CALL(MPI_Isend(sbuf[i], BYTES, MPI_BYTE, peer, t, MPI_COMM_WORLD, &r));
        if (0 == i % freed_every) {
            MT_CALL(MPI_Request_free(&r));
            MT_CHECK(MPI_REQUEST_NULL == r, "MPI_Request_free must set MPI_REQUEST_NULL");
        } else {
            sreqs[nsend++] = r;
        }
    }
    MT_CALL(MPI_Waitall(PER, rreqs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < PER; ++i) {
        char what[80];
        snprintf(what, sizeof what, "round %ld, thread %d, message %d", round, t, i);
        MT_VERIFY(rbuf[i], BYTES, seed_of(round, t, i), what);
    }
    MT_CALL(MPI_Waitall(nsend, sreqs, MPI_STATUSES_IGNORE));
}

static void *churner(void *raw)
{
    exchange(round_now, (int) (intptr_t) raw);
    return NULL;
}

static pthread_mutex_t linger_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t linger_cond = PTHREAD_COND_INITIALIZER;
static int linger_stage; /* 1: its exchange is done; 2: main has finalized */

static void *lingerer(void *raw)
{
    (void) raw;
    exchange(-1, THREADS);
    pthread_mutex_lock(&linger_lock);
    linger_stage = 1;
    pthread_cond_broadcast(&linger_cond);
    while (linger_stage < 2) {
        pthread_cond_wait(&linger_cond, &linger_lock);
    }
    pthread_mutex_unlock(&linger_lock);
    return NULL; /* exits after MPI_Finalize, with whatever the PML kept for it */
}

int main(int argc, char **argv)
{
    pthread_t linger;
    mt_init(&argc, &argv, "thread_churn", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    const long rounds = mt_iterations(argc, argv, 20);
    peer = mt_rank ^ 1;
    if (mt_rank < 2) {
        MT_CHECK(0 == pthread_create(&linger, NULL, lingerer, NULL), "pthread_create failed");
        pthread_mutex_lock(&linger_lock);
        while (linger_stage < 1) {
            pthread_cond_wait(&linger_cond, &linger_lock);
        }
        pthread_mutex_unlock(&linger_lock);
        for (round_now = 0; round_now < rounds; ++round_now) {
            mt_run_threads(THREADS, churner);
            MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
        }
    }
    const int rc = mt_finish();
    if (mt_rank < 2) {
        pthread_mutex_lock(&linger_lock);
        linger_stage = 2;
        pthread_cond_broadcast(&linger_cond);
        pthread_mutex_unlock(&linger_lock);
        pthread_join(linger, NULL);
    }
    return rc;
}
