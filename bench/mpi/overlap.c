/*
 * overlap: does non-blocking communication overlap computation? (seed 002, §5.1)
 *
 * Two processes. Rank 0 starts a non-blocking operation on V bytes, computes for t_work (a
 * calibrated busy loop, not a sleep: a sleeping process would leave its core to a progress
 * thread), then waits:
 *   mode=isend  rank 0: MPI_Isend, work, MPI_Wait    rank 1: MPI_Recv
 *   mode=irecv  rank 0: MPI_Irecv, work, MPI_Wait    rank 1: MPI_Send
 * (--peer-wait sleep: rank 1 starts MPI_Irecv/MPI_Isend and polls MPI_Test with 20 us sleeps,
 * leaving its core to others between polls; the transfer then advances only as far as rank 1's
 * polls carry it, which shows how much of it needs the peer's progress.) Rank 1 takes its
 * options from rank 0, so an MPMD launch may pass it different arguments or environment.
 * Rank 0 measures, per size and work time, the medians over --reps repetitions of
 *   t_comm    the operation alone (start, then wait at once)
 *   t_work    the busy loop alone
 *   t_total   start, busy loop, wait
 *   t_work_in_total  the busy loop inside t_total (longer than t_work when something else,
 *             e.g. a progress thread, took CPU time from it)
 *   t_post_in_total  the MPI_Isend/MPI_Irecv call inside t_total (long when the library moves
 *             the data inside the call, e.g. a receive that finds its message already there)
 * and reports overlap = (t_comm + t_work - t_total) / min(t_comm, t_work): 0 when nothing
 * overlaps (t_total = t_comm + t_work), 1 when everything does (t_total = max(t_comm,
 * t_work)); and total_over_max = t_total / max(t_comm, t_work).
 *
 * Output: one line per data point and metric on stdout (rank 0):
 *   bench=overlap impl=I threads=1 size=S metric=M value=V unit=U mode=isend|irecv work_us=W
 *   peer_wait=spin|sleep
 * Every MPI call is checked; an error prints the call and the MPI error string and aborts with
 * exit code 3; a data mismatch (the data is checked on the first repetition of each point)
 * aborts with 4; a usage error exits with 2.
 *
 * Build: mpicc -O2 -o overlap overlap.c (any MPI library).
 * Run:   mpirun -np 2 ./overlap [--sizes 1M,4M] [--work-us auto|LIST] [--mode both|isend|irecv]
 *        [--reps 50] [--warmup 5] [--peer-wait spin|sleep] [--impl NAME]   (impl= defaults to
 *        $MPIV_BENCH_IMPL, else ompi/mpich from the library version)
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_USAGE = 2, EXIT_MPI = 3, EXIT_DATA = 4, MAX_LIST = 64 };

static int rank;

static void check_mpi(int rc, const char *call, int line)
{
    if (MPI_SUCCESS != rc) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        if (MPI_SUCCESS != MPI_Error_string(rc, text, &len)) {
            snprintf(text, sizeof text, "MPI error code %d", rc);
        }
        fprintf(stderr, "overlap: rank %d: %s failed at line %d: %s\n", rank, call, line, text);
        MPI_Abort(MPI_COMM_WORLD, EXIT_MPI);
        exit(EXIT_MPI);
    }
}
#define MPI_CHECK(_call) check_mpi((_call), #_call, __LINE__)

static void usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "overlap: %s '%s' (try --help)\n", what, arg);
    exit(EXIT_USAGE);
}

/* ------------------------------------------------------------------ options */

struct options {
    long sizes[MAX_LIST]; /* bytes */
    int nsizes;
    double work_us[MAX_LIST]; /* < 0: auto (= the measured t_comm of the size) */
    int nwork;
    int isend, irecv; /* modes to run */
    int peer_sleep;   /* rank 1 waits with MPI_Test and 20 us sleeps instead of blocking */
    int reps, warmup;
    const char *impl; /* rank 0 only */
};

/* A non-negative integer with an optional k/K (2^10) or m/M (2^20) suffix. */
static long parse_size(const char *text)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || v < 0) {
        usage_error("bad size", text);
    }
    if ('k' == *end || 'K' == *end) {
        v <<= 10;
        ++end;
    } else if ('m' == *end || 'M' == *end) {
        v <<= 20;
        ++end;
    }
    if ('\0' != *end || v > (1L << 30)) {
        usage_error("bad size (at most 1 GiB)", text);
    }
    return v;
}

/* Split a comma-separated list; returns the number of items. */
static int split(char *text, char **items)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(text, ",", &save); NULL != t; t = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) {
            usage_error("too many list items in", text);
        }
        items[n++] = t;
    }
    return n;
}

