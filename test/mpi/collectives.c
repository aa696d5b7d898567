/*
 * collectives: Open MPI's coll framework on top of the PML under test (np 3 or 4).
 *
 * On MPI_COMM_WORLD, on MPI_Comm_split(color = rank % 2, key = -rank: reversed order), on
 * MPI_Comm_dup(MPI_COMM_WORLD) and on a split where rank 0 gives MPI_UNDEFINED (gets
 * MPI_COMM_NULL): MPI_Barrier; MPI_Bcast from every root of 4 ints and of 1 MiB; MPI_Allreduce
 * (MPI_SUM of ints, MPI_MAX of doubles) of 1 and 256 Ki elements; MPI_Alltoall of 1 and
 * 16 Ki ints per pair; MPI_Gather to every root of 3 and 64 Ki ints.  Results are checked
 * element by element against values computed locally.
 */
#include "mpi_test.h"

/* The value rank `rank` of a communicator contributes at element `i`. */
static int contribution(int rank, int i) { return rank * 1000 + (i % 997) - 300; }

static void check_comm(MPI_Comm comm, const char *name)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MT_CALL(MPI_Barrier(comm));

    /* Bcast from every root, small and large */
    static const int bcast_counts[] = {4, 1 << 18};
    for (int c = 0; c < 2; ++c) {
        const int count = bcast_counts[c];
        int *buf = mt_malloc(sizeof(int) * (size_t) count);
        for (int root = 0; root < size; ++root) {
            for (int i = 0; i < count; ++i) {
                buf[i] = (rank == root) ? contribution(root, i) : -1;
            }
            MT_CALL(MPI_Bcast(buf, count, MPI_INT, root, comm));
            for (int i = 0; i < count; ++i) {
                if (buf[i] != contribution(root, i)) {
                    MT_FAIL(
                        "%s: MPI_Bcast of %d ints from root %d: element %d: expected %d, got %d",
                        name, count, root, i, contribution(root, i), buf[i]);
                }
            }
        }
        free(buf);
    }

    /* Allreduce: sum of ints, max of doubles */
    static const int reduce_counts[] = {1, 1 << 18};
    for (int c = 0; c < 2; ++c) {
        const int count = reduce_counts[c];
        int *in = mt_malloc(sizeof(int) * (size_t) count),
            *out = mt_malloc(sizeof(int) * (size_t) count);
        double *din = mt_malloc(sizeof(double) * (size_t) count);
        double *dout = mt_malloc(sizeof(double) * (size_t) count);
        for (int i = 0; i < count; ++i) {
            in[i] = contribution(rank, i);
            din[i] = (double) ((rank * 7919 + i) % size) + 0.5 * rank;
        }
        MT_CALL(MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, comm));
        MT_CALL(MPI_Allreduce(din, dout, count, MPI_DOUBLE, MPI_MAX, comm));
        for (int i = 0; i < count; ++i) {
            int sum = 0;
            double max = -1.0;
            for (int r = 0; r < size; ++r) {
                sum += contribution(r, i);
                double v = (double) ((r * 7919 + i) % size) + 0.5 * r;
                max = v > max ? v : max;
            }
            if (out[i] != sum) {
                MT_FAIL("%s: MPI_Allreduce(MPI_SUM) of %d ints: element %d: expected %d, got %d",
                        name, count, i, sum, out[i]);
            }
            if (dout[i] != max) {
                MT_FAIL("%s: MPI_Allreduce(MPI_MAX) of %d doubles: element %d: expected %g, got %g",
                        name, count, i, max, dout[i]);
            }
        }
        free(in);
        free(out);
        free(din);
        free(dout);
    }

    /* Alltoall: block for rank d from rank s holds s * 1e6 + d * 1e3 + i */
    static const int alltoall_counts[] = {1, 1 << 14};
    for (int c = 0; c < 2; ++c) {
        const int count = alltoall_counts[c];
        const size_t total = (size_t) count * (size_t) size;
        int *in = mt_malloc(sizeof(int) * total), *out = mt_malloc(sizeof(int) * total);
        for (int d = 0; d < size; ++d) {
            for (int i = 0; i < count; ++i) {
                in[d * count + i] = rank * 1000000 + d * 1000 + i % 1000;
                out[d * count + i] = -1;
            }
        }
        MT_CALL(MPI_Alltoall(in, count, MPI_INT, out, count, MPI_INT, comm));
        for (int s = 0; s < size; ++s) {
            for (int i = 0; i < count; ++i) {
                int expected = s * 1000000 + rank * 1000 + i % 1000;
                if (out[s * count + i] != expected) {
                    MT_FAIL("%s: MPI_Alltoall of %d ints: block from rank %d, element %d: "
                            "expected %d, got %d",
                            name, count, s, i, expected, out[s * count + i]);
                }
            }
        }
        free(in);
        free(out);
    }

    /* Gather to every root */
    static const int gather_counts[] = {3, 1 << 16};
    for (int c = 0; c < 2; ++c) {
        const int count = gather_counts[c];
        int *in = mt_malloc(sizeof(int) * (size_t) count);
        int *out = mt_malloc(sizeof(int) * (size_t) count * (size_t) size);
        for (int i = 0; i < count; ++i) {
            in[i] = contribution(rank, i);
        }
        for (int root = 0; root < size; ++root) {
            if (rank == root) {
                memset(out, 0xFF, sizeof(int) * (size_t) count * (size_t) size);
            }
            MT_CALL(MPI_Gather(in, count, MPI_INT, out, count, MPI_INT, root, comm));
            for (int s = 0; s < size && rank == root; ++s) {
                for (int i = 0; i < count; ++i) {
                    if (out[s * count + i] != contribution(s, i)) {
                        MT_FAIL("%s: MPI_Gather of %d ints to root %d: block of rank %d, element "
                                "%d: expected %d, got %d",
                                name, count, root, s, i, contribution(s, i), out[s * count + i]);
                    }
                }
            }
        }
        free(in);
        free(out);
    }
    MT_CALL(MPI_Barrier(comm));
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "collectives", MPI_THREAD_SINGLE);
    mt_require_size(3);

    check_comm(MPI_COMM_WORLD, "MPI_COMM_WORLD");

    MPI_Comm split, dup, partial;
    MT_CALL(MPI_Comm_split(MPI_COMM_WORLD, mt_rank % 2, -mt_rank, &split));
    int split_rank, split_size;
    MPI_Comm_rank(split, &split_rank);
    MPI_Comm_size(split, &split_size);
    const int expected_size = (mt_size + 1 - mt_rank % 2) / 2;
    MT_EXPECT_EQ("MPI_Comm_split: size", expected_size, split_size);
    /* key -rank reverses the order: the highest world rank of the color is rank 0 */
    MT_EXPECT_EQ("MPI_Comm_split: rank", (mt_size - 1 - mt_rank) / 2, split_rank);
    check_comm(split, "split(rank % 2, key -rank)");

    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    check_comm(dup, "dup(MPI_COMM_WORLD)");

    MT_CALL(MPI_Comm_split(MPI_COMM_WORLD, 0 == mt_rank ? MPI_UNDEFINED : 1, mt_rank, &partial));
    if (0 == mt_rank) {
        MT_CHECK(MPI_COMM_NULL == partial,
                 "MPI_Comm_split with MPI_UNDEFINED must give MPI_COMM_NULL");
    } else {
        check_comm(partial, "split without rank 0");
        MPI_Comm_free(&partial);
    }

    /* the communicators are independent: world still works after the others */
    check_comm(MPI_COMM_WORLD, "MPI_COMM_WORLD again");
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);
    return mt_finish();
}
