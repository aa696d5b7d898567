/* mpiv ULTs in the MPI benchmarks; see bench_ult.h. */
#include "bench_ult.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_ult_check(int rc, const char *call, const char *file, int line)
{
    if (MPIV_OK == rc) {
        return;
    }
    fprintf(stderr, "%s failed at %s:%d: %s\n", call, file, line,
            mpiv_status_string((mpiv_status_t) rc));
    MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_MPI);
    exit(BENCH_EXIT_MPI);
}

/* ------------------------------------------------------------------ options, start */

void bench_ult_opts_init(struct bench_ult_opts *o, struct bench_extra_opt *extra)
{
    o->workers = "0";
    o->stack_size = "16k";
    extra[0] = (struct bench_extra_opt){
        "workers", "mpiv workers per process (default 0: one per PU of the binding)",
        &o->workers};
    extra[1] = (struct bench_extra_opt){
        "stack-size", "ULT stack bytes, k/M suffixes, >= 16k (default 16k)", &o->stack_size};
    o->scratch_ults = "default";
    extra[2] = (struct bench_extra_opt){
        "scratch-ults",
        "live ULTs per worker from which their engine calls use its scratch stack\n"
        "                      (0: always; default: the runtime's, from the cache size)",
        &o->scratch_ults};
    o->prefetch_ults = "default";
    extra[3] = (struct bench_extra_opt){
        "prefetch-ults",
        "live ULTs per worker from which its scheduler prefetches the next ULTs' stacks\n"
        "                      (0: always; 4294967295: never; default: the runtime's, from the cache size)",
        &o->prefetch_ults};
}

/* A ULT-count threshold option (0..UINT32_MAX or "default"): sets @p bit and *field. */
static void ult_threshold(const char *text, const char *name, const char *prog,
                          mpiv_params_t *params, uint64_t bit, uint32_t *field)
{
    if (0 == strcmp(text, "default")) {
        return;
    }
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if ('\0' != *end || end == text || '-' == text[0] || 0 != errno || v > UINT32_MAX) {
        fprintf(stderr, "%s: --%s needs 0..4294967295 or default, not '%s' (try --help)\n",
                prog, name, text);
        exit(BENCH_EXIT_USAGE);
    }
    params->field_mask |= bit;
    *field = (uint32_t) v;
}

mpiv_params_t bench_ult_params(const struct bench_ult_opts *o, const char *prog,
                               size_t *stack_p)
{
    char *end = NULL;
    long workers = strtol(o->workers, &end, 10);
    if ('\0' != *end || end == o->workers || workers < 0 || workers > 1024) {
        fprintf(stderr, "%s: --workers needs 0..1024, not '%s' (try --help)\n", prog,
                o->workers);
        exit(BENCH_EXIT_USAGE);
    }
    size_t stack = 0;
    if (0 != bench_parse_size(o->stack_size, &stack) || stack < 16 * 1024 ||
        stack > ((size_t) 1 << 30)) {
        fprintf(stderr, "%s: --stack-size needs 16k..1024M, not '%s' (try --help)\n", prog,
                o->stack_size);
        exit(BENCH_EXIT_USAGE);
    }
    mpiv_params_t params;
    memset(&params, 0, sizeof params);
    params.field_mask = MPIV_PARAM_FIELD_STACK_SIZE;
    params.stack_size = stack;
    ult_threshold(o->scratch_ults, "scratch-ults", prog, &params, MPIV_PARAM_FIELD_SCRATCH_ULTS,
                  &params.scratch_ults);
    ult_threshold(o->prefetch_ults, "prefetch-ults", prog, &params,
                  MPIV_PARAM_FIELD_PREFETCH_ULTS, &params.prefetch_ults);
    if (workers > 0) {
        params.field_mask |= MPIV_PARAM_FIELD_NUM_WORKERS;
        params.num_workers = (unsigned) workers;
    }
    *stack_p = stack;
    return params;
}

unsigned bench_ult_start(const mpiv_params_t *params)
{
    unsigned nworkers = 0;
    BENCH_ULT(mpiv_init(params));
    BENCH_ULT(mpiv_num_workers(&nworkers));
    return nworkers;
}

/* ------------------------------------------------------------------ teams */

/*
 * The barrier: a member re-arms its own sync (created at its first barrier, so that it
 * belongs to its ULT: mpiv's fastest wait), counts itself in, and waits on it; the last to
 * count itself in resets the count and signals every other member's sync. A member re-arms
 * only after its previous wait returned, that is after the last signal to it.
 */
struct ult_team {
    bench_thread_fn fn;
    void *arg;
    int nults;
    atomic_int arrived;
    struct ult_member *members;
};

struct ult_member {
    struct bench_team team; /* first: the team that fn gets is the member */
    struct ult_team *shared;
    mpiv_sync_h go;         /* NULL until the member's first barrier */
    int tid;
};

static void member_barrier(struct bench_team *team)
{
    struct ult_member *m = (struct ult_member *) team;
    struct ult_team *t = m->shared;
    if (NULL == m->go) {
        BENCH_ULT(mpiv_sync_create(1, &m->go));
    } else {
        BENCH_ULT(mpiv_sync_reset(m->go, 1));
    }
    /* sync: acq_rel; the last arrival acquires every member's writes before the barrier
     * (its m->go included) and releases them through mpiv_sync_signal to the waiters. */
    if (atomic_fetch_add_explicit(&t->arrived, 1, memory_order_acq_rel) + 1 < t->nults) {
        BENCH_ULT(mpiv_sync_wait(m->go));
        return;
    }
    /* No member counts itself in again before the signals below wake it. */
    atomic_store_explicit(&t->arrived, 0, memory_order_relaxed);
    for (int i = 0; i < t->nults; ++i) {
        if (i != m->tid) {
            BENCH_ULT(mpiv_sync_signal(t->members[i].go));
        }
    }
}

static void *member_main(void *arg)
{
    struct ult_member *m = arg;
    m->shared->fn(&m->team, m->tid, m->shared->arg);
    return NULL;
}

void bench_ult_team_run(int nults, bench_thread_fn fn, void *arg)
{
    struct ult_team t = {.fn = fn, .arg = arg, .nults = nults};
    mpiv_ult_h *ults = bench_alloc((size_t) nults * sizeof *ults);
    atomic_init(&t.arrived, 0);
    t.members = bench_alloc((size_t) nults * sizeof *t.members);
    for (int i = 0; i < nults; ++i) {
        t.members[i] = (struct ult_member){
            .team = {.nthreads = nults, .member_barrier = member_barrier}, .shared = &t,
            .tid = i};
    }
    for (int i = 0; i < nults; ++i) {
        BENCH_ULT(mpiv_spawn(member_main, &t.members[i], MPIV_WORKER_ANY, &ults[i]));
    }
    for (int i = 0; i < nults; ++i) {
        BENCH_ULT(mpiv_join(ults[i], NULL));
    }
    for (int i = 0; i < nults; ++i) {
        if (NULL != t.members[i].go) {
            BENCH_ULT(mpiv_sync_destroy(t.members[i].go));
        }
    }
    free(t.members);
    free(ults);
}
