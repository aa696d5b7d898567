/*
 * Communication kernels shared by the MPI benchmarks. Each runs every size of opts for one
 * thread count: thread i of rank 0 pairs with thread i of rank 1 on tag i, and rank 0 prints.
 */
#ifndef MPIV_BENCH_KERNELS_H
#define MPIV_BENCH_KERNELS_H

#include "bench_common.h"

/* Who answers the round trips of bench_pingpong. */
enum bench_pp_mode {
    /* Thread i of rank 1 echoes thread i of rank 0 (blocking MPI_Send/MPI_Recv both sides). */
    BENCH_PP_PAIRS,
    /*
     * Seed 004's latency regime: the threads of rank 0 are clients (MPI_Irecv + MPI_Isend +
     * MPI_Waitall per request); rank 1 is a single-threaded server that receives with
     * MPI_ANY_TAG and answers each request before taking the next.
     */
    BENCH_PP_SERVER,
};

/*
 * Round trips of `size` bytes each way, started by the threads of rank 0. Each timed round
 * trip is recorded. Metrics: rate (aggregate round trips/s) and lat_mean, lat_p50, lat_p99
 * (half a round trip, microseconds).
 *
 * Each client thread ends a data point with one message one byte longer than any request the
 * other side may receive at that point, which it tells apart with MPI_Get_count. This keeps
 * the timed loop free of control traffic and the pairs free of wildcard receives.
 */
void bench_pingpong(const struct bench_opts *opts, const char *bench, const char *impl, int rank,
                    int nthreads, enum bench_pp_mode mode);

/*
 * Windowed stream: rank 0 (the sink) pre-posts `window` MPI_Irecv, sends a one-int "go" and
 * waits for all of them; rank 1 (the source) answers each "go" with `window` MPI_Isend of one
 * buffer and waits for them. A "go" of 0 ends the point. The sink measures. Metrics: msg_rate
 * (messages/s) and bw (10^6 bytes/s). Large messages get a smaller window so that the receive
 * buffers of a thread stay within 64 MiB; the line's window= field gives the value used.
 */
void bench_stream(const struct bench_opts *opts, const char *bench, const char *impl, int rank,
                  int nthreads, int window);

#endif
