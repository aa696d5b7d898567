/*
 * libmpiv-apsm: asynchronous progress for non-blocking MPI point-to-point and MPI-IO, added to
 * any MPI library through the profiling interface (APSM, Wittmann et al., "Asynchronous MPI
 * for the Masses", seed 002).
 *
 * Use: LD_PRELOAD=libmpiv-apsm.so mpirun ... ./app           (Open MPI)
 *      LD_PRELOAD=libmpiv-apsm-mpich.so mpiexec.mpich ... ./app   (MPICH)
 * or link the library before the MPI library. The application needs no change: MPI_Isend,
 * MPI_Ibsend, MPI_Issend, MPI_Irsend, MPI_Irecv and MPI_File_iread/iwrite[_at|_shared] return
 * generalized requests that a progress thread completes, so the transfer advances while the
 * application computes. Wait, Test, Cancel and Request_free work on them as on any request.
 *
 * Environment:
 *   MPIV_APSM_EAGER_LIMIT  messages of at most this many bytes bypass the progress thread and
 *                          return the library's own request (k/m suffixes; 0 queues every
 *                          message). Default: the library's eager limit read through MPI_T.
 *   MPIV_APSM_CPU_LIST     where the progress thread of each local rank runs: entries separated
 *                          by '_', entry i for local rank i (wrapping around), each entry a list
 *                          of OS PU numbers and ranges ("0_2_4", "1,3_5-7"). Default: a spare PU
 *                          of the process binding, else no binding of its own.
 *   MPIV_APSM_POLL         what the progress thread does after a poll that completed nothing:
 *                          "spin" (poll again), "yield" (sched_yield), "sleep" or "sleep:<us>"
 *                          (pause 20 or <us> microseconds). Default "auto": yield, or sleep when
 *                          the thread shares the process's only PU with waits that spin
 *                          (MPIV_APSM_WAIT=library): a yield would hand the PU to the spinner.
 *   MPIV_APSM_WAIT         how MPI_Wait, Waitall, Waitany and Waitsome wait while operations are
 *                          queued: "yield" (the matching test call, then sched_yield, until it
 *                          reports completion: the PU goes to the progress thread), "library"
 *                          (the library's own wait) or "auto" (default): yield when the
 *                          progress thread shares the process's only PU.
 *   MPIV_APSM_VERBOSE      1: one line per process on stderr saying how APSM is set up.
 *   MPIV_APSM_DISABLE      1: intercept nothing (plain MPI behaviour, for comparisons).
 */
#ifndef MPIV_APSM_API_H
#define MPIV_APSM_API_H

#include <stdint.h>

#include <mpiv/mpiv_status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A snapshot of libmpiv-apsm's state, for tests and for checking that APSM is active. */
typedef struct mpiv_apsm_counters {
    uint64_t queued;     /**< operations handed to the progress thread so far */
    uint64_t completed;  /**< of which completed (each generalized request exactly once) */
    uint64_t cancelled;  /**< of which completed as cancelled */
    uint64_t released;   /**< operation records freed; queued - released are still alive */
    uint64_t yielding_waits; /**< MPI_Wait* calls made of tests and sched_yield (MPIV_APSM_WAIT) */
    uint64_t eager_limit; /**< bytes; messages up to this size bypass the queue (0: none) */
    int progress_thread; /**< 1 while the progress thread runs (between init and finalize) */
} mpiv_apsm_counters_t;

/**
 * @brief Read the counters of libmpiv-apsm.
 * @param[out] counters_p where to store the snapshot (each field is read atomically, the
 *             snapshot as a whole is not)
 * @return MPIV_OK, or MPIV_ERR_INVALID_ARG if counters_p is NULL
 * @context thread-safe, never blocks, callable before MPI_Init and after MPI_Finalize.
 *          Programs that may run without the library look the symbol up with dlsym().
 */
MPIV_API mpiv_status_t mpiv_apsm_counters_get(mpiv_apsm_counters_t *counters_p);

#ifdef __cplusplus
}
#endif

#endif /* MPIV_APSM_API_H */
