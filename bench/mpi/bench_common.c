/* Shared infrastructure of the MPI benchmarks; see bench_common.h. */
#include "bench_common.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_mpi_check(int rc, const char *call, const char *file, int line)
{
    if (MPI_SUCCESS == rc) {
        return;
    }
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    int rank = -1;
    if (MPI_SUCCESS != MPI_Error_string(rc, msg, &len)) {
        snprintf(msg, sizeof msg, "MPI error code %d", rc);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "rank %d: %s failed at %s:%d: %s\n", rank, call, file, line, msg);
    MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
    exit(BENCH_EXIT_MPI);
}

void bench_pt_check(int rc, const char *call, const char *file, int line)
{
    if (0 == rc) {
        return;
    }
    fprintf(stderr, "%s failed at %s:%d: %s\n", call, file, line, strerror(rc));
    MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
    exit(BENCH_EXIT_MPI);
}

/* ------------------------------------------------------------------ options */

int bench_parse_size(const char *text, size_t *out)
{
    char *end = NULL;
    errno = 0;
    if ('-' == text[0]) {
        return -1;
    }
    unsigned long long v = strtoull(text, &end, 10);
    if (0 != errno || end == text) {
        return -1;
    }
    unsigned shift = 0;
    if ('k' == *end || 'K' == *end) {
        shift = 10;
        ++end;
    } else if ('m' == *end || 'M' == *end) {
        shift = 20;
        ++end;
    }
    if ('\0' != *end || v > (SIZE_MAX >> shift)) {
        return -1;
    }
    *out = (size_t) v << shift;
    return 0;
}

/*
 * A list is comma-separated items; an item is a value or lo:hi, which expands to lo and the
 * powers of two in (lo, hi]. Returns the number of values, or -1 on a syntax error.
 */
static int parse_list(const char *text, size_t **out)
{
    char *copy = strdup(text);
    size_t *vals = NULL;
    int n = 0;
    char *save = NULL;
    if (NULL == copy) {
        return -1;
    }
    for (char *item = strtok_r(copy, ",", &save); NULL != item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        size_t lo, hi;
        if (NULL != colon) {
            *colon = '\0';
        }
        if (0 != bench_parse_size(item, &lo) ||
            (NULL != colon && (0 != bench_parse_size(colon + 1, &hi) || hi < lo))) {
            goto err_syntax;
        }
        if (NULL == colon) {
            hi = lo;
        }
        if (hi > ((size_t) 1 << 40)) {
            goto err_syntax; /* keeps the doubling below from overflowing */
        }
        for (size_t v = lo;;) {
            size_t *grown = realloc(vals, (size_t) (n + 1) * sizeof *vals);
            if (NULL == grown) {
                goto err_syntax;
            }
            vals = grown;
            vals[n++] = v;
            size_t next = 1;
            while (next <= v) {
                next <<= 1;
            }
            if (next > hi || next <= v) {
                break;
            }
            v = next;
        }
    }
    free(copy);
    if (0 == n) {
        return -1;
    }
    *out = vals;
    return n;
err_syntax:
    free(vals);
    free(copy);
    return -1;
}

static void usage(FILE *f, const char *prog, const char *summary, unsigned common,
                  const char *default_sizes, const struct bench_extra_opt *extra, int nextra)
{
    fprintf(f, "usage: mpirun -np 2 %s [options]\n%s\n\noptions:\n", prog, summary);
    if (common & BENCH_OPT_THREADS) {
        fprintf(f, "  -t, --threads LIST  threads per process, e.g. 1,2,4 or 1:16 (default 1)\n");
    }
    fprintf(f,
            "  -s, --sizes LIST    message sizes in bytes, e.g. 8,64 or 0:16M (powers of two;\n"
            "                      k and M suffixes; default %s)\n"
            "  -n, --iters N       at most N operations per thread and data point (default:\n"
            "                      no bound, --seconds ends the point)\n"
            "  -d, --seconds S     time bound per data point (default 1)\n"
            "  -w, --warmup N      warm-up operations per thread and data point (default\n"
            "                      100); it also ends after a tenth of --seconds, at most 0.2 s\n"
            "  -l, --label NAME    impl= value of the result lines (default: ompi or mpich)\n",
            default_sizes);
    for (int i = 0; i < nextra; ++i) {
        char head[64];
        snprintf(head, sizeof head, "--%s V", extra[i].name);
        if (strlen(head) < 16) {
            fprintf(f, "      %-16s%s\n", head, extra[i].help);
        } else {
            fprintf(f, "      %s\n%22s%s\n", head, "", extra[i].help);
        }
    }
    fprintf(f, "  -h, --help          this text\n");
}

