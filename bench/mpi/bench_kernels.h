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
/* The window bench_stream uses for messages of `size` bytes when asked for `window`. */
int bench_stream_window(int window, size_t size);

/*
 * Where the threads of a kernel run and which communicator they use. The kernels above run
 * pthreads on MPI_COMM_WORLD, thread i with thread i of the other process on tag i.
 */
struct bench_place {
    /*
     * NULL: MPI_COMM_WORLD. Else an endpoints communicator with nthreads handles per
     * process: thread i uses handles[i] and talks to endpoint i of the other process (rank
     * nthreads * other + i) on tag 0.
     */
    const MPI_Comm *handles;
    bench_team_runner run_team; /* NULL: bench_team_run (pthreads) */
};

/*
 * bench_pingpong (BENCH_PP_PAIRS) and bench_stream on a place, printing nothing: rank 0 gets
 * the aggregate of each size of opts in pts[0 .. opts->nsizes - 1]. bench names the program
 * in data-check messages.
 */
void bench_pingpong_points(const struct bench_opts *opts, const char *bench, int rank,
                           int nthreads, const struct bench_place *place, struct bench_point *pts);
void bench_stream_points(const struct bench_opts *opts, const char *bench, int rank, int nthreads,
                         int window, const struct bench_place *place, struct bench_point *pts);

#endif
