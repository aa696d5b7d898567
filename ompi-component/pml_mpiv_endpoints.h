/*
 * pml_mpiv_endpoints.h: the endpoints communicators' state inside the component, shared by
 * pml_mpiv_endpoints.c (building handles, the registry, freeing) and
 * pml_mpiv_endpoints_ops.c (the constructors called on a handle). See the design comment
 * at the top of pml_mpiv_endpoints.c.
 */
#ifndef PML_MPIV_ENDPOINTS_H
#define PML_MPIV_ENDPOINTS_H

#include "pml_mpiv.h"

#include "opal/threads/mutex.h"

BEGIN_C_DECLS

struct mca_pml_mpiv_ep_op;

/** What the handles of one endpoints communicator of this process share. Built whole by
 *  mca_pml_mpiv_ep_build before any handle is published; afterwards only the fields
 *  marked (ep_lock) change, under mca_pml_mpiv_ep_lock. Freed with the last handle. */
typedef struct mca_pml_mpiv_ep_shared {
    int live;                           /* handles not freed yet (ep_lock) */
    ompi_communicator_t *proc_comm;     /* its processes, one rank each */
    ompi_communicator_t **handles;      /* by endpoint index; NULL once freed (ep_lock) */
    int count;                          /* endpoints (handles) of this process */
    int total;                          /* ranks of the communicator */
    int *rank_proc;                     /* rank -> proc_comm rank of its process */
    uint16_t *rank_queue;               /* rank -> its inbound queue in its process */
    int *proc_counts;                   /* proc_comm rank -> its endpoints */
    int *my_ranks;                      /* endpoint index -> rank (increasing) */
    uint64_t *ops;                      /* constructor calls per handle (ep_lock) */
    struct mca_pml_mpiv_ep_op *pending; /* calls not taken by every handle yet (ep_lock) */
    opal_mutex_t op_lock;               /* one constructor at a time on proc_comm */
    uint64_t ran;                       /* calls run (op_lock): they run in call order */
} mca_pml_mpiv_ep_shared_t;

/** Guards the registry and the (ep_lock) fields of every mca_pml_mpiv_ep_shared_t. */
extern opal_mutex_t mca_pml_mpiv_ep_lock;

/** Join the pthreads that ran constructor work (pml_mpiv_endpoints_ops.c): at finalize. */
void mca_pml_mpiv_ep_join_workers(void);

/** The shared state of the endpoints handle @p comm and its endpoint index (*k_p), or
 *  NULL when @p comm is not a live handle. Caller holds mca_pml_mpiv_ep_lock. */
mca_pml_mpiv_ep_shared_t *mca_pml_mpiv_ep_lookup(ompi_communicator_t *comm, int *k_p);

/** A new endpoints communicator, as mca_pml_mpiv_ep_build makes it. */
typedef struct mca_pml_mpiv_ep_spec {
    ompi_communicator_t *proc_comm;     /* its processes, one rank each (build takes it) */
    int total;                          /* ranks */
    const int *rank_proc;               /* rank -> proc_comm rank of its process */
    const uint16_t *rank_queue;         /* rank -> its inbound queue (NULL: endpoint index) */
    /* By new endpoint index (NULL: errh): the handle whose error handler it takes, and
     * whose attributes it copies when copy_attrs */
    ompi_communicator_t *const *like;
    ompi_errhandler_t *errh;
    bool copy_attrs;
    /* By new endpoint index (NULL, or NULL entries: none): hints the handle gets, as
     * MPI_Comm_dup_with_info gives them (mpiv's collective preference kept) */
    opal_info_t *const *infos;
} mca_pml_mpiv_ep_spec_t;

/** Build this process's handles of the endpoints communicator @p spec describes:
 *  collective over spec->proc_comm, one call per process. Rank r belongs to the process
 *  spec->rank_proc[r]; a process's handles are its ranks in increasing order (endpoint
 *  index 0, 1, ...), and every process of proc_comm must have at least one (at most
 *  65535). One context id, agreed over proc_comm (one participant per process); at the
 *  end the processes agree on success, so either all have their handles or none.
 *  @param[out] out   this process's handles, by endpoint index
 *  @param[out] why_p what failed, for the error message
 *  @return MPI_SUCCESS or an MPI error class; on error nothing is left behind (proc_comm
 *          freed). A process that fails before the context-id agreement (out of memory)
 *          leaves the others waiting, as Open MPI's own constructors do.
 *  @context any thread or ULT; blocks (collective) */
int mca_pml_mpiv_ep_build(const mca_pml_mpiv_ep_spec_t *spec, ompi_communicator_t **out,
                          const char **why_p);

/** The queues of @p n new endpoints of one MPIX_Comm_create_endpoints call: with the info
 *  key mpiv_worker (a comma-separated list of worker endpoints) entry k mod its length for
 *  the k-th, else (@p first + k) mod the queue count.
 *  @param[out] queues  n entries
 *  @return false when the key's value is not such a list
 *  @context any thread */
bool mca_pml_mpiv_ep_parse_workers(opal_info_t *info, int n, int first, uint16_t *queues);

/** MPIX_Comm_create_endpoints(@p parent, @p my_num_ep, @p info, @p out) where @p parent is
 *  an endpoints handle: one of the constructor calls of pml_mpiv_endpoints_ops.c (the
 *  handles of a process meet), collective over every endpoint rank of the parent. The new
 *  communicator has the sum of every rank's my_num_ep ranks, by parent rank, then by index
 *  in its out array; errors (a bad count on any rank, another constructor as the same
 *  call) fail every rank, through @p parent's error handler.
 *  @param[out] out  my_num_ep handles, written on success only
 *  @return MPI_SUCCESS or what the error handler returned
 *  @context any thread or ULT; blocks (collective) */
int mca_pml_mpiv_ep_create_on_handle(ompi_communicator_t *parent, int my_num_ep,
                                     opal_info_t *info, ompi_communicator_t **out);

END_C_DECLS

#endif /* PML_MPIV_ENDPOINTS_H */