static void usage_error(const char *prog, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (try --help)\n");
    exit(BENCH_EXIT_USAGE);
}

void bench_parse(int argc, char **argv, const char *prog, const char *summary, unsigned common,
                 const char *default_sizes, struct bench_extra_opt *extra, int nextra,
                 struct bench_opts *opts)
{
    enum { NCOMMON = 7 };
    struct option *longopts = calloc((size_t) (NCOMMON + nextra + 1), sizeof *longopts);
    const struct option base[NCOMMON] = {
        {"threads", required_argument, NULL, 't'}, {"sizes", required_argument, NULL, 's'},
        {"iters", required_argument, NULL, 'n'},   {"seconds", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},  {"label", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
    };
    const char *threads_text = "1";
    const char *sizes_text = default_sizes;
    if (NULL == longopts) {
        fprintf(stderr, "%s: out of memory\n", prog);
        exit(BENCH_EXIT_USAGE);
    }
    int nlong = 0;
    for (int i = 0; i < NCOMMON; ++i) {
        if ('t' != base[i].val || (common & BENCH_OPT_THREADS)) {
            longopts[nlong++] = base[i];
        }
    }
    for (int i = 0; i < nextra; ++i) {
        longopts[nlong++] = (struct option){extra[i].name, required_argument, NULL, 256 + i};
    }
    memset(opts, 0, sizeof *opts);
    opts->seconds = 1.0;
    opts->warmup = 100;

    const char *shortopts = (common & BENCH_OPT_THREADS) ? "t:s:n:d:w:l:h" : "s:n:d:w:l:h";
    int c;
    while (-1 != (c = getopt_long(argc, argv, shortopts, longopts, NULL))) {
        char *end = NULL;
        switch (c) {
        case 't':
            threads_text = optarg;
            break;
        case 's':
            sizes_text = optarg;
            break;
        case 'n':
            opts->iters = strtoll(optarg, &end, 10);
            if ('\0' != *end || opts->iters < 1) {
                usage_error(prog, "--iters needs a positive integer, not '%s'", optarg);
            }
            break;
        case 'd':
            opts->seconds = strtod(optarg, &end);
            if ('\0' != *end || !(opts->seconds > 0.0)) {
                usage_error(prog, "--seconds needs a positive number, not '%s'", optarg);
            }
            break;
        case 'w':
            opts->warmup = strtoll(optarg, &end, 10);
            if ('\0' != *end || opts->warmup < 1) {
                usage_error(prog, "--warmup needs a positive integer, not '%s'", optarg);
            }
            break;
        case 'l':
            opts->label = optarg;
            break;
        case 'h':
            usage(stdout, prog, summary, common, default_sizes, extra, nextra);
            exit(0);
        default:
            if (c >= 256 && c < 256 + nextra) {
                *extra[c - 256].value = optarg;
                break;
            }
            usage_error(prog, "%s", "unknown option");
        }
    }
    if (optind < argc) {
        usage_error(prog, "unexpected argument '%s'", argv[optind]);
    }
    free(longopts);

    size_t *vals = NULL;
    int n = parse_list(threads_text, &vals);
    if (n < 1) {
        usage_error(prog, "bad thread list '%s'", threads_text);
    }
    opts->threads = malloc((size_t) n * sizeof *opts->threads);
    if (NULL == opts->threads) {
        usage_error(prog, "%s", "out of memory");
    }
    const size_t max_threads = (common & BENCH_OPT_MANY_THREADS) ? (size_t) 1 << 20 : 4096;
    for (int i = 0; i < n; ++i) {
        if (vals[i] < 1 || vals[i] > max_threads) {
            usage_error(prog,
                        (common & BENCH_OPT_MANY_THREADS)
                            ? "thread counts must be in 1..1048576: '%s'"
                            : "thread counts must be in 1..4096: '%s'",
                        threads_text);
        }
        opts->threads[i] = (int) vals[i];
    }
    opts->nthreads = n;
    free(vals);

    n = parse_list(sizes_text, &opts->sizes);
    if (n < 1) {
        usage_error(prog, "bad size list '%s'", sizes_text);
    }
    opts->nsizes = n;
    for (int i = 0; i < n; ++i) {
        /* The in-band stop message is one byte longer than the largest payload. */
        if (opts->sizes[i] >= INT32_MAX) {
            usage_error(prog, "message sizes must be below 2 GiB: '%s'", sizes_text);
        }
        if (opts->sizes[i] > opts->max_size) {
            opts->max_size = opts->sizes[i];
        }
    }
}

void bench_opts_free(struct bench_opts *opts)
{
    free(opts->threads);
    free(opts->sizes);
}

/* ------------------------------------------------------------------ MPI setup */

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE:
        return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
        return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
        return "MPI_THREAD_SERIALIZED";
    default:
        return "MPI_THREAD_MULTIPLE";
    }
}

