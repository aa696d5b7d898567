/*
 * self: messages a process sends to itself, and MPI_PROC_NULL (every rank does it; np 2).
 *
 * Self-sends for 0 B, 8 B, 4 KiB, 64 KiB + 1, 1 MiB and 16 MiB:
 *   MPI_Isend to self, then a blocking MPI_Recv (specific and MPI_ANY_SOURCE), then MPI_Wait;
 *   MPI_Irecv from self, then a blocking MPI_Send, then MPI_Wait;
 *   MPI_Irecv from self, then MPI_Ssend;  MPI_Sendrecv with self.
 * MPI_PROC_NULL: Send, Isend, Ssend return at once; Recv/Irecv from MPI_PROC_NULL complete with
 * status source MPI_PROC_NULL, tag MPI_ANY_TAG, count 0 and leave the buffer alone; Sendrecv
 * with MPI_PROC_NULL on both sides.
 */
#include "mpi_test.h"

static const size_t sizes[] = {0, 8, 4096, 65537, 1 << 20, 16 << 20};
#define NUM_SIZES ((int) (sizeof(sizes) / sizeof(sizes[0])))

static void check_proc_null(const MPI_Status *status, const int *value, const char *what)
{
    MT_CHECK_STATUS(status, MPI_PROC_NULL, MPI_ANY_TAG, MPI_INT, 0, what);
    MT_EXPECT_EQ(what, 123, *value);
}

static void proc_null(void)
{
    int value = 123;
    MPI_Status status;
    MPI_Request request;
    MT_CALL(MPI_Send(&value, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    MT_CALL(MPI_Ssend(&value, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    MT_CALL(MPI_Isend(&value, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &request));
    MT_CALL(MPI_Wait(&request, &status));
    MT_CALL(MPI_Recv(&value, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &status));
    check_proc_null(&status, &value, "Recv from MPI_PROC_NULL");
    MT_CALL(MPI_Irecv(&value, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &request));
    MT_CALL(MPI_Wait(&request, &status));
    check_proc_null(&status, &value, "Irecv from MPI_PROC_NULL");
    MT_CALL(MPI_Sendrecv(&value, 1, MPI_INT, MPI_PROC_NULL, 1, &value, 1, MPI_INT, MPI_PROC_NULL, 1,
                         MPI_COMM_WORLD, &status));
    check_proc_null(&status, &value, "Sendrecv with MPI_PROC_NULL");
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "self", MPI_THREAD_SINGLE);
    const size_t max_bytes = sizes[NUM_SIZES - 1];
    uint8_t *send_buf = mt_malloc(max_bytes), *recv_buf = mt_malloc(max_bytes);
    const int me = mt_rank;

    for (int s = 0; s < NUM_SIZES; ++s) {
        const size_t bytes = sizes[s];
        const int count = (int) bytes;
        MPI_Request request;
        MPI_Status status;
        char what[120];

        for (int any_source = 0; any_source < 2; ++any_source) {
            const int tag = 10 + s;
            const uint32_t seed = (uint32_t) (100 * me + 10 * s + any_source);
            snprintf(what, sizeof(what), "Isend to self then Recv(%s) of %zu bytes",
                     any_source ? "ANY_SOURCE" : "self", bytes);
            mt_fill(send_buf, bytes, seed);
            memset(recv_buf, 0, bytes);
            MT_CALL(MPI_Isend(send_buf, count, MPI_BYTE, me, tag, MPI_COMM_WORLD, &request));
            MT_CALL(MPI_Recv(recv_buf, count, MPI_BYTE, any_source ? MPI_ANY_SOURCE : me, tag,
                             MPI_COMM_WORLD, &status));
            MT_CALL(MPI_Wait(&request, MPI_STATUS_IGNORE));
            MT_CHECK_STATUS(&status, me, tag, MPI_BYTE, count, what);
            MT_VERIFY(recv_buf, bytes, seed, what);
        }

        snprintf(what, sizeof(what), "Irecv from self then Send of %zu bytes", bytes);
        mt_fill(send_buf, bytes, (uint32_t) (100 * me + 10 * s + 2));
        memset(recv_buf, 0, bytes);
        MT_CALL(MPI_Irecv(recv_buf, count, MPI_BYTE, me, 20 + s, MPI_COMM_WORLD, &request));
        MT_CALL(MPI_Send(send_buf, count, MPI_BYTE, me, 20 + s, MPI_COMM_WORLD));
        MT_CALL(MPI_Wait(&request, &status));
        MT_CHECK_STATUS(&status, me, 20 + s, MPI_BYTE, count, what);
        MT_VERIFY(recv_buf, bytes, (uint32_t) (100 * me + 10 * s + 2), what);

        snprintf(what, sizeof(what), "Irecv from self then Ssend of %zu bytes", bytes);
        mt_fill(send_buf, bytes, (uint32_t) (100 * me + 10 * s + 3));
        memset(recv_buf, 0, bytes);
        MT_CALL(MPI_Irecv(recv_buf, count, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                          &request));
        MT_CALL(MPI_Ssend(send_buf, count, MPI_BYTE, me, 30 + s, MPI_COMM_WORLD));
        MT_CALL(MPI_Wait(&request, &status));
        MT_CHECK_STATUS(&status, me, 30 + s, MPI_BYTE, count, what);
        MT_VERIFY(recv_buf, bytes, (uint32_t) (100 * me + 10 * s + 3), what);

        snprintf(what, sizeof(what), "Sendrecv with self of %zu bytes", bytes);
        mt_fill(send_buf, bytes, (uint32_t) (100 * me + 10 * s + 4));
        memset(recv_buf, 0, bytes);
        MT_CALL(MPI_Sendrecv(send_buf, count, MPI_BYTE, me, 40 + s, recv_buf, count, MPI_BYTE, me,
                             40 + s, MPI_COMM_WORLD, &status));
        MT_CHECK_STATUS(&status, me, 40 + s, MPI_BYTE, count, what);
        MT_VERIFY(recv_buf, bytes, (uint32_t) (100 * me + 10 * s + 4), what);
    }
    proc_null();

    free(send_buf);
    free(recv_buf);
    return mt_finish();
}
