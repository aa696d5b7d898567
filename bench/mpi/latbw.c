/*
 * latbw: single-threaded latency (blocking ping-pong) and bandwidth (windowed non-blocking
 * stream) over a sweep of message sizes, under MPI_THREAD_SINGLE.
 */
#include "bench_kernels.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    struct bench_opts opts;
    const char *window_text = "64";
    struct bench_extra_opt extra[] = {
        {"window", "messages in flight in the bandwidth test (default 64)", &window_text},
    };
    bench_parse(argc, argv, "latbw",
                "Single-threaded sweep: lat_mean, lat_p50, lat_p99 (half a round trip, us) and\n"
                "rate (round trips/s) of a ping-pong, then msg_rate (messages/s) and bw (10^6\n"
                "bytes/s) of a windowed stream from rank 1 to rank 0.",
                0, "0:16M", extra, 1, &opts);
    char *end = NULL;
    long window = strtol(window_text, &end, 10);
    if ('\0' != *end || window < 1 || window > 4096) {
        fprintf(stderr, "latbw: --window needs an integer in 1..4096, not '%s'\n", window_text);
        return BENCH_EXIT_USAGE;
    }
    int rank = bench_init(&argc, &argv, MPI_THREAD_SINGLE, "latbw");
    const char *impl = bench_impl_label(&opts);
    bench_pingpong(&opts, "latbw", impl, rank, 1, BENCH_PP_PAIRS);
    bench_stream(&opts, "latbw", impl, rank, 1, (int) window);
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
