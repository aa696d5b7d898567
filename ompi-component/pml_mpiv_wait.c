/*
 * pml_mpiv_wait.c: MPI_Wait, Waitall, Waitany and Waitsome for mpiv's requests.
 *
 * MPI_Wait and friends go through ompi_request_functions; mpiv installs versions that
 * first wait for its own requests in its own way (a ULT blocks alone; a pthread drives
 * progress as the process's progress owner or sleeps until its completion or a hand-over
 * wakes it), then call Open MPI's default function, which finds the requests complete
 * and does the MPI bookkeeping (statuses, freeing, persistent requests). Sets that hold
 * an incomplete request of another kind (generalized, collective) go to the default
 * function directly; mpiv completes its requests with ompi_request_complete, so the
 * default waits work for them as well. */
#include "pml_mpiv.h"


#include "ompi/request/request.h"

#include <mpiv/mpiv.h>

static ompi_request_fns_t saved_fns;
static bool fns_installed;

static bool is_mpiv(const ompi_request_t *r)
{
    return r->req_free == mca_pml_mpiv_req_free;
}

static bool waitable(const ompi_request_t *r)
{
    return MPI_REQUEST_NULL != r && OMPI_REQUEST_INACTIVE != r->req_state;
}

bool mca_pml_mpiv_in_ult(void)
{
    mpiv_ult_h self;
    return MPIV_OK == mpiv_self(&self);
}

/* Polls of a wait before it registers a waiter (about 15 us here). */
#define MPIV_PREPOLLS 1024

/* Whether a wait must register on reqs[i]: an mpiv request that may still complete later.
 * In serial mode a complete request stays so and needs no registration (nothing else runs
 * between the checks); otherwise a request may complete between the count and the
 * registration, so every mpiv request counts (registering on a complete one only costs an
 * immediate wake-up). */
static bool must_register(ompi_request_t *r)
{
    return waitable(r) && is_mpiv(r) && !(mca_pml_mpiv.serial && REQUEST_COMPLETE(r));
}

/* The requests of a wait that polls first (mpiv_p2p_poll_alone). Complete requests stay
 * complete (only the waiting call may restart them), so each check resumes where the
 * last one stopped. */
struct poll_set {
    size_t n;
    size_t first; /* reqs[0..first) are complete */
    ompi_request_t **reqs;
};

static int poll_set_done(void *arg)
{
    struct poll_set *p = arg;
    while (p->first < p->n &&
           (!waitable(p->reqs[p->first]) || REQUEST_COMPLETE(p->reqs[p->first]))) {
        ++p->first;
    }
    return p->first == p->n;
}

/* Wait until all of reqs[0..n) that are mpiv requests are complete; false (nothing
 * done) when another kind of request is still incomplete. */
bool mca_pml_mpiv_wait_own(size_t n, ompi_request_t **reqs)
{
    int32_t pending = 0;
    mpiv_p2p_waiter_t *w;
    for (size_t i = 0; i < n; ++i) {
        if (waitable(reqs[i]) && !is_mpiv(reqs[i]) && !REQUEST_COMPLETE(reqs[i])) {
            return false;
        }
        pending += must_register(reqs[i]);
    }
    /* A pthread polls before it registers a waiter (for a budget it learned when other
     * threads wait too): registering on each request, waking and unwinding the wait cost
     * more than the polls (atomics on each request, both ways), on the path from an
     * arrival back to the application. */
    if (0 != pending) {
        struct poll_set set = {n, 0, reqs};
        if (mpiv_p2p_poll_alone(mca_pml_mpiv.engine, MPIV_PREPOLLS, poll_set_done, &set)) {
            return true;
        }
    }
    if (mca_pml_mpiv.serial) {
        pending = 0;
        for (size_t i = 0; i < n; ++i) {
            pending += must_register(reqs[i]);
        }
    }
    if (0 == pending) {
        return true;
    }
    w = mpiv_p2p_wait_begin(mca_pml_mpiv.engine, pending);
    for (size_t i = 0; i < n; ++i) {
        mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) reqs[i];
        void *expected = NULL;
        if (!must_register(reqs[i])) {
            continue;
        }
        if (!__atomic_compare_exchange_n(&req->waiter, &expected, w, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            mpiv_p2p_wake(mca_pml_mpiv.engine, w); /* already complete */
        }
    }
    mpiv_p2p_wait_end(mca_pml_mpiv.engine, w);
    return true;
}

/* Wait until at least one of the mpiv requests of reqs[0..n) completes, when all
 * incomplete ones are mpiv's. A ULT polls (yielding); a pthread registers once. */
