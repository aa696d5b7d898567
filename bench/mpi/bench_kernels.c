/* Communication kernels shared by the MPI benchmarks; see bench_kernels.h. */
#include "bench_kernels.h"

#include <stdio.h>
#include <stdlib.h>

/* State of one run of a kernel over all sizes, shared by the threads of a team. */
struct kernel_ctx {
    const struct bench_opts *opts;
    const char *bench;
    const char *impl;
    int rank;
    enum bench_pp_mode mode;          /* bench_pingpong only */
    int window;                       /* bench_stream only */
    int nthreads;
    const struct bench_place *place;  /* NULL: pthreads on MPI_COMM_WORLD */
    struct bench_point *pts;          /* rank 0, per size: kept here, not printed; or NULL */
    struct bench_thread_result *res;  /* per thread, rank 0 */
    struct bench_hist **hist;         /* per thread, rank 0, bench_pingpong only */
};

static int as_count(size_t n)
{
    return (int) n; /* bench_parse keeps every size below INT32_MAX */
}

/* Where thread tid sends and receives (see struct bench_place). */
struct route {
    MPI_Comm comm;
    int peer;
    int tag;
};

static struct route route_of(const struct kernel_ctx *c, int tid)
{
    if (NULL == c->place || NULL == c->place->handles) {
        return (struct route){MPI_COMM_WORLD, 1 - c->rank, tid};
    }
    return (struct route){c->place->handles[tid], (1 - c->rank) * c->nthreads + tid, 0};
}

static void run_team(struct kernel_ctx *c, bench_thread_fn fn)
{
    if (NULL != c->place && NULL != c->place->run_team) {
        c->place->run_team(c->nthreads, fn, c);
    } else {
        bench_team_run(c->nthreads, fn, c);
    }
}

/* ------------------------------------------------------------------ ping-pong */

static void pingpong_report(const struct kernel_ctx *c, int nthreads, size_t size)
{
    struct bench_point pt = bench_point_sum(c->res, nthreads);
    struct bench_hist *all = bench_alloc(sizeof *all);
    bench_hist_reset(all);
    for (int i = 0; i < nthreads; ++i) {
        bench_hist_merge(all, c->hist[i]);
    }
    /* Histogram samples are round trips in ns; latencies are half of one, in us. */
    const double half_us = 0.5e-3;
    double rate = pt.seconds > 0.0 ? (double) pt.ops / pt.seconds : 0.0;
    double mean = all->count ? all->sum_ns / (double) all->count : 0.0;
    bench_emit(c->bench, c->impl, nthreads, size, "rate", rate, "roundtrips/s", &pt, "");
    bench_emit(c->bench, c->impl, nthreads, size, "lat_mean", mean * half_us, "us", &pt, "");
    bench_emit(c->bench, c->impl, nthreads, size, "lat_p50",
               bench_hist_quantile(all, 0.50) * half_us, "us", &pt, "");
    bench_emit(c->bench, c->impl, nthreads, size, "lat_p99",
               bench_hist_quantile(all, 0.99) * half_us, "us", &pt, "");
    free(all);
}

/* One round trip from rank 0: n bytes out to r, n bytes back into rbuf. */
static void round_trip(enum bench_pp_mode mode, char *sbuf, char *rbuf, int n,
                       const struct route *r, MPI_Status *st)
{
    if (BENCH_PP_PAIRS == mode) {
        BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, r->peer, r->tag, r->comm));
        BENCH_MPI(MPI_Recv(rbuf, n, MPI_BYTE, r->peer, r->tag, r->comm, st));
    } else {
        MPI_Request reqs[2];
        MPI_Status sts[2];
        BENCH_MPI(MPI_Irecv(rbuf, n, MPI_BYTE, r->peer, r->tag, r->comm, &reqs[0]));
        BENCH_MPI(MPI_Isend(sbuf, n, MPI_BYTE, r->peer, r->tag, r->comm, &reqs[1]));
        BENCH_MPI(MPI_Waitall(2, reqs, MPI_STATUS_IGNORE == st ? MPI_STATUSES_IGNORE : sts));
        if (MPI_STATUS_IGNORE != st) {
            *st = sts[0];
        }
    }
}

/*
 * Length of the message that ends a data point. The echoing thread of a pair receives at most
 * size + 1 bytes; the server receives at most max_size + 1 bytes whatever the current size.
 */
static size_t end_length(const struct kernel_ctx *c, size_t size)
{
    return (BENCH_PP_PAIRS == c->mode ? size : c->opts->max_size) + 1;
}

