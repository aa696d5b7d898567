/*
 * mem_lat: what memory costs once a working set outgrows the last-level cache (no MPI).
 * It bounds ult_pingpong with tens of thousands of ULTs per process, where every round
 * trip resumes a ULT whose stack, request and matching entry were last touched tens of
 * thousands of round trips ago (bench/README.md, "The million-ULT run: what limits it").
 *
 * Two measurements, each the median of --batches timed batches (with min and max):
 * - chase (the default): dependent loads, each naming the next, over a random cycle
 *   through every cache line of --mib MiB. One load costs the full memory latency: this
 *   is the price of each miss a program cannot overlap with another.
 *   Prints "mem_lat_ns=MEDIAN min=MIN max=MAX mib=N".
 * - footprint (-u ULTS): ULTS regions of --stack bytes, like ULT stacks; a visit reads and
 *   writes --lines consecutive cache lines at the top of one region, the regions visited
 *   in a random order. The lines of one visit are independent, so the processor overlaps
 *   their misses: this is the cost of a ULT's footprint when nothing serializes it.
 *   Prints "visit_ns=MEDIAN min=MIN max=MAX ults=U lines=L stack=S".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "probe.h"

enum { LINE = 64, MAX_BATCHES = 101 };

/* xorshift64*: a fixed, portable sequence (the measurement must not depend on libc's rand) */
static uint64_t next_random(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* A random permutation of 0..n-1 (Fisher-Yates). */
static uint32_t *shuffled(size_t n)
{
    uint32_t *p = malloc(n * sizeof *p);
    if (p == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n; ++i) {
        p[i] = (uint32_t) i;
    }
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (size_t i = n - 1; i > 0; --i) {
        const size_t j = (size_t) (next_random(&s) % (i + 1));
        const uint32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

static void *map(size_t bytes)
{
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "mem_lat: cannot map %zu bytes: %s\n", bytes, strerror(errno));
        exit(1);
    }
    return m;
}

static void chase(long mib, long loads, long batches)
{
    const size_t lines = (size_t) mib * 1024 * 1024 / LINE;
    char *m = map(lines * LINE);
    uint32_t *order = shuffled(lines);
    if (order == NULL) {
        fprintf(stderr, "mem_lat: no memory for the order of %zu lines\n", lines);
        exit(1);
    }
    for (size_t i = 0; i < lines; ++i) { /* one cycle through every line */
        *(char **) (m + (size_t) order[i] * LINE) = m + (size_t) order[(i + 1) % lines] * LINE;
    }
    free(order);
    double ns[MAX_BATCHES];
    char *volatile *p = (char *volatile *) m;
    for (long k = 0; k < batches; ++k) {
        const double t0 = probe_now_ns();
        for (long j = 0; j < loads; ++j) {
            p = (char *volatile *) *p;
        }
        ns[k] = (probe_now_ns() - t0) / (double) loads;
    }
    char tail[64];
    snprintf(tail, sizeof tail, "mib=%ld", mib);
    probe_report("mem_lat_ns", ns, batches, tail);
}

static void footprint(long ults, long lines, long stack, long batches)
{
    char *m = map((size_t) ults * (size_t) stack);
    uint32_t *order = shuffled((size_t) ults);
    if (order == NULL) {
        fprintf(stderr, "mem_lat: no memory for the order of %ld regions\n", ults);
        exit(1);
    }
    const size_t first = (size_t) (stack - lines * LINE); /* the top of each region */
    for (long u = 0; u < ults; ++u) {
        memset(m + (size_t) u * (size_t) stack + first, 1, (size_t) (lines * LINE));
    }
    double ns[MAX_BATCHES];
    uint64_t sum = 0;
    for (long k = 0; k < batches; ++k) {
        const double t0 = probe_now_ns();
        for (long u = 0; u < ults; ++u) {
            volatile uint64_t *w = (volatile uint64_t *) (m + (size_t) order[u] * (size_t) stack + first);
            for (long l = 0; l < lines; ++l) {
                sum += w[l * (LINE / 8)];
                w[l * (LINE / 8) + 1] = sum;
            }
        }
        ns[k] = (probe_now_ns() - t0) / (double) ults;
    }
    free(order);
    char tail[96];
    snprintf(tail, sizeof tail, "ults=%ld lines=%ld stack=%ld", ults, lines, stack);
    probe_report("visit_ns", ns, batches, tail);
}

int main(int argc, char **argv)
{
    long mib = 512, loads = 2000000, batches = 5, ults = 0, lines = 40, stack = 16384;
    for (int i = 1; i < argc; ++i) {
        const char *opt = argv[i];
        if (0 == strcmp(opt, "-h") || 0 == strcmp(opt, "--help")) {
            printf("usage: mem_lat [-m MIB] [-n LOADS] [-k BATCHES]\n"
                   "       mem_lat -u ULTS [-l LINES] [-s STACK] [-k BATCHES]\n"
                   "Dependent loads over a random cycle through the lines of MIB (default 512)\n"
                   "MiB: BATCHES (default 5, at most %d) batches of LOADS (default 2000000);\n"
                   "prints mem_lat_ns=MEDIAN min=MIN max=MAX mib=MIB.\n"
                   "With -u: ULTS regions of STACK bytes (default 16384), each visit reading\n"
                   "and writing LINES (default 40) lines at the top of one region, regions in\n"
                   "a random order, BATCHES passes; prints visit_ns=MEDIAN min=MIN max=MAX.\n",
                   MAX_BATCHES);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mem_lat: %s needs a value (see --help)\n", opt);
            return 2;
        }
        const char *val = argv[++i];
        if (0 == strcmp(opt, "-m")) {
            mib = probe_parse("mem_lat", "-m", val, 1, 65536);
        } else if (0 == strcmp(opt, "-n")) {
            loads = probe_parse("mem_lat", "-n", val, 1, 1000000000);
        } else if (0 == strcmp(opt, "-k")) {
            batches = probe_parse("mem_lat", "-k", val, 1, MAX_BATCHES);
        } else if (0 == strcmp(opt, "-u")) {
            ults = probe_parse("mem_lat", "-u", val, 1, 1 << 22);
        } else if (0 == strcmp(opt, "-l")) {
            lines = probe_parse("mem_lat", "-l", val, 1, 1 << 16);
        } else if (0 == strcmp(opt, "-s")) {
            stack = probe_parse("mem_lat", "-s", val, LINE, 1 << 26);
        } else {
            fprintf(stderr, "mem_lat: unknown option '%s' (see --help)\n", opt);
            return 2;
        }
    }
    if (ults == 0) {
        chase(mib, loads, batches);
        return 0;
    }
    if (lines * LINE > stack) {
        fprintf(stderr, "mem_lat: -l %ld lines (%ld bytes) do not fit in -s %ld bytes\n", lines,
                lines * LINE, stack);
        return 2;
    }
    footprint(ults, lines, stack, batches);
    return 0;
}
