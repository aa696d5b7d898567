/*
 * endpoints_split: MPI_Comm_split, MPI_Comm_split_type, MPI_Comm_dup_with_info and
 * MPIX_Comm_create_endpoints on the handles of an endpoints communicator under pml mpiv,
 * called by every endpoint rank at once (np 3; processes ask for 1, 3 and 7 endpoints: 11
 * ranks, one pthread per handle).
 * Every new communicator's rank and size are checked against a sequential computation of
 * the split (ranks ordered by key, then old rank), and used: each rank sends its old rank
 * to its new neighbour (received by source, value and status checked) and an
 * MPI_Allreduce sums the old ranks; a new handle has its old handle's error handler
 * (MPI_ERRORS_RETURN) and, made by a split, none of its attributes. Each rank, in order:
 *   - even/odd by rank, key = -rank (reversed order);
 *   - MPI_UNDEFINED for ranks that are multiples of 3 (they get MPI_COMM_NULL), one color
 *     and one key for the others (ranks in old order);
 *   - color = rank: every rank alone;
 *   - a split of the even/odd split: its lower and upper halves, reversed again;
 *   - MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), key reversing the ranks: one node here,
 *     so all ranks; MPI_UNDEFINED as split_type gives MPI_COMM_NULL;
 *   - errors, on every rank under MPI_ERRORS_RETURN: a split_type mpiv does not support
 *     (MPI_ERR_ARG), a negative color on one rank only (MPI_ERR_ARG everywhere), and
 *     (np 3 only) mixed constructors as one collective call, rank 1 calling MPI_Comm_dup
 *     while the others call MPI_Comm_split (MPI_ERR_COMM everywhere, no hang); a split
 *     after them works;
 *   - MPI_Comm_dup_with_info with a hint whose value names the rank: MPI_Comm_get_info
 *     on the new handle gives it back, an attribute was copied; a dup_with_info of that
 *     with MPI_INFO_NULL has no hint (the info replaces the inherited hints);
 *   - MPIX_Comm_create_endpoints with its handle as the parent, rank s asking for s % 3 + 1
 *     endpoints (1 by ULTs), one pthread per new handle: the new ranks in parent rank
 *     order, then by index, checked against a sequential computation, each sends (parent
 *     rank, index) to every new rank and receives from every one by source (data, status),
 *     an MPI_Allreduce sums the parent ranks (even parent ranks pass mpiv_worker 0);
 *     my_num_ep 0 on one rank fails every rank with MPI_ERR_ARG, a bad mpiv_worker on one
 *     rank with MPI_ERR_INFO_VALUE, (np 3) MPI_Comm_dup on rank 1 against it with
 *     MPI_ERR_COMM; the new handles freed in an order that depends on the rank;
 *   - frees its communicators in an order that depends on its rank; the main thread frees
 *     the even/odd ones after the threads end, in reverse order.
 * "wide": np 2, 16 threads per process. "ult": np 2, 64 endpoints per process, each driven
 * by an mpiv ULT (no every-rank-alone split: 128 rounds). Under another PML than mpiv
 * MPIX_Comm_create_endpoints fails with MPI_ERR_UNSUPPORTED_OPERATION, and that is all this
 * program checks.
 */
#include "mpi_test.h"

#include <pthread.h>

#include <mpiv/mpiv.h>
#include <mpiv/mpix_endpoints.h>

enum { MAX_EP = 64 };
static const int wanted[3] = {1, 3, 7};

static int total;              /* ranks of the endpoints communicator */
static int first;              /* this process's first rank */
static int all_alone = 1;      /* the every-rank-alone split */
static int mixed = 0;          /* the mixed-constructors case (np 3) */
static int sub_one = 0;        /* MPIX_Comm_create_endpoints(handle, 1) only (ULTs) */
static int keyval = MPI_KEYVAL_INVALID;
static MPI_Comm handles[MAX_EP];
static MPI_Comm even_odd[MAX_EP]; /* freed by the main thread */

