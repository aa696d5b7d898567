/*
 * wildcards: MPI_ANY_SOURCE / MPI_ANY_TAG matching and ordering (np >= 3, run with 4).
 *
 * Part 1, non-overtaking: every rank > 0 sends rank 0 a stream of messages (tags 10..12 in
 * turn, mostly small, every 7th one 100 KiB so eager and rendezvous messages interleave; the
 * header of each message holds sender and sequence number).  Rank 0 receives the streams three
 * times: with (ANY_SOURCE, ANY_TAG), with (ANY_SOURCE, tag) tag by tag, and with
 * (source, ANY_TAG) source by source.  Messages from one sender must arrive in send order
 * (per tag where the tag is fixed); every message exactly once, payload intact.
 *
 * Part 2, earliest posted receive wins: rank 0 posts a mix of specific and wildcard receives,
 * then tells a sender (on a separate control communicator) to send; the first message must go
 * to the earliest posted receive that matches it:
 *   (ANY_SOURCE, T) then (1, T)           <- 1 sends m0, m1: m0 -> first, m1 -> second
 *   (1, T) then (ANY_SOURCE, T)           <- same, specific first
 *   (1, ANY_TAG) then (1, T)              <- 1 sends tag T twice
 *   (ANY, ANY), (2, T), (ANY_SOURCE, T)   <- 2 sends m0, m1 (checked), then 3 sends m2
 * and the same with rank 1's / rank 2's messages sent before the receives are posted
 * (unexpected queue).
 */
#include "mpi_test.h"

#define STREAM_LENGTH 60
#define BIG_BYTES     (100 * 1024)
#define HEADER_INTS   3 /* sender, sequence number, tag */

static MPI_Comm control_comm; /* "go" messages, never seen by the receives under test */

static size_t stream_bytes(int seq)
{
    return (0 == seq % 7) ? BIG_BYTES : (size_t) (HEADER_INTS * sizeof(int) + (seq * 37) % 200);
}

static int stream_tag(int seq) { return 10 + seq % 3; }

static uint32_t stream_seed(int sender, int seq) { return (uint32_t) (sender * 100000 + seq); }

/* Senders: the whole stream with MPI_Isend (rank 0 receives it out of tag order), once rank 0
 * says "go": a stream must not mix with the previous one in rank 0's wildcard receives. */
static void send_stream(void)
{
    MPI_Request requests[STREAM_LENGTH];
    uint8_t *buffers[STREAM_LENGTH];
    MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 0, 2, control_comm, MPI_STATUS_IGNORE));
    for (int seq = 0; seq < STREAM_LENGTH; ++seq) {
        size_t bytes = stream_bytes(seq);
        buffers[seq] = mt_malloc(bytes);
        mt_fill(buffers[seq], bytes, stream_seed(mt_rank, seq));
        int header[HEADER_INTS] = {mt_rank, seq, stream_tag(seq)};
        memcpy(buffers[seq], header, sizeof(header));
        MT_CALL(MPI_Isend(buffers[seq], (int) bytes, MPI_BYTE, 0, stream_tag(seq), MPI_COMM_WORLD,
                          &requests[seq]));
    }
    MT_CALL(MPI_Waitall(STREAM_LENGTH, requests, MPI_STATUSES_IGNORE));
    for (int seq = 0; seq < STREAM_LENGTH; ++seq) {
        free(buffers[seq]);
    }
}

/* Rank 0: one receive; checks the message is the next one expected from its sender. */
static void receive_one(int source, int tag, int *next_seq, int seq_step, uint8_t *buf,
                        const char *mode)
{
    MPI_Status status;
    MT_CALL(MPI_Recv(buf, BIG_BYTES, MPI_BYTE, source, tag, MPI_COMM_WORLD, &status));
    int header[HEADER_INTS], count;
    MPI_Get_count(&status, MPI_BYTE, &count);
    MT_CHECK(count >= (int) sizeof(header), "%s: message of %d bytes is too short", mode, count);
    memcpy(header, buf, sizeof(header));
    const int sender = status.MPI_SOURCE;
    MT_CHECK(sender > 0 && sender < mt_size, "%s: status.MPI_SOURCE %d", mode, sender);
    MT_CHECK(MPI_ANY_SOURCE == source || sender == source, "%s: received from %d with source %d",
             mode, sender, source);
    MT_EXPECT_EQ(mode, sender, header[0]);
    if (header[1] != next_seq[sender]) {
        MT_FAIL("%s: order broken: from rank %d expected sequence number %d (tag %d), got %d "
                "(tag %d)",
                mode, sender, next_seq[sender], stream_tag(next_seq[sender]), header[1], header[2]);
    }
    const int seq = header[1];
    next_seq[sender] += seq_step;
    MT_EXPECT_EQ(mode, stream_tag(seq), status.MPI_TAG);
    MT_EXPECT_EQ(mode, stream_tag(seq), header[2]);
    MT_EXPECT_EQ(mode, stream_bytes(seq), count);
    mt_fill(buf, sizeof(header), stream_seed(sender, seq)); /* header checked; restore pattern */
    MT_VERIFY(buf, (size_t) count, stream_seed(sender, seq), mode);
}

