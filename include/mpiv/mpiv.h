/*
 * mpiv.h: the C ABI of the mpiv runtime (libmpiv.so).
 *
 * The runtime runs lightweight user-level threads (ULTs) on a set of workers: one
 * pthread per processing unit (PU) of a cpuset, each pinned with hwloc. A ULT has its own
 * stack and is switched in user space. Waiting in a ULT (mpiv_sync_wait, mpiv_join)
 * blocks only that ULT: its worker runs others meanwhile. The same calls also work from
 * ordinary pthreads, which spin briefly and then sleep in the kernel.
 *
 * One runtime instance exists per process. mpiv_init() is reference counted so that an
 * application and the Open MPI component (mca_pml_mpiv) can both initialize it; the
 * first call's parameters take effect.
 *
 * Conventions: every function returns an mpiv_status_t (see mpiv_status.h; text with
 * mpiv_status_string()); output arguments come last, end in _p and are written only on
 * success; no function throws or aborts on bad input.
 */
#ifndef MPIV_H
#define MPIV_H

#include <stddef.h>
#include <stdint.h>

#include <mpiv/mpiv_status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Handle of a ULT. Opaque; 0 (MPIV_ULT_NULL) is never a valid handle. Handles are not
 *  reused while the ULT they name is alive or unjoined. */
typedef uint64_t mpiv_ult_h;
#define MPIV_ULT_NULL ((mpiv_ult_h) 0)

/** Handle of a sync object (a completion counter a thread can wait on). */
typedef struct mpiv_sync *mpiv_sync_h;

/** Body of a ULT: receives the spawn argument, returns a value join() hands back. */
typedef void *(*mpiv_ult_func_t)(void *arg);

/** Pass as the worker hint of mpiv_spawn() to let the runtime choose the worker. */
#define MPIV_WORKER_ANY (-1)

/** Bits of mpiv_params_t::field_mask: a field is used only when its bit is set. */
enum mpiv_params_field {
    MPIV_PARAM_FIELD_NUM_WORKERS = 1u << 0,
    MPIV_PARAM_FIELD_CPUSET = 1u << 1,
    MPIV_PARAM_FIELD_STACK_SIZE = 1u << 2,
    MPIV_PARAM_FIELD_MAX_ULTS = 1u << 3,
    MPIV_PARAM_FIELD_GUARD_PAGES = 1u << 4,
    MPIV_PARAM_FIELD_SCRATCH_ULTS = 1u << 5,
    MPIV_PARAM_FIELD_PREFETCH_ULTS = 1u << 6
};

/** Guard-page policy for ULT stacks. */
typedef enum mpiv_guard_pages {
    /** Guard pages while the process stays well below vm.max_map_count (each guarded
     *  stack costs two memory mappings), then none. The default. */
    MPIV_GUARD_PAGES_AUTO = 0,
    MPIV_GUARD_PAGES_ALWAYS = 1, /**< every stack; spawn fails with MPIV_ERR_NOMEM when
                                      the mapping budget is used up */
    MPIV_GUARD_PAGES_NEVER = 2   /**< no guard pages (fewest mappings) */
} mpiv_guard_pages_t;

/** Runtime parameters. Zero-initialize, then set fields and their field_mask bits. */
typedef struct mpiv_params {
    uint64_t field_mask;          /**< which fields below are set (mpiv_params_field) */
    unsigned num_workers;         /**< workers (default: one per PU of the cpuset) */
    const char *cpuset;           /**< PUs to run workers on, as an hwloc bitmap list
                                       string such as "0-3,8" (default: the process
                                       binding); with more workers than PUs, workers
                                       share PUs round robin */
    size_t stack_size;            /**< ULT stack bytes, rounded up to pages (default
                                       64 KiB, minimum 16 KiB) */
    uint32_t max_ults_per_worker; /**< live ULTs per worker (default and maximum
                                       1,048,576, minimum 64) */
    mpiv_guard_pages_t guard_pages; /**< stack guard-page policy (default AUTO) */
    uint32_t scratch_ults;        /**< live ULTs of a worker (each worker counts its
                                       own) from which they make the MPI library's short
                                       calls (a send, the post of a receive, the poll
                                       before a wait) on the worker's scratch stack, whose
                                       frames stay in the cache, instead of on their own,
                                       cold once many ULTs take turns (default: the
                                       worker's share of its last-level cache, the size
                                       divided among the workers placed under that cache,
                                       / 8 KiB, at least 64: 4,096 for 32 MiB and one
                                       worker, and 4,096 when hwloc knows no cache; 0:
                                       always; UINT32_MAX: never, and no scratch stack is
                                       made) */
    uint32_t prefetch_ults;       /**< live ULTs of a worker from which its scheduler,
                                       before each ULT's turn, prefetches the stack of
                                       the ULT that runs after it in the same scheduling
                                       pass (from its saved stack pointer up, at most 64
                                       cache lines), so that a ULT resumed after
                                       thousands of others does not wait for its frames
                                       one miss at a time (default: the worker's share of
                                       the closest cache of level 2 or more above it,
                                       divided among the workers placed under it, /
                                       2 KiB, at least 64: 512 for 1 MiB, and 256 when
                                       hwloc knows no such cache; 0: always;
                                       UINT32_MAX: never) */
} mpiv_params_t;

