/*
 * mt_pingpong: T threads per process; thread i of rank 0 ping-pongs with thread i of rank 1 on
 * tag i (blocking MPI_Send/MPI_Recv). Reports aggregate round trips per second and the mean,
 * median and 99th percentile of half a round trip, per thread count and message size.
 */
#include "bench_kernels.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
    struct bench_opts opts;
    bench_parse(argc, argv, "mt_pingpong",
                "Multithreaded ping-pong: thread i of each process pairs with thread i of the\n"
                "other on tag i. Metrics: rate (round trips/s, all threads), lat_mean, lat_p50,\n"
                "lat_p99 (half a round trip, us). Needs MPI_THREAD_MULTIPLE.",
                BENCH_OPT_THREADS, "8", NULL, 0, &opts);
    int rank = bench_init(&argc, &argv, MPI_THREAD_MULTIPLE, "mt_pingpong");
    const char *impl = bench_impl_label(&opts);
    for (int i = 0; i < opts.nthreads; ++i) {
        bench_pingpong(&opts, "mt_pingpong", impl, rank, opts.threads[i], BENCH_PP_PAIRS);
    }
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
