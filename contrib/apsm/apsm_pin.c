/*
 * Placement of the progress thread (seed 002, §3.5), with hwloc.
 *
 * MPIV_APSM_CPU_LIST="e0_e1_..." gives entry i to local rank i (wrapping around when there
 * are more local ranks than entries); an entry is an hwloc list of OS PU numbers ("2",
 * "1,3", "4-7"). The local rank comes from the launcher's environment.
 *
 * Without the variable the thread gets a spare PU of the process binding when there is an
 * obvious one: the process is bound to one core with several hardware threads, and the progress
 * thread takes the last of them (the placement of §5.2). A process bound to one PU has no spare
 * PU; a process bound to several cores, or not bound, may share its binding with other
 * processes, so no PU is known to be free: the thread is left to the scheduler within the
 * process binding.
 */
#define _POSIX_C_SOURCE 200809L
#include "apsm.h"

#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

/* The node-local rank from the launcher, or -1. */
static int apsm_local_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        const char *value = getenv(names[i]);
        char *end = NULL;
        if (NULL != value && '\0' != value[0]) {
            long rank = strtol(value, &end, 10);
            if ('\0' == *end && rank >= 0 && rank < 1 << 20) {
                return (int) rank;
            }
        }
    }
    return -1;
}

/* Fill set from this rank's entry of MPIV_APSM_CPU_LIST; false (message printed) on error. */
static bool apsm_set_from_list(hwloc_topology_t topo, const char *list, hwloc_bitmap_t set)
{
    int rank = apsm_local_rank();
    if (rank < 0) {
        apsm_error("MPIV_APSM_CPU_LIST is set but the local rank is unknown (none of "
                   "OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID is set): the "
                   "progress thread is not bound");
        return false;
    }
    int entries = 1;
    for (const char *p = list; '\0' != *p; ++p) {
        entries += '_' == *p;
    }
    const char *entry = list;
    for (int skip = rank % entries; skip > 0; --skip) {
        entry = strchr(entry, '_') + 1;
    }
    size_t len = strcspn(entry, "_");
    char *text = strndup(entry, len);
    if (NULL == text) {
        apsm_error("no memory to parse MPIV_APSM_CPU_LIST: the progress thread is not bound");
        return false;
    }
    bool ok = 0 == hwloc_bitmap_list_sscanf(set, text) && !hwloc_bitmap_iszero(set) &&
              hwloc_bitmap_isincluded(set, hwloc_topology_get_allowed_cpuset(topo));
    if (!ok) {
        apsm_error("MPIV_APSM_CPU_LIST entry '%s' of local rank %d is not a list of PUs of this "
                   "node (e.g. 0,2-3): the progress thread is not bound",
                   text, rank);
    }
    free(text);
    return ok;
}

/* The core that PU os_index belongs to, or NULL. */
static hwloc_obj_t apsm_core_of(hwloc_topology_t topo, int os_index)
{
    hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, (unsigned) os_index);
    return NULL == pu ? NULL : hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
}

/* Fill set with a spare PU of the process binding proc; false (reason in *why) if none. */
static bool apsm_set_spare_pu(hwloc_topology_t topo, hwloc_const_bitmap_t proc,
                              hwloc_bitmap_t set, const char **why)
{
    if (hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), proc)) {
        *why = "the process is not bound";
        return false;
    }
    if (hwloc_bitmap_weight(proc) < 2) {
        *why = "the process is bound to a single PU, which the progress thread shares";
        return false;
    }
    int last = hwloc_bitmap_last(proc);
    hwloc_obj_t core_first = apsm_core_of(topo, hwloc_bitmap_first(proc));
    if (NULL == core_first || core_first != apsm_core_of(topo, last)) {
        *why = "the process is bound to several cores";
        return false;
    }
    hwloc_bitmap_only(set, (unsigned) last);
    return true;
}

bool apsm_pin_self(void)
{
    hwloc_topology_t topo;
    bool shared = false;
    if (0 != hwloc_topology_init(&topo)) {
        apsm_error("hwloc_topology_init failed: the progress thread is not bound");
        return false;
    }
    hwloc_bitmap_t proc = hwloc_bitmap_alloc();
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (NULL == proc || NULL == set || 0 != hwloc_topology_load(topo) ||
        0 != hwloc_get_cpubind(topo, proc, HWLOC_CPUBIND_PROCESS)) {
        apsm_error("hwloc cannot read the topology or the process binding: the progress thread "
                   "is not bound");
        goto out;
    }
    const char *list = getenv("MPIV_APSM_CPU_LIST");
    const char *why = NULL;
    bool bind = NULL != list && '\0' != list[0] ? apsm_set_from_list(topo, list, set)
                                                 : apsm_set_spare_pu(topo, proc, set, &why);
    if (bind) {
        char *text = NULL;
        hwloc_bitmap_list_asprintf(&text, set);
        if (0 != hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD)) {
            apsm_error("cannot bind the progress thread to PU %s (%s)", text ? text : "?",
                       strerror(errno));
            hwloc_bitmap_copy(set, proc);
        } else {
            apsm_info("progress thread bound to PU %s", text ? text : "?");
        }
        free(text);
    } else {
        if (NULL != why) {
            apsm_info("progress thread not bound (%s)", why);
        }
        hwloc_bitmap_copy(set, proc);
    }
    shared = 1 == hwloc_bitmap_weight(proc) && hwloc_bitmap_isincluded(set, proc);
out:
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(proc);
    hwloc_topology_destroy(topo);
    return shared;
}
