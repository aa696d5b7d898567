/*
 * Test of libmpiv-apsm, run by run_apsm_test.sh under mpirun -np 2, with and without the library
 * preloaded. The same checks must hold in both cases (APSM must not change what MPI does);
 * with the library, the counters of mpiv_apsm_counters_get() must also show that it really
 * queued the operations above its eager limit and none of the others.
 *
 * usage: test-apsm --expect plain|apsm|disabled --file PATH [--init single|multiple]
 *   plain     the library is not loaded
 *   apsm      the library is loaded and its progress thread runs
 *   disabled  the library is loaded with MPIV_APSM_DISABLE=1 (it must queue nothing)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpiv_apsm.h"

enum expect { EXPECT_PLAIN, EXPECT_APSM, EXPECT_DISABLED };

/* Sizes in ints. BIG is above every eager limit (Open MPI vader 4 KiB, MPICH cell 68 KiB). */
enum { SMALL = 16, BIG = 48 * 1024, THREADS = 4, THREAD_ROUNDS = 25 };

static int rank;
static enum expect expect;
static mpiv_status_t (*counters_fn)(mpiv_apsm_counters_t *);

static void fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(int line, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "test-apsm: rank %d: line %d: FAILED: %s\n", rank, line, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CHECK(_cond, ...)                  \
    do {                                   \
        if (!(_cond)) {                    \
            fail(__LINE__, __VA_ARGS__);   \
        }                                  \
    } while (0)

static void check_mpi(int rc, const char *call, int line)
{
    if (MPI_SUCCESS != rc) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        fail(line, "%s returned %d: %s", call, rc, text);
    }
}
#define MPI_CHECK(_call) check_mpi((_call), #_call, __LINE__)

static int error_class(int rc)
{
    int cls = rc;
    MPI_Error_class(rc, &cls);
    return cls;
}

/*
 * Does error code rc have class cls? An error that comes back through an APSM generalized
 * request in MPICH has class MPI_ERR_OTHER: MPICH replaces every error a generalized-request
 * callback returns by "user defined function returned an error code" (APSM prints the original
 * on stderr). queued says whether the failed operation went through APSM.
 */
static int has_class(int rc, int cls, int queued)
{
#if defined(MPICH_VERSION)
    if (queued && MPI_ERR_OTHER == error_class(rc)) {
        return 1;
    }
#else
    (void) queued;
#endif
    return cls == error_class(rc);
}

/* ------------------------------------------------------------------ data, counters */

/* Element i of the pattern of @p seed. Unsigned arithmetic: seed * 1000003 exceeds
 * INT_MAX for the larger seeds, and a signed overflow is undefined (an optimizer may then
 * assume the seeds small and drop a loop's exit test). */
static int pattern(int seed, int i)
{
    return (int) ((unsigned) seed * 1000003u + (unsigned) i);
}

static void fill(int *buf, int n, int seed)
{
    for (int i = 0; i < n; ++i) {
        buf[i] = pattern(seed, i);
    }
}

static void verify(const int *buf, int n, int seed, int line)
{
    for (int i = 0; i < n; ++i) {
        if (buf[i] != pattern(seed, i)) {
            fail(line, "element %d of %d is %d, expected %d (seed %d)", i, n, buf[i],
                 pattern(seed, i), seed);
        }
    }
}

static int *alloc_ints(int n)
{
    int *p = malloc((size_t) n * sizeof *p);
    CHECK(NULL != p, "out of memory");
    return p;
}

static mpiv_apsm_counters_t counters(void)
{
    mpiv_apsm_counters_t c;
    memset(&c, 0, sizeof c);
    if (NULL != counters_fn) {
        CHECK(MPIV_OK == counters_fn(&c), "mpiv_apsm_counters_get failed");
    }
    return c;
}

/* Would APSM queue a message of this many bytes? */
static int queues(long long bytes)
{
    mpiv_apsm_counters_t c = counters();
    return EXPECT_APSM == expect &&
           (0 == c.eager_limit || (unsigned long long) bytes > c.eager_limit);
}

