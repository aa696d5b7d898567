/*
 * Shared infrastructure of the MPI benchmarks in bench/mpi: option parsing, result lines,
 * clocks, data patterns, latency histograms, thread teams and MPI error checking.
 *
 * Conventions every benchmark follows:
 * - Exactly two processes. Rank 0 measures and prints; rank 1 is the peer.
 * - Thread i of one process talks only to thread i of the other, on tag i.
 * - Every data point is bounded both by an operation count (--iters) and by wall time
 *   (--seconds); whichever comes first ends it, and the line says which (bound=iters|time).
 *   A collapsing MPI library therefore yields a low rate, never a hang of the benchmark.
 * - MPI_COMM_WORLD uses MPI_ERRORS_RETURN and every MPI call goes through BENCH_MPI(), which
 *   prints the failing call, rank and MPI error string, then calls MPI_Abort with exit
 *   code 3. A data mismatch aborts with code 4; usage errors exit with code 2.
 * - One line per data point and metric on stdout:
 *   bench=B impl=I threads=T size=S metric=M value=V unit=U [key=value ...]
 */
#ifndef MPIV_BENCH_COMMON_H
#define MPIV_BENCH_COMMON_H

/* Barriers and clock_gettime are POSIX; every benchmark source includes this header first. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <mpi.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_MPI 3
#define BENCH_EXIT_DATA 4

/* Check the return code of an MPI call; on failure report it and abort the job. */
#define BENCH_MPI(_call) bench_mpi_check((_call), #_call, __FILE__, __LINE__)
/* Same for pthread calls, which return an errno value. */
#define BENCH_PT(_call) bench_pt_check((_call), #_call, __FILE__, __LINE__)

void bench_mpi_check(int rc, const char *call, const char *file, int line);
void bench_pt_check(int rc, const char *call, const char *file, int line);

/*
 * Common options enabled per program (a program without threads has no --threads).
 * BENCH_OPT_MANY_THREADS raises the limit of --threads from 4096 to 2^20 (ULTs, not pthreads).
 */
enum { BENCH_OPT_THREADS = 1, BENCH_OPT_MANY_THREADS = 2 };

/* A program-specific option --name VALUE. */
struct bench_extra_opt {
    const char *name;
    const char *help;
    const char **value; /* in: the default; out: the value given */
};

struct bench_opts {
    int *threads;       /* thread counts to run, in order */
    int nthreads;
    size_t *sizes;      /* message sizes in bytes, in order */
    int nsizes;
    size_t max_size;
    long long iters;    /* max operations per thread and data point; 0 = unbounded */
    double seconds;     /* wall-time bound per data point */
    long long warmup;   /* warm-up operations per thread and data point (>= 1) */
    const char *label;  /* impl= value; NULL = derived from the MPI library */
};

/*
 * Parse argv. Called before MPI_Init so that --help works without mpirun. Prints usage and
 * exits 0 on --help; prints an error and exits BENCH_EXIT_USAGE on a bad option.
 * default_sizes is a size list in --sizes syntax.
 */
void bench_parse(int argc, char **argv, const char *prog, const char *summary, unsigned common,
                 const char *default_sizes, struct bench_extra_opt *extra, int nextra,
                 struct bench_opts *opts);
void bench_opts_free(struct bench_opts *opts);

/*
 * MPI_Init_thread with the required level, MPI_ERRORS_RETURN on MPI_COMM_WORLD, a check of
 * the thread level and of the world size (2). Returns this process's rank.
 */
int bench_init(int *argc, char ***argv, int required, const char *prog);
/* The impl= label: opts->label if given, else "ompi"/"mpich"/"mpi" from the library version. */
const char *bench_impl_label(const struct bench_opts *opts);

/* malloc that aborts the job when memory runs out; never returns NULL (n == 0 gives 1 byte). */
void *bench_alloc(size_t n);

/* A non-negative integer with an optional k/K (2^10) or m/M (2^20) suffix into *out;
 * returns 0, or -1 (nothing written) when malformed or too large. */
int bench_parse_size(const char *text, size_t *out);

/* Monotonic clock. */
uint64_t bench_now_ns(void);

/* Fill/check a buffer with a pattern determined by (sender rank, tag, size). */
void bench_fill(void *buf, size_t n, int rank, int tag);
/* Abort with BENCH_EXIT_DATA unless buf holds the pattern of (rank, tag) and count == n. */
void bench_verify(const void *buf, size_t n, int count, int rank, int tag, const char *prog,
                  const char *what);

/*
 * Log-linear histogram of durations in nanoseconds: exact below 64 ns, then 32 sub-buckets
 * per power of two (relative error of a reported percentile <= 1/64).
 */
#define BENCH_HIST_BUCKETS (64 + 58 * 32)
struct bench_hist {
    uint64_t count;
    double sum_ns;
    uint64_t bucket[BENCH_HIST_BUCKETS];
};
void bench_hist_reset(struct bench_hist *h);
void bench_hist_add(struct bench_hist *h, uint64_t ns);
void bench_hist_merge(struct bench_hist *into, const struct bench_hist *from);
/* Value (ns) below which a fraction q of the samples lie; 0 if empty. */
double bench_hist_quantile(const struct bench_hist *h, double q);

/*
 * A team of threads running the same function. With one thread the function runs on the
 * calling thread, so single-threaded programs stay legal under MPI_THREAD_SINGLE. Teams of
 * mpiv ULTs (bench_ult.h) give each member a team of its own with member_barrier set.
 */
struct bench_team {
    int nthreads;
    pthread_barrier_t *barrier;                       /* pthreads, more than one */
    void (*member_barrier)(struct bench_team *team);  /* other kinds of team, else NULL */
};
typedef void (*bench_thread_fn)(struct bench_team *team, int tid, void *arg);
/* Runs fn(team, tid, arg) for tid 0 .. nthreads-1 and returns when all have returned. */
typedef void (*bench_team_runner)(int nthreads, bench_thread_fn fn, void *arg);
void bench_team_run(int nthreads, bench_thread_fn fn, void *arg);
void bench_team_barrier(struct bench_team *team);

/* Per-thread outcome of one timed phase. */
struct bench_thread_result {
    uint64_t ops;
    uint64_t t_start_ns;
    uint64_t t_end_ns;
    int time_bound; /* 1 if the time bound ended the phase */
};

/* Aggregate over a team: total ops, elapsed from the first start to the last end. */
struct bench_point {
    uint64_t ops;
    double seconds;
    int time_bound;
};
struct bench_point bench_point_sum(const struct bench_thread_result *res, int n);

/*
 * True when a timed phase that started at t_start_ns and has done ops operations must stop
 * (now_ns is the caller's latest clock reading).
 */
int bench_should_stop(const struct bench_opts *opts, uint64_t ops, uint64_t t_start_ns,
                      uint64_t now_ns, int *time_bound);
/* End time of the warm-up that started at t_ns: a tenth of the time bound, at most 0.2 s. */
uint64_t bench_warmup_deadline(const struct bench_opts *opts, uint64_t t_ns);

/* Print one result line (rank 0 only). extra is appended verbatim (may be empty). */
void bench_emit(const char *bench, const char *impl, int threads, size_t size, const char *metric,
                double value, const char *unit, const struct bench_point *pt, const char *extra);

#endif
