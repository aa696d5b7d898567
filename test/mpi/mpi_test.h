/*
 * mpi_test.h: helpers shared by the MPI point-to-point tests in test/mpi/.
 *
 * Every test fails loudly: a failed check prints "[test rank N] FAIL file:line: what: expected
 * X, got Y" on stderr and calls MPI_Abort, so mpirun exits non-zero.  Payloads carry a byte
 * pattern derived from a seed, so a misplaced, shifted or stale byte is caught and reported
 * with its offset.  Everything here is static so each test is a single translation unit.
 */
#ifndef MPIV_TEST_MPI_TEST_H
#define MPIV_TEST_MPI_TEST_H

/* clock_gettime, nanosleep and pthreads under -std=c11 */
#ifndef _POSIX_C_SOURCE
#    define _POSIX_C_SOURCE 200809L
#endif

#include <mpi.h>

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *mt_test_name = "mpi_test"; /* set by mt_init() */
static int mt_rank = -1;                      /* rank in MPI_COMM_WORLD */
static int mt_size = 0;                       /* size of MPI_COMM_WORLD */

/** Prints a failure message with rank and location, then aborts the whole job. */
static inline void mt_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static inline void mt_fail_at(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%s rank %d] FAIL %s:%d: %s\n", mt_test_name, mt_rank, file, line, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort should not return */
}

#define MT_FAIL(...) mt_fail_at(__FILE__, __LINE__, __VA_ARGS__)

/** Fails unless `_cond` holds; the remaining arguments are a printf-style explanation. */
#define MT_CHECK(_cond, ...)      \
    do {                          \
        if (!(_cond)) {           \
            MT_FAIL(__VA_ARGS__); \
        }                         \
    } while (0)

/** Fails unless two integers are equal, printing both. */
#define MT_EXPECT_EQ(_what, _expected, _got)                                   \
    do {                                                                       \
        long long mt_e_ = (long long) (_expected), mt_g_ = (long long) (_got); \
        if (mt_e_ != mt_g_) {                                                  \
            MT_FAIL("%s: expected %lld, got %lld", (_what), mt_e_, mt_g_);     \
        }                                                                      \
    } while (0)

/** Runs an MPI call and fails with the MPI error string unless it returns MPI_SUCCESS. */
#define MT_CALL(_call)                                               \
    do {                                                             \
        int mt_rc_ = (_call);                                        \
        if (MPI_SUCCESS != mt_rc_) {                                 \
            char mt_err_[MPI_MAX_ERROR_STRING];                      \
            int mt_len_ = 0;                                         \
            MPI_Error_string(mt_rc_, mt_err_, &mt_len_);             \
            MT_FAIL("%s returned %d (%s)", #_call, mt_rc_, mt_err_); \
        }                                                            \
    } while (0)

/** malloc that fails the test instead of returning NULL. */
static inline void *mt_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    MT_CHECK(NULL != p, "malloc(%zu) failed", bytes);
    return p;
}

/** The pattern byte at offset `i` of a payload with seed `seed`. */
static inline uint8_t mt_pattern_byte(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u + (uint32_t) i * 40503u + (uint32_t) (i >> 16) * 97u;
    return (uint8_t) (x ^ (x >> 11) ^ (x >> 23));
}

/** Fills `bytes` bytes of `buf` with the pattern of `seed`. */
static inline void mt_fill(void *buf, size_t bytes, uint32_t seed)
{
    uint8_t *b = (uint8_t *) buf;
    for (size_t i = 0; i < bytes; ++i) {
        b[i] = mt_pattern_byte(seed, i);
    }
}

/** Fails with the first differing offset unless `buf` holds the pattern of `seed`. */
static inline void mt_verify_at(const char *file, int line, const void *buf, size_t bytes,
                                uint32_t seed, const char *what)
{
    const uint8_t *b = (const uint8_t *) buf;
    for (size_t i = 0; i < bytes; ++i) {
        if (b[i] != mt_pattern_byte(seed, i)) {
            mt_fail_at(file, line, "%s: payload byte %zu of %zu: expected 0x%02x, got 0x%02x", what,
                       i, bytes, mt_pattern_byte(seed, i), b[i]);
        }
    }
}
#define MT_VERIFY(_buf, _bytes, _seed, _what) \
    mt_verify_at(__FILE__, __LINE__, (_buf), (_bytes), (_seed), (_what))

/** Fails unless all `bytes` bytes of `buf` equal `value` (guard areas, untouched gaps). */
static inline void mt_verify_fill_at(const char *file, int line, const void *buf, size_t bytes,
                                     uint8_t value, const char *what)
{
    const uint8_t *b = (const uint8_t *) buf;
    for (size_t i = 0; i < bytes; ++i) {
        if (b[i] != value) {
            mt_fail_at(file, line,
                       "%s: byte %zu of %zu was overwritten: expected 0x%02x, got 0x%02x", what, i,
                       bytes, value, b[i]);
        }
    }
}
#define MT_VERIFY_FILL(_buf, _bytes, _value, _what) \
    mt_verify_fill_at(__FILE__, __LINE__, (_buf), (_bytes), (_value), (_what))