static void pingpong_initiator(struct bench_team *team, int tid, struct kernel_ctx *c)
{
    const struct bench_opts *o = c->opts;
    char *sbuf = bench_alloc(o->max_size + 1);
    char *rbuf = bench_alloc(o->max_size);
    /* Latencies only for the printed report. */
    struct bench_hist *hist = NULL == c->pts ? bench_alloc(sizeof *hist) : NULL;
    struct bench_thread_result *res = &c->res[tid];
    const struct route r = route_of(c, tid);
    c->hist[tid] = hist;

    for (int k = 0; k < o->nsizes; ++k) {
        const size_t size = o->sizes[k];
        const int n = as_count(size);
        MPI_Status st;
        int count = 0;
        bench_fill(sbuf, size, 0, tid);

        /* Warm-up; its first round trip carries the data check. */
        uint64_t warm_end = bench_warmup_deadline(o, bench_now_ns());
        round_trip(c->mode, sbuf, rbuf, n, &r, &st);
        BENCH_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
        bench_verify(rbuf, size, count, 1, tid, c->bench, "reply");
        for (long long i = 1; i < o->warmup && bench_now_ns() < warm_end; ++i) {
            round_trip(c->mode, sbuf, rbuf, n, &r, MPI_STATUS_IGNORE);
        }

        if (NULL != hist) {
            bench_hist_reset(hist);
        }
        *res = (struct bench_thread_result){0};
        bench_team_barrier(team);
        uint64_t t = bench_now_ns();
        res->t_start_ns = t;
        do {
            round_trip(c->mode, sbuf, rbuf, n, &r, MPI_STATUS_IGNORE);
            uint64_t now = bench_now_ns();
            if (NULL != hist) {
                bench_hist_add(hist, now - t);
            }
            t = now;
            res->ops++;
        } while (!bench_should_stop(o, res->ops, res->t_start_ns, t, &res->time_bound));
        res->t_end_ns = t;
        BENCH_MPI(MPI_Send(sbuf, as_count(end_length(c, size)), MPI_BYTE, r.peer, r.tag, r.comm));

        bench_team_barrier(team);
        if (0 == tid && NULL != c->pts) {
            c->pts[k] = bench_point_sum(c->res, team->nthreads);
        } else if (0 == tid) {
            pingpong_report(c, team->nthreads, size);
        }
        bench_team_barrier(team); /* results are reused by the next size */
    }
    free(hist);
    free(rbuf);
    free(sbuf);
}

/* BENCH_PP_PAIRS, rank 1: thread tid echoes tag tid until the end message of each size. */
static void pingpong_echo(int tid, const struct kernel_ctx *c)
{
    const struct bench_opts *o = c->opts;
    char *sbuf = bench_alloc(o->max_size);
    char *rbuf = bench_alloc(o->max_size + 1);
    const struct route r = route_of(c, tid);

    for (int k = 0; k < o->nsizes; ++k) {
        const size_t size = o->sizes[k];
        bench_fill(sbuf, size, 1, tid);
        for (uint64_t i = 0;; ++i) {
            MPI_Status st;
            int count = 0;
            BENCH_MPI(MPI_Recv(rbuf, as_count(size + 1), MPI_BYTE, r.peer, r.tag, r.comm, &st));
            BENCH_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
            if ((size_t) count == size + 1 && i > 0) {
                break;
            }
            if (0 == i || (size_t) count != size) {
                bench_verify(rbuf, size, count, 0, tid, c->bench, "request");
            }
            BENCH_MPI(MPI_Send(sbuf, as_count(size), MPI_BYTE, r.peer, r.tag, r.comm));
        }
    }
    free(rbuf);
    free(sbuf);
}

/*
 * BENCH_PP_SERVER, rank 1: one thread serves requests from any client thread (MPI_ANY_TAG),
 * one at a time, answering with as many bytes on the request's tag. It checks the first
 * request of each tag and size, and keeps one reply buffer per tag, filled for that size.
 */
