/*
 * The endpoints benchmarks ep_pingpong and ep_msgrate (MPIX_Comm_create_endpoints, so pml
 * mpiv only; libmpiv-mpix). For each thread count T and message size, a kernel of
 * bench_kernels.h runs four times in the same job (ABBA): on MPI_COMM_WORLD (thread i with
 * thread i of the other process on tag i), on an endpoints communicator with T handles per
 * process (thread i on handle i with the other process's endpoint i, tag 0), on it again,
 * and on MPI_COMM_WORLD again. The members are T pthreads per process, or T mpiv ULTs with
 * --mode ults (bench_ult.h; then up to 65535, the endpoints a process may have).
 *
 * Rank 0 prints, per size, the metric rate of each run in order (comm=world, comm=ep,
 * comm=ep, comm=world) and ep_over_world, the sum of the two endpoints rates over the sum of
 * the two world rates (iters= and secs= of that line: all four runs). With --mode ults the
 * program prints bench=NAME_ult and every line ends with workers= and stack= (as in
 * ult_pingpong).
 */
#ifndef MPIV_BENCH_EP_H
#define MPIV_BENCH_EP_H

#include "bench_kernels.h"

struct bench_ep_def {
    const char *name;    /* program and bench= (ULTs: NAME_ult) */
    const char *summary; /* for --help */
    const char *unit;    /* of the metric rate */
    int stream;          /* 0: bench_pingpong_points; 1: bench_stream_points (--window) */
};

/* The whole program: options, MPI, the runs, the lines. Returns the exit status. */
int bench_ep_main(int argc, char **argv, const struct bench_ep_def *def);

#endif
