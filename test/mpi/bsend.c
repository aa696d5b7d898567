/*
 * bsend: buffered sends with MPI_Buffer_attach, MPI_Bsend, MPI_Ibsend, MPI_Buffer_detach (np 2).
 *
 * Three rounds, each with a freshly attached buffer sized with MPI_Pack_size +
 * MPI_BSEND_OVERHEAD: rank 0 Bsends and Ibsends messages of 0 B to 256 KiB before rank 1 has
 * posted any receive (rank 1 waits for "sent" on a control communicator).  The buffered sends
 * must complete locally; rank 0 scribbles over its send buffer right after each call (a
 * buffered send copies the data).  Rank 1 then receives and checks everything in order, and
 * rank 0's MPI_Buffer_detach (which waits for the buffered data to leave) returns the buffer
 * address and size that were attached.
 */
#include "mpi_test.h"

static const size_t sizes[] = {0, 1, 8, 1000, 4096, 4097, 65536, 262144};
#define NUM_SIZES ((int) (sizeof(sizes) / sizeof(sizes[0])))

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "bsend", MPI_THREAD_SINGLE);
    mt_require_size(2);
    MPI_Comm control_comm;
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &control_comm));
    uint8_t *buf = mt_malloc(sizes[NUM_SIZES - 1]);

    for (int round = 0; round < 3 && mt_rank < 2; ++round) {
        /* each size twice: once with MPI_Bsend, once with MPI_Ibsend */
        if (0 == mt_rank) {
            int attach_bytes = 0;
            for (int s = 0; s < NUM_SIZES; ++s) {
                int packed = 0;
                MT_CALL(MPI_Pack_size((int) sizes[s], MPI_BYTE, MPI_COMM_WORLD, &packed));
                attach_bytes += 2 * (packed + MPI_BSEND_OVERHEAD);
            }
            void *attached = mt_malloc((size_t) attach_bytes);
            MT_CALL(MPI_Buffer_attach(attached, attach_bytes));

            MPI_Request requests[NUM_SIZES];
            for (int s = 0; s < NUM_SIZES; ++s) {
                const int count = (int) sizes[s];
                const int tag = 100 * round + s;
                mt_fill(buf, sizes[s], (uint32_t) (2 * tag));
                MT_CALL(MPI_Bsend(buf, count, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
                memset(buf, 0xDD, sizes[s]); /* the library must have copied the data */
                mt_fill(buf, sizes[s], (uint32_t) (2 * tag + 1));
                MT_CALL(MPI_Ibsend(buf, count, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &requests[s]));
                int flag = 0;
                /* an Ibsend completes locally: waiting must not need the receiver */
                MT_CALL(MPI_Wait(&requests[s], MPI_STATUS_IGNORE));
                MT_CALL(MPI_Test(&requests[s], &flag, MPI_STATUS_IGNORE));
                MT_CHECK(flag, "MPI_Test on a completed (null) request must set flag");
                memset(buf, 0xDD, sizes[s]);
            }
            MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, 1, 0, control_comm)); /* "sent" */

            void *detached = NULL;
            int detached_bytes = 0;
            MT_CALL(MPI_Buffer_detach(&detached, &detached_bytes));
            MT_CHECK(detached == attached, "MPI_Buffer_detach returned %p, attached %p", detached,
                     attached);
            MT_EXPECT_EQ("MPI_Buffer_detach size", attach_bytes, detached_bytes);
            free(attached);
        } else {
            MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 0, 0, control_comm, MPI_STATUS_IGNORE));
            for (int s = 0; s < NUM_SIZES; ++s) {
                const int tag = 100 * round + s;
                for (int k = 0; k < 2; ++k) {
                    char what[80];
                    MPI_Status status;
                    snprintf(what, sizeof(what), "round %d, %s of %zu bytes", round,
                             k ? "Ibsend" : "Bsend", sizes[s]);
                    memset(buf, 0, sizes[s]);
                    MT_CALL(
                        MPI_Recv(buf, (int) sizes[s], MPI_BYTE, 0, tag, MPI_COMM_WORLD, &status));
                    MT_CHECK_STATUS(&status, 0, tag, MPI_BYTE, (int) sizes[s], what);
                    MT_VERIFY(buf, sizes[s], (uint32_t) (2 * tag + k), what);
                }
            }
        }
    }

    free(buf);
    MPI_Comm_free(&control_comm);
    return mt_finish();
}
