/*
 * probe.h: what the machine probes without MPI (line_rtt, mem_lat) share: a monotonic
 * clock in ns, the report of a set of timed batches (median, min, max), and option
 * parsing that exits with status 2 and a message naming the option on a bad value.
 */
#ifndef MPIV_BENCH_PROBE_H
#define MPIV_BENCH_PROBE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double probe_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e9 + (double) ts.tv_nsec;
}

static inline int probe_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

/* Sort the @p batches times in @p ns and print "NAME=MEDIAN min=MIN max=MAX TAIL". */
static inline void probe_report(const char *name, double *ns, long batches, const char *tail)
{
    qsort(ns, (size_t) batches, sizeof ns[0], probe_cmp_double);
    printf("%s=%.1f min=%.1f max=%.1f %s\n", name, ns[batches / 2], ns[0], ns[batches - 1],
           tail);
}

/* The integer value of option @p name, in lo..hi; otherwise a message and exit(2). */
static inline long probe_parse(const char *prog, const char *name, const char *text, long lo,
                               long hi)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s needs an integer in %ld..%ld, not '%s'\n", prog, name, lo, hi,
                text);
        exit(2);
    }
    return v;
}

#endif
