/*
 * ult_pingpong: mt_pingpong with T mpiv user-level threads (ULTs, <mpiv/mpiv.h>) per process
 * instead of pthreads; it needs pml mpiv. ULT i of rank 0 ping-pongs with ULT i of rank 1 on
 * tag i (blocking MPI_Send/MPI_Recv; a blocking call blocks only its ULT). T goes up to 2^20
 * per process (bench/compare --million runs 500,000).
 *
 * A data point (one T, one size): each process runs a team of T ULTs (bench_ult.h). On rank 0
 * each ULT does its checked round trip and the warm-up, then waits at the team's barrier
 * until all T have arrived; the timed loop then runs until --iters round trips or --seconds,
 * and the ULT sends the in-band end message (one byte longer than a request). Rank 1's ULTs
 * echo until it comes.
 *
 * Memory stays bounded at any T: latency samples go into one log-linear histogram per mpiv
 * worker (a worker runs one ULT at a time and a ULT is not switched between reading its
 * worker and updating that worker's record), and message buffers of up to 256 bytes live on
 * the ULT's stack. Per ULT the program keeps its handle and team record (bench_ult.c).
 *
 * Metrics (rank 0 prints): rate (round trips/s, all ULTs), msg_rate (messages/s, both
 * directions), lat_mean, lat_p50, lat_p99 (half a round trip, us), t_total (s, from the
 * first spawn to the last join on rank 0: spawn, warm-up and timed phase), and rss_rank0,
 * rss_rank1 (peak resident set of each process so far, MiB, getrusage ru_maxrss). Every line
 * ends with workers= (mpiv workers of rank 0) and stack= (ULT stack bytes).
 */
#include "bench_ult.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

enum { SMALL_BUF = 256 };  /* messages up to this size (+1 for the end message) use the stack */
enum { CTL_TAG_RSS = 1 };  /* on the control communicator */

/* What the ULTs of one worker measured. Only ULTs running on that worker write it. */
struct worker_rec {
    _Alignas(128) struct bench_hist hist; /* round trips, ns */
    uint64_t ops;
    uint64_t first_start_ns; /* UINT64_MAX: no ULT started here */
    uint64_t last_end_ns;
    int time_bound;
};

/* One data point, shared by the ULTs of this process. */
struct point {
    const struct bench_opts *opts;
    int rank;
    int nults;
    size_t size;
    struct worker_rec *rec; /* per worker, rank 0 */
    unsigned nworkers;
};

static struct worker_rec *my_record(const struct point *p)
{
    int w = 0;
    BENCH_ULT(mpiv_self_worker(&w));
    if (w < 0 || (unsigned) w >= p->nworkers) {
        fprintf(stderr, "ult_pingpong: worker %d out of range 0..%u\n", w, p->nworkers - 1);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
    }
    return &p->rec[w];
}