static void pingpong_server(int nthreads, const struct kernel_ctx *c)
{
    const struct bench_opts *o = c->opts;
    const int end = as_count(end_length(c, 0));
    char *rbuf = bench_alloc(o->max_size + 1);
    char **reply = bench_alloc((size_t) nthreads * sizeof *reply);
    int *reply_count = bench_alloc((size_t) nthreads * sizeof *reply_count);
    for (int i = 0; i < nthreads; ++i) {
        reply[i] = bench_alloc(o->max_size);
        reply_count[i] = -1;
    }

    for (int ends = 0; ends < nthreads * o->nsizes;) {
        MPI_Status st;
        int count = 0;
        BENCH_MPI(MPI_Recv(rbuf, end, MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        BENCH_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
        const int tag = st.MPI_TAG;
        if (tag < 0 || tag >= nthreads) {
            fprintf(stderr, "%s: server got tag %d from a client with %d threads\n", c->bench,
                    tag, nthreads);
            MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_DATA);
        }
        if (count == end) {
            ++ends;
            continue;
        }
        if (count != reply_count[tag]) {
            bench_verify(rbuf, (size_t) count, count, 0, tag, c->bench, "request");
            bench_fill(reply[tag], (size_t) count, 1, tag);
            reply_count[tag] = count;
        }
        BENCH_MPI(MPI_Send(reply[tag], count, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
    }
    for (int i = 0; i < nthreads; ++i) {
        free(reply[i]);
    }
    free(reply_count);
    free(reply);
    free(rbuf);
}

static void pingpong_thread(struct bench_team *team, int tid, void *arg)
{
    struct kernel_ctx *c = arg;
    if (0 == c->rank) {
        pingpong_initiator(team, tid, c);
    } else {
        pingpong_echo(tid, c);
    }
}

static void pingpong_run(struct kernel_ctx *c)
{
    if (0 != c->rank && BENCH_PP_SERVER == c->mode) {
        pingpong_server(c->nthreads, c);
        return;
    }
    if (0 == c->rank) {
        c->res = bench_alloc((size_t) c->nthreads * sizeof *c->res);
        c->hist = bench_alloc((size_t) c->nthreads * sizeof *c->hist);
    }
    run_team(c, pingpong_thread);
    free(c->hist);
    free(c->res);
}

void bench_pingpong(const struct bench_opts *opts, const char *bench, const char *impl, int rank,
                    int nthreads, enum bench_pp_mode mode)
{
    struct kernel_ctx c = {
        .opts = opts, .bench = bench, .impl = impl, .rank = rank, .mode = mode,
        .nthreads = nthreads};
    pingpong_run(&c);
}

void bench_pingpong_points(const struct bench_opts *opts, const char *bench, int rank,
                           int nthreads, const struct bench_place *place, struct bench_point *pts)
{
    struct kernel_ctx c = {.opts = opts, .bench = bench, .rank = rank, .mode = BENCH_PP_PAIRS,
                           .nthreads = nthreads, .place = place, .pts = pts};
    pingpong_run(&c);
}

/* ------------------------------------------------------------------ windowed stream */

enum { STREAM_BUFFER_BUDGET = 64 << 20 }; /* receive buffers per thread */

int bench_stream_window(int window, size_t size)
{
    size_t fit = size ? STREAM_BUFFER_BUDGET / size : (size_t) window;
    if (fit < 1) {
        fit = 1;
    }
    return fit < (size_t) window ? (int) fit : window;
}

static void stream_post(char *rbuf, size_t size, int w, const struct route *r,
                        MPI_Request *reqs)
{
    for (int j = 0; j < w; ++j) {
        BENCH_MPI(MPI_Irecv(rbuf + (size_t) j * size, as_count(size), MPI_BYTE, r->peer, r->tag,
                            r->comm, &reqs[j]));
    }
}

static void stream_sink(struct bench_team *team, int tid, struct kernel_ctx *c)
{
    const struct bench_opts *o = c->opts;
    size_t bytes = 0;
    for (int k = 0; k < o->nsizes; ++k) {
        size_t b = (size_t) bench_stream_window(c->window, o->sizes[k]) * o->sizes[k];
        bytes = b > bytes ? b : bytes;
    }
    char *rbuf = bench_alloc(bytes);
    MPI_Request *reqs = bench_alloc((size_t) c->window * sizeof *reqs);
    MPI_Status *st = bench_alloc((size_t) c->window * sizeof *st);
    struct bench_thread_result *res = &c->res[tid];
    const struct route r = route_of(c, tid);
    const int go = 1;
    const int stop = 0;

    for (int k = 0; k < o->nsizes; ++k) {
        const size_t size = o->sizes[k];
        const int w = bench_stream_window(c->window, size);

        /* Warm-up; its first window carries the data check. */
        uint64_t warm_end = bench_warmup_deadline(o, bench_now_ns());
        for (long long done = 0; done < o->warmup;) {
            stream_post(rbuf, size, w, &r, reqs);
            BENCH_MPI(MPI_Send(&go, 1, MPI_INT, r.peer, r.tag, r.comm));
            BENCH_MPI(MPI_Waitall(w, reqs, st));
            if (0 == done) {
                for (int j = 0; j < w; ++j) {
                    int count = 0;
                    BENCH_MPI(MPI_Get_count(&st[j], MPI_BYTE, &count));
                    bench_verify(rbuf + (size_t) j * size, size, count, 1, tid, c->bench,
                                 "stream message");
                }
            }
            done += w;
            if (bench_now_ns() >= warm_end) {
                break;
            }
        }

        *res = (struct bench_thread_result){0};
        bench_team_barrier(team);
        uint64_t t = bench_now_ns();
        res->t_start_ns = t;
        do {
            stream_post(rbuf, size, w, &r, reqs);
            BENCH_MPI(MPI_Send(&go, 1, MPI_INT, r.peer, r.tag, r.comm));
            BENCH_MPI(MPI_Waitall(w, reqs, MPI_STATUSES_IGNORE));
            res->ops += (uint64_t) w;
            t = bench_now_ns();
        } while (!bench_should_stop(o, res->ops, res->t_start_ns, t, &res->time_bound));
        res->t_end_ns = t;
        BENCH_MPI(MPI_Send(&stop, 1, MPI_INT, r.peer, r.tag, r.comm));

        bench_team_barrier(team);
        if (0 == tid && NULL != c->pts) {
            c->pts[k] = bench_point_sum(c->res, team->nthreads);
        } else if (0 == tid) {
            struct bench_point pt = bench_point_sum(c->res, team->nthreads);
            double rate = pt.seconds > 0.0 ? (double) pt.ops / pt.seconds : 0.0;
            char extra[32];
            snprintf(extra, sizeof extra, "window=%d", w);
            bench_emit(c->bench, c->impl, team->nthreads, size, "msg_rate", rate, "msgs/s", &pt,
                       extra);
            bench_emit(c->bench, c->impl, team->nthreads, size, "bw", rate * (double) size * 1e-6,
                       "MB/s", &pt, extra);
        }
        bench_team_barrier(team);
    }
    free(st);
    free(reqs);
    free(rbuf);
}

static void stream_source(int tid, const struct kernel_ctx *c)
{
    const struct bench_opts *o = c->opts;
    char *sbuf = bench_alloc(o->max_size);
    MPI_Request *reqs = bench_alloc((size_t) c->window * sizeof *reqs);
    const struct route r = route_of(c, tid);

    for (int k = 0; k < o->nsizes; ++k) {
        const size_t size = o->sizes[k];
        const int w = bench_stream_window(c->window, size);
        bench_fill(sbuf, size, 1, tid);
        for (;;) {
            int flag = 0;
            BENCH_MPI(MPI_Recv(&flag, 1, MPI_INT, r.peer, r.tag, r.comm, MPI_STATUS_IGNORE));
            if (!flag) {
                break;
            }
            /* Concurrent sends may share a buffer (MPI-3); receive buffers may not. */
            for (int j = 0; j < w; ++j) {
                BENCH_MPI(MPI_Isend(sbuf, as_count(size), MPI_BYTE, r.peer, r.tag, r.comm,
                                    &reqs[j]));
            }
            BENCH_MPI(MPI_Waitall(w, reqs, MPI_STATUSES_IGNORE));
        }
    }
    free(reqs);
    free(sbuf);
}

static void stream_thread(struct bench_team *team, int tid, void *arg)
{
    struct kernel_ctx *c = arg;
    if (0 == c->rank) {
        stream_sink(team, tid, c);
    } else {
        stream_source(tid, c);
    }
}

static void stream_run(struct kernel_ctx *c)
{
    if (0 == c->rank) {
        c->res = bench_alloc((size_t) c->nthreads * sizeof *c->res);
    }
    run_team(c, stream_thread);
    free(c->res);
}

void bench_stream(const struct bench_opts *opts, const char *bench, const char *impl, int rank,
                  int nthreads, int window)
{
    struct kernel_ctx c = {.opts = opts, .bench = bench, .impl = impl, .rank = rank,
                           .window = window, .nthreads = nthreads};
    stream_run(&c);
}

void bench_stream_points(const struct bench_opts *opts, const char *bench, int rank, int nthreads,
                         int window, const struct bench_place *place, struct bench_point *pts)
{
    struct kernel_ctx c = {.opts = opts, .bench = bench, .rank = rank, .window = window,
                           .nthreads = nthreads, .place = place, .pts = pts};
    stream_run(&c);
}
