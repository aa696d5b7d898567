/*
 * probe: MPI_Probe, MPI_Iprobe, MPI_Mprobe/MPI_Mrecv and MPI_Improbe/MPI_Imrecv (np 2).
 *
 * Rank 1 sends, rank 0 probes; each round is run for 0 bytes, 8 bytes, 4 KiB and 1 MiB (so both
 * eager and rendezvous messages are probed).  A round starts when rank 0 says "go" on a
 * control communicator; rank 1 then MPI_Isends the round's messages.
 *   probe     Probe(1, A) twice, Iprobe loop, Probe(ANY, ANY): same source/tag/count each
 *             time (probing does not consume); then Recv gets it; Iprobe(1, A) is then false.
 *   mprobe    two messages with tag B (values 1, 2): Mprobe(1, B) takes the first out of
 *             matching, so a plain Recv(1, B) gets the second; Mrecv of the handle gets the
 *             first; Iprobe(ANY, ANY) then finds nothing.
 *   improbe   same with an Improbe loop and Imrecv + Wait, with wildcard source and tag.
 *   proc_null Probe/Iprobe/Mprobe/Improbe on MPI_PROC_NULL: source MPI_PROC_NULL, tag
 *             MPI_ANY_TAG, count 0, message MPI_MESSAGE_NO_PROC; Mrecv of it does nothing.
 */
#include "mpi_test.h"

enum { TAG_A = 5, TAG_B = 6 };

static MPI_Comm control_comm;
static uint8_t *send_bufs[2], *recv_buf;

static void go(void)
{
    if (0 == mt_rank) {
        MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, 1, 0, control_comm));
    } else {
        MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 0, 0, control_comm, MPI_STATUS_IGNORE));
    }
}

/* Rank 1: sends `n` messages of `bytes` with `tag`, message k carrying the seed `seed + k`. */
static void send_messages(int n, size_t bytes, int tag, uint32_t seed)
{
    MPI_Request requests[2];
    for (int k = 0; k < n; ++k) {
        mt_fill(send_bufs[k], bytes, seed + (uint32_t) k);
        MT_CALL(
            MPI_Isend(send_bufs[k], (int) bytes, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &requests[k]));
    }
    MT_CALL(MPI_Waitall(n, requests, MPI_STATUSES_IGNORE));
}

static void expect_nothing_pending(const char *what)
{
    int flag = 1;
    MPI_Status status;
    MT_CALL(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status));
    MT_CHECK(!flag,
             "%s: Iprobe(ANY, ANY) found a message (source %d, tag %d) that was already "
             "received",
             what, status.MPI_SOURCE, status.MPI_TAG);
}

static void round_probe(size_t bytes, uint32_t seed)
{
    char what[100];
    snprintf(what, sizeof(what), "probe, %zu bytes", bytes);
    go();
    if (1 == mt_rank) {
        send_messages(1, bytes, TAG_A, seed);
        return;
    }
    MPI_Status status;
    int flag = 0;
    MT_CALL(MPI_Probe(1, TAG_A, MPI_COMM_WORLD, &status));
    MT_CHECK_STATUS(&status, 1, TAG_A, MPI_BYTE, (int) bytes, what);
    MT_CALL(MPI_Probe(1, TAG_A, MPI_COMM_WORLD, &status)); /* still there */
    MT_CHECK_STATUS(&status, 1, TAG_A, MPI_BYTE, (int) bytes, what);
    for (int polls = 0; polls < 3; ++polls) {
        flag = 0;
        MT_CALL(MPI_Iprobe(1, TAG_A, MPI_COMM_WORLD, &flag, &status));
        MT_CHECK(flag, "%s: Iprobe after Probe found nothing (poll %d)", what, polls);
        MT_CHECK_STATUS(&status, 1, TAG_A, MPI_BYTE, (int) bytes, what);
    }
    MT_CALL(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status));
    MT_CHECK_STATUS(&status, 1, TAG_A, MPI_BYTE, (int) bytes, what);
    int count = -1;
    MPI_Get_count(&status, MPI_BYTE, &count);
    memset(recv_buf, 0, bytes);
    MT_CALL(MPI_Recv(recv_buf, count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
                     &status));
    MT_CHECK_STATUS(&status, 1, TAG_A, MPI_BYTE, (int) bytes, what);
    MT_VERIFY(recv_buf, bytes, seed, what);
    expect_nothing_pending(what);
}

