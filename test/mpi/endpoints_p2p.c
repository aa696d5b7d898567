/*
 * endpoints_p2p: MPI's point-to-point patterns between endpoints (np 2, 4 endpoints per
 * process, a pthread per handle, all at once). Rank r works with two partners: r ^ 1, an
 * endpoint of its own process, and (r + 4) mod 8, one of the other process; with each:
 *   - MPI_Probe with MPI_ANY_SOURCE, then the receive; MPI_Improbe until found, MPI_Mrecv;
 *   - a receive nobody sends to, cancelled (MPI_Test_cancelled);
 *   - MPI_Ssend (the lower rank sends first), MPI_Bsend (buffer attached by the process);
 *   - persistent requests (MPI_Send_init, MPI_Recv_init), three rounds;
 *   - a strided datatype sent and received contiguous, and the other way round;
 *   - 16 ints into room for 8: MPI_ERR_TRUNCATE, the first 8 delivered;
 *   - three tags received with MPI_ANY_TAG, in the order sent; 1 MiB by MPI_Sendrecv;
 * and on its own: a message to itself, MPI_PROC_NULL. Data and statuses checked. Under
 * another PML than mpiv only the refusal (MPI_ERR_UNSUPPORTED_OPERATION) is checked.
 */
#include "mpi_test.h"

#include <pthread.h>

#include <mpiv/mpix_endpoints.h>

enum { EPS = 4, BIG = 1 << 20 };

struct endpoint {
    MPI_Comm comm;
    pthread_t thread;
};

