/*
 * ep_pingpong: mt_pingpong (bench_pingpong, blocking MPI_Send/MPI_Recv between thread i of
 * each process) on MPI_COMM_WORLD with tag i and on an endpoints communicator where thread i
 * uses handle i, ABBA in one run (see bench_ep.h). Metrics: rate (round trips/s, all
 * threads; comm=world or comm=ep per run) and ep_over_world. --mode ults runs mpiv ULTs
 * instead of pthreads (bench=ep_pingpong_ult). Needs MPI_THREAD_MULTIPLE and pml mpiv.
 */
#include "bench_ep.h"

int main(int argc, char **argv)
{
    const struct bench_ep_def def = {
        "ep_pingpong",
        "Multithreaded ping-pong on MPI_COMM_WORLD (one tag per thread) and on an\n"
        "endpoints communicator (one rank per thread), ABBA in one run. Metrics: rate\n"
        "(round trips/s, all threads; comm=world or comm=ep per run), ep_over_world.\n"
        "--mode ults: mpiv ULTs instead of pthreads. Needs MPI_THREAD_MULTIPLE, pml mpiv.",
        "roundtrips/s", 0};
    return bench_ep_main(argc, argv, &def);
}
