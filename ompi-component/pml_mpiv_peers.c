/*
 * pml_mpiv_peers.c: peers (their segments mapped on first contact, from the modex) and
 * communicators (their matching state in the engine, and the MPI-4 assertions applied
 * when set at creation or by MPI_Comm_set_info).
 */
#include "pml_mpiv.h"

#include <string.h>

#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"
#include "ompi/mca/pml/base/base.h"
#include "ompi/proc/proc.h"

#include <mpiv/mpiv.h>

/* At verbose level 2: each peer's transport and copy mode; at 1: a peer whose large
 * messages come in two copies, and why. */
static void say_single_copy(ompi_proc_t *proc, uint32_t vpid)
{
    int single = 1, error = 0;
    if (MPIV_OK != mpiv_p2p_peer_single_copy(mca_pml_mpiv.engine, vpid, &single, &error)) {
        return;
    }
    opal_output_verbose(2, mca_pml_mpiv.output, "pml mpiv: peer %s: shared memory, %s",
                        OMPI_NAME_PRINT(&proc->super.proc_name),
                        vpid == OMPI_PROC_MY_NAME->vpid
                            ? "this process"
                            : (single ? "single copy (process_vm_readv)" : "two copies"));
    if (single) {
        return;
    }
    if (0 == error) {
        opal_output_verbose(1, mca_pml_mpiv.output,
                            "pml mpiv: messages above the eager limit from %s come in two "
                            "copies through shared memory (pml_mpiv_single_copy none)",
                            OMPI_NAME_PRINT(&proc->super.proc_name));
    } else {
        opal_output_verbose(1, mca_pml_mpiv.output,
                            "pml mpiv: process_vm_readv (CMA) from %s is denied (%s): messages "
                            "above the eager limit from it come in two copies through shared "
                            "memory",
                            OMPI_NAME_PRINT(&proc->super.proc_name), strerror(error));
    }
}

static int connect_proc(ompi_proc_t *proc)
{
    uint32_t vpid = proc->super.proc_name.vpid;
    void *addr = NULL;
    size_t len = 0;
    int rc = OMPI_SUCCESS;

    if (proc->super.proc_name.jobid != OMPI_PROC_MY_NAME->jobid ||
        vpid >= orte_process_info.num_procs) {
        opal_output(0, "pml mpiv: process %s is not in this job: mpiv does not support "
                       "dynamic processes (use --mca pml ob1)", OMPI_NAME_PRINT(&proc->super.proc_name));
        return OMPI_ERR_NOT_SUPPORTED;
    }
    OPAL_THREAD_LOCK(&mca_pml_mpiv.connect_lock);
    if (!mca_pml_mpiv.connected[vpid]) {
        OPAL_MODEX_RECV(rc, &mca_pml_mpiv_component.pmlm_version, &proc->super.proc_name,
                        &addr, &len);
        if (OPAL_SUCCESS != rc) {
            opal_output(0, "pml mpiv: no mpiv address for %s in the modex (%s)",
                        OMPI_NAME_PRINT(&proc->super.proc_name), opal_strerror(rc));
        } else {
            int s = mpiv_p2p_connect_peer(mca_pml_mpiv.engine, vpid, addr, len,
                                          OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags));
            unsigned via = MPIV_P2P_TRANSPORT_SHM;
            if (MPIV_OK != s) {
                opal_output(0, "pml mpiv: cannot connect to %s: %s",
                            OMPI_NAME_PRINT(&proc->super.proc_name), mpiv_status_string(s));
                rc = OMPI_ERR_UNREACH;
            } else {
                mca_pml_mpiv.connected[vpid] = true;
                (void) mpiv_p2p_peer_transport(mca_pml_mpiv.engine, vpid, &via);
                if (MPIV_P2P_TRANSPORT_UCX == via) {
                    opal_output_verbose(2, mca_pml_mpiv.output, "pml mpiv: peer %s: over UCX",
                                        OMPI_NAME_PRINT(&proc->super.proc_name));
                } else {
                    say_single_copy(proc, vpid);
                }
            }
            free(addr);
        }
    }
    OPAL_THREAD_UNLOCK(&mca_pml_mpiv.connect_lock);
    return rc;
}

