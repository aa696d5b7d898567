/*
 * ult: MPI from user-level threads (mpiv.h). Each process spawns ULTS ULTs (default 1000,
 * env MPIV_TEST_ULTS); ULT i exchanges ROUNDS blocking messages with ULT i of the peer on
 * tag i: rank 0 sends then receives; rank 1 receives (after an MPI_Probe in the second
 * round), then sends back the data it got plus one. Sizes cross the eager limit every few
 * rounds. A blocking call blocks only its ULT: with 1000 ULTs per process on one or two
 * workers the job finishes only if the others keep running. Content, source, tag and
 * count are checked; the ULT count and the run time are printed. Then one ULT checks the
 * errors a blocking receive returns (error_body). Under ob1, whose blocking calls block
 * the worker's thread and with it every ULT of that worker (a ULT blocked in MPI_Recv can
 * then keep the peer's ULT waiting for it from ever running), the default is one ULT per
 * worker, each on its own worker. The ULTs make their non-blocking engine calls on their
 * workers' scratch stacks (mpiv_params_t::scratch_ults 0, whatever the ULT count), unless
 * env MPIV_TEST_SCRATCH_ULTS names another threshold ("default": the runtime's), and their
 * workers prefetch the stacks of the ULTs that run next (prefetch_ults 0), unless env
 * MPIV_TEST_PREFETCH_ULTS names another threshold.
 */
#include "mpi_test.h"

#include <mpiv/mpiv.h>

#include <string.h>

#define ROUNDS 4

static int peer;

static size_t round_bytes(int ult, int round)
{
    /* mostly small; every fourth ULT also sends one message above the eager limit */
    return (round == ROUNDS - 1 && ult % 4 == 0) ? 8192 + (size_t) ult : 8 + (size_t) (ult % 64);
}