static void initiator(struct bench_team *team, const struct point *p, int tag)
{
    const struct bench_opts *o = p->opts;
    const int n = (int) p->size;
    char small_s[SMALL_BUF + 1], small_r[SMALL_BUF];
    const int heap = p->size > SMALL_BUF;
    char *sbuf = heap ? bench_alloc(p->size + 1) : small_s;
    char *rbuf = heap ? bench_alloc(p->size) : small_r;
    MPI_Status st;
    int count = 0;

    /* The checked round trip, then the warm-up. */
    bench_fill(sbuf, p->size, 0, tag);
    uint64_t warm_end = bench_warmup_deadline(o, bench_now_ns());
    BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
    BENCH_MPI(MPI_Recv(rbuf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &st));
    BENCH_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
    bench_verify(rbuf, p->size, count, 1, tag, "ult_pingpong", "reply");
    for (long long i = 1; i < o->warmup && bench_now_ns() < warm_end; ++i) {
        BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
        BENCH_MPI(MPI_Recv(rbuf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }

    bench_team_barrier(team);

    uint64_t ops = 0;
    int time_bound = 0;
    uint64_t t = bench_now_ns();
    const uint64_t t_start = t;
    do {
        BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
        BENCH_MPI(MPI_Recv(rbuf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        uint64_t now = bench_now_ns();
        /* No MPI call between here and the update: the ULT stays on this worker. */
        bench_hist_add(&my_record(p)->hist, now - t);
        t = now;
        ++ops;
    } while (!bench_should_stop(o, ops, t_start, t, &time_bound));

    struct worker_rec *r = my_record(p);
    r->ops += ops;
    r->first_start_ns = t_start < r->first_start_ns ? t_start : r->first_start_ns;
    r->last_end_ns = t > r->last_end_ns ? t : r->last_end_ns;
    r->time_bound |= time_bound;
    BENCH_MPI(MPI_Send(sbuf, n + 1, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
    if (heap) {
        free(rbuf);
        free(sbuf);
    }
}

/* Rank 1: echo tag `tag` until the end message (size + 1 bytes) of this data point. */
static void echo(const struct point *p, int tag)
{
    const int n = (int) p->size;
    char small_s[SMALL_BUF], small_r[SMALL_BUF + 1];
    const int heap = p->size > SMALL_BUF;
    char *sbuf = heap ? bench_alloc(p->size) : small_s;
    char *rbuf = heap ? bench_alloc(p->size + 1) : small_r;

    bench_fill(sbuf, p->size, 1, tag);
    for (uint64_t i = 0;; ++i) {
        MPI_Status st;
        int count = 0;
        BENCH_MPI(MPI_Recv(rbuf, n + 1, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &st));
        BENCH_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
        if (count == n + 1 && i > 0) {
            break;
        }
        if (0 == i || count != n) {
            bench_verify(rbuf, p->size, count, 0, tag, "ult_pingpong", "request");
        }
        BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
    }
    if (heap) {
        free(rbuf);
        free(sbuf);
    }
}

static void ult_main(struct bench_team *team, int tid, void *arg)
{
    const struct point *p = arg;
    if (0 == p->rank) {
        initiator(team, p, tid);
    } else {
        echo(p, tid);
    }
}

static double peak_rss_mib(void)
{
    struct rusage ru;
    if (0 != getrusage(RUSAGE_SELF, &ru)) {
        return -1.0;
    }
    return (double) ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

/* One data point; rank 0 prints its lines. */
static void run_point(struct point *p, const char *impl, MPI_Comm ctl, size_t stack)
{
    uint64_t t0 = bench_now_ns();

    if (0 == p->rank) {
        for (unsigned w = 0; w < p->nworkers; ++w) {
            bench_hist_reset(&p->rec[w].hist);
            p->rec[w].ops = 0;
            p->rec[w].first_start_ns = UINT64_MAX;
            p->rec[w].last_end_ns = 0;
            p->rec[w].time_bound = 0;
        }
    }
    bench_ult_team_run(p->nults, ult_main, p);
    const double t_total = (double) (bench_now_ns() - t0) * 1e-9;

    double rss_mine = peak_rss_mib();
    if (0 != p->rank) {
        BENCH_MPI(MPI_Send(&rss_mine, 1, MPI_DOUBLE, 0, CTL_TAG_RSS, ctl));
        return;
    }
    double rss_peer = -1.0;
    BENCH_MPI(MPI_Recv(&rss_peer, 1, MPI_DOUBLE, 1, CTL_TAG_RSS, ctl, MPI_STATUS_IGNORE));

    struct bench_hist *all = bench_alloc(sizeof *all);
    struct bench_point bp = {0, 0.0, 0};
    uint64_t first = UINT64_MAX, last = 0;
    bench_hist_reset(all);
    for (unsigned w = 0; w < p->nworkers; ++w) {
        const struct worker_rec *r = &p->rec[w];
        bench_hist_merge(all, &r->hist);
        bp.ops += r->ops;
        bp.time_bound |= r->time_bound;
        first = r->first_start_ns < first ? r->first_start_ns : first;
        last = r->last_end_ns > last ? r->last_end_ns : last;
    }
    bp.seconds = last > first ? (double) (last - first) * 1e-9 : 0.0;

    const double half_us = 0.5e-3; /* histogram: round trips in ns; latency: half, in us */
    const double rate = bp.seconds > 0.0 ? (double) bp.ops / bp.seconds : 0.0;
    const double mean = all->count ? all->sum_ns / (double) all->count : 0.0;
    char extra[64];
    snprintf(extra, sizeof extra, "workers=%u stack=%zu", p->nworkers, stack);
    const int nu = p->nults;
    const size_t sz = p->size;
    bench_emit("ult_pingpong", impl, nu, sz, "rate", rate, "roundtrips/s", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "msg_rate", 2.0 * rate, "msgs/s", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "lat_mean", mean * half_us, "us", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "lat_p50", bench_hist_quantile(all, 0.50) * half_us,
               "us", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "lat_p99", bench_hist_quantile(all, 0.99) * half_us,
               "us", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "t_total", t_total, "s", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "rss_rank0", rss_mine, "MiB", &bp, extra);
    bench_emit("ult_pingpong", impl, nu, sz, "rss_rank1", rss_peer, "MiB", &bp, extra);
    free(all);
}

int main(int argc, char **argv)
{
    struct bench_ult_opts ult_opts;
    struct bench_extra_opt extra[BENCH_ULT_NOPTS];
    bench_ult_opts_init(&ult_opts, extra);
    struct bench_opts opts;
    bench_parse(argc, argv, "ult_pingpong",
                "ULT ping-pong (pml mpiv): ULT i of each process pairs with ULT i of the other\n"
                "on tag i; up to 1048576 ULTs per process. Metrics: rate (round trips/s, all\n"
                "ULTs), msg_rate, lat_mean, lat_p50, lat_p99 (half a round trip, us), t_total\n"
                "(s, spawn to last join), rss_rank0, rss_rank1 (peak RSS, MiB).",
                BENCH_OPT_THREADS | BENCH_OPT_MANY_THREADS, "8", extra, BENCH_ULT_NOPTS,
                &opts);
    size_t stack = 0;
    const mpiv_params_t params = bench_ult_params(&ult_opts, "ult_pingpong", &stack);

    int rank = bench_init(&argc, &argv, MPI_THREAD_MULTIPLE, "ult_pingpong");
    const char *impl = bench_impl_label(&opts);
    MPI_Comm ctl;
    BENCH_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &ctl));
    BENCH_MPI(MPI_Comm_set_errhandler(ctl, MPI_ERRORS_RETURN));

    const unsigned nworkers = bench_ult_start(&params);

    struct point pt_ctx = {.opts = &opts, .rank = rank, .nworkers = nworkers};
    if (0 == rank) {
        pt_ctx.rec = aligned_alloc(128, nworkers * sizeof *pt_ctx.rec);
        if (NULL == pt_ctx.rec) {
            fprintf(stderr, "ult_pingpong: out of memory\n");
            MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
        }
    }
    for (int i = 0; i < opts.nthreads; ++i) {
        for (int k = 0; k < opts.nsizes; ++k) {
            pt_ctx.nults = opts.threads[i];
            pt_ctx.size = opts.sizes[k];
            run_point(&pt_ctx, impl, ctl, stack);
        }
    }
    free(pt_ctx.rec);
    BENCH_ULT(mpiv_finalize());
    BENCH_MPI(MPI_Comm_free(&ctl));
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