static void check_queued(const mpiv_apsm_counters_t *before, int delta, const char *what, int line)
{
    mpiv_apsm_counters_t now = counters();
    int expected = EXPECT_APSM == expect ? delta : 0;
    if ((long long) (now.queued - before->queued) != expected) {
        fail(line, "%s: %llu operations queued, expected %d", what,
             (unsigned long long) (now.queued - before->queued), expected);
    }
}

/* Wait (at most 20 s: a bound against hangs, not a timing check) until the progress thread
 * has completed and released everything it queued. */
static void check_drained(int line)
{
    if (EXPECT_APSM != expect) {
        return;
    }
    for (int i = 0; i < 20000; ++i) {
        mpiv_apsm_counters_t c = counters();
        if (c.completed == c.queued && c.released == c.queued) {
            return;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    mpiv_apsm_counters_t c = counters();
    fail(line, "operations left: queued %llu completed %llu released %llu",
         (unsigned long long) c.queued, (unsigned long long) c.completed,
         (unsigned long long) c.released);
}

/* Source, tag and count of a receive status. */
static void check_status(const MPI_Status *st, int source, int tag, int count, int line)
{
    int n = -1, flag = 1;
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &n));
    MPI_CHECK(MPI_Test_cancelled(st, &flag));
    if (st->MPI_SOURCE != source || st->MPI_TAG != tag || n != count || flag) {
        fail(line, "status source %d tag %d count %d cancelled %d, expected %d %d %d 0",
             st->MPI_SOURCE, st->MPI_TAG, n, flag, source, tag, count);
    }
}

/* ------------------------------------------------------------------ tests */

static void test_init(int required)
{
    int level = -1;
    MPI_CHECK(MPI_Query_thread(&level));
    CHECK(level == required, "MPI_Query_thread gives %d, the application asked for %d", level,
          required);
    mpiv_apsm_counters_t c = counters();
    CHECK((EXPECT_APSM == expect) == (1 == c.progress_thread),
          "progress thread running: %d, expected %d", c.progress_thread, EXPECT_APSM == expect);
}

/* Each send call with a small and a big message; the receiver uses Irecv (and wildcards). */
static void test_send_calls(void)
{
    typedef int (*isend_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
    static const struct {
        const char *name;
        isend_fn fn;
    } calls[] = {{"MPI_Isend", MPI_Isend},
                 {"MPI_Ibsend", MPI_Ibsend},
                 {"MPI_Issend", MPI_Issend},
                 {"MPI_Irsend", MPI_Irsend}};
    const int sizes[2] = {SMALL, BIG};
    int *buf = alloc_ints(BIG);
    int bsize = 2 * (BIG * (int) sizeof(int) + MPI_BSEND_OVERHEAD);
    void *battach = malloc((size_t) bsize);
    CHECK(NULL != battach, "out of memory");
    MPI_CHECK(MPI_Buffer_attach(battach, bsize));

    for (int c = 0; c < 4; ++c) {
        for (int s = 0; s < 2; ++s) {
            int n = sizes[s], tag = 100 + 2 * c + s, seed = tag;
            MPI_Request req;
            MPI_Status st;
            mpiv_apsm_counters_t before = counters();
            if (0 == rank) {
                int queued = queues((long long) n * (int) sizeof(int));
                fill(buf, n, seed);
                /* A ready send needs the receive posted: wait for rank 1's go. */
                MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                MPI_CHECK(calls[c].fn(buf, n, MPI_INT, 1, tag, MPI_COMM_WORLD, &req));
                check_queued(&before, queued, calls[c].name, __LINE__);
                MPI_CHECK(MPI_Wait(&req, &st));
                CHECK(MPI_REQUEST_NULL == req, "%s: request not freed by MPI_Wait", calls[c].name);
            } else {
                int queued = queues((long long) BIG * (int) sizeof(int));
                memset(buf, 0, (size_t) BIG * sizeof(int));
                /* Wildcards for the big messages. */
                MPI_CHECK(MPI_Irecv(buf, BIG, MPI_INT, s ? MPI_ANY_SOURCE : 0,
                                    s ? MPI_ANY_TAG : tag, MPI_COMM_WORLD, &req));
                check_queued(&before, queued, "MPI_Irecv", __LINE__);
                MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 99, MPI_COMM_WORLD));
                MPI_CHECK(MPI_Wait(&req, &st));
                check_status(&st, 0, tag, n, __LINE__);
                verify(buf, n, seed, __LINE__);
            }
        }
    }
    MPI_CHECK(MPI_Buffer_detach(&battach, &bsize));
    free(battach);
    free(buf);
    check_drained(__LINE__);
}

