/*
 * libmpiv-apsm internals: the operation record, the process-wide state and the functions the
 * interceptors share.
 *
 * Life of an operation (seed 002, Fig. 1b):
 *   1. An application thread makes the real request (point-to-point: in its own thread, so that
 *      a matching send and receive of one process both get posted, §3.2), allocates an
 *      apsm_op, starts a generalized request on it and pushes the op on the incoming stack.
 *      MPI-IO ops carry their arguments instead; the progress thread performs them (§3.3,
 *      apsm_io.c) and completes them at once.
 *   2. The progress thread takes the whole stack, moves the point-to-point ops into its active
 *      set and polls the active set with MPI_Testsome.
 *   3. When a real request completes, the progress thread stores its status in the op, sets
 *      op->done and calls MPI_Grequest_complete. The application's Wait/Test then calls
 *      apsm_query_fn (copies the status) and apsm_free_fn.
 *
 * Ownership: an op has two references, one held by the generalized request (dropped in
 * apsm_free_fn, whenever the MPI library calls it) and one held by the queue (dropped by the
 * progress thread after MPI_Grequest_complete, or at finalize). Whoever drops the last frees.
 * This makes the record safe under both orders the libraries use: Open MPI calls free_fn only
 * once the request is both completed and freed, MPICH calls it at MPI_Request_free even
 * before completion.
 */
#ifndef MPIV_APSM_INTERNAL_H
#define MPIV_APSM_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "mpiv_apsm.h"

/* Distance that keeps fields written by different threads off each other's cache lines. */
#define APSM_FALSE_SHARING 128

enum apsm_kind {
    APSM_OP_P2P,          /* real request made by the caller */
    APSM_OP_IREAD_AT,     /* MPI_File_iread_at, and MPI_File_iread at its claimed offset */
    APSM_OP_IWRITE_AT,    /* MPI_File_iwrite_at, and MPI_File_iwrite at its claimed offset */
    APSM_OP_IREAD_SHARED, /* MPI_File_iread_shared */
    APSM_OP_IWRITE_SHARED /* MPI_File_iwrite_shared */
};

struct apsm_io_args {
    MPI_File fh;
    MPI_Offset offset; /* etype units in the view; unused for the shared file pointer */
    union {
        void *rd;
        const void *wr;
    } buf;
    int count;
    MPI_Datatype type;
    bool type_owned; /* type is our duplicate of a derived type: free it after the access */
};

struct apsm_op {
    struct apsm_op *next; /* incoming stack link; written before the push */
    MPI_Request greq;     /* the handle the application holds */
    MPI_Request real;     /* the library's request (point-to-point only) */
    enum apsm_kind kind;
    const char *call; /* the application's call, for messages */
    struct apsm_io_args io;
    /* Final status, written by the progress thread before done is set. Copied verbatim into
     * the application's status so that hidden fields (count, cancelled) come out exact. */
    MPI_Status status;
    atomic_bool done;   /* status is final */
    atomic_bool cancel; /* MPI_Cancel was called on greq; the progress thread acts on it */
    atomic_int refs;    /* see "Ownership" above */
};

/* MPIV_APSM_POLL; see mpiv_apsm.h. */
enum apsm_poll {
    APSM_POLL_AUTO,  /* sleep if the progress thread shares the process's only PU with waits
                        that spin (MPIV_APSM_WAIT=library), else yield */
    APSM_POLL_SPIN,  /* poll again at once */
    APSM_POLL_YIELD, /* sched_yield, then poll again */
    APSM_POLL_SLEEP  /* sleep poll_sleep_ns, then poll again */
};

/* MPIV_APSM_WAIT; see apsm_wait.c. */
enum apsm_wait {
    APSM_WAIT_AUTO,   /* yielding waits if the progress thread shares the process's only PU */
    APSM_WAIT_YIELD,  /* yielding waits while operations are queued */
    APSM_WAIT_LIBRARY /* the library's own waits */
};

