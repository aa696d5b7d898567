/*
 * mpix_endpoints.h: the MPI endpoints extension (MPIX_Comm_create_endpoints), for Open
 * MPI 4.1 with the mpiv PML (`mpirun --mca pml mpiv`). Compile with mpicc and link with
 * -lmpiv-mpix (`pkg-config --cflags --libs mpiv-mpix`; `pkg-config mpiv` gives the include
 * path).
 *
 * An endpoints communicator gives each thread (or mpiv ULT) of a process a rank of its
 * own: a process asks for my_num_ep ranks and gets that many handles, each a distinct
 * MPI_Comm whose MPI_Comm_rank is its own rank. The handles are ordinary communicators:
 * point-to-point with full MPI semantics, collectives (made by every rank: by several
 * threads of one process at once), attributes, MPI_Comm_free (one call per handle, from
 * any thread, in any order). A handle's messages are matched in a table of its own: a
 * wildcard receive on one handle never takes a message sent to another.
 *
 * MPI_Comm_dup, MPI_Comm_dup_with_info, MPI_Comm_split and MPI_Comm_split_type on a handle
 * are collectives of every endpoint rank, with MPI's semantics; they give endpoints
 * communicators again, in which a process's handles are its ranks in increasing order.
 * MPI_Comm_split_type takes MPI_COMM_TYPE_SHARED (the ranks of the processes on one node)
 * or MPI_UNDEFINED; another type fails with MPI_ERR_ARG. An argument error on any rank
 * fails the call on every rank (MPI_ERR_ARG, MPI_ERR_INFO), and so do different
 * constructors called as the same collective call (MPI_ERR_COMM). MPI_Comm_idup on a
 * handle is local: it returns a request at once, which completes once every endpoint rank
 * has called it. MPI_Comm_create, MPI_Comm_create_group, MPI_Cart_create and
 * MPI_Intercomm_create on a handle fail with MPI_ERR_COMM (not supported yet). Errors go
 * through the handle's error handler.
 *
 * Placement: each handle receives through one worker endpoint of its process, which
 * MPI_Comm_get_info reports as "mpiv_worker" (see info below). It is fixed at creation:
 * MPI_Comm_set_info cannot move it (Open MPI then treats the key as an ignored hint and
 * stops reporting it). A pthread whose first send, receive or probe is on a handle is
 * bound to that handle's endpoint; an mpiv ULT worker w to endpoint w mod
 * pml_mpiv_workers. Run the ULTs that serve a handle on worker (the value reported) mod
 * the ULT runtime's worker count (mpiv_spawn's worker argument).
 *
 * A handle can be the parent of MPIX_Comm_create_endpoints: every endpoint rank of the
 * parent calls it (the threads of a process at once), each with its own my_num_ep, and
 * gets its handles of the new communicator, ranked by parent rank, then by index.
 */
#ifndef MPIX_ENDPOINTS_H
#define MPIX_ENDPOINTS_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Create an endpoints communicator: collective over @p parent_comm (an
 *        intra-communicator, possibly itself an endpoints communicator: then every one
 *        of its endpoint ranks calls); each rank asks for its own @p my_num_ep (>= 1;
 *        ranks may differ). The new communicator has the sum of the counts as its size,
 *        its ranks ordered by parent rank, then by handle index.
 * @param[in]  parent_comm    the parent intra-communicator
 * @param[in]  my_num_ep      ranks (handles) this process wants, 1 .. 65535
 * @param[in]  info           hints, or MPI_INFO_NULL. "mpiv_worker": a comma-separated list
 *                            of mpiv worker endpoints (0 .. pml_mpiv_workers - 1); handle k
 *                            receives through entry k mod (the list's length), by default
 *                            through endpoint k mod pml_mpiv_workers (an endpoints
 *                            parent: the process's k-th new endpoint over all its handles'
 *                            calls, by parent rank). Its messages are
 *                            matched by whichever thread drains that endpoint's queue, so a
 *                            thread that serves a handle does best on the handle's endpoint.
 *                            A bad value on any process fails the call on every process
 *                            (MPI_ERR_INFO_VALUE). Dups and splits keep each endpoint's.
 * @param[out] out_comm_hdls  my_num_ep handles; handle i has rank (this process's first
 *                            rank) + i
 * @return MPI_SUCCESS; otherwise through @p parent_comm's error handler, with a message:
 *         MPI_ERR_ARG (a count below 1 on any rank), MPI_ERR_COMM (an
 *         inter-communicator parent; on an endpoints parent, another constructor called by
 *         some rank as the same collective call), MPI_ERR_OTHER (MPI not initialized with
 *         MPI_THREAD_MULTIPLE), MPI_ERR_UNSUPPORTED_OPERATION (the PML is not mpiv)
 * @context collective; MPI_THREAD_MULTIPLE
 */
int MPIX_Comm_create_endpoints(MPI_Comm parent_comm, int my_num_ep, MPI_Info info,
                               MPI_Comm out_comm_hdls[]);

#ifdef __cplusplus
}
#endif

#endif /* MPIX_ENDPOINTS_H */
