/*
 * rogue: a process that writes a forged message into a peer's shared-memory queue must not
 * make the peer use it; the peer names the writer and ends the job (np 2, pml mpiv only;
 * run by rogue.sh, which checks the message).
 *
 * Rank 0 sends its pid to rank 1 and then waits in MPI_Recv for a message that never
 * comes. Rank 1 finds rank 0's mpiv segment (/proc/<pid>/fd: the memory file
 * "mpiv-shm"), maps it and pushes one message into its first queue the way a sender does:
 * a FIN whose token names no send of rank 0 (before the token table, rank 0 would have
 * taken it for the address of its send and written through it). It prints EXPECTED-ABORT
 * and waits in MPI_Recv too. Rank 0 must report "process 1 ... wrote invalid data into
 * shared memory" and end the job.
 *
 * The layout below is mpiv's, as written by endpoints/engine.cpp (segment_header) and
 * endpoints/shm/mpsc_queue.hpp (queue_header, slots); a layout this test does not know
 * fails it with a message.
 */
#include "mpi_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define SEGMENT_MAGIC 0x6d70697673656702ull /* "mpivseg" + version 2 */
#define QUEUE_MAGIC   0x6d7069766d735104ull /* "mpivmsq" + layout version */
#define WIRE_FIN      5

struct wire { /* endpoints/engine.hpp: the 56-byte queue message header */
    uint8_t kind, flags;
    uint16_t cid;
    uint32_t from;
    int32_t source, tag;
    uint32_t seq;
    uint16_t inline_bytes, dst_ep;
    uint64_t size, where, token, spare;
};

/* Maps the peer's memory file named mpiv-shm; returns its base and size. */
static unsigned char *map_segment(long pid, size_t *bytes)
{
    char dir[64], path[512], target[512];
    struct dirent *e;
    DIR *d;
    snprintf(dir, sizeof(dir), "/proc/%ld/fd", pid);
    d = opendir(dir);
    MT_CHECK(NULL != d, "cannot list %s", dir);
    while (NULL != (e = readdir(d))) {
        ssize_t n;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        n = readlink(path, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            if (0 == strncmp(target, "/memfd:mpiv-shm", 15)) {
                struct stat st;
                void *base;
                const int fd = open(path, O_RDWR);
                MT_CHECK(fd >= 0 && 0 == fstat(fd, &st), "cannot open %s", path);
                base = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                MT_CHECK(MAP_FAILED != base, "cannot map %s", path);
                close(fd);
                closedir(d);
                *bytes = (size_t) st.st_size;
                return (unsigned char *) base;
            }
        }
    }
    closedir(d);
    MT_FAIL("no mpiv-shm memory file in %s (is pml mpiv selected?)", dir);
}

static void push_forged_fin(unsigned char *seg, size_t bytes)
{
    uint64_t magic, queue_offset, pos;
    unsigned char *q;
    uint32_t capacity;
    struct wire w;
    memcpy(&magic, seg, sizeof(magic));
    MT_CHECK(SEGMENT_MAGIC == magic, "not an mpiv segment of the known layout");
    memcpy(&queue_offset, seg + 24, sizeof(queue_offset));
    MT_CHECK(queue_offset + 4096 <= bytes, "queue offset %llu of %zu bytes", (unsigned long long) queue_offset, bytes);
    q = seg + queue_offset;
    memcpy(&magic, q, sizeof(magic));
    MT_CHECK(QUEUE_MAGIC == magic, "not an mpiv queue of the known layout");
    memcpy(&capacity, q + 8, sizeof(capacity));
    uint64_t *tail = (uint64_t *) (q + 128);
    const uint64_t *head = (const uint64_t *) (q + 256);
    pos = __atomic_load_n(tail, __ATOMIC_RELAXED);
    do {
        MT_CHECK(pos - __atomic_load_n(head, __ATOMIC_ACQUIRE) < capacity, "the queue is full");
    } while (!__atomic_compare_exchange_n(tail, &pos, pos + 1, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    memset(&w, 0, sizeof(w));
    w.kind = WIRE_FIN;
    w.from = 1;
    w.token = 0x7f00deadbeef0ull; /* an address-looking value: no send of rank 0 */
    unsigned char *slot = q + 384 + (pos & (capacity - 1)) * 64;
    memcpy(slot + 8, &w, sizeof(w));
    __atomic_store_n((uint64_t *) slot, pos + 1, __ATOMIC_RELEASE); /* one slot: count 0 */
}

int main(int argc, char **argv)
{
    long pid = (long) getpid();
    int never = 0;
    mt_init(&argc, &argv, "rogue", MPI_THREAD_SINGLE);
    mt_require_size(2);
    if (0 == mt_rank) {
        MT_CALL(MPI_Send(&pid, 1, MPI_LONG, 1, 1, MPI_COMM_WORLD));
    } else if (1 == mt_rank) {
        size_t bytes = 0;
        unsigned char *seg;
        MT_CALL(MPI_Recv(&pid, 1, MPI_LONG, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        seg = map_segment(pid, &bytes);
        push_forged_fin(seg, bytes);
        printf("EXPECTED-ABORT\n");
        fflush(stdout);
    }
    if (mt_rank < 2) {
        MT_CALL(MPI_Recv(&never, 1, MPI_INT, 1 - mt_rank, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        fprintf(stderr, "[rogue rank %d] FAIL: MPI_Recv returned although nothing was sent\n",
                mt_rank);
        _exit(0);
    }
    return mt_finish();
}