/**
 * @brief Initialize the runtime, or take another reference to it.
 * @param[in] params parameters, or NULL for defaults; ignored (with a log line at info
 *            level) when the runtime is already initialized
 * @return MPIV_OK; MPIV_ERR_PARAM for an unusable value (the message names the field);
 *         MPIV_ERR_TOPOLOGY when hwloc fails or the cpuset is empty; MPIV_ERR_SYSTEM
 * @context thread-safe; must not be called from a ULT
 */
MPIV_API mpiv_status_t mpiv_init(const mpiv_params_t *params);

/**
 * @brief Drop a reference; the last one stops and joins the workers and frees everything.
 * @return MPIV_OK; MPIV_ERR_NOT_INITIALIZED; MPIV_ERR_BUSY when ULTs are still alive
 *         (their count and first ids are logged at error level) - the runtime is then
 *         left running and the reference is kept, so the caller can join them and retry.
 *         Finished but unjoined ULTs are reclaimed silently.
 * @context thread-safe; must not be called from a ULT
 */
MPIV_API mpiv_status_t mpiv_finalize(void);

/**
 * @brief Number of workers of the running runtime.
 * @param[out] count_p worker count
 * @return MPIV_OK; MPIV_ERR_NOT_INITIALIZED; MPIV_ERR_INVALID_ARG for NULL
 * @context thread-safe, never blocks
 */
MPIV_API mpiv_status_t mpiv_num_workers(unsigned *count_p);

/**
 * @brief Create a ULT running func(arg).
 * @param[in] func   body (must not be NULL)
 * @param[in] arg    its argument
 * @param[in] worker worker to run it on, 0 .. count-1, or MPIV_WORKER_ANY (the caller's
 *                   worker when the caller is a ULT, else round robin)
 * @param[out] ult_p handle for mpiv_join(); may be NULL for a detached ULT, whose
 *                   resources are reclaimed when it returns
 *
 * A ULT spawned by a ULT of the same worker runs as soon as its spawner blocks, yields
 * or returns. Each ULT keeps its own floating-point control state (rounding mode,
 * exception masks; it starts with the spawner's); status flags belong to the worker.
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG; MPIV_ERR_NOT_INITIALIZED; MPIV_ERR_CAPACITY
 *         when the worker holds max_ults_per_worker ULTs; MPIV_ERR_NOMEM
 * @context thread-safe, from ULTs and pthreads; never blocks
 */
MPIV_API mpiv_status_t mpiv_spawn(mpiv_ult_func_t func, void *arg, int worker,
                                  mpiv_ult_h *ult_p);

/**
 * @brief Wait for a ULT to return and release it.
 * @param[in] ult     handle from mpiv_spawn()
 * @param[out] ret_p  the ULT's return value, or NULL
 * @return MPIV_OK; MPIV_ERR_INVALID_HANDLE for a handle never issued;
 *         MPIV_ERR_ALREADY_JOINED when it was joined before or another thread is joining
 *         it; MPIV_ERR_DEADLOCK when a ULT joins itself; MPIV_ERR_NOT_INITIALIZED
 * @context thread-safe; blocks the calling ULT only (a pthread spins, then sleeps)
 */
MPIV_API mpiv_status_t mpiv_join(mpiv_ult_h ult, void **ret_p);

