/*
 * status_error: single-completion calls leave status.MPI_ERROR alone (np 2).
 *
 * MPI-3.1 section 3.2.5: the error field of a status is set only by the functions that
 * complete several requests (MPI_Waitall, Waitsome, Testall, Testsome) when they return
 * MPI_ERR_IN_STATUS; every other call that fills a status leaves it as it was. Programs
 * rely on it: they store a sentinel there and check it afterwards.
 *
 * Rank 0 sends messages of every protocol size (inline, packet, rendezvous: 0 B, 8 B,
 * 1 KiB, 8 KiB, 1 MiB) and rank 1 takes each with another call, the status's MPI_ERROR
 * set to a sentinel before: MPI_Recv, MPI_Irecv + MPI_Wait, MPI_Irecv + MPI_Test (polled),
 * MPI_Probe + MPI_Recv, MPI_Iprobe (polled) + MPI_Recv, MPI_Mprobe + MPI_Mrecv,
 * MPI_Improbe (polled) + MPI_Imrecv + MPI_Wait, a persistent receive (MPI_Start +
 * MPI_Wait), and a truncating MPI_Recv (MPI_ERR_TRUNCATE returned under
 * MPI_ERRORS_RETURN, the status's error field untouched). A cancelled receive's
 * MPI_Wait and a send's MPI_Wait are checked too. Every status must keep the sentinel and
 * report the right source, tag and count.
 */
#include "mpi_test.h"

#define SENTINEL  (-4242)
#define TAG_BASE  100
#define NUM_CALLS 9
#define MAX_BYTES (1 << 20)

static const int sizes[] = {0, 8, 1024, 8192, MAX_BYTES};
#define NUM_SIZES ((int) (sizeof(sizes) / sizeof(sizes[0])))

static const char *call_names[NUM_CALLS] = {
    "MPI_Recv",           "MPI_Irecv+MPI_Wait",  "MPI_Irecv+MPI_Test",
    "MPI_Probe",          "MPI_Iprobe",          "MPI_Mprobe+MPI_Mrecv",
    "MPI_Improbe+Imrecv", "MPI_Start+MPI_Wait",  "truncating MPI_Recv",
};

static void expect_sentinel(const MPI_Status *st, const char *call, int bytes)
{
    if (SENTINEL != st->MPI_ERROR) {
        MT_FAIL("%s (%d bytes) wrote status.MPI_ERROR = %d; a single-completion call must "
                "leave it alone",
                call, bytes, st->MPI_ERROR);
    }
}