static void parse(int argc, char **argv, struct options *o)
{
    char sizes[256] = "1M,4M", work[256] = "auto", *items[MAX_LIST], *end = NULL;
    const char *mode = "both";
    memset(o, 0, sizeof *o);
    o->reps = 50;
    o->warmup = 5;
    o->impl = getenv("MPIV_BENCH_IMPL");
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (0 == strcmp(arg, "--help") || 0 == strcmp(arg, "-h")) {
            printf("usage: mpirun -np 2 overlap [--sizes LIST] [--work-us auto|LIST] "
                   "[--mode both|isend|irecv]\n"
                   "                          [--reps N] [--warmup N] [--peer-wait spin|sleep] "
                   "[--impl NAME]\n"
                   "  --sizes    message sizes in bytes, k/M suffixes (default 1M,4M)\n"
                   "  --work-us  busy-loop times in microseconds; auto = the measured t_comm "
                   "of each size (default)\n"
                   "  --mode     isend: rank 0 overlaps an MPI_Isend; irecv: an MPI_Irecv "
                   "(default both)\n"
                   "  --reps     timed repetitions per point, medians reported (default 50)\n"
                   "  --warmup   untimed repetitions per point (default 5)\n"
                   "  --peer-wait  spin: rank 1 uses blocking MPI_Recv/MPI_Send (default);\n"
                   "             sleep: MPI_Irecv/MPI_Isend, then MPI_Test with 20 us sleeps "
                   "(rank 1's core\n"
                   "             is free between polls)\n"
                   "  --impl     impl= value (default $MPIV_BENCH_IMPL, else from the "
                   "library)\n");
            exit(0);
        }
        static const char *const known[] = {"--sizes", "--work-us", "--mode", "--reps",
                                            "--warmup", "--peer-wait", "--impl"};
        int is_known = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; ++k) {
            is_known |= 0 == strcmp(arg, known[k]);
        }
        if (!is_known) {
            usage_error("unknown option", arg);
        }
        if (NULL == val) {
            usage_error("missing value after", arg);
        }
        if (0 == strcmp(arg, "--sizes")) {
            snprintf(sizes, sizeof sizes, "%s", val);
        } else if (0 == strcmp(arg, "--work-us")) {
            snprintf(work, sizeof work, "%s", val);
        } else if (0 == strcmp(arg, "--mode")) {
            mode = val;
        } else if (0 == strcmp(arg, "--reps")) {
            o->reps = (int) strtol(val, &end, 10);
            if ('\0' != *end || o->reps < 1 || o->reps > 100000) {
                usage_error("bad --reps", val);
            }
        } else if (0 == strcmp(arg, "--warmup")) {
            o->warmup = (int) strtol(val, &end, 10);
            if ('\0' != *end || o->warmup < 1 || o->warmup > 100000) {
                usage_error("bad --warmup (at least 1: it checks the data)", val);
            }
        } else if (0 == strcmp(arg, "--peer-wait")) {
            if (0 != strcmp(val, "spin") && 0 != strcmp(val, "sleep")) {
                usage_error("--peer-wait takes spin or sleep, not", val);
            }
            o->peer_sleep = 0 == strcmp(val, "sleep");
        } else {
            o->impl = val;
        }
        ++i;
    }
    o->nsizes = split(sizes, items);
    for (int i = 0; i < o->nsizes; ++i) {
        o->sizes[i] = parse_size(items[i]);
    }
    o->nwork = split(work, items);
    for (int i = 0; i < o->nwork; ++i) {
        if (0 == strcmp(items[i], "auto")) {
            o->work_us[i] = -1.0;
        } else {
            o->work_us[i] = strtod(items[i], &end);
            if ('\0' != *end || !(o->work_us[i] >= 0.0)) {
                usage_error("bad work time", items[i]);
            }
        }
    }
    o->isend = 0 == strcmp(mode, "isend") || 0 == strcmp(mode, "both");
    o->irecv = 0 == strcmp(mode, "irecv") || 0 == strcmp(mode, "both");
    if (0 == o->nsizes || 0 == o->nwork || !(o->isend || o->irecv)) {
        usage_error("bad --sizes, --work-us or --mode", mode);
    }
}

/* ------------------------------------------------------------------ work, data, statistics */

static double sink; /* keeps the busy loop's result alive */

/* A chain of dependent floating-point operations: runs at a fixed rate, touches no memory. */
static void busy(long iters)
{
    double x = sink + 1.0;
    for (long i = 0; i < iters; ++i) {
        x = x * 1.0000000001 + 1e-10;
    }
    sink = x;
}