/* Partial receive, element counts, MPI_PROC_NULL, truncation. */
static void test_status(void)
{
    int *buf = alloc_ints(BIG);
    MPI_Request req;
    MPI_Status st;
    const int n = BIG - 3; /* odd: not a whole number of doubles */
    if (0 == rank) {
        fill(buf, BIG, 7);
        MPI_CHECK(MPI_Send(buf, n, MPI_INT, 1, 42, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(buf, BIG, MPI_INT, 1, 43, MPI_COMM_WORLD));
    } else {
        int count = -1;
        MPI_Count elements = -1;
        MPI_CHECK(MPI_Irecv(buf, BIG, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req));
        MPI_CHECK(MPI_Wait(&req, &st));
        check_status(&st, 0, 42, n, __LINE__);
        verify(buf, n, 7, __LINE__);
        MPI_CHECK(MPI_Get_elements_x(&st, MPI_INT, &elements));
        CHECK(n == elements, "MPI_Get_elements_x gives %lld, expected %d", (long long) elements, n);
        MPI_CHECK(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK(MPI_UNDEFINED == count, "MPI_Get_count(MPI_DOUBLE) gives %d, not MPI_UNDEFINED",
              count);

        /* Truncation: the error comes back in the status of a multiple-completion call. */
        MPI_Request reqs[1];
        MPI_Status sts[1];
        MPI_CHECK(MPI_Irecv(buf, BIG / 2, MPI_INT, 0, 43, MPI_COMM_WORLD, &reqs[0]));
        int rc = MPI_Waitall(1, reqs, sts);
        CHECK(MPI_ERR_IN_STATUS == error_class(rc), "MPI_Waitall gives %d, not MPI_ERR_IN_STATUS",
              rc);
        CHECK(has_class(sts[0].MPI_ERROR, MPI_ERR_TRUNCATE,
                        queues((long long) BIG / 2 * (int) sizeof(int))),
              "status error %d (class %d), not MPI_ERR_TRUNCATE", sts[0].MPI_ERROR,
              error_class(sts[0].MPI_ERROR));
        CHECK(0 == sts[0].MPI_SOURCE && 43 == sts[0].MPI_TAG, "truncated status source %d tag %d",
              sts[0].MPI_SOURCE, sts[0].MPI_TAG);
    }
    /* MPI_PROC_NULL completes at once and is never queued. (The source and tag of its status
     * are not checked: MPICH 4.0.2 leaves them at 0 instead of MPI_PROC_NULL, MPI_ANY_TAG.) */
    mpiv_apsm_counters_t before = counters();
    int count = -1;
    MPI_CHECK(MPI_Irecv(buf, BIG, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &req));
    check_queued(&before, 0, "MPI_Irecv from MPI_PROC_NULL", __LINE__);
    MPI_CHECK(MPI_Wait(&req, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(0 == count, "a receive from MPI_PROC_NULL gives count %d", count);
    free(buf);
    check_drained(__LINE__);
}

static void test_cancel(void)
{
    int *buf = alloc_ints(BIG);
    MPI_Request req;
    MPI_Status st;
    int flag = 0;
    mpiv_apsm_counters_t before = counters();

    /* A receive that nothing matches: big (queued) and small (bypassed). */
    const int sizes[2] = {BIG, SMALL};
    for (int s = 0; s < 2; ++s) {
        MPI_CHECK(MPI_Irecv(buf, sizes[s], MPI_INT, 1 - rank, 999, MPI_COMM_WORLD, &req));
        MPI_CHECK(MPI_Cancel(&req));
        MPI_CHECK(MPI_Wait(&req, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag, "a receive of %d ints that nothing matches was not cancelled", sizes[s]);
    }
    if (EXPECT_APSM == expect) {
        mpiv_apsm_counters_t c = counters();
        int queued = queues((long long) BIG * (int) sizeof(int)) +
                     queues((long long) SMALL * (int) sizeof(int));
        CHECK(queued == (int) (c.cancelled - before.cancelled),
              "%llu cancelled operations counted, expected %d",
              (unsigned long long) (c.cancelled - before.cancelled), queued);
    }

    /* Cancel after completion has no effect: the message is received. */
    if (0 == rank) {
        fill(buf, BIG, 11);
        MPI_CHECK(MPI_Send(buf, BIG, MPI_INT, 1, 11, MPI_COMM_WORLD));
    } else {
        MPI_CHECK(MPI_Irecv(buf, BIG, MPI_INT, 0, 11, MPI_COMM_WORLD, &req));
        for (flag = 0; !flag;) {
            MPI_CHECK(MPI_Request_get_status(req, &flag, MPI_STATUS_IGNORE));
        }
        MPI_CHECK(MPI_Cancel(&req));
        MPI_CHECK(MPI_Wait(&req, &st));
        check_status(&st, 0, 11, BIG, __LINE__);
        verify(buf, BIG, 11, __LINE__);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    free(buf);
    check_drained(__LINE__);
}

/* MPI_Request_free on a queued send: the message still arrives, nothing leaks. */
static void test_request_free(void)
{
    int *buf = alloc_ints(BIG);
    MPI_Request req;
    if (0 == rank) {
        mpiv_apsm_counters_t before = counters();
        fill(buf, BIG, 13);
        MPI_CHECK(MPI_Isend(buf, BIG, MPI_INT, 1, 13, MPI_COMM_WORLD, &req));
        check_queued(&before, 1, "MPI_Isend before MPI_Request_free", __LINE__);
        MPI_CHECK(MPI_Request_free(&req));
        CHECK(MPI_REQUEST_NULL == req, "MPI_Request_free left the handle set");
        /* The receiver's ack says the data arrived; only then may buf be reused. */
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(buf, BIG, MPI_INT, 0, 13, MPI_COMM_WORLD, &st));
        check_status(&st, 0, 13, BIG, __LINE__);
        verify(buf, BIG, 13, __LINE__);
        MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 14, MPI_COMM_WORLD));
    }
    free(buf);
    check_drained(__LINE__);
}

/*
 * A request array mixing bypassed and queued sends and receives, MPI_REQUEST_NULL and an
 * active persistent request, completed with each multiple-completion call.
 */
enum { NREQ = 6 };
enum completion { C_WAITALL, C_WAITANY, C_WAITSOME, C_TESTALL, C_TESTANY, C_TESTSOME, C_COUNT };
static const char *const completion_names[C_COUNT] = {"MPI_Waitall", "MPI_Waitany",
                                                      "MPI_Waitsome", "MPI_Testall",
                                                      "MPI_Testany", "MPI_Testsome"};

static void complete_all(enum completion how, MPI_Request *reqs, MPI_Status *sts)
{
    int done = 0, flag = 0, outcount = 0, index = 0, idx[NREQ];
    MPI_Status tmp[NREQ];
    int active = 0;
    for (int i = 0; i < NREQ; ++i) {
        active += MPI_REQUEST_NULL != reqs[i];
    }
    switch (how) {
    case C_WAITALL:
        MPI_CHECK(MPI_Waitall(NREQ, reqs, sts));
        break;
    case C_TESTALL:
        while (!flag) {
            MPI_CHECK(MPI_Testall(NREQ, reqs, &flag, sts));
        }
        break;
    case C_WAITANY:
    case C_TESTANY:
        while (done < active) {
            if (C_WAITANY == how) {
                MPI_CHECK(MPI_Waitany(NREQ, reqs, &index, &tmp[0]));
                flag = 1;
            } else {
                MPI_CHECK(MPI_Testany(NREQ, reqs, &index, &flag, &tmp[0]));
            }
            if (flag) {
                CHECK(MPI_UNDEFINED != index, "%s found no active request, %d of %d done",
                      completion_names[how], done, active);
                sts[index] = tmp[0];
                ++done;
            }
        }
        break;
    case C_WAITSOME:
    case C_TESTSOME:
        while (done < active) {
            if (C_WAITSOME == how) {
                MPI_CHECK(MPI_Waitsome(NREQ, reqs, &outcount, idx, tmp));
            } else {
                MPI_CHECK(MPI_Testsome(NREQ, reqs, &outcount, idx, tmp));
            }
            CHECK(MPI_UNDEFINED != outcount, "%s found no active request, %d of %d done",
                  completion_names[how], done, active);
            for (int k = 0; k < outcount; ++k) {
                sts[idx[k]] = tmp[k];
            }
            done += outcount;
        }
        break;
    case C_COUNT:
        break;
    }
}

static void test_mixed_completion(void)
{
    int peer = 1 - rank;
    int *sbig = alloc_ints(BIG), *rbig = alloc_ints(BIG), *pbig = alloc_ints(BIG);
    int ssmall[SMALL], rsmall[SMALL];
    MPI_Request persistent;
    /* Rank 0 sends with the persistent request, rank 1 receives with it. */
    if (0 == rank) {
        MPI_CHECK(MPI_Send_init(pbig, BIG, MPI_INT, peer, 20, MPI_COMM_WORLD, &persistent));
    } else {
        MPI_CHECK(MPI_Recv_init(pbig, BIG, MPI_INT, peer, 20, MPI_COMM_WORLD, &persistent));
    }
    for (int how = 0; how < C_COUNT; ++how) {
        MPI_Request reqs[NREQ];
        MPI_Status sts[NREQ];
        int base = 1000 * (how + 1);
        mpiv_apsm_counters_t before = counters();
        fill(sbig, BIG, base + rank);
        fill(ssmall, SMALL, base + 10 + rank);
        memset(rbig, 0, (size_t) BIG * sizeof(int));
        memset(rsmall, 0, sizeof rsmall);
        if (0 == rank) {
            fill(pbig, BIG, base + 20);
        } else {
            memset(pbig, 0, (size_t) BIG * sizeof(int));
        }
        MPI_CHECK(MPI_Irecv(rbig, BIG, MPI_INT, peer, 21, MPI_COMM_WORLD, &reqs[0]));
        MPI_CHECK(MPI_Irecv(rsmall, SMALL, MPI_INT, MPI_ANY_SOURCE, 22, MPI_COMM_WORLD, &reqs[1]));
        MPI_CHECK(MPI_Isend(sbig, BIG, MPI_INT, peer, 21, MPI_COMM_WORLD, &reqs[2]));
        MPI_CHECK(MPI_Isend(ssmall, SMALL, MPI_INT, peer, 22, MPI_COMM_WORLD, &reqs[3]));
        reqs[4] = MPI_REQUEST_NULL;
        MPI_CHECK(MPI_Start(&persistent));
        reqs[5] = persistent;
        int expected = 2 * queues((long long) BIG * (int) sizeof(int)) +
                       2 * queues((long long) SMALL * (int) sizeof(int));
        check_queued(&before, expected, completion_names[how], __LINE__);

        complete_all((enum completion) how, reqs, sts);
        for (int i = 0; i < 5; ++i) {
            CHECK(MPI_REQUEST_NULL == reqs[i], "%s left request %d set", completion_names[how], i);
        }
        CHECK(persistent == reqs[5], "%s freed the persistent request", completion_names[how]);
        check_status(&sts[0], peer, 21, BIG, __LINE__);
        check_status(&sts[1], peer, 22, SMALL, __LINE__);
        verify(rbig, BIG, base + peer, __LINE__);
        verify(rsmall, SMALL, base + 10 + peer, __LINE__);
        if (1 == rank) {
            check_status(&sts[5], peer, 20, BIG, __LINE__);
            verify(pbig, BIG, base + 20, __LINE__);
        }
        if (C_WAITALL == how || C_TESTALL == how) {
            /* MPI_REQUEST_NULL gets the empty status. */
            check_status(&sts[4], MPI_ANY_SOURCE, MPI_ANY_TAG, 0, __LINE__);
        }
    }
    MPI_CHECK(MPI_Request_free(&persistent));
    free(sbig);
    free(rbig);
    free(pbig);
    check_drained(__LINE__);
}

/* Many threads post big and small sends and receives at once (MPI_THREAD_MULTIPLE only). */
static void *thread_body(void *arg)
{
    int t = (int) (intptr_t) arg, peer = 1 - rank;
    int *sbig = alloc_ints(BIG), *rbig = alloc_ints(BIG);
    int ssmall[SMALL], rsmall[SMALL];
    for (int r = 0; r < THREAD_ROUNDS; ++r) {
        MPI_Request reqs[4];
        MPI_Status sts[4];
        int seed = (t * THREAD_ROUNDS + r) * 4;
        fill(sbig, BIG, seed + rank);
        fill(ssmall, SMALL, seed + 2 + rank);
        MPI_CHECK(MPI_Irecv(rbig, BIG, MPI_INT, peer, 2 * t, MPI_COMM_WORLD, &reqs[0]));
        MPI_CHECK(MPI_Irecv(rsmall, SMALL, MPI_INT, peer, 2 * t + 1, MPI_COMM_WORLD, &reqs[1]));
        MPI_CHECK(MPI_Isend(sbig, BIG, MPI_INT, peer, 2 * t, MPI_COMM_WORLD, &reqs[2]));
        MPI_CHECK(MPI_Isend(ssmall, SMALL, MPI_INT, peer, 2 * t + 1, MPI_COMM_WORLD, &reqs[3]));
        MPI_CHECK(MPI_Waitall(4, reqs, sts));
        check_status(&sts[0], peer, 2 * t, BIG, __LINE__);
        check_status(&sts[1], peer, 2 * t + 1, SMALL, __LINE__);
        verify(rbig, BIG, seed + peer, __LINE__);
        verify(rsmall, SMALL, seed + 2 + peer, __LINE__);
    }
    free(sbig);
    free(rbig);
    return NULL;
}

static void test_threads(void)
{
    pthread_t threads[THREADS];
    mpiv_apsm_counters_t before = counters();
    int expected = THREADS * THREAD_ROUNDS *
                   (2 * queues((long long) BIG * (int) sizeof(int)) +
                    2 * queues((long long) SMALL * (int) sizeof(int)));
    for (int t = 0; t < THREADS; ++t) {
        CHECK(0 == pthread_create(&threads[t], NULL, thread_body, (void *) (intptr_t) t),
              "pthread_create failed");
    }
    for (int t = 0; t < THREADS; ++t) {
        pthread_join(threads[t], NULL);
    }
    check_queued(&before, expected, "threads", __LINE__);
    check_drained(__LINE__);
}

/* ------------------------------------------------------------------ MPI-IO */

static void io_wait_count(MPI_Request *req, int count, const char *what, int line)
{
    MPI_Status st;
    int n = -1;
    MPI_CHECK(MPI_Wait(req, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    if (n != count) {
        fail(line, "%s: status count %d, expected %d", what, n, count);
    }
}

static void test_io(const char *path)
{
    enum { B = BIG };             /* ints per block */
    const MPI_Offset blk = (MPI_Offset) B * (MPI_Offset) sizeof(int);
    int *a = alloc_ints(B), *b = alloc_ints(B), *r = alloc_ints(2 * B);
    MPI_File fh;
    MPI_Request req;
    mpiv_apsm_counters_t before = counters();

    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
                            &fh));
    /* Region 0: explicit offsets, block i at i * blk. */
    fill(a, B, 300 + rank);
    MPI_CHECK(MPI_File_iwrite_at(fh, rank * blk, a, B, MPI_INT, &req));
    io_wait_count(&req, B, "MPI_File_iwrite_at", __LINE__);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_File_iread_at(fh, (1 - rank) * blk, r, B, MPI_INT, &req));
    io_wait_count(&req, B, "MPI_File_iread_at", __LINE__);
    verify(r, B, 301 - rank, __LINE__);

    /* Region 1 (rank's two blocks at 2 + 2 * rank): the individual pointer moves at call time,
     * so a blocking write right after MPI_File_iwrite lands in the next block. A derived type
     * freed right after the call must still work. */
    MPI_Datatype quad;
    MPI_CHECK(MPI_Type_contiguous(4, MPI_INT, &quad));
    MPI_CHECK(MPI_Type_commit(&quad));
    fill(a, B, 310 + rank);
    fill(b, B, 320 + rank);
    MPI_Offset start = (2 + 2 * rank) * blk, pos = -1;
    MPI_CHECK(MPI_File_seek(fh, start, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_iwrite(fh, a, B / 4, quad, &req));
    MPI_CHECK(MPI_Type_free(&quad));
    MPI_CHECK(MPI_File_write(fh, b, B, MPI_INT, MPI_STATUS_IGNORE));
    io_wait_count(&req, B, "MPI_File_iwrite", __LINE__);
    MPI_CHECK(MPI_File_get_position(fh, &pos));
    CHECK(start + 2 * blk == pos, "file pointer at %lld after iwrite+write, expected %lld",
          (long long) pos, (long long) (start + 2 * blk));
    MPI_CHECK(MPI_File_read_at(fh, start, r, 2 * B, MPI_INT, MPI_STATUS_IGNORE));
    verify(r, B, 310 + rank, __LINE__);
    verify(r + B, B, 320 + rank, __LINE__);
    /* The same with reads. */
    MPI_CHECK(MPI_File_seek(fh, start, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_iread(fh, a, B, MPI_INT, &req));
    MPI_CHECK(MPI_File_read(fh, b, B, MPI_INT, MPI_STATUS_IGNORE));
    io_wait_count(&req, B, "MPI_File_iread", __LINE__);
    verify(a, B, 310 + rank, __LINE__);
    verify(b, B, 320 + rank, __LINE__);

    /* Region 2 (blocks 6 and 7): the shared pointer; the two ranks' blocks come in either order. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_File_seek_shared(fh, 6 * blk, MPI_SEEK_SET));
    fill(a, B, 330 + rank);
    MPI_CHECK(MPI_File_iwrite_shared(fh, a, B, MPI_INT, &req));
    io_wait_count(&req, B, "MPI_File_iwrite_shared", __LINE__);
    MPI_CHECK(MPI_File_sync(fh));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_File_sync(fh));
    MPI_CHECK(MPI_File_read_at(fh, 6 * blk, r, 2 * B, MPI_INT, MPI_STATUS_IGNORE));
    int first = r[0] == 330 * 1000003 ? 330 : 331;
    verify(r, B, first, __LINE__);
    verify(r + B, B, 661 - first, __LINE__);
    MPI_CHECK(MPI_File_seek_shared(fh, 6 * blk, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_iread_shared(fh, a, B, MPI_INT, &req));
    io_wait_count(&req, B, "MPI_File_iread_shared", __LINE__);
    int mine = a[0] == 330 * 1000003 ? 330 : 331, theirs = -1;
    verify(a, B, mine, __LINE__);
    MPI_CHECK(MPI_Sendrecv(&mine, 1, MPI_INT, 1 - rank, 30, &theirs, 1, MPI_INT, 1 - rank, 30,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(mine != theirs, "both ranks read block %d through the shared pointer", mine);
    check_queued(&before, 6, "MPI-IO calls", __LINE__);

    /* A write to a read-only handle fails, with APSM in the completion call instead of the
     * call itself; the error class must come through unchanged. */
    MPI_File ro;
    MPI_CHECK(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &ro));
    int rc = MPI_File_iwrite_at(ro, 0, a, B, MPI_INT, &req);
    if (MPI_SUCCESS == rc) {
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    CHECK(has_class(rc, MPI_ERR_READ_ONLY, EXPECT_APSM == expect) ||
              has_class(rc, MPI_ERR_ACCESS, EXPECT_APSM == expect),
          "MPI_File_iwrite_at on a read-only file gives error %d (class %d)", rc, error_class(rc));
    MPI_CHECK(MPI_File_close(&ro));

    MPI_CHECK(MPI_File_close(&fh));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (0 == rank) {
        MPI_CHECK(MPI_File_delete(path, MPI_INFO_NULL));
    }
    free(a);
    free(b);
    free(r);
    check_drained(__LINE__);
}

/* ------------------------------------------------------------------ main */

static void usage(void)
{
    fprintf(stderr, "usage: test-apsm --expect plain|apsm|disabled --file PATH "
                    "[--init single|multiple]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int required = MPI_THREAD_MULTIPLE, provided = -1, size = 0;
    int expect_set = 0;
    for (int i = 1; i < argc; ++i) {
        if (0 == strcmp(argv[i], "--expect") && i + 1 < argc) {
            const char *e = argv[++i];
            expect = 0 == strcmp(e, "apsm") ? EXPECT_APSM
                     : 0 == strcmp(e, "disabled") ? EXPECT_DISABLED
                                                  : EXPECT_PLAIN;
            expect_set = 0 == strcmp(e, "apsm") || 0 == strcmp(e, "disabled") ||
                         0 == strcmp(e, "plain");
        } else if (0 == strcmp(argv[i], "--file") && i + 1 < argc) {
            path = argv[++i];
        } else if (0 == strcmp(argv[i], "--init") && i + 1 < argc) {
            ++i;
            required = 0 == strcmp(argv[i], "single") ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE;
        } else {
            usage();
        }
    }
    if (!expect_set || NULL == path) {
        usage();
    }
    *(void **) &counters_fn = dlsym(RTLD_DEFAULT, "mpiv_apsm_counters_get");
    if ((EXPECT_PLAIN == expect) != (NULL == counters_fn)) {
        fprintf(stderr, "test-apsm: libmpiv-apsm is %s, expected %s\n",
                NULL == counters_fn ? "not loaded" : "loaded",
                EXPECT_PLAIN == expect ? "not loaded" : "loaded");
        return 1;
    }

    if (MPI_THREAD_SINGLE == required) {
        MPI_CHECK(MPI_Init(&argc, &argv));
    } else {
        MPI_CHECK(MPI_Init_thread(&argc, &argv, required, &provided));
        CHECK(provided == required, "MPI_Init_thread provided %d, expected %d", provided,
              required);
    }
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(2 == size, "needs 2 processes, has %d", size);

    test_init(required);
    test_send_calls();
    test_status();
    test_cancel();
    test_request_free();
    test_mixed_completion();
    if (MPI_THREAD_MULTIPLE == required) {
        test_threads();
    }
    test_io(path);

    /* A freed send still in flight at MPI_Finalize must arrive and nothing may hang. */
    int *buf = alloc_ints(BIG);
    mpiv_apsm_counters_t before = counters();
    if (0 == rank) {
        MPI_Request req;
        fill(buf, BIG, 77);
        MPI_CHECK(MPI_Isend(buf, BIG, MPI_INT, 1, 77, MPI_COMM_WORLD, &req));
        MPI_CHECK(MPI_Request_free(&req));
    } else {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(buf, BIG, MPI_INT, 0, 77, MPI_COMM_WORLD, &st));
        check_status(&st, 0, 77, BIG, __LINE__);
        verify(buf, BIG, 77, __LINE__);
    }
    /* MPIV_APSM_WAIT=yield: some wait found operations queued and tested and yielded;
     * library: none did. */
    const char *wait = getenv("MPIV_APSM_WAIT");
    mpiv_apsm_counters_t w = counters();
    const bool yield = NULL != wait && 0 == strcmp(wait, "yield");
    if (EXPECT_APSM == expect && (yield || (NULL != wait && 0 == strcmp(wait, "library"))) &&
        yield != (w.yielding_waits > 0)) {
        fprintf(stderr, "test-apsm: rank %d: %llu yielding waits with MPIV_APSM_WAIT=%s\n", rank,
                (unsigned long long) w.yielding_waits, wait);
        return 1;
    }
    MPI_CHECK(MPI_Finalize());
    mpiv_apsm_counters_t c = counters();
    if (EXPECT_APSM == expect) {
        if (c.progress_thread || c.released != c.queued || c.completed != c.queued ||
            c.queued - before.queued != (0 == rank)) {
            fprintf(stderr, "test-apsm: rank %d: after MPI_Finalize: progress thread %d, "
                            "queued %llu (+%llu), completed %llu, released %llu\n",
                    rank, c.progress_thread, (unsigned long long) c.queued,
                    (unsigned long long) (c.queued - before.queued),
                    (unsigned long long) c.completed, (unsigned long long) c.released);
            return 1;
        }
    } else if (0 != c.queued) {
        fprintf(stderr, "test-apsm: rank %d: %llu operations queued with APSM disabled\n", rank,
                (unsigned long long) c.queued);
        return 1;
    }
    free(buf);
    printf("test-apsm: rank %d: all checks passed (%s)\n", rank,
           EXPECT_APSM == expect ? "apsm" : EXPECT_DISABLED == expect ? "disabled" : "plain");
    return 0;
}
