/*
 * The progress thread, its queue and the generalized-request callbacks.
 *
 * Design
 * ------
 * Incoming stack (multi-producer, single-consumer). Application threads push ops with a CAS on
 * apsm_g.head; the progress thread takes the whole stack at once with an exchange to NULL and
 * reverses it into submission order. The consumer never pops single nodes, so there is no ABA
 * problem, and no producer touches a node after pushing it. A push is lock-free: many threads
 * calling MPI_Isend at once contend on one CAS only.
 *
 * Active set: arrays private to the progress thread holding the real requests (reqs[]) and
 * their ops (ops[]). One round: take the stack (performing MPI-IO ops on the way, see
 * apsm_io.c), apply cancels, MPI_Testsome over reqs[], complete the finished ops, compact.
 * The thread never blocks inside MPI (no Waitsome): a Waitsome over a fixed set could not see
 * new ops, cancels or finalize, and a queued receive could wait forever for a message whose
 * send is still in the stack. After a round that completed nothing it spins, yields or
 * sleeps briefly (MPIV_APSM_POLL, apsm_progress_setup()).
 *
 * Sleeping: with nothing to poll the thread sleeps on a condition variable instead of
 * spinning. The wake-up is Dekker-style: the sleeper stores sleeping=1 and then loads head; a
 * producer stores head and then loads sleeping; both seq_cst, so at least one sees the other:
 * either the sleeper sees the op and does not sleep, or the producer sees sleeping and signals
 * under the mutex (the sleeper re-checks head under that mutex before each wait, so the signal
 * cannot fall between its check and its wait). A producer that finds the thread awake pays one
 * load and takes no lock.
 *
 * Cancel: cancel_fn runs in an application thread while the real request belongs to the
 * progress thread, which may free it inside Testsome at any moment. cancel_fn therefore only
 * sets op->cancel and apsm_g.cancel_pending; the progress thread calls MPI_Cancel itself.
 *
 * Memory: one op per queued operation, freed when both references are gone (apsm.h); the
 * active set grows by doubling and is freed when the thread exits.
 *
 * Not for: persistent requests (MPI_Start is not intercepted) and messages the library
 * completes by itself (they bypass the queue, see apsm_p2p.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "apsm.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

/* What happens to the error of a queued operation. */
#if defined(MPICH_VERSION)
#define APSM_RETURNED_BY_COMPLETION                                                           \
    "the completion call returns it as MPI_ERR_OTHER (MPICH's class for every error of a "    \
    "generalized request)"
#else
#define APSM_RETURNED_BY_COMPLETION "the completion call returns it"
#endif

/* The progress thread's private state. */
struct apsm_active {
    int n;   /* requests being polled */
    int cap; /* capacity of the four arrays */
    MPI_Request *reqs;
    struct apsm_op **ops;
    int *idx;
    MPI_Status *statuses;
    /* Ops taken from the stack that do not fit yet (the arrays could not grow). */
    struct apsm_op *backlog;
    struct apsm_op *backlog_tail;
    enum apsm_poll poll; /* resolved: never APSM_POLL_AUTO */
};

/* ------------------------------------------------------------------ ops */

struct apsm_op *apsm_op_new(enum apsm_kind kind, const char *call)
{
    struct apsm_op *op = calloc(1, sizeof *op);
    if (NULL == op) {
        apsm_error("%s: no memory for the request record; calling the MPI library directly "
                   "(no asynchronous progress for this operation)",
                   call);
        return NULL;
    }
    op->kind = kind;
    op->call = call;
    op->greq = MPI_REQUEST_NULL;
    op->real = MPI_REQUEST_NULL;
    atomic_init(&op->done, false);
    atomic_init(&op->cancel, false);
    atomic_init(&op->refs, 2);
    return op;
}

void apsm_op_discard(struct apsm_op *op)
{
    free(op);
}

void apsm_op_release(struct apsm_op *op)
{
    /* sync: acq_rel; the release publishes this holder's last use of op, the acquire lets the
     * holder that frees see the other's; pairs with the same fetch_sub by the other holder */
    if (1 == atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel)) {
        atomic_fetch_add_explicit(&apsm_g.released, 1, memory_order_relaxed);
        free(op);
    }
}

/* ------------------------------------------------------------------ generalized requests */

