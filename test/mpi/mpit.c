/*
 * mpit: mpiv's MPI_T performance variables count exactly what happens (np 2, pml mpiv).
 *
 * Every counter the runtime keeps (mpiv_stats_*) must be an MPI_T performance variable
 * pml_mpiv_<name>, with pml_mpiv_unexpected_now and pml_mpiv_unexpected_max. Each rank
 * reads them all, then rank 1 sends rank 0 a go message; rank 0 sends 10 inline messages
 * (8 bytes), 5 eager ones (2 KiB), 3 rendezvous ones (64 KiB) and a done message (8
 * bytes). Rank 1 receives done first, so the 18 others arrive before their receives; it
 * reads pml_mpiv_unexpected_now (18), then receives them, the first with MPI_ANY_SOURCE
 * (a wildcard match); 3 receives it posts for messages that never come show in
 * pml_mpiv_posted_now until it cancels them, and in pml_mpiv_posted_max (not continuous:
 * started just before, stopped after) for good. Both read again; the differences must be
 * exact:
 *   rank 0: sent_inline 11, bytes_inline 88, sent_eager 5, bytes_eager 10240,
 *           sent_rendezvous 3, bytes_rendezvous 196608, received 1, bytes_received 8;
 *   rank 1: sent_inline 1, bytes_inline 8, received 19, bytes_received 206936,
 *           unexpected 18, wildcard_matches 1, cma_reads 3, recv_posted 4 (done, and the
 *           3 cancelled), recv_posted_matched 1, recv_cancelled 3; unexpected_now and
 *           posted_now back to 0, posted_max 3.
 * Then one non-contiguous message of each kind, gather and streamed, counted once on each
 * side. The per-communicator counters (pml_mpiv_comm_*, bound to MPI_COMM_WORLD) count the same
 * messages, and bound to a dup they count only its traffic (per_comm()).
 * Messages of 2 KiB go eagerly only with the default eager limit (4 KiB).
 * The transport counters split the same traffic: shm_* count it all (shared memory), ucx_*
 * none. With the argument "ucx" (run with pml_mpiv_transports ucx) it is the other way
 * round, and the 2 KiB messages go by rendezvous (UCX has no packets: above the inline
 * size a message travels as one UCX active message with its bytes), with no CMA read.
 */
#include "mpi_test.h"

enum { MAX_VARS = 64, INLINE = 10, EAGER = 5, RNDV = 3, NEVER = 3 };

static int nvars;
static char names[MAX_VARS][128];
static int indexes[MAX_VARS]; /* MPI_T index of each */
static MPI_T_pvar_handle handles[MAX_VARS];
static MPI_T_pvar_session session;
static MPI_Comm world;

static void open_vars(void)
{
    int num = 0, provided;
    MT_CALL(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    MT_CALL(MPI_T_pvar_get_num(&num));
    MT_CALL(MPI_T_pvar_session_create(&session));
    for (int i = 0; i < num; ++i) {
        char name[128], desc[1024];
        int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, var_class, bind,
            readonly, continuous, atomic, count;
        MPI_Datatype type;
        MPI_T_enum enumtype;
        MT_CALL(MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &type, &enumtype,
                                    desc, &desc_len, &bind, &readonly, &continuous, &atomic));
        if (0 != strncmp(name, "pml_mpiv_", 9)) {
            continue;
        }
        MT_CHECK(nvars < MAX_VARS, "more than %d pml_mpiv variables", MAX_VARS);
        MT_CHECK(MPI_UNSIGNED_LONG_LONG == type, "%s is not unsigned long long", name);
        MT_CHECK(desc_len > 20, "%s has no description", name);
        snprintf(names[nvars], sizeof(names[nvars]), "%s", name + 9);
        indexes[nvars] = i;
        if (0 == strncmp(name, "pml_mpiv_comm_", 14)) {
            /* The per-communicator counters: bound to MPI_COMM_WORLD here. */
            MT_CHECK(MPI_T_BIND_MPI_COMM == bind, "%s is not bound to a communicator", name);
            MT_CALL(MPI_T_pvar_handle_alloc(session, i, &world, &handles[nvars], &count));
        } else {
            MT_CHECK(MPI_T_BIND_NO_OBJECT == bind, "%s is bound to an object", name);
            MT_CALL(MPI_T_pvar_handle_alloc(session, i, NULL, &handles[nvars], &count));
        }
        MT_CHECK(1 == count, "%s has %d values", name, count);
        ++nvars;
    }
}

