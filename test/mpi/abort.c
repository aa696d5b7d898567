/*
 * abort: a process that dies mid-communication must end the whole job (np 2).
 *
 * Rank 1 tells rank 0 it is about to block, then blocks in MPI_Recv for a message that never
 * comes.  Rank 0 waits 200 ms (so rank 1 is inside MPI_Recv) and then
 *   `mpi`   calls MPI_Abort(MPI_COMM_WORLD, 3), or
 *   `kill`  raises SIGKILL (no chance to clean up).
 * Just before, it prints the marker EXPECTED-ABORT.  The test passes when the marker was printed
 * and mpirun exits non-zero within 30 s; run.sh --expect-abort checks that.
 * If MPI_Recv ever returns, rank 1 reports it and exits with status 0 (so the run fails).
 */
#include "mpi_test.h"

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "abort", MPI_THREAD_SINGLE);
    mt_require_size(2);
    const char *mode = (argc > 1) ? argv[1] : "mpi";
    MT_CHECK(0 == strcmp(mode, "mpi") || 0 == strcmp(mode, "kill"),
             "mode must be mpi or kill, got %s", mode);

    if (1 == mt_rank) {
        int value = 0;
        MT_CALL(MPI_Send(&value, 1, MPI_INT, 0, 1, MPI_COMM_WORLD));
        MT_CALL(MPI_Recv(&value, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        fprintf(stderr, "[abort rank 1] FAIL: MPI_Recv returned although nothing was sent\n");
        _exit(0);
    } else if (0 == mt_rank) {
        int value = -1;
        MT_CALL(MPI_Recv(&value, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        mt_sleep_ms(200);
        printf("EXPECTED-ABORT: rank 0 ends the job with %s while rank 1 is blocked in MPI_Recv\n",
               0 == strcmp(mode, "kill") ? "SIGKILL" : "MPI_Abort");
        fflush(stdout);
        if (0 == strcmp(mode, "kill")) {
            raise(SIGKILL);
        } else {
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        fprintf(stderr, "[abort rank 0] FAIL: still running after %s\n", mode);
        _exit(0);
    }
    /* other ranks (np > 2) block as well */
    int value;
    MT_CALL(MPI_Recv(&value, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return 0;
}
