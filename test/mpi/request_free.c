/*
 * request_free: MPI_Request_free on an active MPI_Isend, before it completes (np 2).
 *
 * Rank 0 Isends a batch of messages (0 B to 1 MiB, eager and rendezvous) and frees every
 * request at once; rank 1 posts its receives only after the frees (it waits for a "freed"
 * notice on a control communicator), so the sends are still active when freed.  All data must
 * still arrive intact and in order.  Rank 0 releases the send buffers only after rank 1
 * acknowledged the batch (freed requests give no completion).  Several batches.
 */
#include "mpi_test.h"

static const size_t sizes[] = {0, 8, 4095, 4097, 65536, 300000, 1 << 20};
#define NUM_SIZES ((int) (sizeof(sizes) / sizeof(sizes[0])))

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "request_free", MPI_THREAD_SINGLE);
    mt_require_size(2);
    MPI_Comm control_comm;
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &control_comm));
    const long batches = mt_iterations(argc, argv, 10);

    for (long batch = 0; batch < batches && mt_rank < 2; ++batch) {
        if (0 == mt_rank) {
            uint8_t *bufs[NUM_SIZES];
            for (int s = 0; s < NUM_SIZES; ++s) {
                MPI_Request request;
                bufs[s] = mt_malloc(sizes[s]);
                mt_fill(bufs[s], sizes[s], (uint32_t) (batch * 100 + s));
                MT_CALL(MPI_Isend(bufs[s], (int) sizes[s], MPI_BYTE, 1, s % 2, MPI_COMM_WORLD,
                                  &request));
                MT_CALL(MPI_Request_free(&request));
                MT_CHECK(MPI_REQUEST_NULL == request,
                         "MPI_Request_free must set the handle to MPI_REQUEST_NULL");
            }
            MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, 1, 0, control_comm)); /* "freed" */
            MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 1, 1, control_comm, MPI_STATUS_IGNORE)); /* ack */
            for (int s = 0; s < NUM_SIZES; ++s) {
                free(bufs[s]);
            }
        } else {
            MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 0, 0, control_comm, MPI_STATUS_IGNORE));
            for (int s = 0; s < NUM_SIZES; ++s) {
                char what[80];
                MPI_Status status;
                uint8_t *buf = mt_malloc(sizes[s]);
                snprintf(what, sizeof(what), "batch %ld, freed Isend of %zu bytes", batch,
                         sizes[s]);
                MT_CALL(MPI_Recv(buf, (int) sizes[s], MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD,
                                 &status));
                MT_CHECK_STATUS(&status, 0, s % 2, MPI_BYTE, (int) sizes[s], what);
                MT_VERIFY(buf, sizes[s], (uint32_t) (batch * 100 + s), what);
                free(buf);
            }
            MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, 0, 1, control_comm));
        }
    }
    MPI_Comm_free(&control_comm);
    return mt_finish();
}