int bench_init(int *argc, char ***argv, int required, const char *prog)
{
    int provided = MPI_THREAD_SINGLE;
    int rank = 0;
    int size = 0;
    int rc = MPI_Init_thread(argc, argv, required, &provided);
    if (MPI_SUCCESS != rc) {
        fprintf(stderr, "%s: MPI_Init_thread failed (error %d)\n", prog, rc);
        exit(BENCH_EXIT_MPI);
    }
    BENCH_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    BENCH_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    BENCH_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (2 != size) {
        if (0 == rank) {
            fprintf(stderr, "%s: needs exactly 2 processes, got %d\n", prog, size);
        }
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_USAGE);
    }
    if (provided < required) {
        if (0 == rank) {
            fprintf(stderr, "%s: the MPI library provides %s, this benchmark needs %s\n", prog,
                    thread_level_name(provided), thread_level_name(required));
        }
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
    }
    return rank;
}

const char *bench_impl_label(const struct bench_opts *opts)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (NULL != opts->label) {
        return opts->label;
    }
    BENCH_MPI(MPI_Get_library_version(version, &len));
    if (NULL != strstr(version, "Open MPI")) {
        return "ompi";
    }
    if (NULL != strstr(version, "MPICH")) {
        return "mpich";
    }
    return "mpi";
}

/* ------------------------------------------------------------------ time, data */

void *bench_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (NULL == p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
        exit(BENCH_EXIT_MPI);
    }
    return p;
}

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* Byte i of the pattern; the i >> 8 term makes blocks of 256 bytes distinguishable. */
static inline unsigned char pattern_byte(size_t i, size_t n, int rank, int tag)
{
    return (unsigned char) (i * 7u + (i >> 8) * 13u + n * 31u + (size_t) rank * 101u +
                            (size_t) tag * 59u + 1u);
}

void bench_fill(void *buf, size_t n, int rank, int tag)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < n; ++i) {
        p[i] = pattern_byte(i, n, rank, tag);
    }
}

void bench_verify(const void *buf, size_t n, int count, int rank, int tag, const char *prog,
                  const char *what)
{
    const unsigned char *p = buf;
    if (count < 0 || (size_t) count != n) {
        fprintf(stderr, "%s: %s on tag %d: received %d bytes, expected %zu\n", prog, what, tag,
                count, n);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_DATA);
        exit(BENCH_EXIT_DATA);
    }
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != pattern_byte(i, n, rank, tag)) {
            fprintf(stderr, "%s: %s on tag %d: byte %zu of %zu is 0x%02x, expected 0x%02x\n",
                    prog, what, tag, i, n, p[i], pattern_byte(i, n, rank, tag));
            MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_DATA);
            exit(BENCH_EXIT_DATA);
        }
    }
}

/* ------------------------------------------------------------------ histogram */

void bench_hist_reset(struct bench_hist *h)
{
    memset(h, 0, sizeof *h);
}

void bench_hist_add(struct bench_hist *h, uint64_t ns)
{
    size_t idx;
    if (ns < 64) {
        idx = (size_t) ns;
    } else {
        unsigned e = 63u - (unsigned) __builtin_clzll(ns); /* ns >= 64, so e >= 6 */
        idx = 64 + (size_t) (e - 6) * 32 + (size_t) ((ns >> (e - 5)) & 31u);
    }
    h->bucket[idx]++;
    h->count++;
    h->sum_ns += (double) ns;
}

void bench_hist_merge(struct bench_hist *into, const struct bench_hist *from)
{
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; ++i) {
        into->bucket[i] += from->bucket[i];
    }
    into->count += from->count;
    into->sum_ns += from->sum_ns;
}