/**
 * @brief Let the worker run other ULTs; the caller runs again within a bounded number
 *        of scheduling steps. Outside a ULT it yields the kernel thread.
 * @return MPIV_OK
 * @context any thread
 */
MPIV_API mpiv_status_t mpiv_yield(void);

/**
 * @brief Handle of the calling ULT.
 * @param[out] ult_p the handle
 * @return MPIV_OK; MPIV_ERR_NOT_ULT when called from a pthread; MPIV_ERR_INVALID_ARG
 * @context any thread, never blocks
 */
MPIV_API mpiv_status_t mpiv_self(mpiv_ult_h *ult_p);

/**
 * @brief Call fn(arg) on the scratch stack of the calling ULT's worker when that worker
 *        has at least mpiv_params_t.scratch_ults live ULTs, in place otherwise.
 *
 * For a short call a ULT makes between its blocks: its frames then land on a stack that
 * stays in the cache however many ULTs take turns, instead of on the ULT's own, cold
 * when many do. The stack is lent to one call at a time: a call nested in another, or
 * made while another ULT of the worker is blocked inside one, runs in place. So @p fn may
 * block, yield or call this again; it must return (no longjmp out of it).
 * @param[in]  fn           the function
 * @param[in]  arg          its argument
 * @param[out] on_scratch_p 1 when @p fn ran on the scratch stack, 0 when in place (a
 *                          pthread, a worker with fewer ULTs, the stack lent out, or
 *                          scratch_ults UINT32_MAX); may be NULL
 * @return MPIV_OK once @p fn returned; MPIV_ERR_INVALID_ARG when @p fn is NULL
 * @context any thread
 */
MPIV_API mpiv_status_t mpiv_call_on_scratch(void (*fn)(void *), void *arg, int *on_scratch_p);

/**
 * @brief Worker the caller runs on (ULTs, and worker threads themselves).
 * @param[out] worker_p worker id 0 .. count-1
 * @return MPIV_OK; MPIV_ERR_NOT_ULT when the caller is not on a worker
 * @context any thread, never blocks
 */
MPIV_API mpiv_status_t mpiv_self_worker(int *worker_p);

/**
 * @brief Create a sync object that completes after @p count signals.
 *
 * A sync is a completion counter (ThreadWait/ThreadSignal of the MPIv paper, made safe
 * to count): mpiv_sync_signal() decrements it and the signal that brings it to zero
 * wakes the waiter. Signals may come before the wait, from any thread. One thread waits
 * on a sync at a time.
 *
 * A sync created (or reset) by a ULT, for fewer than 2^29 signals, belongs to that ULT:
 * its wait and the signals from its worker take no atomic read-modify-write, the
 * fastest hand-off. Any other thread may still signal it or wait on it; such a wait
 * first waits for the ULT's worker to finish the ULT it is running.
 * @param[in] count signals needed, >= 1 (a Waitall over N requests uses N)
 * @param[out] sync_p the new sync
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG for count < 1 or NULL; MPIV_ERR_NOMEM
 * @context thread-safe; does not need an initialized runtime
 */
MPIV_API mpiv_status_t mpiv_sync_create(int64_t count, mpiv_sync_h *sync_p);

/**
 * @brief Free a sync. It must not be waited on; pending signals are discarded.
 * @return MPIV_OK; MPIV_ERR_INVALID_HANDLE for NULL or an object not made by
 *         mpiv_sync_create(); MPIV_ERR_BUSY while a thread waits on it
 */
MPIV_API mpiv_status_t mpiv_sync_destroy(mpiv_sync_h sync);

/**
 * @brief Re-arm a completed (or unused) sync for @p count more signals (and give it to
 *        the calling ULT, see mpiv_sync_create()).
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG for count < 1; MPIV_ERR_INVALID_HANDLE;
 *         MPIV_ERR_BUSY while a thread waits on it
 */
MPIV_API mpiv_status_t mpiv_sync_reset(mpiv_sync_h sync, int64_t count);