int mca_pml_mpiv_peer_index(ompi_communicator_t *comm, int rank, uint32_t *peer)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    uint32_t vpid;
    if (NULL == proc) {
        return OMPI_ERR_BAD_PARAM;
    }
    vpid = proc->super.proc_name.vpid;
    if (vpid >= orte_process_info.num_procs || !mca_pml_mpiv.connected[vpid]) {
        int rc = connect_proc(proc);
        if (OMPI_SUCCESS != rc) {
            return rc;
        }
    }
    *peer = vpid;
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_connect_arrival(uint32_t peer)
{
    opal_process_name_t name;
    opal_proc_t *proc;
    if (peer >= orte_process_info.num_procs) {
        return MPIV_ERR_INVALID_ARG;
    }
    name.jobid = OMPI_PROC_MY_NAME->jobid;
    name.vpid = peer;
    /* As ob1 does for a fragment from a process it has not met: the proc (made now if
     * needed, with its locality), then its address from the modex. */
    proc = ompi_proc_for_name(name);
    if (NULL == proc) {
        return MPIV_ERR_NOMEM;
    }
    return OMPI_SUCCESS == connect_proc((ompi_proc_t *) proc) ? MPIV_OK : MPIV_ERR_SYSTEM;
}

int mca_pml_mpiv_add_procs(struct ompi_proc_t **procs, size_t nprocs)
{
    for (size_t i = 0; i < nprocs; ++i) {
        int rc = connect_proc(procs[i]);
        if (OMPI_SUCCESS != rc) {
            return rc;
        }
    }
    return mca_pml_base_pml_check_selected("mpiv", procs, nprocs);
}