double bench_hist_quantile(const struct bench_hist *h, double q)
{
    if (0 == h->count) {
        return 0.0;
    }
    /* Nearest rank: the smallest sample with at least q * count samples at or below it. */
    double target = q * (double) h->count;
    uint64_t rank = (uint64_t) target;
    if ((double) rank < target || rank < 1) {
        ++rank;
    }
    uint64_t seen = 0;
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; ++i) {
        seen += h->bucket[i];
        if (seen >= rank) {
            if (i < 64) {
                return (double) i;
            }
            size_t k = i - 64;
            unsigned shift = (unsigned) (k / 32) + 1; /* bucket width is 2^shift ns */
            double low = (double) ((32 + k % 32) << shift);
            return low + (double) (1ull << shift) / 2.0;
        }
    }
    return 0.0;
}

/* ------------------------------------------------------------------ threads */

struct team_start {
    struct bench_team *team;
    bench_thread_fn fn;
    void *arg;
    int tid;
};

static void *team_main(void *p)
{
    struct team_start *s = p;
    s->fn(s->team, s->tid, s->arg);
    return NULL;
}

void bench_team_run(int nthreads, bench_thread_fn fn, void *arg)
{
    pthread_barrier_t barrier;
    struct bench_team team = {.nthreads = nthreads, .barrier = &barrier};
    if (1 == nthreads) {
        fn(&team, 0, arg);
        return;
    }
    pthread_t *ids = bench_alloc((size_t) nthreads * sizeof *ids);
    struct team_start *starts = bench_alloc((size_t) nthreads * sizeof *starts);
    BENCH_PT(pthread_barrier_init(&barrier, NULL, (unsigned) nthreads));
    for (int i = 0; i < nthreads; ++i) {
        starts[i] = (struct team_start){&team, fn, arg, i};
        BENCH_PT(pthread_create(&ids[i], NULL, team_main, &starts[i]));
    }
    for (int i = 0; i < nthreads; ++i) {
        BENCH_PT(pthread_join(ids[i], NULL));
    }
    BENCH_PT(pthread_barrier_destroy(&barrier));
    free(starts);
    free(ids);
}

void bench_team_barrier(struct bench_team *team)
{
    if (NULL != team->member_barrier) {
        team->member_barrier(team);
    } else if (team->nthreads > 1) {
        int rc = pthread_barrier_wait(team->barrier);
        if (PTHREAD_BARRIER_SERIAL_THREAD != rc) {
            BENCH_PT(rc);
        }
    }
}

/* ------------------------------------------------------------------ results */

struct bench_point bench_point_sum(const struct bench_thread_result *res, int n)
{
    struct bench_point pt = {0, 0.0, 0};
    uint64_t first = UINT64_MAX;
    uint64_t last = 0;
    for (int i = 0; i < n; ++i) {
        pt.ops += res[i].ops;
        pt.time_bound |= res[i].time_bound;
        first = res[i].t_start_ns < first ? res[i].t_start_ns : first;
        last = res[i].t_end_ns > last ? res[i].t_end_ns : last;
    }
    pt.seconds = last > first ? (double) (last - first) * 1e-9 : 0.0;
    return pt;
}

int bench_should_stop(const struct bench_opts *opts, uint64_t ops, uint64_t t_start_ns,
                      uint64_t now_ns, int *time_bound)
{
    if (opts->iters > 0 && ops >= (uint64_t) opts->iters) {
        return 1;
    }
    if ((double) (now_ns - t_start_ns) * 1e-9 >= opts->seconds) {
        *time_bound = 1;
        return 1;
    }
    return 0;
}

uint64_t bench_warmup_deadline(const struct bench_opts *opts, uint64_t t_ns)
{
    double s = opts->seconds / 10.0;
    return t_ns + (uint64_t) ((s < 0.2 ? s : 0.2) * 1e9);
}

void bench_emit(const char *bench, const char *impl, int threads, size_t size, const char *metric,
                double value, const char *unit, const struct bench_point *pt, const char *extra)
{
    printf("bench=%s impl=%s threads=%d size=%zu metric=%s value=%.3f unit=%s iters=%" PRIu64
           " secs=%.3f bound=%s%s%s\n",
           bench, impl, threads, size, metric, value, unit, pt->ops, pt->seconds,
           pt->time_bound ? "time" : "iters", extra[0] ? " " : "", extra);
    fflush(stdout);
}