/* Called by the application's Wait/Test/Request_get_status once the request is complete. */
static int apsm_query_fn(void *extra_state, MPI_Status *status)
{
    const struct apsm_op *op = extra_state;
    /* A structure copy carries the hidden fields (byte count, cancelled) unchanged. The
     * status is final: MPI_Grequest_complete came after it was written. */
    *status = op->status;
    return op->status.MPI_ERROR;
}

/*
 * Called when the generalized request is freed: by the completing Wait/Test, or for
 * MPI_Request_free by Open MPI at completion and by MPICH at once. The error is returned again
 * because MPI returns the free_fn's code from the completion call (MPI 4.0 §13.2).
 */
static int apsm_free_fn(void *extra_state)
{
    struct apsm_op *op = extra_state;
    int rc = MPI_SUCCESS;
    /* sync: acquire; pairs with the release store of done in apsm_complete() */
    if (atomic_load_explicit(&op->done, memory_order_acquire)) {
        rc = op->status.MPI_ERROR;
    }
    apsm_op_release(op);
    return rc;
}

/* Called by MPI_Cancel on the generalized request, in the application's thread. */
static int apsm_cancel_fn(void *extra_state, int complete)
{
    struct apsm_op *op = extra_state;
    if (complete) {
        return MPI_SUCCESS; /* too late: the status already says "not cancelled" */
    }
    atomic_store_explicit(&op->cancel, true, memory_order_relaxed);
    /* sync: release; publishes op->cancel; pairs with the acquire exchange in
     * apsm_apply_cancels() */
    atomic_store_explicit(&apsm_g.cancel_pending, true, memory_order_release);
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ queue */

static void apsm_wake(void)
{
    /* sync: seq_cst; Dekker pair with the seq_cst store of sleeping in apsm_sleep() */
    if (atomic_load_explicit(&apsm_g.sleeping, memory_order_seq_cst)) {
        pthread_mutex_lock(&apsm_g.lock);
        pthread_cond_signal(&apsm_g.cond);
        pthread_mutex_unlock(&apsm_g.lock);
    }
}

int apsm_op_submit(struct apsm_op *op, MPI_Request *request)
{
    MPI_Request greq = MPI_REQUEST_NULL;
    int rc = PMPI_Grequest_start(apsm_query_fn, apsm_free_fn, apsm_cancel_fn, op, &greq);
    if (MPI_SUCCESS != rc) {
        apsm_mpi_error("MPI_Grequest_start", rc,
                       "calling the MPI library directly (no asynchronous progress for this "
                       "operation)");
        return rc;
    }
    op->greq = greq;
    atomic_fetch_add_explicit(&apsm_g.queued, 1, memory_order_relaxed);

    struct apsm_op *head = atomic_load_explicit(&apsm_g.head, memory_order_relaxed);
    do {
        op->next = head;
        /* sync: seq_cst; publishes op (pairs with the acquire exchange in
         * apsm_take_incoming()) and is the producer store of the Dekker pair with apsm_sleep() */
    } while (!atomic_compare_exchange_weak_explicit(&apsm_g.head, &head, op,
                                                    memory_order_seq_cst, memory_order_relaxed));
    apsm_wake();
    *request = greq;
    return MPI_SUCCESS;
}

void apsm_status_empty(MPI_Status *status, int error, int cancelled)
{
    memset(status, 0, sizeof *status);
    status->MPI_SOURCE = MPI_ANY_SOURCE;
    status->MPI_TAG = MPI_ANY_TAG;
    status->MPI_ERROR = error;
    PMPI_Status_set_elements_x(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, cancelled);
}

/* Publish op->status and complete the application's request; drops the queue's reference. */
static void apsm_complete(struct apsm_op *op)
{
    int cancelled = 0;
    PMPI_Test_cancelled(&op->status, &cancelled);
    /* sync: release; pairs with the acquire load of done in apsm_free_fn() */
    atomic_store_explicit(&op->done, true, memory_order_release);
    int rc = PMPI_Grequest_complete(op->greq);
    if (MPI_SUCCESS != rc) {
        apsm_mpi_error("MPI_Grequest_complete", rc, "a wait on this request will not return");
    }
    atomic_fetch_add_explicit(&apsm_g.completed, 1, memory_order_relaxed);
    if (cancelled) {
        atomic_fetch_add_explicit(&apsm_g.cancelled, 1, memory_order_relaxed);
    }
    apsm_op_release(op);
}

/* Make room for one more request; false if memory is exhausted (reported once). */
static bool apsm_reserve(struct apsm_active *a)
{
    static bool warned;
    if (a->n < a->cap) {
        return true;
    }
    int cap = 0 == a->cap ? 64 : 2 * a->cap;
    MPI_Request *reqs = realloc(a->reqs, (size_t) cap * sizeof *reqs);
    if (NULL != reqs) {
        a->reqs = reqs;
    }
    struct apsm_op **ops = realloc(a->ops, (size_t) cap * sizeof *ops);
    if (NULL != ops) {
        a->ops = ops;
    }
    int *idx = realloc(a->idx, (size_t) cap * sizeof *idx);
    if (NULL != idx) {
        a->idx = idx;
    }
    MPI_Status *statuses = realloc(a->statuses, (size_t) cap * sizeof *statuses);
    if (NULL != statuses) {
        a->statuses = statuses;
    }
    if (NULL == reqs || NULL == ops || NULL == idx || NULL == statuses) {
        if (!warned) {
            apsm_error("no memory to poll %d requests; new operations wait until some complete",
                       cap);
            warned = true;
        }
        return false;
    }
    a->cap = cap;
    return true;
}

/* Perform an MPI-IO op (or cancel it, if it was cancelled before) and complete it. */
static void apsm_perform_io(struct apsm_op *op, bool cancel)
{
    if (cancel) {
        apsm_status_empty(&op->status, MPI_SUCCESS, 1);
    } else {
        int rc = apsm_io_run(op->kind, &op->io, &op->status);
        if (MPI_SUCCESS != rc) {
            apsm_mpi_error(op->call, rc, APSM_RETURNED_BY_COMPLETION);
            apsm_status_empty(&op->status, rc, 0);
        } else {
            op->status.MPI_ERROR = MPI_SUCCESS; /* a blocking call leaves the field unset */
        }
    }
    apsm_io_drop_type(&op->io);
    apsm_complete(op);
}

/* Move one point-to-point op into the active set (honouring an early cancel), or perform an
 * MPI-IO op. */
static void apsm_accept(struct apsm_active *a, struct apsm_op *op)
{
    bool cancel = atomic_exchange_explicit(&op->cancel, false, memory_order_relaxed);
    if (APSM_OP_P2P != op->kind) {
        apsm_perform_io(op, cancel);
        return;
    }
    if (cancel) {
        int rc = PMPI_Cancel(&op->real);
        if (MPI_SUCCESS != rc) {
            apsm_mpi_error("MPI_Cancel", rc, "the request completes normally");
        }
    }
    a->reqs[a->n] = op->real;
    a->ops[a->n] = op;
    a->n++;
}

/* Take the incoming stack and move as many ops as fit into the active set. */
static void apsm_take_incoming(struct apsm_active *a)
{
    /* sync: acquire; pairs with the seq_cst CAS in apsm_op_submit() (op fields are visible) */
    struct apsm_op *lifo = atomic_exchange_explicit(&apsm_g.head, NULL, memory_order_acquire);
    struct apsm_op *fifo = NULL;
    struct apsm_op *fifo_tail = lifo;
    while (NULL != lifo) {
        struct apsm_op *next = lifo->next;
        lifo->next = fifo;
        fifo = lifo;
        lifo = next;
    }
    if (NULL != fifo) {
        if (NULL == a->backlog) {
            a->backlog = fifo;
        } else {
            a->backlog_tail->next = fifo;
        }
        a->backlog_tail = fifo_tail;
    }
    while (NULL != a->backlog) {
        struct apsm_op *op = a->backlog;
        if (APSM_OP_P2P == op->kind && !apsm_reserve(a)) {
            break;
        }
        a->backlog = op->next;
        apsm_accept(a, op);
    }
}

static void apsm_apply_cancels(struct apsm_active *a)
{
    /* sync: acquire; pairs with the release store in apsm_cancel_fn() */
    if (!atomic_exchange_explicit(&apsm_g.cancel_pending, false, memory_order_acquire)) {
        return;
    }
    for (int i = 0; i < a->n; ++i) {
        if (atomic_exchange_explicit(&a->ops[i]->cancel, false, memory_order_relaxed)) {
            int rc = PMPI_Cancel(&a->reqs[i]);
            if (MPI_SUCCESS != rc) {
                apsm_mpi_error("MPI_Cancel", rc, "the request completes normally");
            }
        }
    }
}

/* What the progress thread does after a poll that completed nothing. */
static void apsm_pause(enum apsm_poll poll)
{
    switch (poll) {
    case APSM_POLL_YIELD:
        sched_yield();
        break;
    case APSM_POLL_SLEEP:
        nanosleep(&(struct timespec){.tv_nsec = apsm_g.poll_sleep_ns}, NULL);
        break;
    case APSM_POLL_AUTO:
    case APSM_POLL_SPIN:
        break;
    }
}

/* Drop the completed entries (ops[i] == NULL) while keeping the order of the others. */
static void apsm_compact(struct apsm_active *a)
{
    int kept = 0;
    for (int i = 0; i < a->n; ++i) {
        if (NULL != a->ops[i]) {
            a->reqs[kept] = a->reqs[i];
            a->ops[kept] = a->ops[i];
            ++kept;
        }
    }
    a->n = kept;
}

/* One MPI_Testsome over the active set; completes what finished. */
static void apsm_poll(struct apsm_active *a)
{
    int outcount = 0;
    int rc = PMPI_Testsome(a->n, a->reqs, &outcount, a->idx, a->statuses);
    if (MPI_SUCCESS != rc && MPI_ERR_IN_STATUS != rc) {
        /* The request states are unknown: complete every op with the error so that no wait
         * hangs, and leave the real requests alone. */
        apsm_mpi_error("MPI_Testsome", rc, "completing every pending request with this error");
        for (int i = 0; i < a->n; ++i) {
            apsm_status_empty(&a->ops[i]->status, rc, 0);
            apsm_complete(a->ops[i]);
        }
        a->n = 0;
        return;
    }
    if (MPI_UNDEFINED == outcount) {
        outcount = 0;
    }
    for (int k = 0; k < outcount; ++k) {
        int i = a->idx[k];
        struct apsm_op *op = a->ops[i];
        op->status = a->statuses[k];
        if (MPI_SUCCESS == rc) {
            /* MPI sets the MPI_ERROR fields only when it returns MPI_ERR_IN_STATUS. */
            op->status.MPI_ERROR = MPI_SUCCESS;
        } else if (MPI_SUCCESS != op->status.MPI_ERROR) {
            apsm_mpi_error(op->call, op->status.MPI_ERROR, APSM_RETURNED_BY_COMPLETION);
        }
        apsm_complete(op);
        a->ops[i] = NULL;
    }
    if (outcount > 0) {
        apsm_compact(a);
    } else {
        apsm_pause(a->poll);
    }
}

/*
 * At finalize: give the remaining real requests back to the MPI library, exactly as if the
 * application had called MPI_Request_free on them (that is what a correct program did: it
 * completed everything else), and complete their generalized requests.
 */
static void apsm_hand_back(struct apsm_active *a)
{
    int count = 0;
    while (NULL != a->backlog) {
        struct apsm_op *op = a->backlog;
        a->backlog = op->next;
        if (APSM_OP_P2P == op->kind) {
            PMPI_Request_free(&op->real);
        } else {
            apsm_io_drop_type(&op->io);
        }
        apsm_status_empty(&op->status, MPI_ERR_PENDING, 0);
        apsm_complete(op);
        ++count;
    }
    for (int i = 0; i < a->n; ++i) {
        PMPI_Request_free(&a->reqs[i]);
        apsm_status_empty(&a->ops[i]->status, MPI_ERR_PENDING, 0);
        apsm_complete(a->ops[i]);
        ++count;
    }
    a->n = 0;
    if (count > 0) {
        apsm_info("%d operation(s) still pending at MPI_Finalize were handed back to the MPI "
                  "library (as after MPI_Request_free)",
                  count);
    }
}

/* Sleep until the stack is non-empty or finalize asks to stop. */
static void apsm_sleep(void)
{
    /* sync: seq_cst; Dekker pair with the seq_cst CAS in apsm_op_submit() and the load of
     * sleeping in apsm_wake() */
    atomic_store_explicit(&apsm_g.sleeping, true, memory_order_seq_cst);
    pthread_mutex_lock(&apsm_g.lock);
    /* sync: seq_cst load of head (Dekker, above); acquire load of stop pairs with the release
     * store in apsm_progress_stop() */
    while (NULL == atomic_load_explicit(&apsm_g.head, memory_order_seq_cst) &&
           !atomic_load_explicit(&apsm_g.stop, memory_order_acquire)) {
        pthread_cond_wait(&apsm_g.cond, &apsm_g.lock);
    }
    pthread_mutex_unlock(&apsm_g.lock);
    atomic_store_explicit(&apsm_g.sleeping, false, memory_order_relaxed);
}

/*
 * Bind this thread and choose its poll mode and the application's waits. A thread that shares
 * the process's only PU with the application has the application's waits yield the PU to it
 * (apsm_wait.c) and yields it back between polls. With the library's own waits, which spin on
 * that PU while the application waits for this thread, it sleeps between polls instead: a
 * yield would hand the PU straight back to the spinning waiter, so each completion would take
 * a scheduler time slice, while a short sleep makes the kernel preempt the waiter when the
 * pause ends. Both sides yielding is faster still: the sleeps cost a pause per protocol step
 * (pml ucx moves 1 MiB in 4 ms that way, 0.14 ms with yields).
 */
static enum apsm_poll apsm_progress_setup(void)
{
    bool shared = apsm_pin_self();
    const bool yield_waits =
        APSM_WAIT_YIELD == apsm_g.wait || (APSM_WAIT_AUTO == apsm_g.wait && shared);
    atomic_store_explicit(&apsm_g.yield_waits, yield_waits, memory_order_relaxed);
    enum apsm_poll poll = apsm_g.poll;
    if (APSM_POLL_AUTO == poll) {
        poll = shared && !yield_waits ? APSM_POLL_SLEEP : APSM_POLL_YIELD;
    }
#if defined(PR_SET_TIMERSLACK)
    if (APSM_POLL_SLEEP == poll) {
        /* The default slack (50 us) would stretch every pause by that much. */
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    }
#endif
    static const char *const names[] = {"auto", "spin", "yield", "sleep"};
    apsm_info("progress thread started: poll=%s, waits=%s%s", names[poll],
              yield_waits ? "yield" : "library",
              shared ? " (it shares the process's only PU)" : "");
    return poll;
}

static void *apsm_progress_main(void *arg)
{
    struct apsm_active a = {0};
    (void) arg;
    a.poll = apsm_progress_setup();
    for (;;) {
        /* Read stop before taking the stack: every op pushed before MPI_Finalize asked to stop
         * is then taken below and completed or handed back, none is left behind.
         * sync: acquire; pairs with the release store in apsm_progress_stop() */
        bool stop = atomic_load_explicit(&apsm_g.stop, memory_order_acquire);
        apsm_take_incoming(&a);
        apsm_apply_cancels(&a);
        if (0 == a.n && NULL == a.backlog) {
            if (stop) {
                break;
            }
            apsm_sleep();
            continue;
        }
        if (a.n > 0) {
            apsm_poll(&a);
        } else {
            apsm_pause(APSM_POLL_SLEEP); /* only a backlog: wait for memory */
        }
        if (stop) {
            apsm_hand_back(&a);
            break;
        }
    }
    free(a.reqs);
    free(a.ops);
    free(a.idx);
    free(a.statuses);
    return NULL;
}

int apsm_progress_start(void)
{
    int err = pthread_create(&apsm_g.thread, NULL, apsm_progress_main, NULL);
    if (0 != err) {
        apsm_error("cannot create the progress thread (%s): running without asynchronous "
                   "progress",
                   strerror(err));
        return err;
    }
    return 0;
}

void apsm_progress_stop(void)
{
    /* sync: release; pairs with the acquire loads of stop in apsm_progress_main() and
     * apsm_sleep() */
    atomic_store_explicit(&apsm_g.stop, true, memory_order_release);
    pthread_mutex_lock(&apsm_g.lock);
    pthread_cond_signal(&apsm_g.cond);
    pthread_mutex_unlock(&apsm_g.lock);
    int err = pthread_join(apsm_g.thread, NULL);
    if (0 != err) {
        apsm_error("cannot join the progress thread (%s)", strerror(err));
    }
}
