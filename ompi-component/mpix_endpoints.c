/*
 * mpix_endpoints.c: libmpiv-mpix, MPIX_Comm_create_endpoints for applications (see
 * <mpiv/mpix_endpoints.h>). An out-of-tree component cannot add to Open MPI's MPI
 * extensions, so this small library forwards to the mpiv PML's entry points
 * (pml_mpiv_mpix.h) when mpiv is the selected PML, and fails through the parent's error
 * handler otherwise. It also stands in front of Open MPI's communicator constructors (PMPI
 * interposition: linked before libmpi): on an endpoints handle, Open MPI's would run its
 * context-id agreement once per handle of a process and never agree, so MPI_Comm_dup,
 * MPI_Comm_dup_with_info, MPI_Comm_idup, MPI_Comm_split and MPI_Comm_split_type go to mpiv
 * (the handles of a process meet and take part as one, pml_mpiv_endpoints_ops.c) and the
 * others are refused with MPI_ERR_COMM. Other communicators go to Open MPI untouched.
 */
#include "ompi_config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "ompi/communicator/communicator.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/info/info.h"
#include "ompi/mca/pml/base/base.h"

#include <mpiv/mpix_endpoints.h>

#include "pml_mpiv_mpix.h"

/* An entry point of the component: global symbol lookup, else the loaded module by name. */
static void *find_entry(const char *name)
{
    void *sym = dlsym(RTLD_DEFAULT, name);
    if (NULL == sym) {
        void *module = dlopen("mca_pml_mpiv.so", RTLD_NOW | RTLD_NOLOAD);
        if (NULL != module) {
            sym = dlsym(module, name);
            dlclose(module); /* RTLD_NOLOAD took a reference */
        }
    }
    return sym;
}

/* Whether @p comm is a handle of an endpoints communicator. */
static int is_endpoint(MPI_Comm comm)
{
    static mca_pml_mpiv_is_endpoint_fn_t cached; /* found once; threads may race to store
                                                    the same value */
    /* sync: acquire; pairs with the release store below (the pointer only). */
    mca_pml_mpiv_is_endpoint_fn_t fn = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (NULL == fn) {
        if (0 != strcmp(mca_pml_base_selected_component.pmlm_version.mca_component_name, "mpiv")) {
            return 0;
        }
        fn = (mca_pml_mpiv_is_endpoint_fn_t) find_entry("mca_pml_mpiv_is_endpoint");
        /* sync: release; pairs with the acquire load above. */
        __atomic_store_n(&cached, fn, __ATOMIC_RELEASE);
    }
    return NULL != fn && MPI_COMM_NULL != comm && !ompi_comm_invalid(comm) && fn(comm);
}

/* Constructor @p call on the endpoints handle @p comm: mpiv's (a component without the
 * entry point: refused rather than left to Open MPI's, which would never agree). */
static int construct(MPI_Comm comm, int call, int arg, int key, MPI_Info info,
                     MPI_Comm *newcomm, const char *name)
{
    const mca_pml_mpiv_endpoint_construct_fn_t fn =
        (mca_pml_mpiv_endpoint_construct_fn_t) find_entry("mca_pml_mpiv_endpoint_construct");
    char message[160];
    if (NULL == fn) {
        snprintf(message, sizeof(message),
                 "%s: this mpiv component cannot run it on an endpoints communicator", name);
        return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_COMM, message);
    }
    return fn(comm, call, arg, key, info, newcomm);
}

/* The constructors mpiv does not run on a handle: refused with MPI_ERR_COMM. */
#define MPIX_REFUSE(_comm, _name)                                                            \
    do {                                                                                     \
        if (is_endpoint(_comm)) {                                                            \
            return OMPI_ERRHANDLER_INVOKE((_comm), MPI_ERR_COMM,                             \
                                          _name ": not supported on an endpoints "           \
                                                "communicator yet");                         \
        }                                                                                    \
    } while (0)

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    if (is_endpoint(comm)) {
        return construct(comm, MCA_PML_MPIV_EP_DUP, 0, 0, MPI_INFO_NULL, newcomm,
                         "MPI_Comm_dup");
    }
    return PMPI_Comm_dup(comm, newcomm);
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
    if (is_endpoint(comm)) {
        return construct(comm, MCA_PML_MPIV_EP_DUP_WITH_INFO, 0, 0, info, newcomm,
                         "MPI_Comm_dup_with_info");
    }
    return PMPI_Comm_dup_with_info(comm, info, newcomm);
}