static int var(const char *name)
{
    for (int i = 0; i < nvars; ++i) {
        if (0 == strcmp(names[i], name)) {
            return i;
        }
    }
    MT_FAIL("no MPI_T performance variable pml_mpiv_%s", name);
}

static void read_all(unsigned long long *values)
{
    for (int i = 0; i < nvars; ++i) {
        MT_CALL(MPI_T_pvar_read(session, handles[i], &values[i]));
    }
}

static void expect_delta(const unsigned long long *before, const unsigned long long *after,
                         const char *name, unsigned long long want)
{
    const int i = var(name);
    char what[96];
    snprintf(what, sizeof(what), "rank %d: change of pml_mpiv_%s", mt_rank, name);
    MT_EXPECT_EQ(what, want, after[i] - before[i]);
}

/* The transport counters: @p msgs messages and @p bytes bytes each way over the transport
 * in use (@p ucx), none over the other. */
static void expect_transport(const unsigned long long *before, const unsigned long long *after,
                             int ucx, unsigned long long sent, unsigned long long bytes_sent,
                             unsigned long long received, unsigned long long bytes_received)
{
    const char *use = ucx ? "ucx" : "shm", *other = ucx ? "shm" : "ucx";
    const char *what[] = {"sent", "bytes_sent", "received", "bytes_received"};
    const unsigned long long want[] = {sent, bytes_sent, received, bytes_received};
    char name[64];
    for (int i = 0; i < 4; ++i) {
        snprintf(name, sizeof(name), "%s_%s", use, what[i]);
        expect_delta(before, after, name, want[i]);
        snprintf(name, sizeof(name), "%s_%s", other, what[i]);
        expect_delta(before, after, name, 0);
    }
}

/* Non-contiguous rendezvous messages: one whose ranges are long (16 KiB: the receiver reads
 * them in place, "gather") and one of 4-byte ranges (packed as it is read, "streamed"). */