static void patterns(MPI_Comm h, int me, int peer, int t)
{
    MPI_Status st;
    MPI_Request req, reqs[2];
    MPI_Message msg;
    int v = -1, out = 1000 * me + t, flag = 0;
    char what[96];
    snprintf(what, sizeof(what), "rank %d with %d", me, peer);

    /* Probe with MPI_ANY_SOURCE (only the partner sends this tag here). */
    MT_CALL(MPI_Isend(&out, 1, MPI_INT, peer, t + 1, h, &req));
    MT_CALL(MPI_Probe(MPI_ANY_SOURCE, t + 1, h, &st));
    MT_CHECK_STATUS(&st, peer, t + 1, MPI_INT, 1, "MPI_Probe");
    MT_CALL(MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, t + 1, h, MPI_STATUS_IGNORE));
    MT_EXPECT_EQ("probed message", 1000 * peer + t, v);
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));

    /* Improbe until the message is there, then Mrecv. */
    MT_CALL(MPI_Isend(&out, 1, MPI_INT, peer, t + 2, h, &req));
    do {
        MT_CALL(MPI_Improbe(peer, t + 2, h, &flag, &msg, &st));
    } while (!flag);
    v = -1;
    MT_CALL(MPI_Mrecv(&v, 1, MPI_INT, &msg, &st));
    MT_CHECK_STATUS(&st, peer, t + 2, MPI_INT, 1, "MPI_Mrecv");
    MT_EXPECT_EQ("matched-probe message", 1000 * peer + t, v);
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));

    /* A receive nobody sends to is cancelled. */
    MT_CALL(MPI_Irecv(&v, 1, MPI_INT, peer, t + 3, h, &req));
    MT_CALL(MPI_Cancel(&req));
    MT_CALL(MPI_Wait(&req, &st));
    MT_CALL(MPI_Test_cancelled(&st, &flag));
    MT_EXPECT_EQ("cancelled receive", 1, flag);

    /* Synchronous and buffered sends. */
    v = -1;
    if (me < peer) {
        MT_CALL(MPI_Ssend(&out, 1, MPI_INT, peer, t + 4, h));
        MT_CALL(MPI_Recv(&v, 1, MPI_INT, peer, t + 4, h, &st));
    } else {
        MT_CALL(MPI_Recv(&v, 1, MPI_INT, peer, t + 4, h, &st));
        MT_CALL(MPI_Ssend(&out, 1, MPI_INT, peer, t + 4, h));
    }
    MT_EXPECT_EQ("MPI_Ssend", 1000 * peer + t, v);
    MT_CALL(MPI_Bsend(&out, 1, MPI_INT, peer, t + 5, h));
    MT_CALL(MPI_Recv(&v, 1, MPI_INT, peer, t + 5, h, &st));
    MT_EXPECT_EQ("MPI_Bsend", 1000 * peer + t, v);

    /* Persistent requests, three rounds. */
    int pout = 0, pin = -1;
    MT_CALL(MPI_Send_init(&pout, 1, MPI_INT, peer, t + 6, h, &reqs[0]));
    MT_CALL(MPI_Recv_init(&pin, 1, MPI_INT, peer, t + 6, h, &reqs[1]));
    for (int round = 0; round < 3; ++round) {
        pout = 100 * me + round;
        MT_CALL(MPI_Startall(2, reqs));
        MT_CALL(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
        MT_EXPECT_EQ("persistent round", 100 * peer + round, pin);
    }
    MT_CALL(MPI_Request_free(&reqs[0]));
    MT_CALL(MPI_Request_free(&reqs[1]));

    /* A strided type (every third int of 12) against 4 contiguous ints, both ways. */
    MPI_Datatype strided;
    int grid[12], flat[4], back[12];
    MT_CALL(MPI_Type_vector(4, 1, 3, MPI_INT, &strided));
    MT_CALL(MPI_Type_commit(&strided));
    for (int i = 0; i < 12; ++i) {
        grid[i] = 10000 * me + i;
        back[i] = -1;
    }
    MT_CALL(MPI_Sendrecv(grid, 1, strided, peer, t + 7, flat, 4, MPI_INT, peer, t + 7, h, &st));
    MT_CHECK_STATUS(&st, peer, t + 7, MPI_INT, 4, "strided to contiguous");
    for (int i = 0; i < 4; ++i) {
        MT_EXPECT_EQ("strided to contiguous", 10000 * peer + 3 * i, flat[i]);
    }
    MT_CALL(MPI_Sendrecv(flat, 4, MPI_INT, peer, t + 7, back, 1, strided, peer, t + 7, h, &st));
    for (int i = 0; i < 12; ++i) {
        MT_EXPECT_EQ("contiguous to strided", i % 3 ? -1 : 10000 * me + i, back[i]);
    }
    MT_CALL(MPI_Type_free(&strided));

    /* Truncation: 16 ints into room for 8. */
    int sixteen[16], eight[8], cls = -1;
    for (int i = 0; i < 16; ++i) {
        sixteen[i] = 50 * me + i;
    }
    MT_CALL(MPI_Isend(sixteen, 16, MPI_INT, peer, t + 8, h, &req));
    MT_CALL(MPI_Comm_set_errhandler(h, MPI_ERRORS_RETURN));
    MPI_Error_class(MPI_Recv(eight, 8, MPI_INT, peer, t + 8, h, &st), &cls);
    MT_CALL(MPI_Comm_set_errhandler(h, MPI_ERRORS_ARE_FATAL));
    MT_EXPECT_EQ("truncated receive", MPI_ERR_TRUNCATE, cls);
    for (int i = 0; i < 8; ++i) {
        MT_EXPECT_EQ("truncated receive's data", 50 * peer + i, eight[i]);
    }
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));

    /* MPI_ANY_TAG takes one sender's messages in the order it sent them. */
    int three[3] = {out, out + 1, out + 2};
    MPI_Request sends[3];
    for (int i = 0; i < 3; ++i) {
        MT_CALL(MPI_Isend(&three[i], 1, MPI_INT, peer, t + 13 - i, h, &sends[i]));
    }
    for (int i = 0; i < 3; ++i) {
        MT_CALL(MPI_Recv(&v, 1, MPI_INT, peer, MPI_ANY_TAG, h, &st));
        MT_EXPECT_EQ("MPI_ANY_TAG in sending order", 1000 * peer + t + i, v);
        MT_EXPECT_EQ("MPI_ANY_TAG's tag", t + 13 - i, st.MPI_TAG);
    }
    MT_CALL(MPI_Waitall(3, sends, MPI_STATUSES_IGNORE));

    /* 1 MiB each way (rendezvous). */
    unsigned char *bout = mt_malloc(BIG), *bin = mt_malloc(BIG);
    mt_fill(bout, BIG, (uint32_t) (me * 64 + t));
    MT_CALL(MPI_Sendrecv(bout, BIG, MPI_BYTE, peer, t + 14, bin, BIG, MPI_BYTE, peer, t + 14, h,
                         &st));
    MT_CHECK_STATUS(&st, peer, t + 14, MPI_BYTE, BIG, "1 MiB");
    MT_VERIFY(bin, BIG, (uint32_t) (peer * 64 + t), what);
    free(bout);
    free(bin);
}