int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request)
{
    if (is_endpoint(comm)) {
        const mca_pml_mpiv_endpoint_idup_fn_t fn =
            (mca_pml_mpiv_endpoint_idup_fn_t) find_entry("mca_pml_mpiv_endpoint_idup");
        if (NULL == fn) {
            return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_COMM,
                                          "MPI_Comm_idup: this mpiv component cannot run it on "
                                          "an endpoints communicator");
        }
        return fn(comm, newcomm, request);
    }
    return PMPI_Comm_idup(comm, newcomm, request);
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    if (is_endpoint(comm)) {
        return construct(comm, MCA_PML_MPIV_EP_SPLIT, color, key, MPI_INFO_NULL, newcomm,
                         "MPI_Comm_split");
    }
    return PMPI_Comm_split(comm, color, key, newcomm);
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
    if (is_endpoint(comm)) {
        return construct(comm, MCA_PML_MPIV_EP_SPLIT_TYPE, split_type, key, info, newcomm,
                         "MPI_Comm_split_type");
    }
    return PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
    MPIX_REFUSE(comm, "MPI_Comm_create");
    return PMPI_Comm_create(comm, group, newcomm);
}

int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm)
{
    MPIX_REFUSE(comm, "MPI_Comm_create_group");
    return PMPI_Comm_create_group(comm, group, tag, newcomm);
}

int MPI_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *comm_cart)
{
    MPIX_REFUSE(comm_old, "MPI_Cart_create");
    return PMPI_Cart_create(comm_old, ndims, dims, periods, reorder, comm_cart);
}

int MPI_Intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm bridge_comm,
                         int remote_leader, int tag, MPI_Comm *newintercomm)
{
    MPIX_REFUSE(local_comm, "MPI_Intercomm_create");
    return PMPI_Intercomm_create(local_comm, local_leader, bridge_comm, remote_leader, tag,
                                 newintercomm);
}

int MPIX_Comm_create_endpoints(MPI_Comm parent_comm, int my_num_ep, MPI_Info info,
                               MPI_Comm out_comm_hdls[])
{
    const char *pml = mca_pml_base_selected_component.pmlm_version.mca_component_name;
    mca_pml_mpiv_create_endpoints_fn_t create = NULL;
    char message[256];
    if (ompi_comm_invalid(parent_comm)) {
        return OMPI_ERRHANDLER_INVOKE(MPI_COMM_WORLD, MPI_ERR_COMM,
                                      "MPIX_Comm_create_endpoints: invalid parent communicator");
    }
    if (0 == strcmp(pml, "mpiv")) {
        create = (mca_pml_mpiv_create_endpoints_fn_t) find_entry("mca_pml_mpiv_create_endpoints");
    }
    if (NULL == create) {
        snprintf(message, sizeof(message),
                 "MPIX_Comm_create_endpoints: the selected PML is %s, not mpiv (run with "
                 "--mca pml mpiv)",
                 pml);
        return OMPI_ERRHANDLER_INVOKE(parent_comm, MPI_ERR_UNSUPPORTED_OPERATION, message);
    }
    /* On an endpoints handle mpiv checks it with the other ranks (no hang). */
    if (NULL == out_comm_hdls && my_num_ep > 0 && !is_endpoint(parent_comm)) {
        return OMPI_ERRHANDLER_INVOKE(parent_comm, MPI_ERR_ARG,
                                      "MPIX_Comm_create_endpoints: out_comm_hdls is NULL");
    }
    return create(parent_comm, my_num_ep, MPI_INFO_NULL == info ? NULL : &info->super,
                  out_comm_hdls);
}
