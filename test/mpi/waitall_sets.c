/*
 * waitall_sets: MPI_Waitall over mixed sets of requests (np 2, MPI_THREAD_MULTIPLE).
 *
 * MPI-3.1 section 3.7.5: MPI_Waitall completes every active request of the set, frees the
 * non-persistent ones (their handles become MPI_REQUEST_NULL), makes persistent ones
 * inactive (handles kept), and gives a null or inactive handle the empty status (source
 * MPI_ANY_SOURCE, tag MPI_ANY_TAG, count 0). When a request fails it returns
 * MPI_ERR_IN_STATUS, with the error of each request in its status's MPI_ERROR field.
 *
 * Each of THREADS threads of both ranks runs rounds on tags of its own:
 * - a clean round: rank 0 waits on {inline Isend (8 B), Isend of 1 KiB and 64 KiB,
 *   MPI_REQUEST_NULL, an inactive persistent send, an active persistent send}; rank 1 on
 *   the matching receives and the same kinds of null and persistent handles, with
 *   statuses, whose source, tag, count and payloads are checked;
 * - a failing round (even rounds with statuses, odd ones with MPI_STATUSES_IGNORE):
 *   rank 1 receives 16 bytes into 8 (MPI_ERR_TRUNCATE) beside a good receive and a
 *   null handle; MPI_Waitall must return MPI_ERR_IN_STATUS, report the truncation in
 *   that status and success in the other, and free the good request (not under ob1,
 *   whose MPI_Waitall hangs there).
 */
#include "mpi_test.h"

#define THREADS    4
#define TAGS       8 /* per thread */
#define BIG        (64 * 1024)
#define CLEAN_SIZE 4

static const int clean_sizes[CLEAN_SIZE] = {8, 1024, BIG, 8};
static long rounds;

static void expect_empty(const MPI_Status *st, const char *what)
{
    int count = -1;
    MT_CHECK(MPI_ANY_SOURCE == st->MPI_SOURCE && MPI_ANY_TAG == st->MPI_TAG,
             "%s: empty status expected, got source %d tag %d", what, st->MPI_SOURCE,
             st->MPI_TAG);
    MPI_Get_count(st, MPI_BYTE, &count);
    MT_EXPECT_EQ(what, 0, count);
}

static void clean_round(int tid, long round, char **buf, char *pbuf, MPI_Request *idle,
                        MPI_Request *active)
{
    const int base = TAGS * tid;
    const uint32_t seed = (uint32_t) (round * THREADS + tid);
    MPI_Request reqs[CLEAN_SIZE + 3];
    MPI_Status st[CLEAN_SIZE + 3];
    for (int i = 0; i < CLEAN_SIZE - 1; ++i) {
        if (0 == mt_rank) {
            mt_fill(buf[i], (size_t) clean_sizes[i], seed + (uint32_t) i);
            MT_CALL(MPI_Isend(buf[i], clean_sizes[i], MPI_BYTE, 1, base + i, MPI_COMM_WORLD,
                              &reqs[i]));
        } else {
            MT_CALL(MPI_Irecv(buf[i], clean_sizes[i], MPI_BYTE, 0, base + i, MPI_COMM_WORLD,
                              &reqs[i]));
        }
    }
    if (0 == mt_rank) {
        mt_fill(pbuf, 8, seed + 99);
    }
    MT_CALL(MPI_Start(active));
    reqs[CLEAN_SIZE - 1] = *active;
    reqs[CLEAN_SIZE] = MPI_REQUEST_NULL;
    reqs[CLEAN_SIZE + 1] = *idle;
    reqs[CLEAN_SIZE + 2] = MPI_REQUEST_NULL;
    MT_CALL(MPI_Waitall(CLEAN_SIZE + 3, reqs, st));
    for (int i = 0; i < CLEAN_SIZE - 1; ++i) {
        MT_CHECK(MPI_REQUEST_NULL == reqs[i], "thread %d: request %d not freed", tid, i);
        if (1 == mt_rank) {
            MT_CHECK_STATUS(&st[i], 0, base + i, MPI_BYTE, clean_sizes[i], "clean receive");
            MT_VERIFY(buf[i], (size_t) clean_sizes[i], seed + (uint32_t) i, "clean receive");
        }
    }
    MT_CHECK(*active == reqs[CLEAN_SIZE - 1], "thread %d: persistent handle changed", tid);
    MT_CHECK(*idle == reqs[CLEAN_SIZE + 1], "thread %d: inactive handle changed", tid);
    if (1 == mt_rank) {
        MT_CHECK_STATUS(&st[CLEAN_SIZE - 1], 0, base + CLEAN_SIZE - 1, MPI_BYTE, 8,
                        "persistent receive");
        MT_VERIFY(pbuf, 8, seed + 99, "persistent receive");
    }
    expect_empty(&st[CLEAN_SIZE], "MPI_REQUEST_NULL");
    expect_empty(&st[CLEAN_SIZE + 1], "inactive persistent request");
    expect_empty(&st[CLEAN_SIZE + 2], "MPI_REQUEST_NULL");
}

