/*
 * bsend_threads: buffered and standard sends from many threads to a wildcard receiver thread
 * (np 2 or more, MPI_THREAD_MULTIPLE).
 *
 * Each process attaches a 10 MB buffer and makes a duplicate of MPI_COMM_WORLD that it
 * never uses. Per phase, 8 sender threads each send 4 messages of 1 KiB to the next rank
 * ((rank + 1) % size) and one receiver thread takes 32 messages with MPI_ANY_SOURCE and
 * MPI_ANY_TAG. Phases: MPI_Bsend, MPI_Ibsend + MPI_Waitall, MPI_Isend + MPI_Waitall,
 * MPI_Send. A message carries (phase, sender thread, index) in its first bytes and a
 * pattern after them; the receiver checks source, tag, size and pattern, and that each of
 * the 32 came exactly once. ROUNDS rounds of the four phases (`--iters=N`, MPIV_TEST_ITERS
 * or 5 x MPIV_TEST_TIME_MULTIPLIER); MPI_Buffer_detach at the end must wait for every
 * buffered copy.
 */
#include "mpi_test.h"

#include <pthread.h>

#define SENDERS   8
#define PER       4
#define BYTES     1024
#define PHASES    4
#define BUF_BYTES (10 * 1000 * 1000)

static int phase_now;
static int next_rank, prev_rank;

static uint32_t seed_of(int phase, int thread, int i)
{
    return (uint32_t) (phase * 1000 + thread * 10 + i + 1);
}

static void *sender(void *raw)
{
    const int t = (int) (intptr_t) raw;
    char bufs[PER][BYTES];
    MPI_Request reqs[PER];
    for (int i = 0; i < PER; ++i) {
        int32_t h[3] = {phase_now, t, i};
        mt_fill(bufs[i], BYTES, seed_of(phase_now, t, i));
        memcpy(bufs[i], h, sizeof(h));
        const int tag = t * PER + i;
        switch (phase_now % PHASES) {
        case 0:
            MT_CALL(MPI_Bsend(bufs[i], BYTES, MPI_CHAR, next_rank, tag, MPI_COMM_WORLD));
            break;
        case 1:
            MT_CALL(MPI_Ibsend(bufs[i], BYTES, MPI_CHAR, next_rank, tag, MPI_COMM_WORLD,
                               &reqs[i]));
            break;
        case 2:
            MT_CALL(MPI_Isend(bufs[i], BYTES, MPI_CHAR, next_rank, tag, MPI_COMM_WORLD,
                              &reqs[i]));
            break;
        default:
            MT_CALL(MPI_Send(bufs[i], BYTES, MPI_CHAR, next_rank, tag, MPI_COMM_WORLD));
            break;
        }
    }
    if (1 == phase_now % PHASES || 2 == phase_now % PHASES) {
        MT_CALL(MPI_Waitall(PER, reqs, MPI_STATUSES_IGNORE));
    }
    return NULL;
}

static void *receiver(void *raw)
{
    char buf[BYTES];
    int seen[SENDERS * PER] = {0};
    (void) raw;
    for (int k = 0; k < SENDERS * PER; ++k) {
        MPI_Status st;
        int32_t h[3];
        MT_CALL(MPI_Recv(buf, BYTES, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        MT_CHECK_STATUS(&st, prev_rank, st.MPI_TAG, MPI_CHAR, BYTES, "wildcard receive");
        memcpy(h, buf, sizeof(h));
        MT_CHECK(h[0] == phase_now && h[1] >= 0 && h[1] < SENDERS && h[2] >= 0 && h[2] < PER &&
                     st.MPI_TAG == h[1] * PER + h[2],
                 "phase %d: header (%d, %d, %d) with tag %d", phase_now, h[0], h[1], h[2],
                 st.MPI_TAG);
        for (int i = (int) sizeof(h); i < BYTES; ++i) {
            MT_CHECK((uint8_t) buf[i] == mt_pattern_byte(seed_of(h[0], h[1], h[2]), (size_t) i),
                     "phase %d: payload byte %d", phase_now, i);
        }
        seen[st.MPI_TAG]++;
    }
    for (int i = 0; i < SENDERS * PER; ++i) {
        MT_EXPECT_EQ("messages per tag", 1, seen[i]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long rounds;
    void *attached;
    int detached_size = 0;
    MPI_Comm unused;
    mt_init(&argc, &argv, "bsend_threads", MPI_THREAD_MULTIPLE);
    mt_require_size(2);
    mt_watchdog_start(240);
    rounds = mt_iterations(argc, argv, 5);
    next_rank = (mt_rank + 1) % mt_size;
    prev_rank = (mt_rank + mt_size - 1) % mt_size;
    attached = mt_malloc(BUF_BYTES);
    MT_CALL(MPI_Buffer_attach(attached, BUF_BYTES));
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &unused));
    for (long r = 0; r < rounds; ++r) {
        for (int p = 0; p < PHASES; ++p) {
            pthread_t tids[SENDERS + 1];
            phase_now = (int) r * PHASES + p;
            MT_CHECK(0 == pthread_create(&tids[SENDERS], NULL, receiver, NULL), "pthread_create");
            for (int t = 0; t < SENDERS; ++t) {
                MT_CHECK(0 == pthread_create(&tids[t], NULL, sender, (void *) (intptr_t) t),
                         "pthread_create");
            }
            for (int t = 0; t <= SENDERS; ++t) {
                pthread_join(tids[t], NULL);
            }
            MT_CALL(MPI_Barrier(MPI_COMM_WORLD)); /* no phase's message meets another's */
        }
    }
    MT_CALL(MPI_Buffer_detach(&attached, &detached_size));
    MT_EXPECT_EQ("detached buffer size", BUF_BYTES, detached_size);
    MT_CALL(MPI_Comm_free(&unused));
    free(attached);
    return mt_finish();
}
