/*
 * pml_mpiv_endpoints_ops.h: what the meeting of an endpoints communicator's handles
 * (pml_mpiv_endpoints_meet.c) and the work of its constructors (pml_mpiv_endpoints_ops.c)
 * share: the record of one constructor call and the argument errors it carries.
 */
#ifndef PML_MPIV_ENDPOINTS_OPS_H
#define PML_MPIV_ENDPOINTS_OPS_H

#include "pml_mpiv_endpoints.h"

#include "ompi/request/request.h"

#include "pml_mpiv_mpix.h"

/* Argument errors, exchanged in place of the color or count (valid colors: >= 0,
 * MPI_UNDEFINED; valid counts: 1 .. 65535). */
enum {
    BAD_COLOR = -1,
    BAD_SPLIT_TYPE = -2,
    BAD_NEWCOMM = -3,
    BAD_INFO = -4,
    BAD_NUM_EP = -5,
    BAD_WORKER = -6,
    BAD_REQUEST = -7
};

/* A constructor call on the handles of one endpoints communicator: the n-th call on each
 * handle of this process (mca_pml_mpiv_ep_lock, but done and what it publishes). */
typedef struct mca_pml_mpiv_ep_op {
    uint64_t seq;                       /* n */
    int arrived, taken;                 /* handles that called, that took their result */
    int done;                           /* the results are there (release/acquire) */
    int rc;                             /* MPI error class */
    char why[224];                      /* what failed */
    struct {
        int call, arg, key, bad;        /* bad: 0 or an argument error */
        ompi_communicator_t **out;      /* MPIX_Comm_create_endpoints: the caller's array */
        ompi_communicator_t **newcomm;  /* MPI_Comm_idup: where its new handle goes, */
        ompi_request_t *req;            /*   and its request (NULL: a blocking call) */
    } *args;                            /* by endpoint index */
    /* By endpoint index: hints passed, or MPIX_Comm_create_endpoints's info (NULL: none) */
    opal_info_t **infos;
    /* By endpoint index (NULL: MPI_COMM_NULL); MPIX_Comm_create_endpoints's arg handles
     * go straight to args[k].out, its caller waiting until done */
    ompi_communicator_t **results;
    mca_pml_mpiv_ep_shared_t *shared;   /* the communicator's */
    struct mca_pml_mpiv_ep_op *next;
} mca_pml_mpiv_ep_op_t;

/** The name of constructor @p call (mca_pml_mpiv_ep_call_t), for messages. */
const char *mca_pml_mpiv_ep_call_name(int call);

/** Do call @p op for this process's handles of @p sh: the exchange of every rank's
 *  arguments over sh->proc_comm, then the construction; results and errors in @p op.
 *  Caller holds sh->op_lock. */
void mca_pml_mpiv_ep_run(mca_pml_mpiv_ep_shared_t *sh, mca_pml_mpiv_ep_op_t *op);

#endif /* PML_MPIV_ENDPOINTS_OPS_H */