static void failing_round(int tid, long round, char *buf)
{
    const int tag = TAGS * tid + CLEAN_SIZE + 1;
    if (0 == mt_rank) {
        MT_CALL(MPI_Send(buf, 16, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
        MT_CALL(MPI_Send(buf, 8, MPI_BYTE, 1, tag + 1, MPI_COMM_WORLD));
        return;
    }
    MPI_Request reqs[3];
    MPI_Status st[3];
    const int ignore = (int) (round & 1);
    MT_CALL(MPI_Irecv(buf, 8, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &reqs[0]));
    reqs[1] = MPI_REQUEST_NULL;
    MT_CALL(MPI_Irecv(buf + 8, 8, MPI_BYTE, 0, tag + 1, MPI_COMM_WORLD, &reqs[2]));
    for (int i = 0; i < 3; ++i) {
        st[i].MPI_ERROR = -4242;
    }
    const int rc = MPI_Waitall(3, reqs, ignore ? MPI_STATUSES_IGNORE : st);
    int rc_class = -1;
    MPI_Error_class(rc, &rc_class);
    MT_EXPECT_EQ("MPI_Waitall error class", MPI_ERR_IN_STATUS, rc_class);
    MT_CHECK(MPI_REQUEST_NULL == reqs[2], "thread %d: the good receive was not freed", tid);
    if (!ignore) {
        int c0 = -1;
        MPI_Error_class(st[0].MPI_ERROR, &c0);
        MT_EXPECT_EQ("truncated status error class", MPI_ERR_TRUNCATE, c0);
        MT_EXPECT_EQ("good status error", MPI_SUCCESS, st[2].MPI_ERROR);
        MT_CHECK_STATUS(&st[2], 0, tag + 1, MPI_BYTE, 8, "good receive");
    }
    if (MPI_REQUEST_NULL != reqs[0]) { /* a failed request may stay allocated */
        MT_CALL(MPI_Request_free(&reqs[0]));
    }
}

static void *thread_main(void *arg)
{
    const int tid = (int) (intptr_t) arg;
    const int peer = 1 - mt_rank;
    const int ptag = TAGS * tid + CLEAN_SIZE - 1;
    char *buf[CLEAN_SIZE - 1];
    for (int i = 0; i < CLEAN_SIZE - 1; ++i) {
        buf[i] = mt_malloc((size_t) clean_sizes[i]);
    }
    char pbuf[8] = {0}, fbuf[16] = {0};
    /* Open MPI 4.1.4's own MPI_Waitall spins for ever, with threads, on a set holding a
     * request that failed before the call (its WAIT_SYNC_RELEASE): not under ob1. */
    const int failing = !mt_pml_is("ob1");
    MPI_Request idle, active;
    if (0 == mt_rank) {
        MT_CALL(MPI_Send_init(pbuf, 8, MPI_BYTE, peer, ptag, MPI_COMM_WORLD, &active));
        MT_CALL(MPI_Send_init(pbuf, 8, MPI_BYTE, peer, TAGS * tid + TAGS - 1, MPI_COMM_WORLD,
                              &idle));
    } else {
        MT_CALL(MPI_Recv_init(pbuf, 8, MPI_BYTE, peer, ptag, MPI_COMM_WORLD, &active));
        MT_CALL(MPI_Recv_init(pbuf, 8, MPI_BYTE, peer, TAGS * tid + TAGS - 1, MPI_COMM_WORLD,
                              &idle));
    }
    for (long r = 0; r < rounds; ++r) {
        clean_round(tid, r, buf, pbuf, &idle, &active);
        if (failing) {
            failing_round(tid, r, fbuf);
        }
    }
    MT_CALL(MPI_Request_free(&active));
    MT_CALL(MPI_Request_free(&idle));
    for (int i = 0; i < CLEAN_SIZE - 1; ++i) {
        free(buf[i]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "waitall_sets", MPI_THREAD_MULTIPLE);
    MT_CHECK(2 == mt_size, "needs exactly 2 processes, got %d", mt_size);
    MT_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    rounds = mt_iterations(argc, argv, 200);
    mt_run_threads(THREADS, thread_main);
    return mt_finish();
}
