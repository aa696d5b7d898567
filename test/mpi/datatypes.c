/*
 * datatypes: non-contiguous datatypes on both sides of a transfer, in both directions.
 *
 * Layouts (each element's bytes described by (offset, length) segments so the test can compute
 * the expected bytes independently of MPI):
 *   vector   MPI_Type_vector(4 blocks of 3 ints, stride 5): 12 ints in 72 bytes;
 *   indexed  MPI_Type_indexed(blocks 1,2,3,6 at 0,3,7,12):  12 ints in 72 bytes;
 *   struct   {char c; double d; int i[3];} sending c, d, i[0..1]: gaps after c and over i[2];
 *   wide     MPI_Type_vector(2 blocks of 100 ints, stride 150) resized to 1200 bytes: ranges
 *            of 400 bytes (large messages of it are read in place by mpiv, not packed);
 * each with a packed twin of the same type signature and no gaps (contiguous(12, MPI_INT), a
 * 17-byte struct, contiguous(200, MPI_INT)).  Cases: derived -> packed, packed -> derived,
 * derived -> same derived, and vector <-> indexed (same signature, different layouts); counts
 * giving a few hundred bytes and more than 1 MiB (at most 8 MiB); sender rank 0 and rank 1; blocking, non-blocking and matched-probe
 * (MPI_Mprobe + MPI_Mrecv) receives take turns.
 * Checks: received bytes equal the sent segments in type-map order, receiver bytes outside the
 * segments (gaps, the tail) keep their sentinel, status source/tag and MPI_Get_count.
 */
#include "mpi_test.h"

#include <stddef.h>

#define SENTINEL     0xEE
#define MAX_SEGMENTS 4

/* A datatype plus the byte layout of one element. */
typedef struct {
    const char *name;
    MPI_Datatype type;
    MPI_Aint extent;
    int num_segments;
    MPI_Aint offset[MAX_SEGMENTS];
    MPI_Aint length[MAX_SEGMENTS];
} layout_t;

typedef struct {
    char c;
    double d;
    int i[3];
} record_t;

enum { VECTOR, INDEXED, RECORD, WIDE, PACKED_INTS, PACKED_RECORD, PACKED_WIDE, NUM_LAYOUTS };
static layout_t layouts[NUM_LAYOUTS];

static MPI_Aint packed_size(const layout_t *l)
{
    MPI_Aint bytes = 0;
    for (int s = 0; s < l->num_segments; ++s) {
        bytes += l->length[s];
    }
    return bytes;
}

static void commit(layout_t *l, MPI_Datatype type)
{
    MPI_Aint lb, extent;
    int size;
    MT_CALL(MPI_Type_commit(&type));
    MPI_Type_get_extent(type, &lb, &extent);
    MPI_Type_size(type, &size);
    l->type = type;
    MT_EXPECT_EQ(l->name, l->extent, extent);
    MT_EXPECT_EQ(l->name, packed_size(l), size);
}