static void receive(int call, int bytes, char *buf)
{
    const int tag = TAG_BASE + call;
    const char *name = call_names[call];
    MPI_Status st, pst;
    MPI_Request req;
    MPI_Message msg;
    int flag = 0;
    st.MPI_ERROR = SENTINEL;
    pst.MPI_ERROR = SENTINEL;
    switch (call) {
    case 0:
        MT_CALL(MPI_Recv(buf, bytes, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &st));
        break;
    case 1:
        MT_CALL(MPI_Irecv(buf, bytes, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &req));
        MT_CALL(MPI_Wait(&req, &st));
        break;
    case 2:
        MT_CALL(MPI_Irecv(buf, bytes, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &req));
        while (!flag) {
            MT_CALL(MPI_Test(&req, &flag, &st));
            if (!flag) {
                expect_sentinel(&st, "MPI_Test (not complete)", bytes);
            }
        }
        break;
    case 3:
        MT_CALL(MPI_Probe(0, tag, MPI_COMM_WORLD, &pst));
        expect_sentinel(&pst, "MPI_Probe", bytes);
        MT_CHECK_STATUS(&pst, 0, tag, MPI_CHAR, bytes, name);
        MT_CALL(MPI_Recv(buf, bytes, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &st));
        break;
    case 4:
        while (!flag) {
            MT_CALL(MPI_Iprobe(0, tag, MPI_COMM_WORLD, &flag, &pst));
            expect_sentinel(&pst, "MPI_Iprobe", bytes);
        }
        MT_CHECK_STATUS(&pst, 0, tag, MPI_CHAR, bytes, name);
        MT_CALL(MPI_Recv(buf, bytes, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &st));
        break;
    case 5:
        MT_CALL(MPI_Mprobe(0, tag, MPI_COMM_WORLD, &msg, &pst));
        expect_sentinel(&pst, "MPI_Mprobe", bytes);
        MT_CHECK_STATUS(&pst, 0, tag, MPI_CHAR, bytes, name);
        MT_CALL(MPI_Mrecv(buf, bytes, MPI_CHAR, &msg, &st));
        break;
    case 6:
        while (!flag) {
            MT_CALL(MPI_Improbe(0, tag, MPI_COMM_WORLD, &flag, &msg, &pst));
            expect_sentinel(&pst, "MPI_Improbe", bytes);
        }
        MT_CHECK_STATUS(&pst, 0, tag, MPI_CHAR, bytes, name);
        MT_CALL(MPI_Imrecv(buf, bytes, MPI_CHAR, &msg, &req));
        MT_CALL(MPI_Wait(&req, &st));
        break;
    case 7:
        MT_CALL(MPI_Recv_init(buf, bytes, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &req));
        MT_CALL(MPI_Start(&req));
        MT_CALL(MPI_Wait(&req, &st));
        MT_CALL(MPI_Request_free(&req));
        break;
    case 8: {
        /* One byte short (an empty message cannot be truncated: receive it whole). */
        const int capacity = bytes > 0 ? bytes - 1 : 0;
        const int rc = MPI_Recv(buf, capacity, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &st);
        int cls = MPI_SUCCESS;
        MPI_Error_class(rc, &cls);
        MT_EXPECT_EQ("truncating MPI_Recv: error class", bytes > 0 ? MPI_ERR_TRUNCATE : MPI_SUCCESS,
                     cls);
        expect_sentinel(&st, name, bytes);
        MT_EXPECT_EQ("truncating MPI_Recv: status.MPI_SOURCE", 0, st.MPI_SOURCE);
        MT_EXPECT_EQ("truncating MPI_Recv: status.MPI_TAG", tag, st.MPI_TAG);
        return;
    }
    }
    expect_sentinel(&st, name, bytes);
    MT_CHECK_STATUS(&st, 0, tag, MPI_CHAR, bytes, name);
    MT_VERIFY(buf, (size_t) bytes, (uint32_t) (call * 977 + bytes), name);
}

int main(int argc, char **argv)
{
    char *buf;
    mt_init(&argc, &argv, "status_error", MPI_THREAD_SINGLE);
    mt_require_size(2);
    mt_watchdog_start(120);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    buf = mt_malloc(MAX_BYTES);
    for (int s = 0; s < NUM_SIZES; ++s) {
        for (int call = 0; call < NUM_CALLS; ++call) {
            const int bytes = sizes[s];
            if (0 == mt_rank) {
                MPI_Request req;
                MPI_Status st;
                st.MPI_ERROR = SENTINEL;
                mt_fill(buf, (size_t) bytes, (uint32_t) (call * 977 + bytes));
                MT_CALL(MPI_Isend(buf, bytes, MPI_CHAR, 1, TAG_BASE + call, MPI_COMM_WORLD,
                                  &req));
                MT_CALL(MPI_Wait(&req, &st));
                expect_sentinel(&st, "MPI_Isend+MPI_Wait", bytes);
            } else if (1 == mt_rank) {
                receive(call, bytes, buf);
            }
        }
    }
    if (1 == mt_rank) {
        /* A cancelled receive: MPI_Wait reports it through MPI_Test_cancelled only. */
        MPI_Request req;
        MPI_Status st;
        int cancelled = 0;
        st.MPI_ERROR = SENTINEL;
        MT_CALL(MPI_Irecv(buf, 8, MPI_CHAR, 0, TAG_BASE + 99, MPI_COMM_WORLD, &req));
        MT_CALL(MPI_Cancel(&req));
        MT_CALL(MPI_Wait(&req, &st));
        MT_CALL(MPI_Test_cancelled(&st, &cancelled));
        MT_EXPECT_EQ("cancelled receive", 1, cancelled);
        expect_sentinel(&st, "MPI_Wait on a cancelled receive", 8);
    }
    free(buf);
    return mt_finish();
}
