/*
 * ssend: synchronous sends complete only after the receiver matched them (np 2).
 *
 * Rank 0 sends, rank 1 receives, for 0 B, 8 B, 4 KiB, 64 KiB and 1 MiB.  No barrier is used:
 * the receiver posts its receive only when told to on a control communicator.
 *   Issend  rank 0 Issends, then polls MPI_Test for 50 ms: it must stay false because rank 1
 *           has not posted the receive.  Then rank 0 says "post"; MPI_Wait completes.
 *   Ssend   rank 0 says "ready", then Ssends; rank 1 sleeps 100 ms after "ready" before
 *           posting, so Ssend cannot return earlier than 100 ms after "ready" was sent.
 *   several Issends of increasing size outstanding at once, received in order after a delay.
 * Data and status are checked on the receiver.
 */
#include "mpi_test.h"

#define POLL_MS  50
#define DELAY_MS 100

static MPI_Comm control_comm;

static void tell(int to, int tag) { MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, to, tag, control_comm)); }

static void wait_told(int from, int tag)
{
    MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, from, tag, control_comm, MPI_STATUS_IGNORE));
}

static void receive_and_check(uint8_t *buf, size_t bytes, int tag, uint32_t seed, const char *what)
{
    MPI_Status status;
    memset(buf, 0, bytes);
    MT_CALL(MPI_Recv(buf, (int) bytes, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &status));
    MT_CHECK_STATUS(&status, 0, tag, MPI_BYTE, (int) bytes, what);
    MT_VERIFY(buf, bytes, seed, what);
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "ssend", MPI_THREAD_SINGLE);
    mt_require_size(2);
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &control_comm));
    static const size_t sizes[] = {0, 8, 4096, 65536, 1 << 20};
    const int num_sizes = (int) (sizeof(sizes) / sizeof(sizes[0]));
    uint8_t *bufs[5];
    for (int s = 0; s < num_sizes; ++s) {
        bufs[s] = mt_malloc(sizes[s]);
    }

    for (int s = 0; s < num_sizes && mt_rank < 2; ++s) {
        const size_t bytes = sizes[s];
        char what[80];

        /* Issend: stays incomplete while the receive is not posted */
        snprintf(what, sizeof(what), "Issend of %zu bytes", bytes);
        const int issend_tag = 10 + s;
        if (0 == mt_rank) {
            MPI_Request request;
            int flag = 0;
            long polls = 0;
            mt_fill(bufs[s], bytes, (uint32_t) issend_tag);
            MT_CALL(MPI_Issend(bufs[s], (int) bytes, MPI_BYTE, 1, issend_tag, MPI_COMM_WORLD,
                               &request));
            const double end = mt_now() + POLL_MS * 1e-3;
            while (mt_now() < end) {
                MT_CALL(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
                MT_CHECK(!flag,
                         "%s: MPI_Test reported completion after %ld polls although the "
                         "receiver has not posted its receive",
                         what, polls);
                ++polls;
            }
            tell(1, 1);
            MT_CALL(MPI_Wait(&request, MPI_STATUS_IGNORE));
        } else {
            wait_told(0, 1);
            receive_and_check(bufs[s], bytes, issend_tag, (uint32_t) issend_tag, what);
        }

        /* Ssend: cannot return before the delayed receive is posted */
        snprintf(what, sizeof(what), "Ssend of %zu bytes", bytes);
        const int ssend_tag = 20 + s;
        if (0 == mt_rank) {
            mt_fill(bufs[s], bytes, (uint32_t) ssend_tag);
            const double start = mt_now();
            tell(1, 2);
            MT_CALL(MPI_Ssend(bufs[s], (int) bytes, MPI_BYTE, 1, ssend_tag, MPI_COMM_WORLD));
            const double waited_ms = (mt_now() - start) * 1e3;
            MT_CHECK(waited_ms >= DELAY_MS * 0.95,
                     "%s returned after %.1f ms; the receive was posted only after %d ms", what,
                     waited_ms, DELAY_MS);
        } else {
            wait_told(0, 2);
            mt_sleep_ms(DELAY_MS);
            receive_and_check(bufs[s], bytes, ssend_tag, (uint32_t) ssend_tag, what);
        }
    }

    /* several Issends outstanding; none completes before its receive is posted */
    if (0 == mt_rank) {
        MPI_Request requests[5];
        for (int s = 0; s < num_sizes; ++s) {
            mt_fill(bufs[s], sizes[s], (uint32_t) (30 + s));
            MT_CALL(
                MPI_Issend(bufs[s], (int) sizes[s], MPI_BYTE, 1, 30, MPI_COMM_WORLD, &requests[s]));
        }
        const double end = mt_now() + POLL_MS * 1e-3;
        while (mt_now() < end) {
            int index = -1, flag = 0;
            MT_CALL(MPI_Testany(num_sizes, requests, &index, &flag, MPI_STATUS_IGNORE));
            MT_CHECK(!flag, "outstanding Issend #%d completed before any receive was posted",
                     index);
        }
        tell(1, 3);
        MT_CALL(MPI_Waitall(num_sizes, requests, MPI_STATUSES_IGNORE));
    } else if (1 == mt_rank) {
        wait_told(0, 3);
        for (int s = 0; s < num_sizes; ++s) {
            char what[80];
            snprintf(what, sizeof(what), "outstanding Issend #%d (%zu bytes)", s, sizes[s]);
            receive_and_check(bufs[s], sizes[s], 30, (uint32_t) (30 + s), what);
        }
    }

    for (int s = 0; s < num_sizes; ++s) {
        free(bufs[s]);
    }
    MPI_Comm_free(&control_comm);
    return mt_finish();
}
