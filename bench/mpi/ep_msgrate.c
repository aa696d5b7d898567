/*
 * ep_msgrate: msgrate's throughput regime (bench_stream: each sink thread of rank 0 posts a
 * window of MPI_Irecv and sends "go"; its source thread on rank 1 answers with a window of
 * MPI_Isend) on MPI_COMM_WORLD with tag i and on an endpoints communicator where thread i
 * uses handle i, ABBA in one run (see bench_ep.h). Metrics: rate (messages/s received, all
 * threads; comm=world or comm=ep per run) and ep_over_world. --mode ults runs mpiv ULTs
 * instead of pthreads (bench=ep_msgrate_ult). Needs MPI_THREAD_MULTIPLE and pml mpiv.
 */
#include "bench_ep.h"

int main(int argc, char **argv)
{
    const struct bench_ep_def def = {
        "ep_msgrate",
        "Message rate (windows of non-blocking messages) on MPI_COMM_WORLD (one tag per\n"
        "thread) and on an endpoints communicator (one rank per thread), ABBA in one run.\n"
        "Metrics: rate (messages/s, all threads; comm=world or comm=ep per run),\n"
        "ep_over_world. --mode ults: mpiv ULTs instead of pthreads. Needs\n"
        "MPI_THREAD_MULTIPLE, pml mpiv.",
        "msgs/s", 1};
    return bench_ep_main(argc, argv, &def);
}
