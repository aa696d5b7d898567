/*
 * pml_mpiv_mpix.h: what libmpiv-mpix (mpix_endpoints.c) calls in the mpiv component, found
 * by name with dlsym when mpiv is the selected PML. Only Open MPI's types: libmpiv-mpix is
 * built without mpiv's own headers.
 */
#ifndef PML_MPIV_MPIX_H
#define PML_MPIV_MPIX_H

#include "ompi_config.h"

#include "ompi/communicator/communicator.h"
#include "ompi/info/info.h"
#include "ompi/request/request.h"

BEGIN_C_DECLS

/** The communicator constructors mpiv runs on an endpoints handle. */
typedef enum {
    MCA_PML_MPIV_EP_DUP = 1,           /**< MPI_Comm_dup */
    MCA_PML_MPIV_EP_DUP_WITH_INFO = 2, /**< MPI_Comm_dup_with_info */
    MCA_PML_MPIV_EP_SPLIT = 3,         /**< MPI_Comm_split */
    MCA_PML_MPIV_EP_SPLIT_TYPE = 4,    /**< MPI_Comm_split_type */
    /** MPIX_Comm_create_endpoints with a handle as the parent (through
     *  mca_pml_mpiv_create_endpoints, not mca_pml_mpiv_endpoint_construct) */
    MCA_PML_MPIV_EP_CREATE = 5,
    /** MPI_Comm_idup (through mca_pml_mpiv_endpoint_idup) */
    MCA_PML_MPIV_EP_IDUP = 6,
} mca_pml_mpiv_ep_call_t;

/** "mca_pml_mpiv_create_endpoints": MPIX_Comm_create_endpoints. */
typedef int (*mca_pml_mpiv_create_endpoints_fn_t)(ompi_communicator_t *parent, int my_num_ep,
                                                  opal_info_t *info, ompi_communicator_t **out);

/** "mca_pml_mpiv_is_endpoint": whether @p comm is a handle of an endpoints communicator. */
typedef int (*mca_pml_mpiv_is_endpoint_fn_t)(ompi_communicator_t *comm);

/** "mca_pml_mpiv_endpoint_construct": constructor @p call (mca_pml_mpiv_ep_call_t) on the
 *  handle @p comm, collective over every endpoint rank; @p arg is the color
 *  (MCA_PML_MPIV_EP_SPLIT) or the split_type (MCA_PML_MPIV_EP_SPLIT_TYPE), @p key the key
 *  of both; @p info the hints of DUP_WITH_INFO and SPLIT_TYPE (MPI_INFO_NULL: none). The
 *  handle's errors go through its error handler, with a message. */
typedef int (*mca_pml_mpiv_endpoint_construct_fn_t)(ompi_communicator_t *comm, int call,
                                                    int arg, int key, ompi_info_t *info,
                                                    ompi_communicator_t **newcomm);

/** "mca_pml_mpiv_endpoint_idup": MPI_Comm_idup on the handle @p comm, collective over every
 *  endpoint rank and local: it returns at once with @p request, which completes once every
 *  endpoint rank called it and the new handle is in *@p newcomm. */
typedef int (*mca_pml_mpiv_endpoint_idup_fn_t)(ompi_communicator_t *comm,
                                               ompi_communicator_t **newcomm,
                                               ompi_request_t **request);

END_C_DECLS

#endif /* PML_MPIV_MPIX_H */
