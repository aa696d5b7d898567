/*
 * procname: where each rank runs, for the two-node tests (contrib/twonode/check.sh).
 *
 * Every rank passes a message around the ring (so each talks to both neighbours, which a
 * round-robin mapping puts on the other node), then rank 0 gathers MPI_Get_processor_name
 * and the node-local size and prints one line per rank:
 *   procname: rank R of N on HOST, LOCAL ranks on its node
 * followed by "PASS procname" when the ring came back intact.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, len, local, token, ok;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm node_comm;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    memset(name, 0, sizeof(name));
    MPI_Get_processor_name(name, &len);
    /* The ranks Open MPI considers on this node (by its locality, not by hostname). */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_comm);
    MPI_Comm_size(node_comm, &local);
    MPI_Comm_free(&node_comm);

    /* The ring: rank 0 starts the token, each rank adds its rank. */
    if (0 == rank) {
        token = 0;
        MPI_Send(&token, 1, MPI_INT, 1 % size, 0, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok = token == size * (size - 1) / 2;
    } else {
        MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank;
        MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        ok = 1;
    }

    static int locals[1024];
    static char names[1024][MPI_MAX_PROCESSOR_NAME];
    if (size > 1024) {
        MPI_Abort(MPI_COMM_WORLD, 2); /* the arrays above are sized for the tests */
    }
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    MPI_Gather(&local, 1, MPI_INT, locals, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (0 == rank) {
        for (int r = 0; r < size; ++r) {
            printf("procname: rank %d of %d on %s, %d ranks on its node\n", r, size, names[r],
                   locals[r]);
        }
        printf("%s procname: the ring %s\n", ok ? "PASS" : "FAIL", ok ? "came back" : "is broken");
        fflush(stdout);
    }
    MPI_Finalize();
    return ok ? 0 : 1;
}