/* Mprobe (or Improbe when `immediate`) takes message 1 out; a Recv gets message 2. */
static void round_mprobe(size_t bytes, uint32_t seed, int immediate)
{
    char what[100];
    snprintf(what, sizeof(what), "%s, %zu bytes", immediate ? "improbe" : "mprobe", bytes);
    go();
    if (1 == mt_rank) {
        send_messages(2, bytes, TAG_B, seed);
        return;
    }
    MPI_Status status;
    MPI_Message message = MPI_MESSAGE_NULL;
    if (immediate) {
        int flag = 0;
        while (!flag) {
            MT_CALL(
                MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &message, &status));
        }
    } else {
        MT_CALL(MPI_Mprobe(1, TAG_B, MPI_COMM_WORLD, &message, &status));
    }
    MT_CHECK(MPI_MESSAGE_NULL != message && MPI_MESSAGE_NO_PROC != message, "%s: no message handle",
             what);
    MT_CHECK_STATUS(&status, 1, TAG_B, MPI_BYTE, (int) bytes, what);

    /* the matched message is gone from matching: Probe and Recv see the second one */
    MT_CALL(MPI_Probe(1, TAG_B, MPI_COMM_WORLD, &status));
    MT_CHECK_STATUS(&status, 1, TAG_B, MPI_BYTE, (int) bytes, what);
    memset(recv_buf, 0, bytes);
    MT_CALL(MPI_Recv(recv_buf, (int) bytes, MPI_BYTE, 1, TAG_B, MPI_COMM_WORLD, &status));
    MT_CHECK_STATUS(&status, 1, TAG_B, MPI_BYTE, (int) bytes, what);
    char second[200];
    snprintf(second, sizeof(second), "%s: Recv after the probe must get the second message", what);
    MT_VERIFY(recv_buf, bytes, seed + 1, second);

    memset(recv_buf, 0, bytes);
    if (immediate) {
        MPI_Request request;
        MT_CALL(MPI_Imrecv(recv_buf, (int) bytes, MPI_BYTE, &message, &request));
        MT_CALL(MPI_Wait(&request, &status));
    } else {
        MT_CALL(MPI_Mrecv(recv_buf, (int) bytes, MPI_BYTE, &message, &status));
    }
    MT_CHECK(MPI_MESSAGE_NULL == message, "%s: the message handle was not reset", what);
    MT_CHECK_STATUS(&status, 1, TAG_B, MPI_BYTE, (int) bytes, what);
    char first[200];
    snprintf(first, sizeof(first), "%s: the matched-probe receive must get the first message",
             what);
    MT_VERIFY(recv_buf, bytes, seed, first);
    expect_nothing_pending(what);
}

static void check_proc_null_status(const MPI_Status *status, const char *what)
{
    MT_CHECK_STATUS(status, MPI_PROC_NULL, MPI_ANY_TAG, MPI_BYTE, 0, what);
}

static void round_proc_null(void)
{
    MPI_Status status;
    MPI_Message message = MPI_MESSAGE_NULL;
    int flag = 0;
    MT_CALL(MPI_Probe(MPI_PROC_NULL, 3, MPI_COMM_WORLD, &status));
    check_proc_null_status(&status, "Probe(MPI_PROC_NULL)");
    MT_CALL(MPI_Iprobe(MPI_PROC_NULL, 3, MPI_COMM_WORLD, &flag, &status));
    MT_CHECK(flag, "Iprobe(MPI_PROC_NULL): flag must be true");
    check_proc_null_status(&status, "Iprobe(MPI_PROC_NULL)");
    MT_CALL(MPI_Mprobe(MPI_PROC_NULL, 3, MPI_COMM_WORLD, &message, &status));
    MT_CHECK(MPI_MESSAGE_NO_PROC == message, "Mprobe(MPI_PROC_NULL): expected MPI_MESSAGE_NO_PROC");
    check_proc_null_status(&status, "Mprobe(MPI_PROC_NULL)");
    int value = 77;
    MT_CALL(MPI_Mrecv(&value, 1, MPI_INT, &message, &status));
    check_proc_null_status(&status, "Mrecv(MPI_MESSAGE_NO_PROC)");
    MT_EXPECT_EQ("Mrecv(MPI_MESSAGE_NO_PROC) must not write the buffer", 77, value);
    message = MPI_MESSAGE_NULL;
    flag = 0;
    MT_CALL(MPI_Improbe(MPI_PROC_NULL, 3, MPI_COMM_WORLD, &flag, &message, &status));
    MT_CHECK(flag && MPI_MESSAGE_NO_PROC == message,
             "Improbe(MPI_PROC_NULL): expected flag and MPI_MESSAGE_NO_PROC");
    check_proc_null_status(&status, "Improbe(MPI_PROC_NULL)");
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "probe", MPI_THREAD_SINGLE);
    mt_require_size(2);
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &control_comm));
    static const size_t sizes[] = {0, 8, 4096, 1 << 20};
    const size_t max_bytes = 1 << 20;
    send_bufs[0] = mt_malloc(max_bytes);
    send_bufs[1] = mt_malloc(max_bytes);
    recv_buf = mt_malloc(max_bytes);

    if (mt_rank < 2) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
            uint32_t seed = (uint32_t) (s * 10);
            round_probe(sizes[s], seed);
            round_mprobe(sizes[s], seed + 2, 0);
            round_mprobe(sizes[s], seed + 4, 1);
        }
        round_proc_null();
    }

    free(send_bufs[0]);
    free(send_bufs[1]);
    free(recv_buf);
    MPI_Comm_free(&control_comm);
    return mt_finish();
}
