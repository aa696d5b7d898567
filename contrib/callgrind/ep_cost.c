/*
 * ep_cost: N blocking 8-byte round trips between two processes, on MPI_COMM_WORLD under
 * MPI_THREAD_MULTIPLE or between two endpoints (MPIX_Comm_create_endpoints, one per
 * process): the program that contrib/callgrind/ep_cost.sh runs under callgrind to count
 * the instructions of mpiv's send, receive-post and arrival paths per message.
 * Usage: ep_cost world|ep N (np 2, pml mpiv).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpiv/mpix_endpoints.h>

int main(int argc, char **argv)
{
    int provided = 0, rank = 0, size = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int ep = argc > 1 && 0 == strcmp(argv[1], "ep");
    const long n = argc > 2 ? atol(argv[2]) : 0;
    if (provided != MPI_THREAD_MULTIPLE || 2 != size || n < 1 ||
        (argc > 1 && !ep && 0 != strcmp(argv[1], "world"))) {
        if (0 == rank) {
            fprintf(stderr, "usage: mpirun -np 2 ep_cost world|ep N (needs MPI_THREAD_MULTIPLE)\n");
        }
        MPI_Finalize();
        return 2;
    }
    MPI_Comm comm = MPI_COMM_WORLD;
    if (ep && MPI_SUCCESS != MPIX_Comm_create_endpoints(MPI_COMM_WORLD, 1, MPI_INFO_NULL, &comm)) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int peer = 1 - rank; /* endpoint ranks are 0 and 1 too */
    double v = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < n; ++i) {
        if (0 == rank) {
            MPI_Send(&v, 1, MPI_DOUBLE, peer, 0, comm);
            MPI_Recv(&v, 1, MPI_DOUBLE, peer, 0, comm, MPI_STATUS_IGNORE);
            v += 1;
        } else {
            MPI_Recv(&v, 1, MPI_DOUBLE, peer, 0, comm, MPI_STATUS_IGNORE);
            MPI_Send(&v, 1, MPI_DOUBLE, peer, 0, comm);
        }
    }
    if (0 == rank && v != (double) n) {
        fprintf(stderr, "ep_cost: %g round trips counted, %ld made\n", v, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (ep) {
        MPI_Comm_free(&comm);
    }
    MPI_Finalize();
    return 0;
}
