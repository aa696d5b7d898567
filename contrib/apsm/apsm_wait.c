/*
 * Blocking completion calls: MPI_Wait, MPI_Waitall, MPI_Waitany, MPI_Waitsome.
 *
 * Yielding waits. When the progress thread shares the process's only PU with the application,
 * a library's blocking wait spins on that PU while the operation it waits for needs the
 * progress thread to run: each completion then costs a scheduler time slice, and a spin lock
 * inside the library (UCX's worker lock) may be held by whichever thread the kernel preempts,
 * so the other spins a whole slice on it (pml ucx: 20 ms instead of 0.2 ms per 1 MiB receive).
 * While operations are queued, such a wait is made of the matching test call and
 * sched_yield(), which hands the PU to the progress thread between two tests. MPI defines each
 * wait as its test repeated until it reports completion (same statuses, same errors), so the
 * application sees no difference. MPIV_APSM_WAIT chooses: auto (yield when the PU is shared),
 * yield (always, while operations are queued) or library (the library's own wait).
 *
 * The MPICH build also steers MPI_Waitall around an MPICH assertion (below).
 */
#include "apsm.h"

#include <sched.h>
#include <stdlib.h>

/* Whether a wait that starts now should test and yield: the progress thread asked for it and
 * operations are queued (relaxed: a stale answer only picks the library's wait, which is
 * correct, just slower on a shared PU). */
static bool apsm_yield_wait(void)
{
    if (!apsm_on() || !atomic_load_explicit(&apsm_g.yield_waits, memory_order_relaxed) ||
        atomic_load_explicit(&apsm_g.queued, memory_order_relaxed) ==
            atomic_load_explicit(&apsm_g.completed, memory_order_relaxed)) {
        return false;
    }
    atomic_fetch_add_explicit(&apsm_g.yielding_waits, 1, memory_order_relaxed);
    return true;
}

MPIV_API int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    if (!apsm_yield_wait()) {
        return PMPI_Wait(request, status);
    }
    for (int flag = 0;; sched_yield()) {
        int rc = PMPI_Test(request, &flag, status);
        if (MPI_SUCCESS != rc || flag) {
            return rc;
        }
    }
}

/* MPI_Waitall on requests that may be MPI_REQUEST_NULL (see the MPICH note below). */
static int apsm_waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    if (!apsm_yield_wait()) {
        return PMPI_Waitall(count, requests, statuses);
    }
    for (int flag = 0;; sched_yield()) {
        int rc = PMPI_Testall(count, requests, &flag, statuses);
        if (MPI_SUCCESS != rc || flag) {
            return rc;
        }
    }
}

MPIV_API int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    if (!apsm_yield_wait()) {
        return PMPI_Waitany(count, requests, index, status);
    }
    for (int flag = 0;; sched_yield()) {
        int rc = PMPI_Testany(count, requests, index, &flag, status);
        if (MPI_SUCCESS != rc || flag) {
            return rc;
        }
    }
}

MPIV_API int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                          MPI_Status statuses[])
{
    if (!apsm_yield_wait()) {
        return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    }
    for (;; sched_yield()) {
        int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
        if (MPI_SUCCESS != rc || 0 != *outcount) {
            return rc; /* MPI_UNDEFINED when no request was active, as for MPI_Waitsome */
        }
    }
}

#if !defined(MPICH_VERSION)
MPIV_API int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    return apsm_waitall(count, requests, statuses);
}
#else
/*
 * MPICH 4.0.2 aborts in MPI_Waitall ("Assertion failed in src/mpi/request/request_impl.c:
 * request_ptrs[i]->kind != MPIR_REQUEST_KIND__GREQUEST") when the array holds MPI_REQUEST_NULL
 * and a classic generalized request that is not complete yet: on that path it expects such
 * requests to be finished before it waits. Waiting on the non-null entries only takes its
 * other path, which polls them like any request; the null entries get the empty status.
 */
MPIV_API int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    enum { ON_STACK = 64 };
    MPI_Request stack_reqs[ON_STACK];
    MPI_Status stack_sts[ON_STACK];
    int live = 0;
    for (int i = 0; i < count; ++i) {
        live += MPI_REQUEST_NULL != requests[i];
    }
    if (!apsm_on() || live == count || 0 == live) {
        return apsm_waitall(count, requests, statuses);
    }
    MPI_Request *reqs = stack_reqs;
    MPI_Status *sts = stack_sts;
    if (live > ON_STACK) {
        reqs = malloc((size_t) live * sizeof *reqs);
        sts = malloc((size_t) live * sizeof *sts);
        if (NULL == reqs || NULL == sts) {
            free(reqs);
            free(sts);
            apsm_error("MPI_Waitall: no memory to set %d null requests aside", count - live);
            return MPI_ERR_NO_MEM;
        }
    }
    for (int i = 0, k = 0; i < count; ++i) {
        if (MPI_REQUEST_NULL != requests[i]) {
            reqs[k++] = requests[i];
        }
    }
    int rc = apsm_waitall(live, reqs, MPI_STATUSES_IGNORE == statuses ? MPI_STATUSES_IGNORE : sts);
    for (int i = 0, k = 0; i < count; ++i) {
        if (MPI_REQUEST_NULL != requests[i]) {
            requests[i] = reqs[k];
            if (MPI_STATUSES_IGNORE != statuses) {
                statuses[i] = sts[k];
            }
            ++k;
        } else if (MPI_STATUSES_IGNORE != statuses) {
            apsm_status_empty(&statuses[i], MPI_SUCCESS, 0);
        }
    }
    if (reqs != stack_reqs) {
        free(reqs);
        free(sts);
    }
    return rc;
}
#endif
