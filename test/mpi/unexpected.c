/*
 * unexpected: many messages that arrive before their receives (np 2).
 *
 * Rank 1 sends 100,000 small messages (8 bytes, its sequence number) with tag 1, then one
 * with tag 2. Rank 0 receives the tag-2 message first, so that every tag-1 message has
 * arrived unexpected and waits in memory, then receives them all (alternately with
 * MPI_Recv and MPI_Mprobe + MPI_Mrecv) and checks that they come in the sender's order.
 * Under pml mpiv at verbose level 1 this prints the warning that messages pile up
 * (checked by variants.sh). An argument changes the count.
 */
#include "mpi_test.h"

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "unexpected", MPI_THREAD_SINGLE);
    const long n = argc > 1 ? atol(argv[1]) : 100000;
    MT_CHECK(n > 0, "bad count %ld", n);
    MT_CHECK(mt_size == 2, "runs on 2 processes, not %d", mt_size);
    if (1 == mt_rank) {
        for (long i = 0; i < n; ++i) {
            MT_CALL(MPI_Send(&i, 1, MPI_LONG, 0, 1, MPI_COMM_WORLD));
        }
        MT_CALL(MPI_Send(&n, 1, MPI_LONG, 0, 2, MPI_COMM_WORLD));
    } else {
        long last = -1, got = -1;
        MPI_Status status;
        MT_CALL(MPI_Recv(&last, 1, MPI_LONG, 1, 2, MPI_COMM_WORLD, &status));
        MT_EXPECT_EQ("the tag-2 message", n, last);
        for (long i = 0; i < n; ++i) {
            if (0 == i % 2) {
                MT_CALL(MPI_Recv(&got, 1, MPI_LONG, 1, 1, MPI_COMM_WORLD, &status));
            } else {
                MPI_Message message;
                MT_CALL(MPI_Mprobe(1, 1, MPI_COMM_WORLD, &message, &status));
                MT_CALL(MPI_Mrecv(&got, 1, MPI_LONG, &message, &status));
            }
            MT_CHECK_STATUS(&status, 1, 1, MPI_LONG, 1, "a tag-1 message");
            MT_EXPECT_EQ("a tag-1 message in the sender's order", i, got);
        }
    }
    return mt_finish();
}