/* Rank 0: lets the senders start their next stream. */
static void start_streams(void)
{
    for (int r = 1; r < mt_size; ++r) {
        MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, r, 2, control_comm));
    }
}

static void part1_non_overtaking(void)
{
    const int senders = mt_size - 1;
    const int total = senders * STREAM_LENGTH;
    int next_seq[64];
    uint8_t *buf = mt_malloc(BIG_BYTES);

    /* (ANY_SOURCE, ANY_TAG) */
    if (0 == mt_rank) {
        start_streams();
        for (int r = 0; r < mt_size; ++r) {
            next_seq[r] = 0;
        }
        for (int i = 0; i < total; ++i) {
            receive_one(MPI_ANY_SOURCE, MPI_ANY_TAG, next_seq, 1, buf, "ANY_SOURCE+ANY_TAG");
        }
    } else {
        send_stream();
    }
    /* (ANY_SOURCE, tag), one tag after the other */
    if (0 == mt_rank) {
        start_streams();
        for (int tag = 10; tag < 13; ++tag) {
            for (int r = 0; r < mt_size; ++r) {
                next_seq[r] = tag - 10;
            }
            for (int i = 0; i < senders * (STREAM_LENGTH / 3); ++i) {
                receive_one(MPI_ANY_SOURCE, tag, next_seq, 3, buf, "ANY_SOURCE+tag");
            }
        }
    } else {
        send_stream();
    }
    /* (source, ANY_TAG), highest rank first */
    if (0 == mt_rank) {
        start_streams();
        for (int r = 0; r < mt_size; ++r) {
            next_seq[r] = 0;
        }
        for (int source = mt_size - 1; source > 0; --source) {
            for (int i = 0; i < STREAM_LENGTH; ++i) {
                receive_one(source, MPI_ANY_TAG, next_seq, 1, buf, "source+ANY_TAG");
            }
        }
    } else {
        send_stream();
    }
    free(buf);
}

/* A receive under test in part 2: what was posted and which message it must get. */
typedef struct {
    int source, tag;               /* as posted (may be wildcards) */
    int expect_source, expect_msg; /* sender and message number it must get */
    int value;                     /* message number received */
    MPI_Request request;
} posted_t;

static void post(posted_t *p, int source, int tag, int expect_source, int expect_msg)
{
    p->source = source;
    p->tag = tag;
    p->expect_source = expect_source;
    p->expect_msg = expect_msg;
    p->value = -1;
    MT_CALL(MPI_Irecv(&p->value, 1, MPI_INT, source, tag, MPI_COMM_WORLD, &p->request));
}

static void check_posted(posted_t *p, int expect_tag, const char *scenario, int index)
{
    MPI_Status status;
    char what[160];
    snprintf(what, sizeof(what), "%s: receive #%d posted as (source %d, tag %d)", scenario, index,
             p->source, p->tag);
    MT_CALL(MPI_Wait(&p->request, &status));
    MT_CHECK_STATUS(&status, p->expect_source, expect_tag, MPI_INT, 1, what);
    if (p->value != p->expect_msg) {
        MT_FAIL("%s: got message m%d, expected m%d (the earliest posted matching receive must "
                "get the earliest message)",
                what, p->value, p->expect_msg);
    }
}

/* Rank `sender` sends `count` ints (first_msg, first_msg+1, ...) with `tag` when told to. */
static void send_on_go(int sender, int first_msg, int count, int tag)
{
    if (mt_rank == 0) {
        MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, sender, 0, control_comm));
    } else if (mt_rank == sender) {
        MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, 0, 0, control_comm, MPI_STATUS_IGNORE));
        for (int m = first_msg; m < first_msg + count; ++m) {
            MT_CALL(MPI_Send(&m, 1, MPI_INT, 0, tag, MPI_COMM_WORLD));
        }
        /* "sent" notice so rank 0 can post after the messages are queued */
        MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, 0, 1, control_comm));
    }
}

