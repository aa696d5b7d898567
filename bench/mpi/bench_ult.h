/*
 * mpiv ULTs in the MPI benchmarks (<mpiv/mpiv.h>, libmpiv; pml mpiv only): the options
 * --workers, --stack-size, --scratch-ults and --prefetch-ults, the start of the runtime, and
 * teams of ULTs that run a bench_thread_fn as bench_team_run runs pthreads.
 */
#ifndef MPIV_BENCH_ULT_H
#define MPIV_BENCH_ULT_H

#include "bench_common.h"

#include <mpiv/mpiv.h>

/* Check the status of an mpiv call; on failure report it and abort the job (exit code 3). */
#define BENCH_ULT(_call) bench_ult_check((_call), #_call, __FILE__, __LINE__)
void bench_ult_check(int rc, const char *call, const char *file, int line);

/* The texts of --workers, --stack-size, --scratch-ults and --prefetch-ults;
 * bench_ult_opts_init sets the defaults. */
struct bench_ult_opts {
    const char *workers;
    const char *stack_size;
    const char *scratch_ults;
    const char *prefetch_ults;
};
enum { BENCH_ULT_NOPTS = 4 };
/* Defaults, and the options for bench_parse in extra[0 .. BENCH_ULT_NOPTS - 1]. */
void bench_ult_opts_init(struct bench_ult_opts *o, struct bench_extra_opt *extra);

/*
 * Parameters of mpiv_init from the options, before MPI_Init (a bad value prints an error and
 * exits with BENCH_EXIT_USAGE). *stack_p gets the stack size in bytes.
 */
mpiv_params_t bench_ult_params(const struct bench_ult_opts *o, const char *prog,
                               size_t *stack_p);

/* mpiv_init(params) (after MPI_Init); returns the number of workers. */
unsigned bench_ult_start(const mpiv_params_t *params);

/*
 * bench_team_run with a ULT per member (a bench_team_runner), even for one. A member blocked
 * in MPI or in bench_team_barrier blocks only its ULT. The barrier is reusable; it costs the
 * last member to arrive one mpiv_sync_signal per other member.
 */
void bench_ult_team_run(int nults, bench_thread_fn fn, void *arg);

#endif