static void wait_mpiv_any(size_t n, ompi_request_t **reqs)
{
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
        if (!waitable(reqs[i])) {
            continue;
        }
        if (REQUEST_COMPLETE(reqs[i]) || !is_mpiv(reqs[i])) {
            return;
        }
        any = true;
    }
    if (!any) {
        return;
    }
    if (mca_pml_mpiv_in_ult()) {
        for (;;) {
            for (size_t i = 0; i < n; ++i) {
                if (waitable(reqs[i]) && REQUEST_COMPLETE(reqs[i])) {
                    return;
                }
            }
            mpiv_p2p_progress(mca_pml_mpiv.engine);
            mpiv_yield();
        }
    } else {
        /* A pthread registers its one waiter on each request, for one completion. Every
         * request whose completion takes the waiter (req_done's exchange) wakes it, maybe
         * after this wait ended: before the thread's next wait may begin, those wakes
         * must all have landed (wait_settle), or a late one would end that wait early. The
         * registrations still in place are taken back; each of the others is one wake. */
        mpiv_p2p_waiter_t *w = mpiv_p2p_wait_begin(mca_pml_mpiv.engine, 1);
        size_t registered = 0;
        int32_t wakes = 0;
        for (size_t i = 0; i < n; ++i) {
            mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) reqs[i];
            void *expected = NULL;
            if (!waitable(reqs[i])) {
                continue;
            }
            if (!__atomic_compare_exchange_n(&req->waiter, &expected, w, false,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                mpiv_p2p_wake(mca_pml_mpiv.engine, w); /* complete already */
                wakes = 1;
                break;
            }
            registered = i + 1;
        }
        mpiv_p2p_wait_end(mca_pml_mpiv.engine, w);
        for (size_t i = 0; i < registered; ++i) {
            mca_pml_mpiv_request_t *req = (mca_pml_mpiv_request_t *) reqs[i];
            void *expected = w;
            if (waitable(reqs[i]) &&
                !__atomic_compare_exchange_n(&req->waiter, &expected, NULL, false,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                ++wakes; /* its completion took the waiter: its wake is due */
            }
        }
        mpiv_p2p_wait_settle(mca_pml_mpiv.engine, w, wakes);
    }
}

static int mpiv_wait(ompi_request_t **request, ompi_status_public_t *status)
{
    (void) mca_pml_mpiv_wait_own(1, request);
    return saved_fns.req_wait(request, status);
}

/* Whether requests[0..count) are all inactive (or MPI_REQUEST_NULL), mpiv requests, or
 * ompi_request_empty (complete at once: what a send that went inline returns). */
static bool all_mpiv(size_t count, ompi_request_t **requests)
{
    for (size_t i = 0; i < count; ++i) {
        const ompi_request_t *r = requests[i];
        if (OMPI_REQUEST_INACTIVE != r->req_state && !is_mpiv(r) && &ompi_request_empty != r) {
            return false;
        }
    }
    return true;
}

/* The end of MPI_Waitall over complete requests, as Open MPI's default function does it:
 * statuses copied, persistent requests made inactive, the others freed unless they failed
 * (their handles stay, as the default leaves them), MPI_ERR_IN_STATUS when one failed. */
static int finish_all(size_t count, ompi_request_t **requests, ompi_status_public_t *statuses)
{
    int mpi_error = OMPI_SUCCESS;
    opal_atomic_rmb(); /* the statuses after the completions seen */
    for (size_t i = 0; i < count; ++i) {
        ompi_request_t *r = requests[i];
        int rc;
        if (OMPI_REQUEST_INACTIVE == r->req_state) {
            if (MPI_STATUSES_IGNORE != statuses) {
                OMPI_COPY_STATUS(&statuses[i], ompi_status_empty, true);
            }
            continue;
        }
        rc = r->req_status.MPI_ERROR;
        if (MPI_STATUSES_IGNORE != statuses) {
            OMPI_COPY_STATUS(&statuses[i], r->req_status, true);
        }
        if (r->req_persistent) {
            r->req_state = OMPI_REQUEST_INACTIVE;
        } else if (MPI_SUCCESS == rc) {
            int tmp = ompi_request_free(&requests[i]);
            if (OMPI_SUCCESS == mpi_error && OMPI_SUCCESS != tmp) {
                mpi_error = tmp;
            }
        }
        if (OMPI_SUCCESS == mpi_error && OMPI_SUCCESS != rc) {
            mpi_error = MPI_ERR_IN_STATUS;
        }
    }
    return mpi_error;
}

static int mpiv_wait_all(size_t count, ompi_request_t **requests, ompi_status_public_t *statuses)
{
    /* A set of mpiv requests, all complete now, is finished here. Open MPI 4.1.4's default
     * function would still attach a wait object to each request (a CAS each), count them
     * down, and make, signal and destroy a mutex and condition variable: about as long as
     * the rest of a short message's round trip. It also, when it finds a request already
     * complete with an error, skips its wait and then, with threads
     * (MPI_THREAD_MULTIPLE), spins for ever in WAIT_SYNC_RELEASE: its sync stays
     * "signaling". */
    if (mca_pml_mpiv_wait_own(count, requests) && all_mpiv(count, requests)) {
        return finish_all(count, requests, statuses);
    }
    return saved_fns.req_wait_all(count, requests, statuses);
}

static int mpiv_wait_any(size_t count, ompi_request_t **requests, int *index,
                         ompi_status_public_t *status)
{
    wait_mpiv_any(count, requests);
    return saved_fns.req_wait_any(count, requests, index, status);
}

static int mpiv_wait_some(size_t count, ompi_request_t **requests, int *outcount, int *indices,
                          ompi_status_public_t *statuses)
{
    wait_mpiv_any(count, requests);
    return saved_fns.req_wait_some(count, requests, outcount, indices, statuses);
}

void mca_pml_mpiv_install_wait_functions(void)
{
    if (!fns_installed) {
        saved_fns = ompi_request_functions;
        ompi_request_functions.req_wait = mpiv_wait;
        ompi_request_functions.req_wait_all = mpiv_wait_all;
        ompi_request_functions.req_wait_any = mpiv_wait_any;
        ompi_request_functions.req_wait_some = mpiv_wait_some;
        fns_installed = true;
    }
}

void mca_pml_mpiv_restore_wait_functions(void)
{
    if (fns_installed) {
        ompi_request_functions = saved_fns;
        fns_installed = false;
    }
}