/* Rank and size that old rank @p r gets in a split by color[] and key[] (-1: none). */
static void expect_split(const int *color, const int *key, int r, int *rank_p, int *size_p)
{
    int rank = 0, size = 0;
    if (MPI_UNDEFINED == color[r]) {
        *rank_p = *size_p = -1;
        return;
    }
    for (int s = 0; s < total; ++s) {
        if (color[s] == color[r]) {
            ++size;
            rank += key[s] < key[r] || (key[s] == key[r] && s < r);
        }
    }
    *rank_p = rank;
    *size_p = size;
}

/* The old rank that has new rank @p rank among color @p c. */
static int member_at(const int *color, const int *key, int c, int rank)
{
    for (int s = 0; s < total; ++s) {
        int sr, ss;
        if (color[s] == c) {
            expect_split(color, key, s, &sr, &ss);
            if (sr == rank) {
                return s;
            }
        }
    }
    MT_FAIL("no member %d of color %d", rank, c);
}

/* @p comm is old rank @p r's part of the split by color[] and key[]: check and use it. */
static void check_split(MPI_Comm comm, const int *color, const int *key, int r, const char *what)
{
    int want_rank, want_size, rank = -1, size = -1, got = -1;
    long sum = 0, mine = r, want_sum = 0;
    MPI_Request req;
    MPI_Status status;
    char label[128];
    expect_split(color, key, r, &want_rank, &want_size);
    if (want_size < 0) {
        snprintf(label, sizeof(label), "%s: MPI_UNDEFINED gives MPI_COMM_NULL", what);
        MT_CHECK(MPI_COMM_NULL == comm, "rank %d: %s", r, label);
        return;
    }
    MT_CHECK(MPI_COMM_NULL != comm, "rank %d: %s: MPI_COMM_NULL", r, what);
    MPI_Errhandler errh;
    MT_CALL(MPI_Comm_get_errhandler(comm, &errh));
    MT_CHECK(MPI_ERRORS_RETURN == errh, "rank %d: %s: not the old handle's error handler", r,
             what);
    MT_CALL(MPI_Errhandler_free(&errh));
    MT_CALL(MPI_Comm_rank(comm, &rank));
    MT_CALL(MPI_Comm_size(comm, &size));
    snprintf(label, sizeof(label), "%s: new rank of old rank %d", what, r);
    MT_EXPECT_EQ(label, want_rank, rank);
    snprintf(label, sizeof(label), "%s: new size at old rank %d", what, r);
    MT_EXPECT_EQ(label, want_size, size);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MT_CALL(MPI_Isend(&r, 1, MPI_INT, next, 77, comm, &req));
    MT_CALL(MPI_Recv(&got, 1, MPI_INT, prev, 77, comm, &status));
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    snprintf(label, sizeof(label), "%s: old rank of the new neighbour before %d", what, r);
    MT_EXPECT_EQ(label, member_at(color, key, color[r], prev), got);
    MT_EXPECT_EQ("status source", prev, status.MPI_SOURCE);
    MT_CALL(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm));
    for (int s = 0; s < total; ++s) {
        want_sum += color[s] == color[r] ? s : 0;
    }
    snprintf(label, sizeof(label), "%s: MPI_Allreduce of the old ranks", what);
    MT_EXPECT_EQ(label, want_sum, sum);
}

/* Whether @p comm has the attribute of keyval (a split copies none, a dup all). */
static int has_attr(MPI_Comm comm)
{
    void *attr = NULL;
    int flag = 0;
    MT_CALL(MPI_Comm_get_attr(comm, keyval, &attr, &flag));
    return flag;
}

static int error_class(int rc)
{
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls;
}

/* The hint "mpiv_test_hint" of @p comm ("" if none). */
static void get_hint(MPI_Comm comm, char *value, int len)
{
    MPI_Info info;
    int flag = 0;
    MT_CALL(MPI_Comm_get_info(comm, &info));
    MT_CALL(MPI_Info_get(info, "mpiv_test_hint", len - 1, value, &flag));
    if (!flag) {
        value[0] = '\0';
    }
    MT_CALL(MPI_Info_free(&info));
}

