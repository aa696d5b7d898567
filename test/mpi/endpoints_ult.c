/*
 * endpoints_ult: an endpoints communicator with 256 endpoints per process, each driven by
 * an mpiv ULT (np 2: 512 ranks). A blocking call on a handle blocks only its ULT, so the
 * 256 ULTs of a process share its few workers. Each endpoint rank:
 *   - sends its rank to the next rank and to the rank half-way round, and receives theirs
 *     by source (the half-way one is in the other process);
 *   - receives a ring message with MPI_ANY_SOURCE (a handle sees only its own messages);
 *   - joins MPI_Barrier and MPI_Allreduce (sum of the ranks) on its handle;
 *   - duplicates its handle (the 256 ULTs of a process meet) and reduces on the dup;
 *   - frees both.
 * Each handle's ULT runs on the worker MPI_Comm_get_info reports for it (mpiv_worker).
 * Under a PML other than mpiv it checks only that the call fails (see endpoints.c).
 */
#include "mpi_test.h"

#include <mpiv/mpiv.h>
#include <mpiv/mpix_endpoints.h>

enum { PER_PROCESS = 256 };

static MPI_Comm handles[PER_PROCESS];

static void *body(void *arg)
{
    MPI_Comm comm = handles[(intptr_t) arg];
    int rank = -1, n = -1, got[3] = {-1, -1, -1};
    MPI_Request req[4];
    MPI_Status status;
    MT_CALL(MPI_Comm_rank(comm, &rank));
    MT_CALL(MPI_Comm_size(comm, &n));
    MT_EXPECT_EQ("rank of a handle", mt_rank * PER_PROCESS + (intptr_t) arg, rank);
    MT_EXPECT_EQ("size", 2 * PER_PROCESS, n);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n, far = (rank + n / 2) % n;
    MT_CALL(MPI_Irecv(&got[0], 1, MPI_INT, prev, 1, comm, &req[0]));
    MT_CALL(MPI_Irecv(&got[1], 1, MPI_INT, far, 2, comm, &req[1]));
    MT_CALL(MPI_Isend(&rank, 1, MPI_INT, next, 1, comm, &req[2]));
    MT_CALL(MPI_Isend(&rank, 1, MPI_INT, far, 2, comm, &req[3]));
    MT_CALL(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
    MT_EXPECT_EQ("from the rank before", prev, got[0]);
    MT_EXPECT_EQ("from the rank half-way round", far, got[1]);
    MT_CALL(MPI_Isend(&rank, 1, MPI_INT, next, 3, comm, &req[0]));
    MT_CALL(MPI_Recv(&got[2], 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &status));
    MT_CALL(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
    MT_EXPECT_EQ("wildcard receive: the rank before", prev, got[2]);
    MT_CALL(MPI_Barrier(comm));
    long sum = 0, mine = rank;
    MT_CALL(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm));
    MT_EXPECT_EQ("MPI_Allreduce of the ranks", (long) n * (n - 1) / 2, sum);
    /* MPI_Comm_dup by all 256 ULTs of each process: they meet, the last builds it. */
    MPI_Comm dup;
    MT_CALL(MPI_Comm_dup(comm, &dup));
    MT_CALL(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, dup));
    MT_EXPECT_EQ("MPI_Allreduce on a dup", (long) n * (n - 1) / 2, sum);
    MT_CALL(MPI_Comm_free(&dup));
    MT_CALL(MPI_Comm_free(&comm));
    return NULL;
}

int main(int argc, char **argv)
{
    const char *pml = getenv("OMPI_MCA_pml");
    mt_init(&argc, &argv, "endpoints_ult", MPI_THREAD_MULTIPLE);
    MT_CHECK(2 == mt_size, "runs on 2 processes, not %d", mt_size);
    if (NULL == pml || 0 != strncmp(pml, "mpiv", 4)) {
        MPI_Comm parent;
        int cls = -1;
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &parent));
        MT_CALL(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
        MPI_Error_class(MPIX_Comm_create_endpoints(parent, 1, MPI_INFO_NULL, handles), &cls);
        MT_EXPECT_EQ("a PML other than mpiv", MPI_ERR_UNSUPPORTED_OPERATION, cls);
        MT_CALL(MPI_Comm_free(&parent));
        return mt_finish();
    }
    MT_CALL(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, PER_PROCESS, MPI_INFO_NULL, handles));
    MT_CHECK(MPIV_OK == mpiv_init(NULL), "mpiv_init failed");
    unsigned workers = 0;
    MT_CHECK(MPIV_OK == mpiv_num_workers(&workers), "mpiv_num_workers failed");
    mpiv_ult_h ults[PER_PROCESS];
    for (intptr_t i = 0; i < PER_PROCESS; ++i) {
        /* Each handle's ULT on the worker it receives through (MPI_Comm_get_info's
         * mpiv_worker; ULT worker w drains endpoint w first). */
        const int reported = mt_reported_worker(handles[i]);
        MT_CHECK(reported >= 0, "handle %d: no mpiv_worker reported", (int) i);
        const int worker = (int) ((unsigned) reported % workers);
        const int rc = mpiv_spawn(body, (void *) i, worker, &ults[i]);
        MT_CHECK(MPIV_OK == rc, "mpiv_spawn %d: %s", (int) i, mpiv_status_string(rc));
    }
    for (int i = 0; i < PER_PROCESS; ++i) {
        MT_CHECK(MPIV_OK == mpiv_join(ults[i], NULL), "mpiv_join %d", i);
    }
    MT_CHECK(MPIV_OK == mpiv_finalize(), "mpiv_finalize failed");
    return mt_finish();
}
