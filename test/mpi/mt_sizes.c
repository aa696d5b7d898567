/*
 * mt_sizes: several threads of one rank stream messages of every small size to the threads
 * of the other rank on one tag (np 2, MPI_THREAD_MULTIPLE).
 *
 * Phases of 1, 2, 3 and 4 threads per process (MPI_Barrier between them). In a phase every
 * thread of rank 0 sends to rank 1 on MPI_COMM_WORLD with tag 0 and every thread of rank 1
 * receives with tag 0 from rank 0: sizes 0, 1, 2, 4, ... 4096 bytes, ITERS x 16 messages per
 * thread and size, first with blocking MPI_Send/MPI_Recv, then in windows of 16
 * MPI_Isend/MPI_Irecv and MPI_Waitall. The threads of a process meet at a pthread barrier
 * after each size and mode, and the first of them then calls MPI_Barrier, so every message
 * of one size is received before the next size starts. Any receiving thread may take any
 * message: each carries its sender thread and index in its first bytes (when it has room)
 * and a byte pattern after them; the receivers check the size and the pattern, and at the end
 * of each size that every message arrived exactly once. A last part of each phase sends and
 * receives the same way with MPI_PROC_NULL as the peer (empty statuses).
 *
 * The blocking sends of the small sizes fill the receiver's queues while its threads wait
 * in MPI_Recv: a library that lets them complete while their messages only sit in a list
 * of the sender's, drained when the sender's threads call MPI again, leaves the receivers
 * asleep and the senders queueing (the hang this test was written for).
 *
 * ITERS: `--iters=N`, MPIV_TEST_ITERS, or 200 x MPIV_TEST_TIME_MULTIPLIER.
 */
#include "mpi_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_THREADS 4
#define WINDOW      16
#define MAX_SIZE    4096
#define NUM_SIZES   14 /* 0, 1, 2, 4, ..., 4096 */

static long iterations;
static int num_threads;
static pthread_barrier_t barrier;
/* rank 1: receipts[thread * per_thread + index] of the current size and mode */
static atomic_int *receipts;
static long per_thread;

static size_t size_at(int k)
{
    return 0 == k ? 0 : (size_t) 1 << (k - 1);
}

/* The header a message carries in its first 8 bytes when it has room. */
static void stamp(unsigned char *buf, size_t bytes, int thread, long index)
{
    int32_t h[2] = {thread, (int32_t) index};
    mt_fill(buf, bytes, (uint32_t) (bytes * 131 + 7));
    if (bytes >= sizeof(h)) {
        memcpy(buf, h, sizeof(h));
    }
}

static void check(const unsigned char *buf, size_t bytes, const MPI_Status *st)
{
    int count = -1;
    MPI_Get_count(st, MPI_BYTE, &count);
    MT_EXPECT_EQ("received size", (long long) bytes, count);
    MT_EXPECT_EQ("status.MPI_SOURCE", 0, st->MPI_SOURCE);
    MT_EXPECT_EQ("status.MPI_TAG", 0, st->MPI_TAG);
    if (bytes >= 8) {
        int32_t h[2];
        memcpy(h, buf, sizeof(h));
        MT_CHECK(h[0] >= 0 && h[0] < num_threads && h[1] >= 0 && h[1] < per_thread,
                 "size %zu: bad header (thread %d, index %d)", bytes, h[0], h[1]);
        atomic_fetch_add_explicit(&receipts[h[0] * per_thread + h[1]], 1, memory_order_relaxed);
        for (size_t i = 8; i < bytes; ++i) {
            MT_CHECK(buf[i] == mt_pattern_byte((uint32_t) (bytes * 131 + 7), i),
                     "size %zu: payload byte %zu is wrong", bytes, i);
        }
    } else {
        MT_VERIFY(buf, bytes, (uint32_t) (bytes * 131 + 7), "short message");
    }
}

/* End of one size and mode: every thread is done, one of them synchronizes the ranks, and
 * rank 1 checks that each message of a size with headers came exactly once. */