/* MPIX_Comm_create_endpoints with an endpoints handle as the parent: parent rank s asks
 * for sub_count(s) endpoints; new ranks in parent rank order, then by index. */
static int sub_count(int s)
{
    return sub_one ? 1 : s % 3 + 1;
}

static int sub_first(int s)
{
    int first_rank = 0;
    for (int t = 0; t < s; ++t) {
        first_rank += sub_count(t);
    }
    return first_rank;
}

typedef struct sub_arg {
    MPI_Comm comm;
    int parent, index;                  /* parent rank, index in its out array */
} sub_arg_t;

/* One new handle: rank and size, a message to and from every new rank, an Allreduce. */
static void *sub_body(void *arg)
{
    const sub_arg_t *a = arg;
    const int sub_total = sub_first(total), want_rank = sub_first(a->parent) + a->index;
    int rank = -1, size = -1, mine[2] = {a->parent, a->index};
    long sum = 0, want_sum = 0, value = a->parent;
    char label[160];
    MT_CALL(MPI_Comm_rank(a->comm, &rank));
    MT_CALL(MPI_Comm_size(a->comm, &size));
    snprintf(label, sizeof(label), "rank of new handle %d of parent rank %d", a->index, a->parent);
    MT_EXPECT_EQ(label, want_rank, rank);
    MT_EXPECT_EQ("size of the endpoints of the endpoints", sub_total, size);
    MPI_Request *reqs = mt_malloc(sizeof(MPI_Request) * (size_t) size);
    int *got = mt_malloc(sizeof(int) * 2 * (size_t) size);
    for (int d = 0; d < size; ++d) {
        MT_CALL(MPI_Isend(mine, 2, MPI_INT, d, 300 + rank, a->comm, &reqs[d]));
    }
    for (int src = 0; src < size; ++src) {
        MPI_Status status;
        int parent = 0;
        MT_CALL(MPI_Recv(&got[2 * src], 2, MPI_INT, src, 300 + src, a->comm, &status));
        MT_EXPECT_EQ("status source", src, status.MPI_SOURCE);
        MT_EXPECT_EQ("status tag", 300 + src, status.MPI_TAG);
        while (sub_first(parent + 1) <= src) {
            ++parent;
        }
        snprintf(label, sizeof(label), "parent rank of new rank %d (at new rank %d)", src, rank);
        MT_EXPECT_EQ(label, parent, got[2 * src]);
        snprintf(label, sizeof(label), "index of new rank %d (at new rank %d)", src, rank);
        MT_EXPECT_EQ(label, src - sub_first(parent), got[2 * src + 1]);
    }
    MT_CALL(MPI_Waitall(size, reqs, MPI_STATUSES_IGNORE));
    MT_CALL(MPI_Allreduce(&value, &sum, 1, MPI_LONG, MPI_SUM, a->comm));
    for (int s = 0; s < total; ++s) {
        want_sum += (long) s * sub_count(s);
    }
    MT_EXPECT_EQ("MPI_Allreduce of the parent ranks over the new handles", want_sum, sum);
    free(got);
    free(reqs);
    return NULL;
}