int mca_pml_mpiv_del_procs(struct ompi_proc_t **procs, size_t nprocs)
{
    /* Segments stay mapped until finalize: a late ACK or FIN may still need them. */
    (void) procs;
    (void) nprocs;
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_enable(bool enable)
{
    if (enable) {
        mca_pml_mpiv_install_wait_functions();
    }
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_progress(void)
{
    return mpiv_p2p_progress(mca_pml_mpiv.engine);
}

/* ------------------------------------------------------------------ communicators */


/* The MPI-4 assertions mpiv reads when it creates a communicator's state: info key,
 * Open MPI's flag (comm->c_assertions), mpiv's bit. */
static const struct {
    const char *key;
    int32_t ompi_flag;
    unsigned bit;
} assertion_keys[] = {
    {"mpi_assert_no_any_source", OMPI_COMM_ASSERT_NO_ANY_SOURCE, MPIV_P2P_ASSERT_NO_ANY_SOURCE},
    {"mpi_assert_no_any_tag", OMPI_COMM_ASSERT_NO_ANY_TAG, MPIV_P2P_ASSERT_NO_ANY_TAG},
    {"mpi_assert_allow_overtaking", OMPI_COMM_ASSERT_ALLOW_OVERTAKE,
     MPIV_P2P_ASSERT_ALLOW_OVERTAKING},
};
#define NUM_ASSERTION_KEYS (sizeof(assertion_keys) / sizeof(assertion_keys[0]))

/* Info subscriber (MPI_Comm_set_info on an existing communicator, and each subscription at
 * creation): applies a changed assertion to the communicator's matching state. Overtaking
 * is decided per message by its sender, so the processes need not change it at the same
 * time. Returns the value in effect, which the communicator's info keeps: the old one when
 * mpiv cannot apply the change (both wildcard assertions while a wildcard receive is
 * posted), which it says at verbose level 1. (Open MPI 4.1's MPI_Comm_get_info reports
 * the value asked, which it saves beside it, not this one.) */
static char *assertion_changed(opal_infosubscriber_t *obj, char *key, char *value)
{
    ompi_communicator_t *comm = (ompi_communicator_t *) obj;
    mpiv_p2p_comm_t *c = (mpiv_p2p_comm_t *) comm->c_pml_comm;
    for (size_t i = 0; NULL != c && i < NUM_ASSERTION_KEYS; ++i) {
        if (0 != strcmp(key, assertion_keys[i].key)) {
            continue;
        }
        const unsigned now = mpiv_p2p_comm_assertions(c);
        const unsigned bit = assertion_keys[i].bit;
        const unsigned next = opal_str_to_bool(value) ? (now | bit) : (now & ~bit);
        if (next == now) {
            return value;
        }
        const int rc = mpiv_p2p_comm_set_assertions(c, next);
        if (MPIV_OK != rc) {
            opal_output_verbose(1, mca_pml_mpiv.output,
                                "pml mpiv: communicator %u: %s = %s not applied: %s",
                                comm->c_contextid, key, value,
                                MPIV_ERR_BUSY == rc ? "a wildcard receive is posted"
                                                    : mpiv_status_string(rc));
            return (now & bit) ? "true" : "false";
        }
        opal_output_verbose(2, mca_pml_mpiv.output,
                            "pml mpiv: communicator %u: %s = %s applied (assertions 0x%x)",
                            comm->c_contextid, key, value, next);
        return value;
    }
    return value;
}

void mca_pml_mpiv_subscribe_assertions(ompi_communicator_t *comm)
{
    for (size_t i = 0; i < NUM_ASSERTION_KEYS; ++i) {
        opal_infosubscribe_subscribe(&comm->super, (char *) assertion_keys[i].key, "false",
                                     assertion_changed);
    }
}

int mca_pml_mpiv_add_comm(struct ompi_communicator_t *comm)
{
    mpiv_p2p_comm_t *c = NULL;
    unsigned assertions = 0;
    int rc;
    if (comm->c_contextid > mca_pml_mpiv_module.pml_max_contextid) {
        opal_output(0, "pml mpiv: context id %u exceeds %u", comm->c_contextid,
                    mca_pml_mpiv_module.pml_max_contextid);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    for (size_t i = 0; i < NUM_ASSERTION_KEYS; ++i) {
        ompi_comm_assert_subscribe(comm, assertion_keys[i].ompi_flag);
        if (OMPI_COMM_CHECK_ASSERT(comm, assertion_keys[i].ompi_flag)) {
            assertions |= assertion_keys[i].bit;
        }
    }
    rc = mpiv_p2p_comm_create(mca_pml_mpiv.engine, (uint16_t) comm->c_contextid,
                              mca_pml_mpiv_remote_size(comm), assertions, &c);
    if (MPIV_OK != rc) {
        opal_output(0, "pml mpiv: cannot add communicator %u: %s", comm->c_contextid,
                    mpiv_status_string(rc));
        return mca_pml_mpiv_map_status(rc);
    }
    opal_output_verbose(3, mca_pml_mpiv.output, "pml mpiv: communicator %u (%d ranks, assertions 0x%x)",
                        comm->c_contextid, mca_pml_mpiv_remote_size(comm), assertions);
    comm->c_pml_comm = (struct mca_pml_comm_t *) c;
    mca_pml_mpiv_subscribe_assertions(comm);
    return OMPI_SUCCESS;
}

int mca_pml_mpiv_del_comm(struct ompi_communicator_t *comm)
{
    (void) mca_pml_mpiv_del_endpoint(comm); /* an endpoints handle: its siblings' share */
    if (NULL != comm->c_pml_comm) {
        (void) mpiv_p2p_comm_destroy(mca_pml_mpiv.engine, (mpiv_p2p_comm_t *) comm->c_pml_comm);
        comm->c_pml_comm = NULL;
    }
    return OMPI_SUCCESS;
}
