/*
 * Non-blocking point-to-point interceptors (seed 002, §3.2 and §5.3).
 *
 * The real call is made here, in the application's thread: a send and a matching receive
 * posted by one process must both be posted when the calls return, whatever the progress
 * thread is doing. Only then is the request queued.
 *
 * Eager awareness: a message of at most apsm_g.eager_limit bytes is not queued, its real
 * request goes back to the application. Such a message travels eagerly: the send completes
 * without the receiver and the receive is one short copy, so the queue would only add latency
 * (§5.3). The size is count times the datatype size, checked
 * after the real call succeeded so that an invalid datatype is reported by that call, as
 * without APSM. Messages to or from MPI_PROC_NULL are complete at once and never queued.
 * MPI_Ibsend follows the same rule; its real request completes as soon as the data sits in the
 * attached buffer, so the progress thread completes it on its next poll (the transfer out of
 * the attached buffer is the library's internal business and APSM cannot see it).
 */
#include "apsm.h"

/* Should a successfully started message of count elements of type be queued? */
static bool apsm_wants(int count, MPI_Datatype type, int peer)
{
    MPI_Count size = 0;
    if (!apsm_on() || MPI_PROC_NULL == peer) {
        return false;
    }
    if (0 == apsm_g.eager_limit) {
        return true;
    }
    if (MPI_SUCCESS != PMPI_Type_size_x(type, &size)) {
        return false; /* cannot happen for a type the real call accepted */
    }
    return (MPI_Count) count * size > apsm_g.eager_limit;
}

/*
 * Replace the real request in *request by a generalized request completed by the progress
 * thread. Whatever fails here, the application keeps a valid request: the real one.
 */
static int apsm_wrap(int rc, const char *call, int count, MPI_Datatype type, int peer,
                     MPI_Request *request)
{
    if (MPI_SUCCESS != rc || !apsm_wants(count, type, peer)) {
        return rc;
    }
    struct apsm_op *op = apsm_op_new(APSM_OP_P2P, call);
    if (NULL == op) {
        return MPI_SUCCESS;
    }
    op->real = *request;
    if (MPI_SUCCESS != apsm_op_submit(op, request)) {
        apsm_op_discard(op);
    }
    return MPI_SUCCESS;
}

MPIV_API int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                       MPI_Comm comm, MPI_Request *request)
{
    int rc = PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
    return apsm_wrap(rc, "MPI_Isend", count, datatype, dest, request);
}

MPIV_API int MPI_Ibsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                        MPI_Comm comm, MPI_Request *request)
{
    int rc = PMPI_Ibsend(buf, count, datatype, dest, tag, comm, request);
    return apsm_wrap(rc, "MPI_Ibsend", count, datatype, dest, request);
}

MPIV_API int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                        MPI_Comm comm, MPI_Request *request)
{
    int rc = PMPI_Issend(buf, count, datatype, dest, tag, comm, request);
    return apsm_wrap(rc, "MPI_Issend", count, datatype, dest, request);
}

MPIV_API int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                        MPI_Comm comm, MPI_Request *request)
{
    int rc = PMPI_Irsend(buf, count, datatype, dest, tag, comm, request);
    return apsm_wrap(rc, "MPI_Irsend", count, datatype, dest, request);
}

MPIV_API int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                       MPI_Comm comm, MPI_Request *request)
{
    int rc = PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
    return apsm_wrap(rc, "MPI_Irecv", count, datatype, source, request);
}
