/*
 * mpix_endpoints.c: libmpiv-mpix, MPIX_Comm_create_endpoints for applications (see
 * <mpiv/mpix_endpoints.h>). An out-of-tree component cannot add to Open MPI's MPI
 * extensions, so this small library forwards to the mpiv PML's entry point when mpiv is
 * the selected PML, and fails through the parent's error handler otherwise.
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

typedef int (*create_fn_t)(ompi_communicator_t *, int, opal_info_t *, ompi_communicator_t **);

/* The component's entry point: global symbol lookup, else the loaded module by name. */
static create_fn_t find_entry(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "mca_pml_mpiv_create_endpoints");
    if (NULL == sym) {
        void *module = dlopen("mca_pml_mpiv.so", RTLD_NOW | RTLD_NOLOAD);
        if (NULL != module) {
            sym = dlsym(module, "mca_pml_mpiv_create_endpoints");
            dlclose(module); /* RTLD_NOLOAD took a reference */
        }
    }
    return (create_fn_t) sym;
}

int MPIX_Comm_create_endpoints(MPI_Comm parent_comm, int my_num_ep, MPI_Info info,
                               MPI_Comm out_comm_hdls[])
{
    const char *pml = mca_pml_base_selected_component.pmlm_version.mca_component_name;
    create_fn_t create;
    char message[256];
    if (ompi_comm_invalid(parent_comm)) {
        return OMPI_ERRHANDLER_INVOKE(MPI_COMM_WORLD, MPI_ERR_COMM,
                                      "MPIX_Comm_create_endpoints: invalid parent communicator");
    }
    if (0 != strcmp(pml, "mpiv") || NULL == (create = find_entry())) {
        snprintf(message, sizeof(message),
                 "MPIX_Comm_create_endpoints: the selected PML is %s, not mpiv (run with "
                 "--mca pml mpiv)",
                 pml);
        return OMPI_ERRHANDLER_INVOKE(parent_comm, MPI_ERR_UNSUPPORTED_OPERATION, message);
    }
    if (NULL == out_comm_hdls && my_num_ep > 0) {
        return OMPI_ERRHANDLER_INVOKE(parent_comm, MPI_ERR_ARG,
                                      "MPIX_Comm_create_endpoints: out_comm_hdls is NULL");
    }
    return create(parent_comm, my_num_ep, MPI_INFO_NULL == info ? NULL : &info->super,
                  out_comm_hdls);
}
