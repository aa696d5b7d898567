/*
 * mt_stress: many threads per process sending and receiving at once (np 2,
 * MPI_THREAD_MULTIPLE; 64 threads by default, `--threads=N` or MPIV_TEST_THREADS to change).
 *
 * Stream phase: thread t of each rank exchanges a stream of messages with thread t of the
 * other rank.  Tag, size and communicator of message i follow from a hash of (sender rank, t,
 * i), so both sides know them: sizes 0..64 KiB, one in 32 is 1 MiB; usually a tag from t's own
 * range on MPI_COMM_WORLD (all threads share it), sometimes any tag on t's private duplicate of
 * MPI_COMM_WORLD.  The receiver keeps a window of receives posted ahead, chosen at random among
 * (peer, tag), (ANY_SOURCE, tag) and, on the private communicator, (ANY_SOURCE, ANY_TAG) and
 * (peer, ANY_TAG); sends are MPI_Send, MPI_Isend or MPI_Issend at random.  Message i must be
 * the i-th received in that stream (status tag and count, payload pattern of i): this checks
 * order per (sender thread, tag) with wildcards in the mix.
 *
 * Wild phase: every thread sends messages with random tags and sizes on one shared
 * communicator and receives the same number with (ANY_SOURCE, ANY_TAG); any thread may get any
 * message.  Each message carries (sender rank, thread, sequence number, tag, size) in a
 * header; the receiver checks it against the status and the payload, and at the end every
 * message must have been received exactly once.
 *
 * Iterations per thread: `--iters=N`, MPIV_TEST_ITERS or 100 x MPIV_TEST_TIME_MULTIPLIER.
 */
#include "mpi_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_THREADS     256
#define TAGS_PER_THREAD 16
#define WINDOW          4           /* receives posted ahead per stream */
#define SMALL_MAX       (64 * 1024) /* random sizes are 0..SMALL_MAX */
#define LARGE_BYTES     (1 << 20)   /* one in LARGE_ONE_IN stream messages */
#define LARGE_ONE_IN    32
#define WILD_PER_THREAD 8
#define WILD_TAGS       100

typedef struct {
    int tag;
    int on_private; /* on the thread's private communicator, else MPI_COMM_WORLD */
    size_t bytes;
} stream_message_t;

typedef struct {
    int sender_rank, thread, seq, tag, bytes;
} wild_header_t;

static int num_threads = 64;
static long iterations;
static int peer;
static MPI_Comm private_comms[MAX_THREADS]; /* one per thread index, same on both ranks */
static MPI_Comm wild_comm;
/* wild phase: receipts[thread * WILD_PER_THREAD + seq] counts receipts of the peer's messages */
static atomic_int *receipts;

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

static stream_message_t stream_message(int sender_rank, int thread, long i)
{
    uint64_t h = hash4(1, (uint64_t) sender_rank, (uint64_t) thread, (uint64_t) i);
    stream_message_t m;
    m.on_private = (0 == h % 8);
    m.tag = m.on_private ? (int) ((h >> 8) % 1000)
                         : thread * TAGS_PER_THREAD + (int) ((h >> 8) % TAGS_PER_THREAD);
    m.bytes = (0 == (h >> 20) % LARGE_ONE_IN) ? LARGE_BYTES
                                              : (size_t) ((h >> 32) % (SMALL_MAX + 1));
    return m;
}

static uint32_t stream_seed(int sender_rank, int thread, long i)
{
    return (uint32_t) hash4(2, (uint64_t) sender_rank, (uint64_t) thread, (uint64_t) i);
}

/* A receive posted ahead in a stream. */
typedef struct {
    long index; /* message number it must get */
    uint8_t *buf;
    MPI_Request request;
    int source, tag; /* as posted */
} stream_recv_t;

static void post_stream_recv(stream_recv_t *r, int thread, long index, uint64_t *rng)
{
    stream_message_t m = stream_message(peer, thread, index);
    MPI_Comm comm = m.on_private ? private_comms[thread] : MPI_COMM_WORLD;
    *rng = mix(*rng);
    const int choice = (int) (*rng % 4);
    r->index = index;
    r->buf = mt_malloc(m.bytes);
    r->source = (0 == choice % 2) ? peer : MPI_ANY_SOURCE;
    r->tag = (m.on_private && choice >= 2) ? MPI_ANY_TAG : m.tag;
    MT_CALL(MPI_Irecv(r->buf, (int) m.bytes, MPI_BYTE, r->source, r->tag, comm, &r->request));
}