/** Checks source, tag and MPI_Get_count of a receive status. */
static inline void mt_check_status_at(const char *file, int line, const MPI_Status *status,
                                      int source, int tag, MPI_Datatype type, int count,
                                      const char *what)
{
    int got = -1;
    if (status->MPI_SOURCE != source) {
        mt_fail_at(file, line, "%s: status.MPI_SOURCE: expected %d, got %d", what, source,
                   status->MPI_SOURCE);
    }
    if (status->MPI_TAG != tag) {
        mt_fail_at(file, line, "%s: status.MPI_TAG: expected %d, got %d", what, tag,
                   status->MPI_TAG);
    }
    MPI_Get_count(status, type, &got);
    if (got != count) {
        mt_fail_at(file, line, "%s: MPI_Get_count: expected %d, got %d", what, count, got);
    }
}
#define MT_CHECK_STATUS(_status, _source, _tag, _type, _count, _what) \
    mt_check_status_at(__FILE__, __LINE__, (_status), (_source), (_tag), (_type), (_count), (_what))

/** Integer from the environment, or `dflt` when unset or empty. */
/* The worker endpoint MPI_Comm_get_info reports for an mpiv endpoints handle @p h (key
 * mpiv_worker), or -1 when the key is not there. A value that is not a worker endpoint
 * fails the test. */
static inline int mt_reported_worker(MPI_Comm h)
{
    MPI_Info got;
    char value[16] = "", *end = NULL;
    int flag = 0;
    MT_CALL(MPI_Comm_get_info(h, &got));
    MT_CALL(MPI_Info_get(got, "mpiv_worker", (int) sizeof(value) - 1, value, &flag));
    MT_CALL(MPI_Info_free(&got));
    if (!flag) {
        return -1;
    }
    const long w = strtol(value, &end, 10);
    MT_CHECK('\0' != value[0] && '\0' == *end && w >= 0 && w < 256,
             "mpiv_worker reported as '%s', not a worker endpoint", value);
    return (int) w;
}

static inline long mt_env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return (NULL != s && '\0' != *s) ? strtol(s, NULL, 0) : dflt;
}

/**
 * Iteration count of a stress loop: `--iters=N` on the command line, else MPIV_TEST_ITERS,
 * else `dflt` scaled by MPIV_TEST_TIME_MULTIPLIER (house rule for stress loops).
 */
static inline long mt_iterations(int argc, char **argv, long dflt)
{
    for (int i = 1; i < argc; ++i) {
        if (0 == strncmp(argv[i], "--iters=", 8)) {
            return strtol(argv[i] + 8, NULL, 0);
        }
    }
    long iters = mt_env_long("MPIV_TEST_ITERS", 0);
    if (iters > 0) {
        return iters;
    }
    long mult = mt_env_long("MPIV_TEST_TIME_MULTIPLIER", 1);
    return dflt * (mult > 0 ? mult : 1);
}

/** Monotonic seconds. */
static inline double mt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static inline void mt_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
    while (0 != nanosleep(&ts, &ts)) {
    }
}

static inline void mt_watchdog_fired(int sig)
{
    static const char msg[] = "FAIL watchdog: the test did not finish in time (deadlock?)\n";
    (void) sig;
    (void) !write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(3);
}

/**
 * Ends the process with a message if the test is still running after `seconds`; a hang then
 * says which test and rank instead of waiting for the runner's timeout.
 */
static inline void mt_watchdog_start(unsigned seconds)
{
    signal(SIGALRM, mt_watchdog_fired);
    alarm(seconds);
}

/**
 * MPI_Init_thread with a check that the `required` level is provided. MPIV_TEST_THREAD_MULTIPLE=1
 * asks for MPI_THREAD_MULTIPLE whatever the test needs, so that a single-threaded test also
 * runs the library's thread-safe paths (mpiv takes lock-free serial paths below it).
 */
static inline void mt_init(int *argc, char ***argv, const char *name, int required)
{
    int provided = -1;
    mt_test_name = name;
    if (0 != mt_env_long("MPIV_TEST_THREAD_MULTIPLE", 0)) {
        required = MPI_THREAD_MULTIPLE;
    }
    MT_CALL(MPI_Init_thread(argc, argv, required, &provided));
    MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
    MT_CHECK(provided >= required, "MPI_Init_thread: required thread level %d, provided %d",
             required, provided);
}

/** Runs `fn` on `n` new threads (1 .. 256), each given its index 0 .. n-1 as
 *  (void *) (intptr_t) index, and joins them. */
static inline void mt_run_threads(int n, void *(*fn)(void *))
{
    pthread_t tids[256];
    MT_CHECK(n >= 1 && n <= 256, "thread count %d is not in 1..256", n);
    for (int t = 0; t < n; ++t) {
        MT_CHECK(0 == pthread_create(&tids[t], NULL, fn, (void *) (intptr_t) t),
                 "pthread_create failed");
    }
    for (int t = 0; t < n; ++t) {
        pthread_join(tids[t], NULL);
    }
}

/** Fails unless the job has at least `min` processes. */
static inline void mt_require_size(int min)
{
    MT_CHECK(mt_size >= min, "this test needs at least %d processes, got %d", min, mt_size);
}

/**
 * True when the job runs on PML `name` (mpirun passes `--mca pml NAME` on as OMPI_MCA_pml).
 * Used only to tolerate bugs of Open MPI's own ob1 that the PML under test must not have.
 */
static inline int mt_pml_is(const char *name)
{
    const char *pml = getenv("OMPI_MCA_pml");
    return NULL != pml && 0 == strcmp(pml, name);
}

/** Synchronises, reports PASS from rank 0 and finalizes; returns the exit code for main. */
static inline int mt_finish(void)
{
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (0 == mt_rank) {
        printf("PASS %s (%d processes)\n", mt_test_name, mt_size);
        fflush(stdout);
    }
    MT_CALL(MPI_Finalize());
    return 0;
}

#endif /* MPIV_TEST_MPI_TEST_H */