static void wait_sent(int sender)
{
    if (0 == mt_rank) {
        MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, sender, 1, control_comm, MPI_STATUS_IGNORE));
    }
}

/* Part 2: `unexpected` = messages sent before the receives are posted. */
static void part2_earliest_posted(int unexpected)
{
    const int T = 42;
    const char *when = unexpected ? "unexpected" : "posted";
    posted_t p[3];
    char scenario[120];

    /* wildcard first, then specific */
    snprintf(scenario, sizeof(scenario), "(ANY_SOURCE,T) then (1,T), %s", when);
    if (unexpected) {
        send_on_go(1, 0, 2, T);
        wait_sent(1);
    }
    if (0 == mt_rank) {
        post(&p[0], MPI_ANY_SOURCE, T, 1, 0);
        post(&p[1], 1, T, 1, 1);
    }
    if (!unexpected) {
        send_on_go(1, 0, 2, T);
        wait_sent(1);
    }
    if (0 == mt_rank) {
        check_posted(&p[0], T, scenario, 0);
        check_posted(&p[1], T, scenario, 1);
    }

    /* specific first, then wildcard */
    snprintf(scenario, sizeof(scenario), "(1,T) then (ANY_SOURCE,T), %s", when);
    if (unexpected) {
        send_on_go(1, 0, 2, T);
        wait_sent(1);
    }
    if (0 == mt_rank) {
        post(&p[0], 1, T, 1, 0);
        post(&p[1], MPI_ANY_SOURCE, T, 1, 1);
    }
    if (!unexpected) {
        send_on_go(1, 0, 2, T);
        wait_sent(1);
    }
    if (0 == mt_rank) {
        check_posted(&p[0], T, scenario, 0);
        check_posted(&p[1], T, scenario, 1);
    }

    /* tag wildcard first, then specific tag */
    snprintf(scenario, sizeof(scenario), "(1,ANY_TAG) then (1,T), %s", when);
    if (unexpected) {
        send_on_go(1, 0, 2, T);
        wait_sent(1);
    }
    if (0 == mt_rank) {
        post(&p[0], 1, MPI_ANY_TAG, 1, 0);
        post(&p[1], 1, T, 1, 1);
    }
    if (!unexpected) {
        send_on_go(1, 0, 2, T);
        wait_sent(1);
    }
    if (0 == mt_rank) {
        check_posted(&p[0], T, scenario, 0);
        check_posted(&p[1], T, scenario, 1);
    }

    /* (ANY,ANY), (2,T), (ANY_SOURCE,T): rank 2's two messages fill the first two, then rank 3
     * (or rank 1 with np 3) sends the message for the last.  Rank 3 sends only after the first
     * two completed: with two senders queued, ANY_SOURCE may pick either. */
    const int third = (mt_size > 3) ? 3 : 1;
    snprintf(scenario, sizeof(scenario), "(ANY,ANY), (2,T), (ANY_SOURCE,T), %s", when);
    if (unexpected) {
        send_on_go(2, 0, 2, T);
        wait_sent(2);
    }
    if (0 == mt_rank) {
        post(&p[0], MPI_ANY_SOURCE, MPI_ANY_TAG, 2, 0);
        post(&p[1], 2, T, 2, 1);
        post(&p[2], MPI_ANY_SOURCE, T, third, 2);
    }
    if (!unexpected) {
        send_on_go(2, 0, 2, T);
        wait_sent(2);
    }
    if (0 == mt_rank) {
        check_posted(&p[0], T, scenario, 0);
        check_posted(&p[1], T, scenario, 1);
    }
    send_on_go(third, 2, 1, T);
    wait_sent(third);
    if (0 == mt_rank) {
        check_posted(&p[2], T, scenario, 2);
    }
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "wildcards", MPI_THREAD_SINGLE);
    mt_require_size(3);
    MT_CHECK(mt_size <= 64, "at most 64 processes, got %d", mt_size);
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &control_comm));

    part1_non_overtaking();
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    part2_earliest_posted(0);
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    part2_earliest_posted(1);

    MPI_Comm_free(&control_comm);
    return mt_finish();
}