static void step_done(int thread, size_t bytes)
{
    pthread_barrier_wait(&barrier);
    if (0 == thread) {
        if (1 == mt_rank && bytes >= 8) {
            for (long i = 0; i < (long) num_threads * per_thread; ++i) {
                MT_CHECK(1 == atomic_load(&receipts[i]),
                         "size %zu: message %ld of thread %ld received %d times", bytes,
                         i % per_thread, i / per_thread, atomic_load(&receipts[i]));
                atomic_store(&receipts[i], 0);
            }
        }
        MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    }
    pthread_barrier_wait(&barrier);
}

static void proc_null_part(unsigned char *buf)
{
    for (long i = 0; i < iterations; ++i) {
        MPI_Request reqs[2];
        MPI_Status st;
        MT_CALL(MPI_Send(buf, 8, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
        MT_CALL(MPI_Recv(buf, 8, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
        MT_EXPECT_EQ("PROC_NULL status.MPI_SOURCE", MPI_PROC_NULL, st.MPI_SOURCE);
        MT_EXPECT_EQ("PROC_NULL status.MPI_TAG", MPI_ANY_TAG, st.MPI_TAG);
        MT_CALL(MPI_Isend(buf, 8, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &reqs[0]));
        MT_CALL(MPI_Irecv(buf, 8, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &reqs[1]));
        MT_CALL(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
    }
}

static void *thread_main(void *raw)
{
    const int t = (int) (intptr_t) raw;
    unsigned char *bufs = mt_malloc((size_t) WINDOW * MAX_SIZE);
    for (int k = 0; k < NUM_SIZES; ++k) {
        const size_t bytes = size_at(k);
        for (int mode = 0; mode < 2; ++mode) {
            long index = 0;
            for (long it = 0; it < iterations; ++it) {
                MPI_Request reqs[WINDOW];
                MPI_Status sts[WINDOW];
                for (int j = 0; j < WINDOW; ++j, ++index) {
                    unsigned char *b = bufs + (size_t) j * MAX_SIZE;
                    if (0 == mt_rank) {
                        stamp(b, bytes, t, index);
                        if (0 == mode) {
                            MT_CALL(MPI_Send(b, (int) bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD));
                        } else {
                            MT_CALL(MPI_Isend(b, (int) bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD,
                                              &reqs[j]));
                        }
                    } else if (0 == mode) {
                        MT_CALL(MPI_Recv(b, MAX_SIZE, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &sts[j]));
                        check(b, bytes, &sts[j]);
                    } else {
                        MT_CALL(MPI_Irecv(b, MAX_SIZE, MPI_BYTE, 0, 0, MPI_COMM_WORLD,
                                          &reqs[j]));
                    }
                }
                if (1 == mode) {
                    MT_CALL(MPI_Waitall(WINDOW, reqs, sts));
                    for (int j = 0; 1 == mt_rank && j < WINDOW; ++j) {
                        check(bufs + (size_t) j * MAX_SIZE, bytes, &sts[j]);
                    }
                }
            }
            step_done(t, bytes);
        }
    }
    proc_null_part(bufs);
    free(bufs);
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "mt_sizes", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    mt_watchdog_start(300);
    iterations = mt_iterations(argc, argv, 200);
    per_thread = iterations * WINDOW;
    receipts = mt_malloc((size_t) MAX_THREADS * per_thread * sizeof(*receipts));
    for (long i = 0; i < (long) MAX_THREADS * per_thread; ++i) {
        atomic_init(&receipts[i], 0);
    }
    if (mt_rank < 2) {
        for (num_threads = 1; num_threads <= MAX_THREADS; ++num_threads) {
            pthread_barrier_init(&barrier, NULL, (unsigned) num_threads);
            mt_run_threads(num_threads, thread_main);
            pthread_barrier_destroy(&barrier);
        }
    } else {
        /* Extra ranks only take part in the barriers. */
        for (int phase = 1; phase <= MAX_THREADS; ++phase) {
            for (int s = 0; s < NUM_SIZES * 2; ++s) {
                MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
            }
        }
    }
    free(receipts);
    return mt_finish();
}