/* Parent rank @p r's part of the endpoints-of-endpoints checks (see the top of the file). */
static void create_on_handle(MPI_Comm comm, int r)
{
    const int n = sub_count(r);
    MPI_Comm sub[3], bad[3] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
    sub_arg_t args[3];
    pthread_t threads[3];
    MPI_Info info = MPI_INFO_NULL;
    if (0 == r % 2) {
        /* Even ranks place theirs on worker endpoint 0, odd ones take the default. */
        MT_CALL(MPI_Info_create(&info));
        MT_CALL(MPI_Info_set(info, "mpiv_worker", "0"));
    }
    MT_CALL(MPIX_Comm_create_endpoints(comm, n, info, sub));
    for (int i = 0; i < n; ++i) {
        MPI_Errhandler errh;
        MT_CALL(MPI_Comm_get_errhandler(sub[i], &errh));
        MT_CHECK(MPI_ERRORS_RETURN == errh, "a new handle lacks its parent's error handler");
        MT_CALL(MPI_Errhandler_free(&errh));
        args[i].comm = sub[i];
        args[i].parent = r;
        args[i].index = i;
    }
    if (1 == n) {
        sub_body(&args[0]); /* the ULT (or thread) drives its only new handle */
    } else {
        for (int i = 0; i < n; ++i) {
            MT_CHECK(0 == pthread_create(&threads[i], NULL, sub_body, &args[i]), "pthread_create");
        }
        for (int i = 0; i < n; ++i) {
            MT_CHECK(0 == pthread_join(threads[i], NULL), "pthread_join");
        }
    }
    /* A bad count or mpiv_worker on one rank fails every rank; mixed with MPI_Comm_dup,
     * MPI_ERR_COMM. */
    if (MPI_INFO_NULL == info) {
        MT_CALL(MPI_Info_create(&info));
    }
    MT_EXPECT_EQ("MPIX_Comm_create_endpoints(handle) with my_num_ep 0 on one rank: MPI_ERR_ARG",
                 MPI_ERR_ARG,
                 error_class(MPIX_Comm_create_endpoints(comm, r == total - 1 ? 0 : 2, MPI_INFO_NULL,
                                                        bad)));
    MT_CALL(MPI_Info_set(info, "mpiv_worker", r == total - 1 ? "no,such" : "0"));
    MT_EXPECT_EQ("MPIX_Comm_create_endpoints(handle) with a bad mpiv_worker on one rank: "
                 "MPI_ERR_INFO_VALUE",
                 MPI_ERR_INFO_VALUE,
                 error_class(MPIX_Comm_create_endpoints(comm, 1, info, bad)));
    MT_CALL(MPI_Info_free(&info));
    if (mixed) {
        const int rc = 1 == r ? MPI_Comm_dup(comm, &bad[0])
                              : MPIX_Comm_create_endpoints(comm, 1, MPI_INFO_NULL, bad);
        MT_EXPECT_EQ("MPI_Comm_dup on rank 1 against MPIX_Comm_create_endpoints: MPI_ERR_COMM",
                     MPI_ERR_COMM, error_class(rc));
    }
    for (int i = 0; i < 3; ++i) {
        MT_CHECK(MPI_COMM_NULL == bad[i], "a failed call made a communicator");
    }
    /* Free in an order that depends on the parent rank. */
    for (int i = 0; i < n; ++i) {
        MT_CALL(MPI_Comm_free(&sub[(i + r) % n]));
    }
}