static void non_contiguous(void)
{
    enum { G_BLOCKS = 16, G_INTS = 4096, S_INTS = 8192 };
    const char *vars[] = {"sent_gather", "sent_streamed", "received_gather", "received_streamed"};
    enum { NV = sizeof(vars) / sizeof(vars[0]) };
    unsigned long long before[MAX_VARS], after[MAX_VARS];
    MPI_Datatype gather, streamed;
    int *buf = mt_malloc(2 * G_BLOCKS * G_INTS * sizeof(int));
    MT_CALL(MPI_Type_vector(G_BLOCKS, G_INTS, 2 * G_INTS, MPI_INT, &gather));
    MT_CALL(MPI_Type_vector(S_INTS, 1, 2, MPI_INT, &streamed));
    MT_CALL(MPI_Type_commit(&gather));
    MT_CALL(MPI_Type_commit(&streamed));
    for (int i = 0; i < 2 * G_BLOCKS * G_INTS; ++i) {
        buf[i] = i;
    }
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    read_all(before);
    if (0 == mt_rank) {
        MT_CALL(MPI_Send(buf, 1, gather, 1, 20, MPI_COMM_WORLD));
        MT_CALL(MPI_Send(buf, 1, streamed, 1, 21, MPI_COMM_WORLD));
    } else {
        int *in = mt_malloc(G_BLOCKS * G_INTS * sizeof(int));
        MT_CALL(MPI_Recv(in, G_BLOCKS * G_INTS, MPI_INT, 0, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MT_EXPECT_EQ("the gathered message's last int", (2 * G_BLOCKS - 2) * G_INTS + G_INTS - 1,
                     in[G_BLOCKS * G_INTS - 1]);
        MT_CALL(MPI_Recv(in, S_INTS, MPI_INT, 0, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MT_EXPECT_EQ("the streamed message's last int", 2 * (S_INTS - 1), in[S_INTS - 1]);
        free(in);
    }
    read_all(after);
    for (int i = 0; i < NV; ++i) {
        /* rank 0 sends both, rank 1 receives both */
        const int sent = 0 == strncmp(vars[i], "sent", 4);
        expect_delta(before, after, vars[i], (0 == mt_rank) == sent ? 1 : 0);
    }
    MT_CALL(MPI_Type_free(&gather));
    MT_CALL(MPI_Type_free(&streamed));
    free(buf);
}

/* The per-communicator counters bound to a new communicator count its traffic only:
 * rank 1 posts 2 receives on it, then rank 0 sends 4 messages (8 bytes), the last 2 of
 * which arrive before their receives (rank 1 probes for them first). */
static void per_comm(void)
{
    const char *vars[] = {"comm_sent", "comm_bytes_sent", "comm_received", "comm_unexpected",
                          "comm_recv_posted"};
    enum { NV = sizeof(vars) / sizeof(vars[0]) };
    MPI_T_pvar_handle h[NV];
    unsigned long long before[NV], after[NV];
    MPI_Comm dup;
    long word = 5, got[4];
    int count;
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    for (int i = 0; i < NV; ++i) {
        MT_CALL(MPI_T_pvar_handle_alloc(session, indexes[var(vars[i])], &dup, &h[i], &count));
        MT_CHECK(1 == count, "pml_mpiv_%s has %d values", vars[i], count);
        MT_CALL(MPI_T_pvar_read(session, h[i], &before[i]));
    }
    if (0 == mt_rank) {
        MT_CALL(MPI_Recv(&word, 1, MPI_LONG, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int t = 1; t <= 4; ++t) {
            MT_CALL(MPI_Send(&word, 1, MPI_LONG, 1, t, dup));
        }
    } else {
        MPI_Request r[2];
        MPI_Status st;
        MT_CALL(MPI_Irecv(&got[0], 1, MPI_LONG, 0, 1, dup, &r[0]));
        MT_CALL(MPI_Irecv(&got[1], 1, MPI_LONG, 0, 2, dup, &r[1]));
        MT_CALL(MPI_Send(&word, 1, MPI_LONG, 0, 7, MPI_COMM_WORLD)); /* ready */
        MT_CALL(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        MT_CALL(MPI_Probe(0, 3, dup, &st));
        MT_CALL(MPI_Probe(0, 4, dup, &st));
        MT_CALL(MPI_Recv(&got[2], 1, MPI_LONG, 0, 3, dup, MPI_STATUS_IGNORE));
        MT_CALL(MPI_Recv(&got[3], 1, MPI_LONG, 0, 4, dup, MPI_STATUS_IGNORE));
    }
    for (int i = 0; i < NV; ++i) {
        MT_CALL(MPI_T_pvar_read(session, h[i], &after[i]));
    }
    const unsigned long long want[2][NV] = {{4, 4 * sizeof(long), 0, 0, 0}, {0, 0, 4, 2, 2}};
    for (int i = 0; i < NV; ++i) {
        char what[96];
        snprintf(what, sizeof(what), "rank %d: change of pml_mpiv_%s on a dup", mt_rank, vars[i]);
        MT_EXPECT_EQ(what, want[mt_rank][i], after[i] - before[i]);
        MT_CALL(MPI_T_pvar_handle_free(session, &h[i]));
    }
    MT_CALL(MPI_Comm_free(&dup));
}

int main(int argc, char **argv)
{
    static unsigned char buf[RNDV][65536], eager[EAGER][2048];
    unsigned long long before[MAX_VARS], after[MAX_VARS], now[MAX_VARS];
    long word = 7;
    MPI_Status status;
    mt_init(&argc, &argv, "mpit", MPI_THREAD_SINGLE);
    MT_CHECK(2 == mt_size, "runs on 2 processes, not %d", mt_size);
    world = MPI_COMM_WORLD;
    const int ucx = argc > 1 && 0 == strcmp(argv[1], "ucx");
    /* Over UCX the 2 KiB messages go by rendezvous too. */
    const unsigned long long eager_n = ucx ? 0 : EAGER, rndv_n = ucx ? EAGER + RNDV : RNDV;
    const unsigned long long rndv_bytes = RNDV * 65536ULL + (ucx ? EAGER * 2048ULL : 0);
    const unsigned long long all_bytes = (INLINE + 1) * sizeof(long) + EAGER * 2048 + RNDV * 65536;
    open_vars();
    /* Every counter of the runtime, and the two levels. */
    const char *all[] = {"sent_inline", "sent_eager", "sent_rendezvous", "sent_gather",
                         "sent_streamed", "bytes_inline", "bytes_eager", "bytes_rendezvous",
                         "received", "received_inline", "received_eager", "received_rendezvous",
                         "received_gather", "received_streamed", "bytes_received", "shm_sent",
                         "shm_bytes_sent",
                         "shm_received", "shm_bytes_received", "ucx_sent", "ucx_bytes_sent",
                         "ucx_received", "ucx_bytes_received", "recv_posted", "recv_posted_matched",
                         "recv_cancelled", "unexpected", "wildcard_matches",
                         "tlp_high", "tlp_low", "tlp_high_wait_ns", "tlp_low_wait_ns",
                         "backpressure", "cma_reads", "two_copy_pieces", "ucx_rndv", "waits_slept",
                         "ult_switches", "ult_wakeups", "ult_parks", "pool_steals", "pool_empty",
                         "server_polls", "server_polls_with_work", "table_growths", "scratch_calls",
                         "stack_prefetches", "batched_completions",
                         "unexpected_now",
                         "unexpected_max", "posted_now", "posted_max", "comm_sent",
                         "comm_bytes_sent", "comm_received", "comm_unexpected",
                         "comm_recv_posted"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) {
        (void) var(all[i]);
    }
    MT_EXPECT_EQ("pml_mpiv variables", (long) (sizeof(all) / sizeof(all[0])), nvars);
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    read_all(before);
    if (0 == mt_rank) {
        MPI_Request req[INLINE + EAGER + RNDV + 1];
        long small[INLINE];
        int n = 0;
        MT_CALL(MPI_Recv(&word, 1, MPI_LONG, 1, 1, MPI_COMM_WORLD, &status)); /* go */
        for (int i = 0; i < INLINE; ++i) {
            small[i] = i;
            MT_CALL(MPI_Isend(&small[i], 1, MPI_LONG, 1, 10, MPI_COMM_WORLD, &req[n++]));
        }
        for (int i = 0; i < EAGER; ++i) {
            MT_CALL(MPI_Isend(eager[i], 2048, MPI_BYTE, 1, 11, MPI_COMM_WORLD, &req[n++]));
        }
        for (int i = 0; i < RNDV; ++i) {
            MT_CALL(MPI_Isend(buf[i], 65536, MPI_BYTE, 1, 12, MPI_COMM_WORLD, &req[n++]));
        }
        MT_CALL(MPI_Isend(&word, 1, MPI_LONG, 1, 2, MPI_COMM_WORLD, &req[n++])); /* done */
        MT_CALL(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
        read_all(after);
        expect_delta(before, after, "sent_inline", INLINE + 1);
        expect_delta(before, after, "bytes_inline", (INLINE + 1) * sizeof(long));
        expect_delta(before, after, "sent_eager", eager_n);
        expect_delta(before, after, "bytes_eager", eager_n * 2048);
        expect_delta(before, after, "sent_rendezvous", rndv_n);
        expect_delta(before, after, "bytes_rendezvous", rndv_bytes);
        expect_delta(before, after, "received", 1);
        expect_delta(before, after, "received_inline", 1);
        expect_delta(before, after, "bytes_received", sizeof(long));
        expect_transport(before, after, ucx, INLINE + EAGER + RNDV + 1, all_bytes, 1,
                         sizeof(long));
        /* Only MPI_COMM_WORLD carried traffic meanwhile: its counters say the same. */
        expect_delta(before, after, "comm_sent", INLINE + EAGER + RNDV + 1);
        expect_delta(before, after, "comm_bytes_sent", all_bytes);
        expect_delta(before, after, "comm_received", 1); /* "go" (it may come at any time) */
    } else {
        /* The receive of "done" is posted before "go" leaves: it waits in the posted list
         * whatever the timing. */
        MPI_Request done;
        long done_word = 0;
        MT_CALL(MPI_Irecv(&done_word, 1, MPI_LONG, 0, 2, MPI_COMM_WORLD, &done));
        MT_CALL(MPI_Send(&word, 1, MPI_LONG, 0, 1, MPI_COMM_WORLD)); /* go */
        MT_CALL(MPI_Wait(&done, &status));
        read_all(now);
        MT_EXPECT_EQ("rank 1: pml_mpiv_unexpected_now after done", INLINE + EAGER + RNDV,
                     now[var("unexpected_now")]);
        MT_CHECK(now[var("unexpected_max")] >= INLINE + EAGER + RNDV,
                 "pml_mpiv_unexpected_max %llu", now[var("unexpected_max")]);
        {
            MPI_Request never[NEVER];
            long sink[NEVER];
            const int hw = var("posted_max");
            MT_CALL(MPI_T_pvar_start(session, handles[hw]));
            for (int i = 0; i < NEVER; ++i) {
                MT_CALL(MPI_Irecv(&sink[i], 1, MPI_LONG, 0, 99 + i, MPI_COMM_WORLD, &never[i]));
            }
            read_all(now);
            MT_EXPECT_EQ("rank 1: pml_mpiv_posted_now with 3 receives waiting", NEVER,
                         now[var("posted_now")]);
            MT_EXPECT_EQ("rank 1: pml_mpiv_posted_max with 3 receives waiting", NEVER,
                         now[hw]);
            for (int i = 0; i < NEVER; ++i) {
                MT_CALL(MPI_Cancel(&never[i]));
                MT_CALL(MPI_Wait(&never[i], &status));
            }
            read_all(now);
            MT_EXPECT_EQ("rank 1: pml_mpiv_posted_max once they are cancelled", NEVER, now[hw]);
            MT_CALL(MPI_T_pvar_stop(session, handles[hw]));
        }
        for (int i = 0; i < INLINE; ++i) {
            MT_CALL(MPI_Recv(&word, 1, MPI_LONG, 0 == i ? MPI_ANY_SOURCE : 0, 10, MPI_COMM_WORLD,
                             &status));
            MT_EXPECT_EQ("an inline message, in order", i, word);
        }
        for (int i = 0; i < EAGER; ++i) {
            MT_CALL(MPI_Recv(eager[i], 2048, MPI_BYTE, 0, 11, MPI_COMM_WORLD, &status));
        }
        for (int i = 0; i < RNDV; ++i) {
            MT_CALL(MPI_Recv(buf[i], 65536, MPI_BYTE, 0, 12, MPI_COMM_WORLD, &status));
        }
        read_all(after);
        expect_delta(before, after, "sent_inline", 1);
        expect_delta(before, after, "bytes_inline", sizeof(long));
        expect_delta(before, after, "received", INLINE + EAGER + RNDV + 1);
        expect_delta(before, after, "bytes_received", all_bytes);
        expect_delta(before, after, "received_inline", INLINE + 1);
        expect_delta(before, after, "received_eager", eager_n);
        expect_delta(before, after, "received_rendezvous", rndv_n);
        expect_delta(before, after, "received_gather", 0);
        expect_delta(before, after, "received_streamed", 0);
        expect_transport(before, after, ucx, 1, sizeof(long), INLINE + EAGER + RNDV + 1,
                         all_bytes);
        expect_delta(before, after, "comm_sent", 1);
        expect_delta(before, after, "comm_bytes_sent", sizeof(long));
        expect_delta(before, after, "comm_received", INLINE + EAGER + RNDV + 1);
        expect_delta(before, after, "comm_unexpected", INLINE + EAGER + RNDV);
        expect_delta(before, after, "comm_recv_posted", 1 + NEVER);
        expect_delta(before, after, "unexpected", INLINE + EAGER + RNDV);
        expect_delta(before, after, "wildcard_matches", 1);
        expect_delta(before, after, "cma_reads", ucx ? 0 : RNDV);
        expect_delta(before, after, "recv_posted", 1 + NEVER);
        expect_delta(before, after, "recv_posted_matched", 1);
        expect_delta(before, after, "recv_cancelled", NEVER);
        MT_EXPECT_EQ("rank 1: pml_mpiv_posted_max after the stop", NEVER,
                     after[var("posted_max")]);
        MT_EXPECT_EQ("rank 1: pml_mpiv_posted_now at the end", 0, after[var("posted_now")]);
        MT_EXPECT_EQ("rank 1: pml_mpiv_unexpected_now at the end", 0,
                     after[var("unexpected_now")]);
    }
    per_comm();
    non_contiguous();
    for (int i = 0; i < nvars; ++i) {
        MT_CALL(MPI_T_pvar_handle_free(session, &handles[i]));
    }
    MT_CALL(MPI_T_pvar_session_free(&session));
    MT_CALL(MPI_T_finalize());
    return mt_finish();
}