static void build_layouts(void)
{
    MPI_Datatype t, unsized;

    layout_t *v = &layouts[VECTOR];
    *v = (layout_t){"vector", MPI_DATATYPE_NULL, 72, 4, {0, 20, 40, 60}, {12, 12, 12, 12}};
    MT_CALL(MPI_Type_vector(4, 3, 5, MPI_INT, &t));
    commit(v, t);

    layout_t *x = &layouts[INDEXED];
    *x = (layout_t){"indexed", MPI_DATATYPE_NULL, 72, 4, {0, 12, 28, 48}, {4, 8, 12, 24}};
    int block_lengths[4] = {1, 2, 3, 6}, displacements[4] = {0, 3, 7, 12};
    MT_CALL(MPI_Type_indexed(4, block_lengths, displacements, MPI_INT, &t));
    commit(x, t);

    layout_t *r = &layouts[RECORD];
    *r = (layout_t){"struct",
                    MPI_DATATYPE_NULL,
                    sizeof(record_t),
                    3,
                    {offsetof(record_t, c), offsetof(record_t, d), offsetof(record_t, i)},
                    {1, sizeof(double), 2 * sizeof(int)}};
    int record_blocks[3] = {1, 1, 2};
    MPI_Aint record_displs[3] = {r->offset[0], r->offset[1], r->offset[2]};
    MPI_Datatype record_types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    MT_CALL(MPI_Type_create_struct(3, record_blocks, record_displs, record_types, &unsized));
    MT_CALL(MPI_Type_create_resized(unsized, 0, sizeof(record_t), &t));
    MPI_Type_free(&unsized);
    commit(r, t);

    /* ranges of 400 bytes: mpiv sends large messages of it from the ranges in place */
    layout_t *w = &layouts[WIDE];
    *w = (layout_t){"wide vector", MPI_DATATYPE_NULL, 1200, 2, {0, 600}, {400, 400}};
    MT_CALL(MPI_Type_vector(2, 100, 150, MPI_INT, &unsized));
    MT_CALL(MPI_Type_create_resized(unsized, 0, 1200, &t));
    MPI_Type_free(&unsized);
    commit(w, t);

    layout_t *pi = &layouts[PACKED_INTS];
    *pi = (layout_t){"contiguous(12 int)", MPI_DATATYPE_NULL, 48, 1, {0}, {48}};
    MT_CALL(MPI_Type_contiguous(12, MPI_INT, &t));
    commit(pi, t);

    const MPI_Aint packed_bytes = 1 + sizeof(double) + 2 * sizeof(int);
    layout_t *pr = &layouts[PACKED_RECORD];
    *pr = (layout_t){"packed struct", MPI_DATATYPE_NULL, packed_bytes, 1, {0}, {packed_bytes}};
    MPI_Aint packed_displs[3] = {0, 1, 1 + sizeof(double)};
    MT_CALL(MPI_Type_create_struct(3, record_blocks, packed_displs, record_types, &unsized));
    MT_CALL(MPI_Type_create_resized(unsized, 0, packed_bytes, &t));
    MPI_Type_free(&unsized);
    commit(pr, t);

    layout_t *pw = &layouts[PACKED_WIDE];
    *pw = (layout_t){"contiguous(200 int)", MPI_DATATYPE_NULL, 800, 1, {0}, {800}};
    MT_CALL(MPI_Type_contiguous(200, MPI_INT, &t));
    commit(pw, t);
}

/* Copies the type-map bytes of `count` elements of layout `l` at `buf` into `stream`. */
static void gather(const layout_t *l, const uint8_t *buf, int count, uint8_t *stream)
{
    for (int e = 0; e < count; ++e) {
        for (int s = 0; s < l->num_segments; ++s) {
            memcpy(stream, buf + e * l->extent + l->offset[s], (size_t) l->length[s]);
            stream += l->length[s];
        }
    }
}

/* Checks that `buf` holds `stream` in the segments of `l` and the sentinel elsewhere. */
static void check_scatter(const layout_t *l, const uint8_t *buf, int count, const uint8_t *stream,
                          const char *what)
{
    MPI_Aint pos = 0; /* next byte of buf to check */
    MPI_Aint stream_pos = 0;
    for (int e = 0; e < count; ++e) {
        for (int s = 0; s < l->num_segments; ++s) {
            MPI_Aint start = e * l->extent + l->offset[s];
            for (; pos < start; ++pos) {
                MT_CHECK(SENTINEL == buf[pos], "%s: gap byte %ld (element %d) was written: 0x%02x",
                         what, (long) pos, e, buf[pos]);
            }
            for (MPI_Aint i = 0; i < l->length[s]; ++i, ++pos, ++stream_pos) {
                MT_CHECK(buf[pos] == stream[stream_pos],
                         "%s: element %d segment %d byte %ld (buffer offset %ld): expected 0x%02x,"
                         " got 0x%02x",
                         what, e, s, (long) i, (long) pos, stream[stream_pos], buf[pos]);
            }
        }
    }
    /* the tail up to the end of the last extent plus one extra extent */
    for (; pos < (count + 1) * l->extent; ++pos) {
        MT_CHECK(SENTINEL == buf[pos], "%s: byte %ld past the data was written: 0x%02x", what,
                 (long) pos, buf[pos]);
    }
}

/* One transfer of `count` elements from layout `from` on rank `sender` to layout `to`. */
enum { BLOCKING, NONBLOCKING, MATCHED_PROBE };

