/*
 * msgrate: the two regimes of seed 004 (Amer et al., section 3.4).
 * - throughput (default): T source threads on rank 1 stream windows of non-blocking messages
 *   to T sink threads on rank 0, pair i on tag i; the sinks measure messages/s (bench=msgrate).
 * - latency: T client threads on rank 0 send requests to a single-threaded server on rank 1
 *   and wait for each reply; reports answered requests (round trips) per second and the
 *   request latency (bench=msgrate_lat).
 */
#include "bench_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct bench_opts opts;
    const char *regime = "throughput";
    const char *window_text = "64";
    struct bench_extra_opt extra[] = {
        {"regime", "throughput (default) or latency", &regime},
        {"window", "messages in flight per thread, throughput regime (default 64)",
         &window_text},
    };
    bench_parse(argc, argv, "msgrate",
                "Message rate with T threads per process, after seed 004. Throughput regime\n"
                "(bench=msgrate): msg_rate (messages/s) and bw (10^6 bytes/s) at the sink.\n"
                "Latency regime (bench=msgrate_lat): rate (answered requests/s) and lat_mean,\n"
                "lat_p50, lat_p99 (half a request round trip, us). Needs MPI_THREAD_MULTIPLE.",
                BENCH_OPT_THREADS, "8", extra, 2, &opts);
    char *end = NULL;
    long window = strtol(window_text, &end, 10);
    if ('\0' != *end || window < 1 || window > 4096) {
        fprintf(stderr, "msgrate: --window needs an integer in 1..4096, not '%s'\n", window_text);
        return BENCH_EXIT_USAGE;
    }
    int latency = 0 == strcmp(regime, "latency");
    if (!latency && 0 != strcmp(regime, "throughput")) {
        fprintf(stderr, "msgrate: --regime is throughput or latency, not '%s'\n", regime);
        return BENCH_EXIT_USAGE;
    }
    int rank = bench_init(&argc, &argv, MPI_THREAD_MULTIPLE, "msgrate");
    const char *impl = bench_impl_label(&opts);
    for (int i = 0; i < opts.nthreads; ++i) {
        if (latency) {
            bench_pingpong(&opts, "msgrate_lat", impl, rank, opts.threads[i], BENCH_PP_SERVER);
        } else {
            bench_stream(&opts, "msgrate", impl, rank, opts.threads[i], (int) window);
        }
    }
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