/*
 * Busy-loop iterations per microsecond: the fastest of 20 runs of about 1 ms, so that runs in
 * which the process was preempted (a shared machine) do not count.
 */
static double calibrate(void)
{
    long iters = 1 << 10;
    double best = 0.0;
    for (double t = 0.0; t < 1e-3; iters *= 2) {
        double t0 = MPI_Wtime();
        busy(iters);
        t = MPI_Wtime() - t0;
    }
    for (int i = 0; i < 20; ++i) {
        double t0 = MPI_Wtime();
        busy(iters);
        double rate = (double) iters / ((MPI_Wtime() - t0) * 1e6);
        best = rate > best ? rate : best;
    }
    return best;
}

static unsigned char pattern(long i, long size, int mode)
{
    return (unsigned char) (i * 7 + (i >> 8) * 13 + size * 31 + mode * 101 + 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------------ measurement */

enum phase { COMM, WORK, TOTAL };
enum { MODE_ISEND, MODE_IRECV };

/* Median times of one phase, in microseconds. */
struct phase_times {
    double total; /* start to end */
    double work;  /* the busy loop */
    double post;  /* the MPI_Isend/MPI_Irecv call */
};

/*
 * One phase of one data point: warm-up repetitions (the first checks the data), then timed
 * ones. Rank 0 gets the medians in *t.
 */
static void run_phase(enum phase phase, int mode, long size, long iters, unsigned char *buf,
                      const struct options *o, struct phase_times *t)
{
    double *samples = malloc(3 * (size_t) o->reps * sizeof *samples);
    if (NULL == samples) {
        fprintf(stderr, "overlap: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, EXIT_MPI);
    }
    double *inner = samples + o->reps, *post = inner + o->reps;
    int sender = MODE_ISEND == mode ? 0 : 1;
    int count = (int) size;
    for (int r = -o->warmup; r < o->reps; ++r) {
        int check = r == -o->warmup && COMM == phase;
        if (check && rank != sender) {
            memset(buf, 0, (size_t) size);
        }
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (0 == rank) {
            MPI_Request req;
            double t0 = MPI_Wtime(), w0 = t0, w1 = t0;
            if (WORK != phase) {
                if (MODE_ISEND == mode) {
                    MPI_CHECK(MPI_Isend(buf, count, MPI_BYTE, 1, 0, MPI_COMM_WORLD, &req));
                } else {
                    MPI_CHECK(MPI_Irecv(buf, count, MPI_BYTE, 1, 0, MPI_COMM_WORLD, &req));
                }
                w0 = w1 = MPI_Wtime();
            }
            if (COMM != phase) {
                w0 = MPI_Wtime();
                busy(iters);
                w1 = MPI_Wtime();
            }
            MPI_Status st;
            if (WORK != phase) {
                MPI_CHECK(MPI_Wait(&req, &st));
            }
            double t1 = MPI_Wtime();
            if (r >= 0) {
                samples[r] = (t1 - t0) * 1e6;
                inner[r] = (w1 - w0) * 1e6;
                post[r] = (WORK != phase ? w0 - t0 : 0.0) * 1e6;
            }
            if (check && MODE_IRECV == mode) {
                int n = -1;
                MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
                for (long i = 0; i < size; ++i) {
                    if (n != count || buf[i] != pattern(i, size, mode)) {
                        fprintf(stderr, "overlap: rank 0: received %d bytes, byte %ld wrong\n",
                                n, i);
                        MPI_Abort(MPI_COMM_WORLD, EXIT_DATA);
                    }
                }
            }
        } else if (WORK != phase) {
            MPI_Status st;
            if (!o->peer_sleep && MODE_ISEND == mode) {
                MPI_CHECK(MPI_Recv(buf, count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &st));
            } else if (!o->peer_sleep) {
                MPI_CHECK(MPI_Send(buf, count, MPI_BYTE, 0, 0, MPI_COMM_WORLD));
            } else {
                MPI_Request req;
                int done = 0;
                if (MODE_ISEND == mode) {
                    MPI_CHECK(MPI_Irecv(buf, count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &req));
                } else {
                    MPI_CHECK(MPI_Isend(buf, count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &req));
                }
                while (!done) {
                    MPI_CHECK(MPI_Test(&req, &done, &st));
                    if (!done) {
                        nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
                    }
                }
            }
            if (check && MODE_ISEND == mode) {
                int n = -1;
                MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
                for (long i = 0; i < size; ++i) {
                    if (n != count || buf[i] != pattern(i, size, mode)) {
                        fprintf(stderr, "overlap: rank 1: received %d bytes, byte %ld wrong\n",
                                n, i);
                        MPI_Abort(MPI_COMM_WORLD, EXIT_DATA);
                    }
                }
            }
        }
    }
    if (0 == rank) {
        t->total = median(samples, o->reps);
        t->work = median(inner, o->reps);
        t->post = median(post, o->reps);
    }
    free(samples);
}

static void emit(const char *impl, long size, const char *metric, double value, const char *unit,
                 int mode, const char *work, int peer_sleep)
{
    printf("bench=overlap impl=%s threads=1 size=%ld metric=%s value=%.3f unit=%s mode=%s "
           "work_us=%s peer_wait=%s\n",
           impl, size, metric, value, unit, MODE_ISEND == mode ? "isend" : "irecv", work,
           peer_sleep ? "sleep" : "spin");
}

static const char *library_label(void)
{
    static char version[8192]; /* MPICH's MPI_MAX_LIBRARY_VERSION_STRING */
    int len = 0;
    MPI_CHECK(MPI_Get_library_version(version, &len));
    if (NULL != strstr(version, "Open MPI")) {
        return "ompi";
    }
    if (NULL != strstr(version, "MPICH")) {
        return "mpich";
    }
    return "mpi";
}

int main(int argc, char **argv)
{
    struct options o;
    int size = 0;
    parse(argc, argv, &o);
    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (2 != size) {
        if (0 == rank) {
            fprintf(stderr, "overlap: needs exactly 2 processes, got %d\n", size);
        }
        MPI_Abort(MPI_COMM_WORLD, EXIT_USAGE);
    }
    /* Rank 1 follows rank 0's options (an MPMD launch may give it other arguments). */
    const char *impl = NULL != o.impl && '\0' != o.impl[0] ? o.impl : library_label();
    MPI_CHECK(MPI_Bcast(&o, (int) sizeof o, MPI_BYTE, 0, MPI_COMM_WORLD));
    long max_size = 0;
    for (int i = 0; i < o.nsizes; ++i) {
        max_size = o.sizes[i] > max_size ? o.sizes[i] : max_size;
    }
    unsigned char *buf = malloc((size_t) (max_size ? max_size : 1));
    if (NULL == buf) {
        fprintf(stderr, "overlap: out of memory (%ld bytes)\n", max_size);
        MPI_Abort(MPI_COMM_WORLD, EXIT_MPI);
    }
    double per_us = 0.0;
    if (0 == rank) {
        per_us = calibrate();
    }
    for (int mode = MODE_ISEND; mode <= MODE_IRECV; ++mode) {
        if ((MODE_ISEND == mode && !o.isend) || (MODE_IRECV == mode && !o.irecv)) {
            continue;
        }
        for (int s = 0; s < o.nsizes; ++s) {
            long bytes = o.sizes[s];
            int sender = MODE_ISEND == mode ? 0 : 1;
            struct phase_times comm = {0}, work = {0}, total = {0};
            if (rank == sender) {
                for (long i = 0; i < bytes; ++i) {
                    buf[i] = pattern(i, bytes, mode);
                }
            }
            run_phase(COMM, mode, bytes, 0, buf, &o, &comm);
            for (int w = 0; w < o.nwork; ++w) {
                double target = o.work_us[w] < 0.0 ? comm.total : o.work_us[w];
                long iters = (long) (target * per_us);
                char label[32];
                if (o.work_us[w] < 0.0) {
                    snprintf(label, sizeof label, "auto");
                } else {
                    snprintf(label, sizeof label, "%g", o.work_us[w]);
                }
                run_phase(WORK, mode, bytes, iters, buf, &o, &work);
                run_phase(TOTAL, mode, bytes, iters, buf, &o, &total);
                if (0 != rank) {
                    continue;
                }
                double t_comm = comm.total, t_work = work.total, t_total = total.total;
                double lo = t_comm < t_work ? t_comm : t_work;
                double hi = t_comm < t_work ? t_work : t_comm;
                emit(impl, bytes, "t_comm", t_comm, "us", mode, label, o.peer_sleep);
                emit(impl, bytes, "t_work", t_work, "us", mode, label, o.peer_sleep);
                emit(impl, bytes, "t_total", t_total, "us", mode, label, o.peer_sleep);
                emit(impl, bytes, "t_work_in_total", total.work, "us", mode, label, o.peer_sleep);
                emit(impl, bytes, "t_post_in_total", total.post, "us", mode, label, o.peer_sleep);
                emit(impl, bytes, "overlap", lo > 0.0 ? (t_comm + t_work - t_total) / lo : 0.0,
                     "ratio", mode, label, o.peer_sleep);
                emit(impl, bytes, "total_over_max", hi > 0.0 ? t_total / hi : 0.0, "ratio",
                     mode, label, o.peer_sleep);
                fflush(stdout);
            }
        }
    }
    free(buf);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
