/*
 * ep_pingpong: T threads per process ping-pong pairwise (thread i of rank 0 with thread i of
 * rank 1, blocking MPI_Send/MPI_Recv), in two ways in the same run: on MPI_COMM_WORLD with
 * tag i (all threads share one rank and one matching state), and on an endpoints
 * communicator (MPIX_Comm_create_endpoints, T endpoints per process) where thread i uses
 * handle i and its peer is endpoint rank T + i (a rank and a matching table of its own).
 * Each thread count runs world, endpoints, endpoints, world (ABBA); the metric rate (round
 * trips/s, all threads) is printed per run with comm=world or comm=ep, then ep_over_world,
 * the ratio of the sums. Needs MPI_THREAD_MULTIPLE and pml mpiv (libmpiv-mpix).
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>

#include <mpiv/mpix_endpoints.h>

struct run {
    const struct bench_opts *opts;
    int rank, nthreads, ep;
    size_t size;
    MPI_Comm *handles; /* ep: this process's T handles */
    struct bench_thread_result *res;
};

static void thread_main(struct bench_team *team, int tid, void *arg)
{
    struct run *r = arg;
    const int n = (int) r->size;
    MPI_Comm comm = r->ep ? r->handles[tid] : MPI_COMM_WORLD;
    /* world: rank 1, tag tid; endpoints: the other process's endpoint tid, tag 0 */
    const int peer = r->ep ? (0 == r->rank ? r->nthreads + tid : tid) : 1 - r->rank;
    const int tag = r->ep ? 0 : tid;
    char *sbuf = bench_alloc(r->size + 1), *rbuf = bench_alloc(r->size + 1);
    MPI_Status st;
    bench_team_barrier(team);
    if (0 == r->rank) {
        struct bench_thread_result *res = &r->res[tid];
        uint64_t ops = 0, now = bench_now_ns();
        res->t_start_ns = now;
        while (!bench_should_stop(r->opts, ops, res->t_start_ns, now, &res->time_bound)) {
            BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, peer, tag, comm));
            BENCH_MPI(MPI_Recv(rbuf, n, MPI_BYTE, peer, tag, comm, &st));
            ++ops;
            now = bench_now_ns();
        }
        res->t_end_ns = now;
        res->ops = ops;
        BENCH_MPI(MPI_Send(sbuf, n + 1, MPI_BYTE, peer, tag, comm)); /* the end */
    } else {
        for (;;) {
            int count = 0;
            BENCH_MPI(MPI_Recv(rbuf, n + 1, MPI_BYTE, peer, tag, comm, &st));
            BENCH_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
            if (count == n + 1) {
                break;
            }
            BENCH_MPI(MPI_Send(sbuf, n, MPI_BYTE, peer, tag, comm));
        }
    }
    free(sbuf);
    free(rbuf);
}

int main(int argc, char **argv)
{
    struct bench_opts opts;
    bench_parse(argc, argv, "ep_pingpong",
                "Multithreaded ping-pong on MPI_COMM_WORLD (one tag per thread) and on an\n"
                "endpoints communicator (one rank per thread), ABBA in one run. Metrics: rate\n"
                "(round trips/s, all threads; comm=world or comm=ep per run), ep_over_world.\n"
                "Needs MPI_THREAD_MULTIPLE and pml mpiv.",
                BENCH_OPT_THREADS, "8", NULL, 0, &opts);
    const int rank = bench_init(&argc, &argv, MPI_THREAD_MULTIPLE, "ep_pingpong");
    const char *impl = bench_impl_label(&opts);
    for (int t = 0; t < opts.nthreads; ++t) {
        const int nthreads = opts.threads[t];
        MPI_Comm *handles = bench_alloc(sizeof(MPI_Comm) * (size_t) nthreads);
        BENCH_MPI(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, nthreads, MPI_INFO_NULL, handles));
        for (int s = 0; s < opts.nsizes; ++s) {
            double sum[2] = {0, 0};
            for (int k = 0; k < 4; ++k) {
                const int ep = 1 == k || 2 == k; /* world, ep, ep, world */
                struct run r = {&opts, rank, nthreads, ep, opts.sizes[s], handles,
                                bench_alloc(sizeof(struct bench_thread_result) * (size_t) nthreads)};
                BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
                bench_team_run(nthreads, thread_main, &r);
                if (0 == rank) {
                    const struct bench_point pt = bench_point_sum(r.res, nthreads);
                    const double rate = pt.seconds > 0 ? (double) pt.ops / pt.seconds : 0;
                    sum[ep] += rate;
                    bench_emit("ep_pingpong", impl, nthreads, opts.sizes[s], "rate", rate,
                               "roundtrips/s", &pt, ep ? " comm=ep" : " comm=world");
                }
                free(r.res);
            }
            if (0 == rank && sum[0] > 0) {
                const struct bench_point none = {0, 0, 0};
                bench_emit("ep_pingpong", impl, nthreads, opts.sizes[s], "ep_over_world",
                           sum[1] / sum[0], "ratio", &none, "");
            }
        }
        for (int i = 0; i < nthreads; ++i) {
            BENCH_MPI(MPI_Comm_free(&handles[i]));
        }
        free(handles);
    }
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
