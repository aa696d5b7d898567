/*
 * mpiv status codes.
 *
 * Every mpiv C entry point returns an mpiv_status_t. MPIV_OK is zero and
 * MPIV_INPROGRESS is positive; errors are negative and grouped in ranges so
 * that a caller can classify an unknown code:
 *   -1   .. -99   the caller's mistake (bad argument, bad state, bad handle)
 *   -100 .. -199  temporary back-pressure: retry after making progress
 *   -200 .. -299  the system refused (memory, threads, topology)
 */
#ifndef MPIV_STATUS_H
#define MPIV_STATUS_H

/** Marks the symbols libmpiv.so exports; everything else is hidden. */
#if defined(MPIV_BUILDING_LIBRARY)
#define MPIV_API __attribute__((visibility("default")))
#else
#define MPIV_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mpiv_status {
    MPIV_OK = 0,                    /**< success */
    MPIV_INPROGRESS = 1,            /**< started; completion is signalled later */

    MPIV_ERR_INVALID_ARG = -1,      /**< an argument is NULL or out of range */
    MPIV_ERR_INVALID_HANDLE = -2,   /**< the handle was never issued by this runtime */
    MPIV_ERR_ALREADY_JOINED = -3,   /**< the ULT was joined already (or is being joined) */
    MPIV_ERR_NOT_INITIALIZED = -4,  /**< the runtime is not initialized (or was finalized) */
    MPIV_ERR_NOT_ULT = -5,          /**< the call needs a ULT and the caller is not one */
    MPIV_ERR_BUSY = -6,             /**< objects are still in use (live ULTs at finalize) */
    MPIV_ERR_OVERSIGNALED = -7,     /**< a sync was signalled more often than its count */
    MPIV_ERR_DEADLOCK = -8,         /**< the call would wait for itself (a ULT joining itself) */
    MPIV_ERR_PARAM = -9,            /**< a runtime parameter has an unusable value */
    MPIV_ERR_NOT_FOUND = -10,       /**< no such element (cancel of a completed receive) */
    MPIV_ERR_TRUNCATE = -11,        /**< a message is longer than the receive buffer */

    MPIV_ERR_RETRY_LOCK = -100,     /**< a try-lock failed: retry */
    MPIV_ERR_RETRY_NOPACKET = -101, /**< the packet pool is empty: progress, then retry */
    MPIV_ERR_RETRY_NOMEM = -102,    /**< a bounded queue is full: progress, then retry */

    MPIV_ERR_NOMEM = -200,          /**< memory (or address space) is exhausted */
    MPIV_ERR_SYSTEM = -201,         /**< a system call failed (errno is logged) */
    MPIV_ERR_CAPACITY = -202,       /**< a configured limit (ULTs per worker) is reached */
    MPIV_ERR_TOPOLOGY = -203,       /**< hwloc failed, or the cpuset is empty or invalid */
    MPIV_ERR_INTERNAL = -299        /**< a bug in mpiv: please report it */
} mpiv_status_t;

/** True for the temporary back-pressure class: the operation may be retried. */
#define MPIV_STATUS_IS_RETRY(_s) ((_s) <= -100 && (_s) > -200)

/**
 * @brief Human-readable text for a status code.
 * @param[in] status any value, including unknown ones
 * @return a static string, never NULL
 * @context thread-safe, never blocks
 */
MPIV_API const char *mpiv_status_string(mpiv_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* MPIV_STATUS_H */
