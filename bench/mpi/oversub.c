/*
 * oversub: blocking point-to-point patterns of many single-threaded processes, for nodes
 * with more processes than cores (run with --oversubscribe; the usual -np is 8 for fan
 * and 4 for pairs on a 2-core machine). Unlike the other benchmarks it takes any number of
 * processes.
 * - fan (bench=oversub_fan): rank 0 receives 3 or 4 ints (alternating) from each other rank
 *   in turn with a blocking MPI_Recv, then sends 3 ints to each with MPI_Send; the others
 *   mirror it. Reports rounds per second (rate) and the time of a round (round_us).
 * - pairs (bench=oversub_pairs): rank i and rank i + np/2 form a pair. Every pair runs a
 *   blocking ping-pong over the --sizes sweep at once (OSU multi-pair latency: lat_mean,
 *   half a round trip in us, averaged over the pairs), then streams windows of 64 8-byte
 *   non-blocking messages, one acknowledgement per window (OSU multi-pair message rate:
 *   msg_rate, messages per second of all pairs together).
 * --iters bounds the rounds (fan), the round trips per size (pairs; a tenth above 8 KiB)
 * and the windows (pairs, a tenth of it); --seconds is not used: every process must run
 * the same count.
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static void emit(const char *bench, const char *impl, int np, size_t size, const char *metric,
                 double value, const char *unit, uint64_t ops, double seconds)
{
    struct bench_point pt = {ops, seconds, 0};
    char extra[32];
    snprintf(extra, sizeof extra, "np=%d", np);
    bench_emit(bench, impl, 1, size, metric, value, unit, &pt, extra);
}

static void fan(const char *impl, int rank, int np, long long rounds)
{
    int buf[4] = {1, 2, 3, 4};
    BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
    const uint64_t t0 = bench_now_ns();
    for (long long i = 0; i < rounds; ++i) {
        if (0 == rank) {
            for (int p = 1; p < np; ++p) {
                BENCH_MPI(MPI_Recv(buf, 4, MPI_INT, p, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            }
            for (int p = 1; p < np; ++p) {
                BENCH_MPI(MPI_Send(buf, 3, MPI_INT, p, 999, MPI_COMM_WORLD));
            }
        } else {
            BENCH_MPI(MPI_Send(buf, 3 + (int) (i & 1), MPI_INT, 0, 999, MPI_COMM_WORLD));
            BENCH_MPI(MPI_Recv(buf, 4, MPI_INT, 0, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
    }
    const double s = (double) (bench_now_ns() - t0) * 1e-9;
    if (0 == rank) {
        emit("oversub_fan", impl, np, 12, "rate", (double) rounds / s, "rounds/s",
             (uint64_t) rounds, s);
        emit("oversub_fan", impl, np, 12, "round_us", s * 1e6 / (double) rounds, "us",
             (uint64_t) rounds, s);
    }
}

static void pairs(const struct bench_opts *opts, const char *impl, int rank, int np,
                  long long iters)
{
    const int half = np / 2;
    const int peer = rank < half ? rank + half : rank - half;
    const int leader = rank < half;
    char *buf = bench_alloc(opts->max_size > WINDOW * 8 ? opts->max_size : WINDOW * 8);
    for (int k = 0; k < opts->nsizes; ++k) {
        const size_t n = opts->sizes[k];
        const long long trips = n > 8192 ? (iters + 9) / 10 : iters;
        BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
        const uint64_t t0 = bench_now_ns();
        for (long long i = 0; i < trips; ++i) {
            if (leader) {
                BENCH_MPI(MPI_Send(buf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
                BENCH_MPI(MPI_Recv(buf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE));
            } else {
                BENCH_MPI(MPI_Recv(buf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE));
                BENCH_MPI(MPI_Send(buf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
            }
        }
        /* Half a round trip, averaged over the pairs (leaders' clocks). */
        double half_us = leader ? (double) (bench_now_ns() - t0) * 1e-3 / (2.0 * (double) trips)
                                : 0.0;
        double sum = 0.0;
        BENCH_MPI(MPI_Reduce(&half_us, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
        if (0 == rank) {
            emit("oversub_pairs", impl, np, n, "lat_mean", sum / half, "us", (uint64_t) trips,
                 sum / half * 2.0 * (double) trips * 1e-6);
        }
    }
    const long long windows = (iters + 9) / 10;
    MPI_Request reqs[WINDOW];
    char ack = 0;
    BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
    const uint64_t t0 = bench_now_ns();
    for (long long w = 0; w < windows; ++w) {
        for (int j = 0; j < WINDOW; ++j) {
            if (leader) {
                BENCH_MPI(MPI_Isend(buf, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[j]));
            } else {
                BENCH_MPI(MPI_Irecv(buf + 8 * j, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[j]));
            }
        }
        BENCH_MPI(MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE));
        if (leader) {
            BENCH_MPI(MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            BENCH_MPI(MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD));
        }
    }
    double s = (double) (bench_now_ns() - t0) * 1e-9, slowest = 0.0;
    BENCH_MPI(MPI_Reduce(&s, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    if (0 == rank) {
        const uint64_t msgs = (uint64_t) windows * WINDOW * (uint64_t) half;
        emit("oversub_pairs", impl, np, 8, "msg_rate", (double) msgs / slowest, "msgs/s", msgs,
             slowest);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    struct bench_opts opts;
    const char *pattern = "fan";
    struct bench_extra_opt extra[] = {
        {"pattern", "fan (default) or pairs", &pattern},
    };
    int rank = 0, np = 0, rc;
    bench_parse(argc, argv, "oversub",
                "Blocking patterns of many single-threaded processes (any np; pairs needs an\n"
                "even np). fan: rate (rounds/s) and round_us of rank 0 gathering from and\n"
                "answering every other rank. pairs: lat_mean (us) of np/2 simultaneous\n"
                "ping-pongs over --sizes, then msg_rate (messages/s) of np/2 streams.",
                0, "0:64k", extra, 1, &opts);
    const int is_fan = 0 == strcmp(pattern, "fan");
    if (!is_fan && 0 != strcmp(pattern, "pairs")) {
        fprintf(stderr, "oversub: --pattern is fan or pairs, not '%s'\n", pattern);
        return BENCH_EXIT_USAGE;
    }
    rc = MPI_Init(&argc, &argv);
    if (MPI_SUCCESS != rc) {
        fprintf(stderr, "oversub: MPI_Init failed (error %d)\n", rc);
        return BENCH_EXIT_MPI;
    }
    BENCH_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    BENCH_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    BENCH_MPI(MPI_Comm_size(MPI_COMM_WORLD, &np));
    if (np < 2 || (!is_fan && 0 != np % 2)) {
        if (0 == rank) {
            fprintf(stderr, "oversub: %s needs %s processes, got %d\n", pattern,
                    is_fan ? "2 or more" : "an even number of", np);
        }
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_USAGE);
    }
    const char *impl = bench_impl_label(&opts);
    const long long iters = opts.iters > 0 ? opts.iters : is_fan ? 20000 : 5000;
    if (is_fan) {
        fan(impl, rank, np, iters);
    } else {
        pairs(&opts, impl, rank, np, iters);
    }
    bench_opts_free(&opts);
    BENCH_MPI(MPI_Finalize());
    return EXIT_SUCCESS;
}
