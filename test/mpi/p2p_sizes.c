/*
 * p2p_sizes: point-to-point transfers of every interesting size, in both directions.
 *
 * Sizes: 0, 1, 8, 4 KiB +-1, 8 KiB +-1, 64 KiB +-1, 1 MiB, 16 MiB, plus limit-1/limit/limit+1
 * for every eager limit the library reports through MPI_T (control variables named
 * "*eager_limit" or "*max_send_size", e.g. pml_mpiv_eager_limit, btl_vader_eager_limit), for
 * every limit listed in the environment variable MPIV_TEST_EAGER (comma separated) and for
 * every number given on the command line.  Each size is sent in three ways:
 *   blocking     MPI_Send / MPI_Recv, 0 -> 1 then 1 -> 0;
 *   unexpected   MPI_Isend, then a zero-byte "sent" message; the receiver posts its MPI_Recv only
 *                after the "sent" message, so the data is usually already waiting (unexpected);
 *   exchange     both ranks MPI_Irecv + MPI_Isend at once, MPI_Waitall.
 * Checks: payload pattern, guard bytes past the message untouched, status source and tag,
 * MPI_Get_count in MPI_BYTE and in MPI_INT (MPI_UNDEFINED when the size is not a multiple).
 */
#include "mpi_test.h"

#define MAX_SIZES   64
#define GUARD_BYTES 64
#define GUARD_VALUE 0xA5
#define MAX_MESSAGE (16u << 20)

static size_t sizes[MAX_SIZES];
static int num_sizes = 0;

static void add_size(long long bytes)
{
    if (bytes < 0 || bytes > (long long) MAX_MESSAGE || num_sizes == MAX_SIZES) {
        return;
    }
    for (int i = 0; i < num_sizes; ++i) {
        if (sizes[i] == (size_t) bytes) {
            return;
        }
    }
    sizes[num_sizes++] = (size_t) bytes;
}

static void add_limit(long long limit)
{
    if (limit > 0) {
        add_size(limit - 1);
        add_size(limit);
        add_size(limit + 1);
    }
}

/* Adds limit-1/limit/limit+1 for each eager-limit-like MPI_T control variable. */
static void add_mpi_t_limits(void)
{
    int provided, num_cvars = 0;
    if (MPI_SUCCESS != MPI_T_init_thread(MPI_THREAD_SINGLE, &provided)) {
        return;
    }
    MPI_T_cvar_get_num(&num_cvars);
    for (int i = 0; i < num_cvars; ++i) {
        char name[256], desc[1024];
        int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, bind, scope, count;
        MPI_Datatype type;
        MPI_T_enum enum_type;
        MPI_T_cvar_handle handle;
        if (MPI_SUCCESS != MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enum_type,
                                               desc, &desc_len, &bind, &scope)) {
            continue;
        }
        size_t len = strlen(name);
        int is_limit = (len > 11 && 0 == strcmp(name + len - 11, "eager_limit")) ||
                       (len > 13 && 0 == strcmp(name + len - 13, "max_send_size"));
        if (!is_limit || MPI_T_BIND_NO_OBJECT != bind ||
            MPI_SUCCESS != MPI_T_cvar_handle_alloc(i, NULL, &handle, &count)) {
            continue;
        }
        long long value = -1;
        if (1 == count) {
            union {
                int i;
                unsigned u;
                long l;
                unsigned long ul;
                long long ll;
                unsigned long long ull;
            } v;
            memset(&v, 0, sizeof(v));
            if (MPI_SUCCESS == MPI_T_cvar_read(handle, &v)) {
                if (MPI_INT == type) {
                    value = v.i;
                } else if (MPI_UNSIGNED == type) {
                    value = v.u;
                } else if (MPI_LONG == type) {
                    value = v.l;
                } else if (MPI_UNSIGNED_LONG == type) {
                    value = (long long) v.ul;
                } else if (MPI_LONG_LONG == type) {
                    value = v.ll;
                } else if (MPI_UNSIGNED_LONG_LONG == type) {
                    value = (long long) v.ull;
                }
            }
        }
        MPI_T_cvar_handle_free(&handle);
        add_limit(value);
    }
    MPI_T_finalize();
}

static int compare_sizes(const void *a, const void *b)
{
    size_t x = *(const size_t *) a, y = *(const size_t *) b;
    return (x > y) - (x < y);
}