static void check_stream_recv(stream_recv_t *r, int thread)
{
    MPI_Status status;
    stream_message_t m = stream_message(peer, thread, r->index);
    char what[200];
    MT_CALL(MPI_Wait(&r->request, &status));
    snprintf(what, sizeof(what),
             "thread %d stream message %ld (%zu bytes, tag %d, %s) received with (source %d, "
             "tag %d)",
             thread, r->index, m.bytes, m.tag, m.on_private ? "private comm" : "world", r->source,
             r->tag);
    MT_CHECK_STATUS(&status, peer, m.tag, MPI_BYTE, (int) m.bytes, what);
    MT_VERIFY(r->buf, m.bytes, stream_seed(peer, thread, r->index), what);
    free(r->buf);
    r->buf = NULL;
}

static void stream_phase(int thread)
{
    uint64_t rng = hash4(3, (uint64_t) mt_rank, (uint64_t) thread, 0);
    stream_recv_t window[WINDOW];
    uint8_t *send_buf = mt_malloc(LARGE_BYTES);
    for (long i = 0; i < WINDOW && i < iterations; ++i) {
        post_stream_recv(&window[i], thread, i, &rng);
    }
    for (long i = 0; i < iterations; ++i) {
        stream_message_t m = stream_message(mt_rank, thread, i);
        MPI_Comm comm = m.on_private ? private_comms[thread] : MPI_COMM_WORLD;
        mt_fill(send_buf, m.bytes, stream_seed(mt_rank, thread, i));
        rng = mix(rng);
        switch (rng % 4) {
        case 0:
        case 1:
            MT_CALL(MPI_Send(send_buf, (int) m.bytes, MPI_BYTE, peer, m.tag, comm));
            break;
        default: {
            MPI_Request request;
            if (2 == rng % 4) {
                MT_CALL(MPI_Isend(send_buf, (int) m.bytes, MPI_BYTE, peer, m.tag, comm, &request));
            } else {
                MT_CALL(MPI_Issend(send_buf, (int) m.bytes, MPI_BYTE, peer, m.tag, comm, &request));
            }
            MT_CALL(MPI_Wait(&request, MPI_STATUS_IGNORE));
        } break;
        }
        stream_recv_t *r = &window[i % WINDOW];
        check_stream_recv(r, thread);
        if (i + WINDOW < iterations) {
            post_stream_recv(r, thread, i + WINDOW, &rng);
        }
    }
    free(send_buf);
}