static void *body(void *arg)
{
    const int index = (int) (intptr_t) arg, r = first + index;
    MPI_Comm comm = handles[index], made[10], bad = MPI_COMM_NULL;
    int *color = mt_malloc(sizeof(int) * (size_t) total);
    int *key = mt_malloc(sizeof(int) * (size_t) total);
    int n = 0, rank = -1;
    MT_CALL(MPI_Comm_rank(comm, &rank));
    MT_EXPECT_EQ("rank of a handle", r, rank);
    MT_CALL(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MT_CALL(MPI_Comm_set_attr(comm, keyval, &handles[index]));

    /* Even/odd, reversed. */
    for (int s = 0; s < total; ++s) {
        color[s] = s % 2;
        key[s] = -s;
    }
    MT_CALL(MPI_Comm_split(comm, r % 2, -r, &even_odd[index]));
    check_split(even_odd[index], color, key, r, "even/odd split");
    MT_CHECK(!has_attr(even_odd[index]), "a split copied an attribute");

    /* Split of the split: the halves of each, reversed again (colors 2 * parity + half). */
    int eo_rank, eo_size;
    int *eo_rank_of = mt_malloc(sizeof(int) * (size_t) total);
    int *eo_size_of = mt_malloc(sizeof(int) * (size_t) total);
    MT_CALL(MPI_Comm_rank(even_odd[index], &eo_rank));
    MT_CALL(MPI_Comm_size(even_odd[index], &eo_size));
    for (int s = 0; s < total; ++s) {
        expect_split(color, key, s, &eo_rank_of[s], &eo_size_of[s]);
    }
    for (int s = 0; s < total; ++s) {
        color[s] = 2 * (s % 2) + (eo_rank_of[s] < eo_size_of[s] / 2 ? 0 : 1);
        key[s] = -eo_rank_of[s];
    }
    free(eo_size_of);
    free(eo_rank_of);
    MT_CALL(MPI_Comm_split(even_odd[index], eo_rank < eo_size / 2 ? 0 : 1, -eo_rank, &made[n]));
    check_split(made[n++], color, key, r, "split of the even/odd split");

    /* MPI_UNDEFINED for multiples of 3; ties broken by old rank. */
    for (int s = 0; s < total; ++s) {
        color[s] = 0 == s % 3 ? MPI_UNDEFINED : 7;
        key[s] = 0;
    }
    MT_CALL(MPI_Comm_split(comm, color[r], 0, &made[n]));
    check_split(made[n], color, key, r, "split with MPI_UNDEFINED");
    n += MPI_COMM_NULL != made[n];

    if (all_alone) {
        for (int s = 0; s < total; ++s) {
            color[s] = s;
            key[s] = 0;
        }
        MT_CALL(MPI_Comm_split(comm, r, 0, &made[n]));
        check_split(made[n++], color, key, r, "color = rank");
    }

    /* One node: MPI_COMM_TYPE_SHARED gives every rank, here in reverse order. */
    for (int s = 0; s < total; ++s) {
        color[s] = 0;
        key[s] = total - s;
    }
    MT_CALL(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, total - r, MPI_INFO_NULL, &made[n]));
    check_split(made[n], color, key, r, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    MT_CHECK(!has_attr(made[n++]), "MPI_Comm_split_type copied an attribute");
    MT_CALL(MPI_Comm_split_type(comm, MPI_UNDEFINED, 0, MPI_INFO_NULL, &bad));
    MT_CHECK(MPI_COMM_NULL == bad, "MPI_Comm_split_type(MPI_UNDEFINED) gives MPI_COMM_NULL");

    /* Errors, on every rank: no hang, and the handles keep working. */
    bad = MPI_COMM_WORLD;
    MT_EXPECT_EQ("MPI_Comm_split_type with an unsupported type: MPI_ERR_ARG", MPI_ERR_ARG,
                 error_class(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED + 1000, 0,
                                                 MPI_INFO_NULL, &bad)));
    MT_CHECK(MPI_COMM_NULL == bad, "a failed split gives MPI_COMM_NULL");
    MT_EXPECT_EQ("MPI_Comm_split with a negative color on one rank: MPI_ERR_ARG everywhere",
                 MPI_ERR_ARG, error_class(MPI_Comm_split(comm, r == total - 1 ? -5 : 0, 0, &bad)));
    if (mixed) {
        const int rc = 1 == r ? MPI_Comm_dup(comm, &bad) : MPI_Comm_split(comm, 0, r, &bad);
        MT_EXPECT_EQ("MPI_Comm_dup on rank 1 against MPI_Comm_split: MPI_ERR_COMM everywhere",
                     MPI_ERR_COMM, error_class(rc));
        for (int s = 0; s < total; ++s) {
            color[s] = 0;
            key[s] = s;
        }
        MT_CALL(MPI_Comm_split(comm, 0, r, &made[n]));
        check_split(made[n++], color, key, r, "a split after the errors");
    }

    /* dup_with_info: the hint comes back; the attribute was copied. */
    MPI_Info info;
    char value[64], want[64];
    int *attr = NULL, flag = 0;
    snprintf(want, sizeof(want), "hint of rank %d", r);
    MT_CALL(MPI_Info_create(&info));
    MT_CALL(MPI_Info_set(info, "mpiv_test_hint", want));
    MT_CALL(MPI_Comm_dup_with_info(comm, info, &made[n]));
    MT_CALL(MPI_Info_free(&info));
    for (int s = 0; s < total; ++s) {
        color[s] = 0;
        key[s] = s;
    }
    check_split(made[n], color, key, r, "MPI_Comm_dup_with_info");
    get_hint(made[n], value, sizeof(value));
    MT_CHECK(0 == strcmp(want, value), "rank %d: the hint of the dup_with_info: '%s', not '%s'",
             r, value, want);
    MT_CALL(MPI_Comm_get_attr(made[n], keyval, &attr, &flag));
    MT_CHECK(flag && attr == (int *) &handles[index], "the attribute was not copied");
    MT_CALL(MPI_Comm_dup_with_info(made[n], MPI_INFO_NULL, &made[n + 1]));
    ++n;
    get_hint(made[n], value, sizeof(value));
    MT_CHECK(0 == strcmp("", value), "rank %d: dup_with_info(MPI_INFO_NULL) kept the hint '%s'", r,
             value);
    check_split(made[n++], color, key, r, "MPI_Comm_dup_with_info(MPI_INFO_NULL)");

    /* MPIX_Comm_create_endpoints on the handle: the handles of the handles. */
    create_on_handle(comm, r);

    /* Free, starting at a place that depends on the rank; the old handle among them. */
    made[n++] = comm;
    for (int i = 0; i < n; ++i) {
        MT_CALL(MPI_Comm_free(&made[(i + r) % n]));
    }
    free(key);
    free(color);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *pml = getenv("OMPI_MCA_pml");
    const int wide = argc > 1 && 0 == strcmp(argv[1], "wide");
    const int ult = argc > 1 && 0 == strcmp(argv[1], "ult");
    mt_init(&argc, &argv, "endpoints_split", MPI_THREAD_MULTIPLE);
    MT_CHECK((wide || ult ? 2 : 3) == mt_size, "runs on %d processes, not %d",
             wide || ult ? 2 : 3, mt_size);
    if (NULL == pml || 0 != strncmp(pml, "mpiv", 4)) {
        MPI_Comm parent;
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &parent));
        MT_CALL(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
        MT_EXPECT_EQ("a PML other than mpiv", MPI_ERR_UNSUPPORTED_OPERATION,
                     error_class(MPIX_Comm_create_endpoints(parent, 1, MPI_INFO_NULL, handles)));
        MT_CALL(MPI_Comm_free(&parent));
        return mt_finish();
    }
    const int per = wide ? 16 : ult ? 64 : 0;
    const int mine = per > 0 ? per : wanted[mt_rank];
    total = per > 0 ? 2 * per : 11;
    first = per > 0 ? mt_rank * per : (0 == mt_rank ? 0 : mt_rank == 1 ? 1 : 4);
    all_alone = !ult;
    mixed = !wide && !ult;
    sub_one = ult;
    MT_CALL(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &keyval, NULL));
    MT_CALL(MPIX_Comm_create_endpoints(MPI_COMM_WORLD, mine, MPI_INFO_NULL, handles));
    if (ult) {
        mpiv_ult_h ults[MAX_EP];
        MT_CHECK(MPIV_OK == mpiv_init(NULL), "mpiv_init failed");
        for (intptr_t i = 0; i < mine; ++i) {
            const int rc = mpiv_spawn(body, (void *) i, MPIV_WORKER_ANY, &ults[i]);
            MT_CHECK(MPIV_OK == rc, "mpiv_spawn %d: %s", (int) i, mpiv_status_string(rc));
        }
        for (int i = 0; i < mine; ++i) {
            MT_CHECK(MPIV_OK == mpiv_join(ults[i], NULL), "mpiv_join %d", i);
        }
        MT_CHECK(MPIV_OK == mpiv_finalize(), "mpiv_finalize failed");
    } else {
        pthread_t threads[MAX_EP];
        for (intptr_t i = 0; i < mine; ++i) {
            MT_CHECK(0 == pthread_create(&threads[i], NULL, body, (void *) i), "pthread_create");
        }
        for (int i = 0; i < mine; ++i) {
            MT_CHECK(0 == pthread_join(threads[i], NULL), "pthread_join");
        }
    }
    /* One thread frees a communicator's handles in turn (the proposal allows it). */
    for (int i = mine - 1; i >= 0; --i) {
        MT_CALL(MPI_Comm_free(&even_odd[i]));
    }
    MT_CALL(MPI_Comm_free_keyval(&keyval));
    return mt_finish();
}
