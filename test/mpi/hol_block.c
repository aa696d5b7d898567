/*
 * hol_block: a peer that does not receive must not hold up traffic to the others (np 3).
 *
 * Ranks 0 and 2 each post more small MPI_Isends to rank 1 than its queues hold (FLOOD,
 * default 6000; `--iters=N` changes it). Rank 1 stays outside MPI until rank 2 has received
 * everything rank 0 sends it next; it waits for a file rank 2 creates, with a deadline. Rank 0
 * then sends to rank 2, with the flood to rank 1 still queued: a small MPI_Send, an MPI_Ssend
 * (its acknowledgement travels back from rank 2, whose own flood to rank 1 is stuck too), an
 * MPI_Send above the eager limit (a rendezvous: rank 2 reads it and owes rank 0 a completion
 * notice) and an MPI_Isend of the same size. Each blocking send must return (its receive is
 * posted) and rank 2 must get the four messages intact. Then rank 1 receives both floods and
 * checks that each sender's messages come in order, and everyone completes its Isends.
 *
 * Legal MPI (the 0->2 sends are matched; nothing waits on rank 1's receives). A library
 * with one outbound list per process, drained only up to its first blocked entry, never
 * delivers the 0->2 messages: rank 1 then reports the missed deadline instead of the job
 * hanging. Open MPI's ob1 passes the small send only: its synchronous and rendezvous sends
 * need fragments of a pool per process that the flood holds, so under ob1 rank 2 sends no
 * flood and rank 0 only the small send.
 */
#include "mpi_test.h"

#include <sys/stat.h>

#define TAG_FLOOD 1
#define TAG_TO2   2
#define LARGE     (256 * 1024)

static void send_flood(long flood, int *payload, MPI_Request *reqs)
{
    for (long i = 0; i < flood; ++i) {
        payload[i] = (int) i;
        MT_CALL(MPI_Isend(&payload[i], 1, MPI_INT, 1, TAG_FLOOD, MPI_COMM_WORLD, &reqs[i]));
    }
}

int main(int argc, char **argv)
{
    char path[256];
    long flood;
    int full; /* every part, not only what ob1 passes */
    mt_init(&argc, &argv, "hol_block", MPI_THREAD_SINGLE);
    mt_require_size(3);
    mt_watchdog_start(180);
    flood = mt_iterations(argc, argv, 6000);
    full = !mt_pml_is("ob1");

    /* The rendezvous file's name, unique per job: rank 0's pid and the time. */
    if (0 == mt_rank) {
        snprintf(path, sizeof(path), "/tmp/mpiv_hol_block.%ld.%ld", (long) getpid(),
                 (long) time(NULL));
    }
    MT_CALL(MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD));

    if (1 == mt_rank) {
        const double deadline = mt_now() + 60.0;
        struct stat sb;
        int *got = mt_malloc(sizeof(int));
        while (0 != stat(path, &sb)) {
            MT_CHECK(mt_now() < deadline,
                     "rank 2 did not get rank 0's messages within 60 s while this rank did not "
                     "receive (head-of-line blocking behind a busy peer)");
            mt_sleep_ms(5);
        }
        unlink(path);
        for (int src = 0; src <= (full ? 2 : 0); src += 2) {
            for (long i = 0; i < flood; ++i) {
                MPI_Status st;
                MT_CALL(MPI_Recv(got, 1, MPI_INT, src, TAG_FLOOD, MPI_COMM_WORLD, &st));
                MT_CHECK(*got == (int) i, "flood from rank %d: message %ld carries %d", src, i,
                         *got);
            }
        }
        free(got);
    } else if (0 == mt_rank) {
        int *payload = mt_malloc(flood * sizeof(int));
        MPI_Request *reqs = mt_malloc((flood + 1) * sizeof(MPI_Request));
        char *large = mt_malloc(LARGE);
        char *large2 = mt_malloc(LARGE);
        int small = 42;
        send_flood(flood, payload, reqs);
        reqs[flood] = MPI_REQUEST_NULL;
        MT_CALL(MPI_Send(&small, 1, MPI_INT, 2, TAG_TO2, MPI_COMM_WORLD));
        if (full) {
            small = 43;
            MT_CALL(MPI_Ssend(&small, 1, MPI_INT, 2, TAG_TO2, MPI_COMM_WORLD));
            mt_fill(large, LARGE, 7);
            MT_CALL(MPI_Send(large, LARGE, MPI_CHAR, 2, TAG_TO2, MPI_COMM_WORLD));
            mt_fill(large2, LARGE, 8);
            MT_CALL(MPI_Isend(large2, LARGE, MPI_CHAR, 2, TAG_TO2, MPI_COMM_WORLD, &reqs[flood]));
        }
        MT_CALL(MPI_Waitall((int) flood + 1, reqs, MPI_STATUSES_IGNORE));
        free(large2);
        free(large);
        free(reqs);
        free(payload);
    } else if (2 == mt_rank) {
        int *payload = mt_malloc(flood * sizeof(int));
        MPI_Request *reqs = mt_malloc(flood * sizeof(MPI_Request));
        char *large = mt_malloc(LARGE);
        int small = 0;
        MPI_Status st;
        FILE *f;
        if (full) {
            send_flood(flood, payload, reqs);
        } else {
            for (long i = 0; i < flood; ++i) {
                reqs[i] = MPI_REQUEST_NULL;
            }
        }
        MT_CALL(MPI_Recv(&small, 1, MPI_INT, 0, TAG_TO2, MPI_COMM_WORLD, &st));
        MT_EXPECT_EQ("standard send from rank 0", 42, small);
        if (full) {
            MT_CALL(MPI_Recv(&small, 1, MPI_INT, 0, TAG_TO2, MPI_COMM_WORLD, &st));
            MT_EXPECT_EQ("synchronous send from rank 0", 43, small);
            MT_CALL(MPI_Recv(large, LARGE, MPI_CHAR, 0, TAG_TO2, MPI_COMM_WORLD, &st));
            MT_VERIFY(large, LARGE, 7, "rendezvous send from rank 0");
            MT_CALL(MPI_Recv(large, LARGE, MPI_CHAR, 0, TAG_TO2, MPI_COMM_WORLD, &st));
            MT_VERIFY(large, LARGE, 8, "rendezvous isend from rank 0");
        }
        f = fopen(path, "w");
        MT_CHECK(NULL != f, "cannot create %s", path);
        fclose(f);
        MT_CALL(MPI_Waitall((int) flood, reqs, MPI_STATUSES_IGNORE));
        free(large);
        free(reqs);
        free(payload);
    }
    return mt_finish();
}