static void wild_phase(int thread)
{
    uint8_t *send_buf = mt_malloc(SMALL_MAX), *recv_buf = mt_malloc(SMALL_MAX);
    for (int seq = 0; seq < WILD_PER_THREAD; ++seq) {
        uint64_t h = hash4(4, (uint64_t) mt_rank, (uint64_t) thread, (uint64_t) seq);
        wild_header_t header = {mt_rank, thread, seq, (int) (h % WILD_TAGS),
                                (int) (sizeof(wild_header_t) +
                                       (h >> 16) % (SMALL_MAX - sizeof(wild_header_t) + 1))};
        mt_fill(send_buf, (size_t) header.bytes, (uint32_t) h);
        memcpy(send_buf, &header, sizeof(header));
        MPI_Request requests[2];
        MPI_Status statuses[2];
        MT_CALL(MPI_Irecv(recv_buf, SMALL_MAX, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, wild_comm,
                          &requests[0]));
        MT_CALL(
            MPI_Isend(send_buf, header.bytes, MPI_BYTE, peer, header.tag, wild_comm, &requests[1]));
        MT_CALL(MPI_Waitall(2, requests, statuses));

        wild_header_t got;
        int count = -1;
        MPI_Get_count(&statuses[0], MPI_BYTE, &count);
        MT_CHECK(count >= (int) sizeof(got), "wild message of %d bytes is too short", count);
        memcpy(&got, recv_buf, sizeof(got));
        MT_EXPECT_EQ("wild message: header sender rank", peer, got.sender_rank);
        MT_EXPECT_EQ("wild message: status.MPI_SOURCE", peer, statuses[0].MPI_SOURCE);
        MT_EXPECT_EQ("wild message: status.MPI_TAG vs header", got.tag, statuses[0].MPI_TAG);
        MT_EXPECT_EQ("wild message: count vs header", got.bytes, count);
        MT_CHECK(got.thread >= 0 && got.thread < num_threads && got.seq >= 0 &&
                     got.seq < WILD_PER_THREAD,
                 "wild message: bad header thread %d seq %d", got.thread, got.seq);
        uint64_t sender_h = hash4(4, (uint64_t) peer, (uint64_t) got.thread, (uint64_t) got.seq);
        MT_EXPECT_EQ("wild message: tag", (int) (sender_h % WILD_TAGS), got.tag);
        mt_fill(recv_buf, sizeof(got), (uint32_t) sender_h); /* header checked; restore pattern */
        char what[100];
        snprintf(what, sizeof(what), "wild message %d of sender thread %d", got.seq, got.thread);
        MT_VERIFY(recv_buf, (size_t) count, (uint32_t) sender_h, what);
        int before = atomic_fetch_add_explicit(&receipts[got.thread * WILD_PER_THREAD + got.seq], 1,
                                               memory_order_relaxed);
        MT_CHECK(0 == before, "%s was received twice", what);
    }
    free(send_buf);
    free(recv_buf);
}

static void *thread_main(void *arg)
{
    const int thread = (int) (intptr_t) arg;
    stream_phase(thread);
    wild_phase(thread);
    return NULL;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv, "mt_stress", MPI_THREAD_MULTIPLE);
    MT_CHECK(2 == mt_size, "this test runs on exactly 2 processes, got %d", mt_size);
    iterations = mt_iterations(argc, argv, 100);
    num_threads = (int) mt_env_long("MPIV_TEST_THREADS", 64);
    for (int i = 1; i < argc; ++i) {
        if (0 == strncmp(argv[i], "--threads=", 10)) {
            num_threads = atoi(argv[i] + 10);
        }
    }
    MT_CHECK(num_threads > 0 && num_threads <= MAX_THREADS, "1..%d threads, got %d", MAX_THREADS,
             num_threads);
    peer = 1 - mt_rank;
    /* well above the default run time; longer runs (more iterations) get more */
    mt_watchdog_start((unsigned) (90 + 90 * iterations / 100));

    for (int t = 0; t < num_threads; ++t) {
        MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &private_comms[t]));
    }
    MT_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &wild_comm));
    receipts = mt_malloc(sizeof(atomic_int) * (size_t) (num_threads * WILD_PER_THREAD));
    for (int k = 0; k < num_threads * WILD_PER_THREAD; ++k) {
        atomic_init(&receipts[k], 0);
    }

    const double start = mt_now();
    pthread_t threads[MAX_THREADS];
    for (int t = 0; t < num_threads; ++t) {
        MT_CHECK(0 == pthread_create(&threads[t], NULL, thread_main, (void *) (intptr_t) t),
                 "pthread_create of thread %d", t);
    }
    for (int t = 0; t < num_threads; ++t) {
        pthread_join(threads[t], NULL);
    }
    const double seconds = mt_now() - start;
    alarm(0);

    for (int k = 0; k < num_threads * WILD_PER_THREAD; ++k) {
        MT_CHECK(1 == atomic_load_explicit(&receipts[k], memory_order_relaxed),
                 "wild message %d of sender thread %d received %d times", k % WILD_PER_THREAD,
                 k / WILD_PER_THREAD, atomic_load_explicit(&receipts[k], memory_order_relaxed));
    }
    if (0 == mt_rank) {
        printf("mt_stress: %d threads x %ld stream + %d wild messages each way in %.2f s\n",
               num_threads, iterations, WILD_PER_THREAD, seconds);
    }
    for (int t = 0; t < num_threads; ++t) {
        MPI_Comm_free(&private_comms[t]);
    }
    MPI_Comm_free(&wild_comm);
    free(receipts);
    return mt_finish();
}