static void *drive(void *arg)
{
    struct endpoint *e = arg;
    MPI_Status st;
    int me = -1, size = -1, v = -1;
    MT_CALL(MPI_Comm_rank(e->comm, &me));
    MT_CALL(MPI_Comm_size(e->comm, &size));
    MT_EXPECT_EQ("MPI_Comm_size", 2 * EPS, size);
    patterns(e->comm, me, me ^ 1, 100);               /* an endpoint of this process */
    patterns(e->comm, me, (me + EPS) % (2 * EPS), 200); /* one of the other process */

    /* To itself, and to MPI_PROC_NULL. */
    const int out = 7 * me;
    MT_CALL(MPI_Sendrecv(&out, 1, MPI_INT, me, 300, &v, 1, MPI_INT, me, 300, e->comm, &st));
    MT_CHECK_STATUS(&st, me, 300, MPI_INT, 1, "a message to itself");
    MT_EXPECT_EQ("a message to itself", out, v);
    MT_CALL(MPI_Send(&out, 1, MPI_INT, MPI_PROC_NULL, 301, e->comm));
    MT_CALL(MPI_Recv(&v, 1, MPI_INT, MPI_PROC_NULL, 301, e->comm, &st));
    MT_CHECK_STATUS(&st, MPI_PROC_NULL, MPI_ANY_TAG, MPI_INT, 0, "MPI_PROC_NULL");
    MT_CALL(MPI_Barrier(e->comm));
    MT_CALL(MPI_Comm_free(&e->comm));
    return NULL;
}

int main(int argc, char **argv)
{
    struct endpoint ep[EPS];
    MPI_Comm handles[EPS];
    const char *pml = getenv("OMPI_MCA_pml");
    const int bsize = 2 * EPS * (int) (sizeof(int) + MPI_BSEND_OVERHEAD) + 1024;
    char *bbuf = mt_malloc((size_t) bsize);
    mt_init(&argc, &argv, "endpoints_p2p", MPI_THREAD_MULTIPLE);
    MT_CHECK(2 == mt_size, "runs on 2 processes, not %d", mt_size);
    if (NULL == pml || 0 != strncmp(pml, "mpiv", 4)) {
        int cls = -1;
        MT_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_Error_class(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, EPS, MPI_INFO_NULL, handles),
                        &cls);
        MT_EXPECT_EQ("another PML", MPI_ERR_UNSUPPORTED_OPERATION, cls);
        free(bbuf);
        return mt_finish();
    }
    MT_CALL(MPI_Buffer_attach(bbuf, bsize));
    MT_CALL(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, EPS, MPI_INFO_NULL, handles));
    for (int k = 0; k < EPS; ++k) {
        ep[k].comm = handles[k];
        MT_CHECK(0 == pthread_create(&ep[k].thread, NULL, drive, &ep[k]), "pthread_create");
    }
    for (int k = 0; k < EPS; ++k) {
        MT_CHECK(0 == pthread_join(ep[k].thread, NULL), "pthread_join");
    }
    void *detached = NULL;
    int dsize = 0;
    MT_CALL(MPI_Buffer_detach(&detached, &dsize));
    free(bbuf);
    return mt_finish();
}
