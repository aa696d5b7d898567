/*
 * line_rtt: the round trip of one cache line between two processing units, the hardware
 * floor under every shared-memory ping-pong (no MPI). Two threads, pinned to PUs A and B,
 * take turns writing a counter into one 64-byte line and waiting to read the other's
 * value; each of --batches batches of --iters round trips is timed, and the median batch
 * is printed as "line_rtt_ns=N" (with min and max).
 *
 * Why bench/compare runs it: on a virtual machine the host may place the two virtual CPUs
 * near each other or far apart, and move them while a run goes on. Here the line round
 * trip was 119 ns in one hour and 530 ns in the next, and every ping-pong figure moved
 * with it (bench/README.md, "Reading the numbers"). The probe names the state a run met.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

enum { MAX_BATCHES = 101 };

struct line {
    _Alignas(128) atomic_uint_fast64_t ping; /* written by the timing thread */
    _Alignas(128) atomic_uint_fast64_t pong; /* written by the echo thread */
};

static struct line shared;

struct echo_arg {
    int pu;
    uint64_t total;
    int error; /* errno of a failed pinning, or 0 */
};

static int pin(int pu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *echo(void *raw)
{
    struct echo_arg *arg = raw;
    arg->error = pin(arg->pu);
    /* Even when pinning failed: the timing thread reads the error only after the run, and
     * it needs its partner either way. */
    for (uint64_t i = 1; i <= arg->total; ++i) {
        /* acquire: pairs with the timing thread's release store of i */
        while (atomic_load_explicit(&shared.ping, memory_order_acquire) != i) {
        }
        /* release: pairs with the timing thread's acquire load */
        atomic_store_explicit(&shared.pong, i, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long pu_a = 0, pu_b = 1, iters = 20000, batches = 11;
    for (int i = 1; i < argc; ++i) {
        const char *opt = argv[i];
        if (0 == strcmp(opt, "-h") || 0 == strcmp(opt, "--help")) {
            printf("usage: line_rtt [-a PU] [-b PU] [-n ITERS] [-k BATCHES]\n"
                   "Round trip of one cache line between PUs A (default 0) and B (default 1):\n"
                   "BATCHES (default 11, at most %d) batches of ITERS (default 20000) round\n"
                   "trips; prints line_rtt_ns=MEDIAN min=MIN max=MAX over the batches.\n",
                   MAX_BATCHES);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "line_rtt: %s needs a value (see --help)\n", opt);
            return 2;
        }
        const char *val = argv[++i];
        if (0 == strcmp(opt, "-a")) {
            pu_a = probe_parse("line_rtt", "-a", val, 0, CPU_SETSIZE - 1);
        } else if (0 == strcmp(opt, "-b")) {
            pu_b = probe_parse("line_rtt", "-b", val, 0, CPU_SETSIZE - 1);
        } else if (0 == strcmp(opt, "-n")) {
            iters = probe_parse("line_rtt", "-n", val, 1, 100000000);
        } else if (0 == strcmp(opt, "-k")) {
            batches = probe_parse("line_rtt", "-k", val, 1, MAX_BATCHES);
        } else {
            fprintf(stderr, "line_rtt: unknown option '%s' (see --help)\n", opt);
            return 2;
        }
    }
    if (pu_a == pu_b) {
        fprintf(stderr, "line_rtt: -a and -b must name two different PUs (both are %ld)\n", pu_a);
        return 2;
    }
    /* Both PUs must be ones this process may run on: otherwise the echo thread would run
     * wherever the kernel puts it, possibly on A, and each round trip would wait for a
     * time slice. */
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        fprintf(stderr, "line_rtt: cannot read this process's PUs: %s\n", strerror(errno));
        return 1;
    }
    if (!CPU_ISSET((int) pu_a, &allowed) || !CPU_ISSET((int) pu_b, &allowed)) {
        fprintf(stderr, "line_rtt: PU %ld or %ld is not one this process may run on\n", pu_a,
                pu_b);
        return 1;
    }
    int rc = pin((int) pu_a);
    if (rc != 0) {
        fprintf(stderr, "line_rtt: cannot run on PU %ld: %s\n", pu_a, strerror(rc));
        return 1;
    }
    struct echo_arg arg = {.pu = (int) pu_b, .total = (uint64_t) iters * (uint64_t) batches};
    pthread_t t;
    rc = pthread_create(&t, NULL, echo, &arg);
    if (rc != 0) {
        fprintf(stderr, "line_rtt: cannot start the echo thread: %s\n", strerror(rc));
        return 1;
    }
    double ns[MAX_BATCHES];
    uint64_t i = 0;
    for (long k = 0; k < batches; ++k) {
        const double t0 = probe_now_ns();
        for (long j = 0; j < iters; ++j) {
            ++i;
            /* release: pairs with the echo thread's acquire load */
            atomic_store_explicit(&shared.ping, i, memory_order_release);
            /* acquire: pairs with the echo thread's release store of i */
            while (atomic_load_explicit(&shared.pong, memory_order_acquire) != i) {
            }
        }
        ns[k] = (probe_now_ns() - t0) / (double) iters;
    }
    pthread_join(t, NULL);
    if (arg.error != 0) {
        fprintf(stderr, "line_rtt: cannot run on PU %ld: %s\n", pu_b, strerror(arg.error));
        return 1;
    }
    char tail[48];
    snprintf(tail, sizeof tail, "pus=%ld,%ld", pu_a, pu_b);
    probe_report("line_rtt_ns", ns, batches, tail);
    return 0;
}
