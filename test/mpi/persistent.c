/*
 * persistent: persistent requests started for many rounds (np 2).
 *
 * Both ranks create persistent receives and sends to the other rank for 0 B, 8 B, 4 KiB,
 * 64 KiB + 1 and 1 MiB (MPI_Recv_init; MPI_Send_init, with MPI_Ssend_init for one size and
 * MPI_Bsend_init for another).  Each round refills the send buffers with a round-dependent
 * pattern, starts the receives and sends (MPI_Startall, or MPI_Start one by one in reverse
 * order on odd rounds, receives after sends on rounds divisible by 3) and waits with
 * MPI_Waitall, alternating with MPI_Wait loops; then checks data and status.  Finally
 * MPI_Request_free on the inactive requests; one more pair is freed while active.
 */
#include "mpi_test.h"

static const size_t sizes[] = {0, 8, 4096, 65537, 1 << 20};
#define NUM_SIZES ((int) (sizeof(sizes) / sizeof(sizes[0])))

static uint32_t seed_of(int sender, int round, int s)
{
    return (uint32_t) (sender * 1000003 + round * 101 + s);
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "persistent", MPI_THREAD_SINGLE);
    mt_require_size(2);
    const long rounds = mt_iterations(argc, argv, 100);
    const int peer = 1 - mt_rank;
    uint8_t *send_bufs[NUM_SIZES], *recv_bufs[NUM_SIZES];
    MPI_Request sends[NUM_SIZES], recvs[NUM_SIZES];

    int bsend_bytes = 0;
    void *bsend_buffer = NULL;
    if (mt_rank < 2) {
        for (int s = 0; s < NUM_SIZES; ++s) {
            const int count = (int) sizes[s];
            send_bufs[s] = mt_malloc(sizes[s]);
            recv_bufs[s] = mt_malloc(sizes[s]);
            MT_CALL(
                MPI_Recv_init(recv_bufs[s], count, MPI_BYTE, peer, s, MPI_COMM_WORLD, &recvs[s]));
            if (1 == s) {
                MT_CALL(MPI_Bsend_init(send_bufs[s], count, MPI_BYTE, peer, s, MPI_COMM_WORLD,
                                       &sends[s]));
                bsend_bytes = count + MPI_BSEND_OVERHEAD + 64;
                bsend_buffer = mt_malloc((size_t) bsend_bytes);
                MT_CALL(MPI_Buffer_attach(bsend_buffer, bsend_bytes));
            } else if (3 == s) {
                MT_CALL(MPI_Ssend_init(send_bufs[s], count, MPI_BYTE, peer, s, MPI_COMM_WORLD,
                                       &sends[s]));
            } else {
                MT_CALL(MPI_Send_init(send_bufs[s], count, MPI_BYTE, peer, s, MPI_COMM_WORLD,
                                      &sends[s]));
            }
        }
    }

    for (long round = 0; round < rounds && mt_rank < 2; ++round) {
        for (int s = 0; s < NUM_SIZES; ++s) {
            mt_fill(send_bufs[s], sizes[s], seed_of(mt_rank, (int) round, s));
            memset(recv_bufs[s], 0, sizes[s]);
        }
        if (0 == round % 3) {
            MT_CALL(MPI_Startall(NUM_SIZES, sends));
            MT_CALL(MPI_Startall(NUM_SIZES, recvs));
        } else if (round % 2) {
            for (int s = NUM_SIZES - 1; s >= 0; --s) {
                MT_CALL(MPI_Start(&recvs[s]));
                MT_CALL(MPI_Start(&sends[s]));
            }
        } else {
            MT_CALL(MPI_Startall(NUM_SIZES, recvs));
            MT_CALL(MPI_Startall(NUM_SIZES, sends));
        }
        MPI_Status statuses[NUM_SIZES];
        if (round % 2) {
            MT_CALL(MPI_Waitall(NUM_SIZES, recvs, statuses));
            MT_CALL(MPI_Waitall(NUM_SIZES, sends, MPI_STATUSES_IGNORE));
        } else {
            for (int s = 0; s < NUM_SIZES; ++s) {
                MT_CALL(MPI_Wait(&recvs[s], &statuses[s]));
                MT_CALL(MPI_Wait(&sends[s], MPI_STATUS_IGNORE));
            }
        }
        for (int s = 0; s < NUM_SIZES; ++s) {
            char what[80];
            snprintf(what, sizeof(what), "round %ld, persistent receive of %zu bytes", round,
                     sizes[s]);
            MT_CHECK(MPI_REQUEST_NULL != recvs[s] && MPI_REQUEST_NULL != sends[s],
                     "%s: a persistent request became MPI_REQUEST_NULL after completion", what);
            MT_CHECK_STATUS(&statuses[s], peer, s, MPI_BYTE, (int) sizes[s], what);
            MT_VERIFY(recv_bufs[s], sizes[s], seed_of(peer, (int) round, s), what);
        }
    }

    if (mt_rank < 2) {
        for (int s = 0; s < NUM_SIZES; ++s) {
            MT_CALL(MPI_Request_free(&recvs[s]));
            MT_CALL(MPI_Request_free(&sends[s]));
            MT_CHECK(MPI_REQUEST_NULL == recvs[s] && MPI_REQUEST_NULL == sends[s],
                     "MPI_Request_free must set the handle to MPI_REQUEST_NULL");
        }
        /* a started persistent send freed while active still delivers its data */
        MPI_Request send, recv;
        const size_t bytes = 65536;
        uint8_t *send_buf = mt_malloc(bytes), *recv_buf = mt_malloc(bytes);
        mt_fill(send_buf, bytes, 99u + (uint32_t) mt_rank);
        MT_CALL(MPI_Send_init(send_buf, (int) bytes, MPI_BYTE, peer, 99, MPI_COMM_WORLD, &send));
        MT_CALL(MPI_Recv_init(recv_buf, (int) bytes, MPI_BYTE, peer, 99, MPI_COMM_WORLD, &recv));
        MT_CALL(MPI_Start(&send));
        MT_CALL(MPI_Request_free(&send));
        MT_CALL(MPI_Start(&recv));
        MPI_Status status;
        MT_CALL(MPI_Wait(&recv, &status));
        MT_CHECK_STATUS(&status, peer, 99, MPI_BYTE, (int) bytes,
                        "persistent send freed while active");
        MT_VERIFY(recv_buf, bytes, 99u + (uint32_t) peer, "persistent send freed while active");
        MT_CALL(MPI_Request_free(&recv));
        /* the peer received our data (its check passed) before we release the buffer */
        MT_CALL(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 100, NULL, 0, MPI_BYTE, peer, 100,
                             MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        free(send_buf);
        free(recv_buf);

        void *detached;
        MT_CALL(MPI_Buffer_detach(&detached, &bsend_bytes));
        free(bsend_buffer);
        for (int s = 0; s < NUM_SIZES; ++s) {
            free(send_bufs[s]);
            free(recv_bufs[s]);
        }
    }
    return mt_finish();
}
