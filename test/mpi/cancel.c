/*
 * cancel: MPI_Cancel of receives (np 2).
 *
 *   unmatched  rank 0 posts receives that nothing can match ((1, unused tag) and (ANY, ANY) on
 *              a communicator nobody sends on), cancels them: MPI_Wait returns, and
 *              MPI_Test_cancelled is true.  Then a message with the cancelled receive's tag is
 *              sent and a new receive gets it (the cancelled receive left the posted queue).
 *   matched    rank 0 posts a receive, waits with MPI_Request_get_status until it has
 *              completed, then cancels: not cancelled, data intact.
 *   race       many rounds of Irecv, immediately Cancel while rank 1 sends (eager and large):
 *              either the receive was cancelled and a new receive gets the message, or it
 *              was not and it holds the message; never lost, never received twice.
 */
#include "mpi_test.h"

#define RACE_ROUNDS 200

static void cancel_unmatched(MPI_Comm comm, int source, int tag, const char *what)
{
    int value = -1, cancelled = 0;
    MPI_Request request;
    MPI_Status status;
    MT_CALL(MPI_Irecv(&value, 1, MPI_INT, source, tag, comm, &request));
    MT_CALL(MPI_Cancel(&request));
    MT_CALL(MPI_Wait(&request, &status));
    MT_CHECK(MPI_REQUEST_NULL == request, "%s: request not freed by MPI_Wait", what);
    MT_CALL(MPI_Test_cancelled(&status, &cancelled));
    MT_CHECK(cancelled, "%s: MPI_Test_cancelled is false for a receive that could not match", what);
    MT_EXPECT_EQ(what, -1, value);
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "cancel", MPI_THREAD_SINGLE);
    mt_require_size(2);
    MPI_Comm quiet_comm; /* no traffic at all */
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &quiet_comm));
    const int unused_tag = 999;
    MPI_Status status;

    /* unmatched receives */
    if (0 == mt_rank) {
        cancel_unmatched(MPI_COMM_WORLD, 1, unused_tag, "cancel of (1, unused tag)");
        cancel_unmatched(quiet_comm, MPI_ANY_SOURCE, MPI_ANY_TAG, "cancel of (ANY, ANY)");
        cancel_unmatched(MPI_COMM_WORLD, 1, unused_tag, "second cancel of (1, unused tag)");
    }
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    /* the cancelled receives must not swallow a later message */
    if (0 == mt_rank) {
        int value = -1;
        MT_CALL(MPI_Recv(&value, 1, MPI_INT, 1, unused_tag, MPI_COMM_WORLD, &status));
        MT_CHECK_STATUS(&status, 1, unused_tag, MPI_INT, 1, "receive after cancel");
        MT_EXPECT_EQ("receive after cancel", 4242, value);
    } else if (1 == mt_rank) {
        int value = 4242;
        MT_CALL(MPI_Send(&value, 1, MPI_INT, 0, unused_tag, MPI_COMM_WORLD));
    }

    /* cancel after the match: too late, not cancelled */
    if (0 == mt_rank) {
        int value = -1, flag = 0, cancelled = 1;
        MPI_Request request;
        MT_CALL(MPI_Irecv(&value, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &request));
        MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, 1, 8, MPI_COMM_WORLD)); /* "posted" */
        while (!flag) {
            MT_CALL(MPI_Request_get_status(request, &flag, &status));
        }
        MT_CALL(MPI_Cancel(&request));
        MT_CALL(MPI_Wait(&request, &status));
        MT_CALL(MPI_Test_cancelled(&status, &cancelled));
        MT_CHECK(!cancelled, "cancel after completion: MPI_Test_cancelled is true");
        MT_CHECK_STATUS(&status, 1, 7, MPI_INT, 1, "cancel after completion");
        MT_EXPECT_EQ("cancel after completion: data", 777, value);
    } else if (1 == mt_rank) {
        int value = 777;
        MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 0, 8, MPI_COMM_WORLD, &status));
        MT_CALL(MPI_Send(&value, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
    }

    /* racing cancels: each message is received exactly once */
    const size_t large = 256 * 1024;
    uint8_t *buf = mt_malloc(large);
    int cancelled_rounds = 0;
    for (int round = 0; round < RACE_ROUNDS && mt_rank < 2; ++round) {
        const size_t bytes = (0 == round % 4) ? large : (size_t) (round % 64) * 4;
        const int tag = 100;
        const uint32_t seed = (uint32_t) round;
        char what[80];
        snprintf(what, sizeof(what), "race round %d, %zu bytes", round, bytes);
        if (1 == mt_rank) {
            mt_fill(buf, bytes, seed);
            MT_CALL(MPI_Send(buf, (int) bytes, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
            continue;
        }
        MPI_Request request;
        int cancelled = 0;
        memset(buf, 0, bytes);
        MT_CALL(MPI_Irecv(buf, (int) bytes, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &request));
        if (round % 3) {
            mt_sleep_ms(0 == round % 2 ? 1 : 0); /* vary the timing */
        }
        MT_CALL(MPI_Cancel(&request));
        MT_CALL(MPI_Wait(&request, &status));
        MT_CALL(MPI_Test_cancelled(&status, &cancelled));
        if (cancelled) {
            ++cancelled_rounds;
            memset(buf, 0, bytes);
            MT_CALL(MPI_Recv(buf, (int) bytes, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &status));
        }
        MT_CHECK_STATUS(&status, 1, tag, MPI_BYTE, (int) bytes, what);
        MT_VERIFY(buf, bytes, seed, what);
    }
    if (0 == mt_rank) {
        int flag = 1;
        MT_CALL(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status));
        MT_CHECK(!flag, "a message is left over after the race rounds (received twice?)");
        printf("cancel: %d of %d racing receives were cancelled\n", cancelled_rounds, RACE_ROUNDS);
    }
    free(buf);
    MPI_Comm_free(&quiet_comm);
    return mt_finish();
}