static void *ult_body(void *arg)
{
    const int ult = (int) (intptr_t) arg;
    for (int round = 0; round < ROUNDS; ++round) {
        const size_t bytes = round_bytes(ult, round);
        const uint32_t seed = (uint32_t) (ult * 131 + round);
        uint8_t *buf = mt_malloc(bytes);
        MPI_Status st;
        int count = -1;
        if (0 == mt_rank) {
            mt_fill(buf, bytes, seed);
            MT_CALL(MPI_Send(buf, (int) bytes, MPI_BYTE, peer, ult, MPI_COMM_WORLD));
            MT_CALL(MPI_Recv(buf, (int) bytes, MPI_BYTE, peer, ult, MPI_COMM_WORLD, &st));
            mt_fill(buf, bytes, seed + 1); /* what rank 1 returns: pattern of seed + 1 */
        } else {
            if (1 == round) {
                /* a blocking probe in a ULT lets the other ULTs of its worker run */
                MT_CALL(MPI_Probe(peer, ult, MPI_COMM_WORLD, &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                MT_EXPECT_EQ("probed count", (long) bytes, (long) count);
            }
            MT_CALL(MPI_Recv(buf, (int) bytes, MPI_BYTE, peer, ult, MPI_COMM_WORLD, &st));
            MT_VERIFY(buf, bytes, seed, "message from rank 0");
            mt_fill(buf, bytes, seed + 1);
            MT_CALL(MPI_Send(buf, (int) bytes, MPI_BYTE, peer, ult, MPI_COMM_WORLD));
        }
        MT_EXPECT_EQ("status source", peer, st.MPI_SOURCE);
        MT_EXPECT_EQ("status tag", ult, st.MPI_TAG);
        MPI_Get_count(&st, MPI_BYTE, &count);
        MT_EXPECT_EQ("received count", (long) bytes, (long) count);
        free(buf);
    }
    return NULL;
}

/* Errors of a ULT's blocking receive, on communicators that return them: a truncation,
 * and (not under ob1, which ignores assertions) a receive that the communicator's
 * mpi_assert_no_any_tag refuses, whose start fails: the ULT must get MPI_ERR_ARG back
 * and go on, not stay blocked. */
static MPI_Comm err_comm, no_tag_comm;

static void *error_body(void *arg)
{
    char buf[16] = {0};
    MPI_Status st;
    int rc, cls = -1;
    (void) arg;
    if (0 == mt_rank) {
        MT_CALL(MPI_Send(buf, 16, MPI_BYTE, peer, 7, err_comm));
        return NULL;
    }
    rc = MPI_Recv(buf, 8, MPI_BYTE, peer, 7, err_comm, &st);
    MPI_Error_class(rc, &cls);
    MT_EXPECT_EQ("truncating receive's error class", MPI_ERR_TRUNCATE, cls);
    MT_EXPECT_EQ("truncated receive's source", peer, st.MPI_SOURCE);
    if (!mt_pml_is("ob1")) {
        rc = MPI_Recv(buf, 8, MPI_BYTE, peer, MPI_ANY_TAG, no_tag_comm, &st);
        MPI_Error_class(rc, &cls);
        MT_EXPECT_EQ("refused receive's error class", MPI_ERR_ARG, cls);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *env = getenv("MPIV_TEST_ULTS");
    unsigned mine;
    int workers;
    int nults;
    int ob1;
    mpiv_ult_h *ults;
    double t0;

    mt_init(&argc, &argv, "ult", MPI_THREAD_MULTIPLE);
    MT_CHECK(mt_size == 2, "needs 2 processes, got %d", mt_size);
    peer = 1 - mt_rank;
    mpiv_params_t params;
    memset(&params, 0, sizeof params);
    const char *scratch = getenv("MPIV_TEST_SCRATCH_ULTS");
    if (NULL == scratch || 0 != strcmp(scratch, "default")) {
        params.field_mask |= MPIV_PARAM_FIELD_SCRATCH_ULTS;
        params.scratch_ults = NULL != scratch ? (uint32_t) strtoul(scratch, NULL, 10) : 0;
    }
    const char *prefetch = getenv("MPIV_TEST_PREFETCH_ULTS");
    if (NULL == prefetch || 0 != strcmp(prefetch, "default")) {
        params.field_mask |= MPIV_PARAM_FIELD_PREFETCH_ULTS;
        params.prefetch_ults = NULL != prefetch ? (uint32_t) strtoul(prefetch, NULL, 10) : 0;
    }
    MT_CHECK(MPIV_OK == mpiv_init(&params), "mpiv_init failed");
    MT_CHECK(MPIV_OK == mpiv_num_workers(&mine), "mpiv_num_workers failed");
    workers = (int) mine;
    /* both processes must run as many ULTs */
    MT_CALL(MPI_Allreduce(MPI_IN_PLACE, &workers, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    ob1 = mt_pml_is("ob1");
    nults = env != NULL ? atoi(env) : ob1 ? workers : 1000;
    MT_CHECK(nults > 0, "MPIV_TEST_ULTS must be positive");
    ults = mt_malloc(sizeof *ults * (size_t) nults);
    t0 = MPI_Wtime();
    for (int i = 0; i < nults; ++i) {
        int rc = mpiv_spawn(ult_body, (void *) (intptr_t) i, ob1 ? i % workers : MPIV_WORKER_ANY,
                            &ults[i]);
        MT_CHECK(MPIV_OK == rc, "mpiv_spawn %d: %s", i, mpiv_status_string(rc));
    }
    for (int i = 0; i < nults; ++i) {
        MT_CHECK(MPIV_OK == mpiv_join(ults[i], NULL), "mpiv_join %d", i);
    }
    printf("ult: rank %d: %d ULTs x %d rounds in %.2f s\n", mt_rank, nults, ROUNDS,
           MPI_Wtime() - t0);
    {
        MPI_Info info;
        mpiv_ult_h h;
        MT_CALL(MPI_Info_create(&info));
        MT_CALL(MPI_Info_set(info, "mpi_assert_no_any_tag", "true"));
        MT_CALL(MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &no_tag_comm));
        MT_CALL(MPI_Info_free(&info));
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &err_comm));
        MT_CALL(MPI_Comm_set_errhandler(err_comm, MPI_ERRORS_RETURN));
        MT_CALL(MPI_Comm_set_errhandler(no_tag_comm, MPI_ERRORS_RETURN));
        MT_CHECK(MPIV_OK == mpiv_spawn(error_body, NULL, MPIV_WORKER_ANY, &h), "mpiv_spawn");
        MT_CHECK(MPIV_OK == mpiv_join(h, NULL), "mpiv_join");
        MT_CALL(MPI_Comm_free(&no_tag_comm));
        MT_CALL(MPI_Comm_free(&err_comm));
    }
    free(ults);
    MT_CHECK(MPIV_OK == mpiv_finalize(), "mpiv_finalize failed");
    return mt_finish();
}