/**
 * @brief Record one completion; the last one wakes the waiter.
 *
 * A ULT woken by a signal from its own worker (another ULT there) runs as soon as the
 * signaller blocks, yields or returns, without a scheduling pass (direct hand-off); the
 * worker still runs every other runnable ULT within a bounded number of steps.
 * @return MPIV_OK; MPIV_ERR_OVERSIGNALED when the count was already zero (the signal is
 *         ignored; a surplus signal racing with the completing one may go unreported);
 *         MPIV_ERR_INVALID_HANDLE
 * @context any thread (ULT, worker, pthread, progress thread); never blocks; hot path
 */
MPIV_API mpiv_status_t mpiv_sync_signal(mpiv_sync_h sync);

/**
 * @brief Wait until the count reaches zero (returns at once if it has).
 * @return MPIV_OK; MPIV_ERR_INVALID_HANDLE; MPIV_ERR_BUSY when another thread waits on it
 * @context a ULT blocks alone (its worker runs other ULTs); a pthread spins for a bounded
 *          time, then sleeps on a futex
 */
MPIV_API mpiv_status_t mpiv_sync_wait(mpiv_sync_h sync);

/**
 * @brief Nonzero when the count has reached zero.
 * @param[out] done_p 1 if complete, else 0
 * @return MPIV_OK; MPIV_ERR_INVALID_HANDLE; MPIV_ERR_INVALID_ARG
 * @context any thread, never blocks
 */
MPIV_API mpiv_status_t mpiv_sync_test(mpiv_sync_h sync, int *done_p);

/** Log levels of mpiv_log_func_t. */
enum mpiv_log_level { MPIV_LOG_ERROR = 0, MPIV_LOG_WARN = 1, MPIV_LOG_INFO = 2, MPIV_LOG_DEBUG = 3 };

/** Receives every log line of the runtime. */
typedef void (*mpiv_log_func_t)(int level, const char *message, void *ctx);

/**
 * @brief Route the runtime's log lines to @p func (NULL restores the default: stderr,
 *        for levels up to the MPIV_VERBOSE environment variable, default 0).
 * @return MPIV_OK
 * @context thread-safe
 */
MPIV_API mpiv_status_t mpiv_set_log_handler(mpiv_log_func_t func, void *ctx);

/**
 * @brief How many event counters the runtime keeps (messages by protocol, unexpected
 *        arrivals, TLP lock acquisitions, ULT switches, ...): indexes 0 .. count - 1.
 * @context thread-safe
 */
MPIV_API size_t mpiv_stats_count(void);

/**
 * @brief Describe counter @p index: its name (a C identifier), its unit and a sentence.
 *        The strings are static.
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG for an index out of range or a NULL output
 * @context thread-safe
 */
MPIV_API mpiv_status_t mpiv_stats_info(size_t index, const char **name_p, const char **unit_p,
                                       const char **description_p);

/**
 * @brief The value of counter @p index: the sum over every thread of the process, live
 *        or exited. Counters only grow; a read is not a snapshot of all of them at once.
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG for an index out of range or a NULL output
 * @context thread-safe; takes a lock (not for hot paths)
 */
MPIV_API mpiv_status_t mpiv_stats_read(size_t index, uint64_t *value_p);

/**
 * @brief Counter @p index per thread: @p values[0] is the total of the threads that have
 *        exited, then one value per live thread that has counted (workers, the
 *        communication server, application threads), at most @p capacity values in all.
 * @param[out] count_p how many values there are (1 + live threads; may exceed @p capacity)
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG for an index out of range or NULL arguments
 * @context thread-safe; takes a lock
 */
MPIV_API mpiv_status_t mpiv_stats_read_threads(size_t index, uint64_t *values, size_t capacity,
                                               size_t *count_p);

/**
 * @brief How many counters the runtime keeps per communicator (messages sent, matched,
 *        unexpected, receives posted, ...; read with mpiv_p2p_comm_stats_read):
 *        indexes 0 .. count - 1.
 * @context thread-safe
 */
MPIV_API size_t mpiv_stats_comm_count(void);

/**
 * @brief Describe per-communicator counter @p index as mpiv_stats_info does.
 * @return MPIV_OK; MPIV_ERR_INVALID_ARG for an index out of range or a NULL output
 * @context thread-safe
 */
MPIV_API mpiv_status_t mpiv_stats_comm_info(size_t index, const char **name_p,
                                            const char **unit_p, const char **description_p);

#ifdef __cplusplus
}
#endif

#endif /* MPIV_H */