/* Rank 0 builds the size list; everyone receives it so both sides agree. */
static void build_sizes(int argc, char **argv)
{
    static const long long fixed[] = {0,    1,    8,     4095,  4096,  4097,    8191,
                                      8192, 8193, 65535, 65536, 65537, 1 << 20, 16 << 20};
    if (0 == mt_rank) {
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); ++i) {
            add_size(fixed[i]);
        }
        const char *env = getenv("MPIV_TEST_EAGER");
        while (NULL != env && '\0' != *env) {
            char *end;
            add_limit(strtoll(env, &end, 0));
            env = (',' == *end) ? end + 1 : "";
        }
        for (int i = 1; i < argc; ++i) {
            add_limit(strtoll(argv[i], NULL, 0));
        }
        add_mpi_t_limits();
        qsort(sizes, (size_t) num_sizes, sizeof(sizes[0]), compare_sizes);
        printf("p2p_sizes: %d sizes:", num_sizes);
        for (int i = 0; i < num_sizes; ++i) {
            printf(" %zu", sizes[i]);
        }
        printf("\n");
        fflush(stdout);
    }
    MT_CALL(MPI_Bcast(&num_sizes, 1, MPI_INT, 0, MPI_COMM_WORLD));
    MT_CALL(MPI_Bcast(sizes, num_sizes * (int) sizeof(size_t), MPI_BYTE, 0, MPI_COMM_WORLD));
}

/* Verifies payload, guard and status of one received message. */
static void check_received(const uint8_t *buf, size_t bytes, uint32_t seed,
                           const MPI_Status *status, int source, int tag, const char *what)
{
    char label[160];
    snprintf(label, sizeof(label), "%s, %zu bytes from rank %d tag %d", what, bytes, source, tag);
    MT_CHECK_STATUS(status, source, tag, MPI_BYTE, (int) bytes, label);
    int ints = -2;
    MPI_Get_count(status, MPI_INT, &ints);
    MT_EXPECT_EQ(label, 0 == bytes % sizeof(int) ? (int) (bytes / sizeof(int)) : MPI_UNDEFINED,
                 ints);
    MT_VERIFY(buf, bytes, seed, label);
    MT_VERIFY_FILL(buf + bytes, GUARD_BYTES, GUARD_VALUE, label);
}

static void prepare_recv(uint8_t *buf, size_t bytes)
{
    memset(buf, 0, bytes);
    memset(buf + bytes, GUARD_VALUE, GUARD_BYTES);
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "p2p_sizes", MPI_THREAD_SINGLE);
    mt_require_size(2);
    build_sizes(argc, argv);

    uint8_t *send_buf = mt_malloc(MAX_MESSAGE);
    uint8_t *recv_buf = mt_malloc(MAX_MESSAGE + GUARD_BYTES);
    const int peer = 1 - mt_rank;
    const int sent_tag = 32000; /* the zero-byte "sent" notice of the unexpected mode */
    MPI_Status status;

    if (mt_rank < 2) {
        for (int s = 0; s < num_sizes; ++s) {
            const size_t bytes = sizes[s];
            const int count = (int) bytes;
            for (int sender = 0; sender < 2; ++sender) {
                const int tag = 100 + s;
                const uint32_t seed = (uint32_t) (s * 16 + sender);
                /* blocking */
                if (mt_rank == sender) {
                    mt_fill(send_buf, bytes, seed);
                    MT_CALL(MPI_Send(send_buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                } else {
                    prepare_recv(recv_buf, bytes);
                    MT_CALL(
                        MPI_Recv(recv_buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &status));
                    check_received(recv_buf, bytes, seed, &status, peer, tag, "blocking");
                }
                /* unexpected: the data is sent before the receive is posted */
                if (mt_rank == sender) {
                    MPI_Request request;
                    mt_fill(send_buf, bytes, seed + 8);
                    MT_CALL(
                        MPI_Isend(send_buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &request));
                    MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, peer, sent_tag, MPI_COMM_WORLD));
                    MT_CALL(MPI_Wait(&request, &status));
                } else {
                    MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, peer, sent_tag, MPI_COMM_WORLD, &status));
                    prepare_recv(recv_buf, bytes);
                    MT_CALL(
                        MPI_Recv(recv_buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &status));
                    check_received(recv_buf, bytes, seed + 8, &status, peer, tag, "unexpected");
                }
            }
            /* exchange: both directions at once, non-blocking */
            MPI_Request requests[2];
            MPI_Status statuses[2];
            const int tag = 20000 + s;
            const uint32_t my_seed = (uint32_t) (s * 16 + 4 + mt_rank);
            mt_fill(send_buf, bytes, my_seed);
            prepare_recv(recv_buf, bytes);
            MT_CALL(MPI_Irecv(recv_buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &requests[0]));
            MT_CALL(MPI_Isend(send_buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &requests[1]));
            MT_CALL(MPI_Waitall(2, requests, statuses));
            check_received(recv_buf, bytes, (uint32_t) (s * 16 + 4 + peer), &statuses[0], peer, tag,
                           "exchange");
            MT_CHECK(MPI_REQUEST_NULL == requests[0] && MPI_REQUEST_NULL == requests[1],
                     "MPI_Waitall left a request non-null");
        }
    }
    free(send_buf);
    free(recv_buf);
    return mt_finish();
}