/* Process-wide state. Fields are grouped by the thread that writes them. */
struct apsm_state {
    /* Written by MPI_Init/MPI_Finalize (the thread that initializes MPI) only. */
    atomic_bool active;     /* interceptors queue work (progress thread running) */
    bool initialized;       /* MPI_Init went through this library */
    int thread_level;       /* level reported to the application */
    int world_rank;         /* for messages; -1 before MPI_Init */
    bool verbose;
    enum apsm_poll poll;    /* what the progress thread does after a poll that found nothing */
    long poll_sleep_ns;     /* APSM_POLL_SLEEP: length of the pause */
    enum apsm_wait wait;    /* MPIV_APSM_WAIT as given */
    MPI_Count eager_limit;  /* 0: queue every message */
    pthread_t thread;
    /* Written once by the progress thread when it starts (the resolved MPIV_APSM_WAIT; read
     * relaxed by waits, a hint: see apsm_wait.c). */
    atomic_bool yield_waits;

    /* Incoming stack: pushed by application threads, emptied by the progress thread. */
    _Alignas(APSM_FALSE_SHARING) _Atomic(struct apsm_op *) head;

    /* Sleep/wake-up of the progress thread (see apsm_progress.c). */
    _Alignas(APSM_FALSE_SHARING) atomic_bool sleeping;
    atomic_bool stop;
    atomic_bool cancel_pending;
    pthread_mutex_t lock;
    pthread_cond_t cond;

    /* Counters (relaxed; see mpiv_apsm_counters_t). queued, released and yielding_waits are
     * written by any thread, completed and cancelled by the progress thread only. */
    _Alignas(APSM_FALSE_SHARING) atomic_uint_fast64_t queued;
    atomic_uint_fast64_t released;
    atomic_uint_fast64_t yielding_waits;
    _Alignas(APSM_FALSE_SHARING) atomic_uint_fast64_t completed;
    atomic_uint_fast64_t cancelled;
};

extern struct apsm_state apsm_g;

/* True when the interceptors should queue work (acquire: sees everything MPI_Init set up). */
static inline bool apsm_on(void)
{
    /* sync: acquire; pairs with the release store of active in apsm_init() */
    return atomic_load_explicit(&apsm_g.active, memory_order_acquire);
}

/* Messages on stderr, prefixed with the library name and the rank. */
void apsm_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void apsm_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "<call> failed: <MPI error string>" on stderr. */
void apsm_mpi_error(const char *call, int rc, const char *consequence);

/* A new op with both references, or NULL when memory is exhausted (message printed). */
struct apsm_op *apsm_op_new(enum apsm_kind kind, const char *call);
/* Free an op that was never submitted. */
void apsm_op_discard(struct apsm_op *op);
/* Drop one reference; the last one frees the op. */
void apsm_op_release(struct apsm_op *op);
/*
 * Start the generalized request of op, push op to the progress thread and store the
 * generalized request in *request. On failure (message printed) an MPI error code is
 * returned, *request is untouched and the caller still owns op (apsm_op_discard).
 */
int apsm_op_submit(struct apsm_op *op, MPI_Request *request);

/* Perform the MPI-IO access of an op with the blocking call; returns its error code. */
int apsm_io_run(enum apsm_kind kind, const struct apsm_io_args *io, MPI_Status *status);
/* Free io->type if it is our duplicate. */
void apsm_io_drop_type(struct apsm_io_args *io);

/* The status MPI defines for an empty request, with an error code and a cancelled flag. */
void apsm_status_empty(MPI_Status *status, int error, int cancelled);

/* Start and stop the progress thread. start returns 0 or an errno value (message printed). */
int apsm_progress_start(void);
void apsm_progress_stop(void);

/*
 * Bind the calling thread (the progress thread) as MPIV_APSM_CPU_LIST or the process binding
 * says. Returns true if it ends up sharing the process's only PU with the application.
 */
bool apsm_pin_self(void);

#endif /* MPIV_APSM_INTERNAL_H */