static void transfer(int from, int to, int count, int sender, int tag, int mode)
{
    static const char *const mode_names[] = {"Send/Recv", "Isend/Irecv", "Send/Mprobe+Mrecv"};
    const int nonblocking = NONBLOCKING == mode;
    const layout_t *src = &layouts[from], *dst = &layouts[to];
    const int receiver = 1 - sender;
    char what[200];
    snprintf(what, sizeof(what), "%s x %d -> %s, rank %d -> %d, %s", src->name, count, dst->name,
             sender, receiver, mode_names[mode]);
    MT_EXPECT_EQ(what, packed_size(src), packed_size(dst));
    const size_t stream_bytes = (size_t) (packed_size(src) * count);
    uint8_t *stream = mt_malloc(stream_bytes);
    MPI_Status status;

    if (mt_rank == sender) {
        size_t bytes = (size_t) (src->extent * count);
        uint8_t *buf = mt_malloc(bytes);
        mt_fill(buf, bytes, (uint32_t) tag);
        if (nonblocking) {
            MPI_Request request;
            MT_CALL(MPI_Isend(buf, count, src->type, receiver, tag, MPI_COMM_WORLD, &request));
            MT_CALL(MPI_Wait(&request, &status));
        } else {
            MT_CALL(MPI_Send(buf, count, src->type, receiver, tag, MPI_COMM_WORLD));
        }
        free(buf);
    } else if (mt_rank == receiver) {
        /* the sender's pattern, as the receiver expects it in type-map order */
        size_t src_bytes = (size_t) (src->extent * count);
        uint8_t *expected_src = mt_malloc(src_bytes);
        mt_fill(expected_src, src_bytes, (uint32_t) tag);
        gather(src, expected_src, count, stream);
        free(expected_src);

        size_t bytes = (size_t) (dst->extent * (count + 1));
        uint8_t *buf = mt_malloc(bytes);
        memset(buf, SENTINEL, bytes);
        if (nonblocking) {
            MPI_Request request;
            MT_CALL(MPI_Irecv(buf, count, dst->type, sender, tag, MPI_COMM_WORLD, &request));
            MT_CALL(MPI_Wait(&request, &status));
        } else if (MATCHED_PROBE == mode) {
            MPI_Message message;
            MT_CALL(MPI_Mprobe(sender, tag, MPI_COMM_WORLD, &message, &status));
            MT_CALL(MPI_Mrecv(buf, count, dst->type, &message, &status));
        } else {
            MT_CALL(MPI_Recv(buf, count, dst->type, sender, tag, MPI_COMM_WORLD, &status));
        }
        MT_CHECK_STATUS(&status, sender, tag, dst->type, count, what);
        check_scatter(dst, buf, count, stream, what);
        free(buf);
    }
    free(stream);
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "datatypes", MPI_THREAD_SINGLE);
    mt_require_size(2);
    build_layouts();

    /* (from, to) pairs with equal type signatures */
    static const int pairs[][2] = {
        {VECTOR, PACKED_INTS},   {PACKED_INTS, VECTOR},   {VECTOR, VECTOR},
        {INDEXED, PACKED_INTS},  {PACKED_INTS, INDEXED},  {INDEXED, INDEXED},
        {RECORD, PACKED_RECORD}, {PACKED_RECORD, RECORD}, {RECORD, RECORD},
        {VECTOR, INDEXED},       {INDEXED, VECTOR},
        {WIDE, PACKED_WIDE},     {PACKED_WIDE, WIDE},     {WIDE, WIDE},
    };
    /* few hundred bytes; around 64 KiB; more than 1 MiB of packed data */
    static const int counts[] = {1, 7, 1500, 30000, 100000};
    int tag = 1;
    for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); ++p) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
            if (packed_size(&layouts[pairs[p][0]]) * counts[c] > (8 << 20)) {
                continue; /* at most 8 MiB of data per message */
            }
            for (int sender = 0; sender < 2; ++sender) {
                transfer(pairs[p][0], pairs[p][1], counts[c], sender, tag, tag % 3);
                ++tag;
            }
        }
    }
    for (int l = 0; l < NUM_LAYOUTS; ++l) {
        MPI_Type_free(&layouts[l].type);
    }
    return mt_finish();
}
