/* The endpoints benchmarks ep_pingpong and ep_msgrate; see bench_ep.h. */
#include "bench_ep.h"

#include "bench_ult.h"

#include <mpiv/mpix_endpoints.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NLEGS = 4, MAX_PTHREADS = 4096, MAX_ENDPOINTS = 65535 };

/* What stays the same over a job. */
struct ep_job {
    const struct bench_ep_def *def;
    const struct bench_opts *opts;
    char bench[64]; /* bench= of the lines */
    const char *impl;
    int rank;
    int ults;       /* members are mpiv ULTs */
    int window;     /* the stream kernel's */
    char tail[64];  /* ULTs: " workers=W stack=S", at the end of every line; else "" */
};

/* The handles of an endpoints communicator with n per process; a clear message without mpiv. */
static MPI_Comm *create_endpoints(const struct ep_job *job, int n)
{
    MPI_Comm *handles = bench_alloc((size_t) n * sizeof *handles);
    const int rc = MPIX_Comm_create_endpoints(MPI_COMM_WORLD, n, MPI_INFO_NULL, handles);
    int cls = MPI_SUCCESS;
    if (MPI_SUCCESS != rc && MPI_SUCCESS == MPI_Error_class(rc, &cls) &&
        MPI_ERR_UNSUPPORTED_OPERATION == cls) {
        if (0 == job->rank) {
            fprintf(stderr, "%s: MPIX_Comm_create_endpoints is not supported by this PML; "
                            "run with --mca pml mpiv\n", job->def->name);
        }
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_USAGE);
    }
    BENCH_MPI(rc);
    return handles;
}

/* Rank 0: the lines of one size, from its point in each leg. */
static void report(const struct ep_job *job, int n, size_t size, const struct bench_point *legs)
{
    char extra[160];
    char fields[96]; /* window= (stream) and the tail, each after a space */
    double sum[2] = {0, 0};
    struct bench_point all = {0, 0.0, 0};
    if (job->def->stream) {
        snprintf(fields, sizeof fields, " window=%d%s", bench_stream_window(job->window, size),
                 job->tail);
    } else {
        snprintf(fields, sizeof fields, "%s", job->tail);
    }
    for (int k = 0; k < NLEGS; ++k) {
        const int ep = 1 == k || 2 == k;
        const struct bench_point *pt = &legs[k];
        const double rate = pt->seconds > 0 ? (double) pt->ops / pt->seconds : 0;
        sum[ep] += rate;
        all.ops += pt->ops;
        all.seconds += pt->seconds;
        all.time_bound |= pt->time_bound;
        snprintf(extra, sizeof extra, "comm=%s%s", ep ? "ep" : "world", fields);
        bench_emit(job->bench, job->impl, n, size, "rate", rate, job->def->unit, pt, extra);
    }
    if (sum[0] > 0) {
        bench_emit(job->bench, job->impl, n, size, "ep_over_world", sum[1] / sum[0], "ratio",
                   &all, fields[0] ? fields + 1 : fields);
    }
}

/* The four legs at n members per process, then the lines. */
static void run_count(const struct ep_job *job, int n)
{
    const struct bench_opts *o = job->opts;
    MPI_Comm *handles = create_endpoints(job, n);
    struct bench_point *pts = bench_alloc((size_t) (NLEGS * o->nsizes) * sizeof *pts);
    for (int k = 0; k < NLEGS; ++k) {
        const int ep = 1 == k || 2 == k; /* world, ep, ep, world */
        const struct bench_place place = {ep ? handles : NULL,
                                          job->ults ? bench_ult_team_run : NULL};
        struct bench_point *leg = &pts[k * o->nsizes];
        BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (job->def->stream) {
            bench_stream_points(o, job->def->name, job->rank, n, job->window, &place, leg);
        } else {
            bench_pingpong_points(o, job->def->name, job->rank, n, &place, leg);
        }
    }
    for (int s = 0; 0 == job->rank && s < o->nsizes; ++s) {
        struct bench_point legs[NLEGS];
        for (int k = 0; k < NLEGS; ++k) {
            legs[k] = pts[k * o->nsizes + s];
        }
        report(job, n, o->sizes[s], legs);
    }
    for (int i = 0; i < n; ++i) {
        BENCH_MPI(MPI_Comm_free(&handles[i]));
    }
    free(pts);
    free(handles);
}

static void usage_exit(const char *prog, const char *what, const char *value)
{
    fprintf(stderr, "%s: %s, not '%s' (try --help)\n", prog, what, value);
    exit(BENCH_EXIT_USAGE);
}

int bench_ep_main(int argc, char **argv, const struct bench_ep_def *def)
{
    struct ep_job job = {.def = def};
    struct bench_ult_opts ult_opts;
    struct bench_extra_opt extra[BENCH_ULT_NOPTS + 2];
    const char *mode = "threads";
    const char *window_text = "64";
    bench_ult_opts_init(&ult_opts, extra);
    extra[BENCH_ULT_NOPTS] = (struct bench_extra_opt){
        "mode", "threads (default: pthreads) or ults (mpiv ULTs, up to 65535)", &mode};
    extra[BENCH_ULT_NOPTS + 1] = (struct bench_extra_opt){
        "window", "messages in flight per thread (default 64)", &window_text};
    struct bench_opts opts;
    bench_parse(argc, argv, def->name, def->summary, BENCH_OPT_THREADS | BENCH_OPT_MANY_THREADS,
                "8", extra, BENCH_ULT_NOPTS + 1 + def->stream, &opts);
    job.opts = &opts;

    job.ults = 0 == strcmp(mode, "ults");
    if (!job.ults && 0 != strcmp(mode, "threads")) {
        usage_exit(def->name, "--mode is threads or ults", mode);
    }
    char *end = NULL;
    job.window = (int) strtol(window_text, &end, 10);
    if ('\0' != *end || job.window < 1 || job.window > 4096) {
        usage_exit(def->name, "--window needs an integer in 1..4096", window_text);
    }
    for (int i = 0; i < opts.nthreads; ++i) {
        char count[16];
        snprintf(count, sizeof count, "%d", opts.threads[i]);
        if (opts.threads[i] > (job.ults ? MAX_ENDPOINTS : MAX_PTHREADS)) {
            usage_exit(def->name,
                       job.ults ? "ULT counts must be in 1..65535 (endpoints per process)"
                                : "thread counts must be in 1..4096 (more with --mode ults)",
                       count);
        }
    }
    size_t stack = 0;
    const mpiv_params_t params = bench_ult_params(&ult_opts, def->name, &stack);
    snprintf(job.bench, sizeof job.bench, "%s%s", def->name, job.ults ? "_ult" : "");

    job.rank = bench_init(&argc, &argv, MPI_THREAD_MULTIPLE, def->name);
    job.impl = bench_impl_label(&opts);
    if (job.ults) {
        const unsigned nworkers = bench_ult_start(&params);
        snprintf(job.tail, sizeof job.tail, " workers=%u stack=%zu", nworkers, stack);
    }
    for (int i = 0; i < opts.nthreads; ++i) {
        run_count(&job, opts.threads[i]);
    }
    if (job.ults) {
        BENCH_ULT(mpiv_finalize());
    }
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
