/*
 * pml_mpiv_component.c: the component: MCA parameters, open (fallback list), init
 * (decline or create the engine and publish its address), finalize.
 */
#include "pml_mpiv.h"
#include "pml_mpiv_endpoints.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"
#include "ompi/mca/pml/base/base.h"
#include "orte/util/proc_info.h"

/* Set by Open MPI from mpi_yield_when_idle (default: whether the node is oversubscribed)
 * before the PML is selected; libmpi exports it but installs no header declaring it. */
extern bool ompi_mpi_yield_when_idle;

#include <mpiv/mpiv.h>

static int component_register(void);
static int component_open(void);
static int component_close(void);
static mca_pml_base_module_t *component_init(int *priority, bool enable_progress_threads,
                                        bool enable_mpi_threads);
static int component_finalize(void);

/* The parameters' defaults are in param_table (component_register). */
mca_pml_mpiv_globals_t mca_pml_mpiv = {
    .output = -1,
};

mca_pml_base_component_2_0_0_t mca_pml_mpiv_component = {
    .pmlm_version = {
        MCA_PML_BASE_VERSION_2_0_0,
        .mca_component_name = "mpiv",
        MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
        .mca_open_component = component_open,
        .mca_close_component = component_close,
        .mca_register_component_params = component_register,
    },
    .pmlm_data = {
        .param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT,
    },
    .pmlm_init = component_init,
    .pmlm_finalize = component_finalize,
};

static const mca_base_var_enum_value_t progress_values[] = {
    {MCA_PML_MPIV_PROGRESS_AUTO, "auto"},
    {MCA_PML_MPIV_PROGRESS_SERVER, "server"},
    {MCA_PML_MPIV_PROGRESS_INLINE, "inline"},
    {0, NULL},
};

static const mca_base_var_enum_value_t lock_values[] = {
    {MPIV_P2P_LOCK_MCS, "mcs"},
    {MPIV_P2P_LOCK_HMCS, "hmcs"},
    {MPIV_P2P_LOCK_TICKET, "ticket"},
    {0, NULL},
};

static const mca_base_var_enum_value_t single_copy_values[] = {
    {MPIV_P2P_SINGLE_COPY_AUTO, "auto"},
    {MPIV_P2P_SINGLE_COPY_CMA, "cma"},
    {MPIV_P2P_SINGLE_COPY_NONE, "none"},
    {0, NULL},
};

/* The component's MCA parameters, one row each: name, type, enumerator values (NULL: a
 * plain integer, string or bool), default, information level, storage, help. The
 * storage is set to its default just before it is registered (component_register). */
typedef struct {
    const char *name;
    mca_base_var_type_t type;
    const mca_base_var_enum_value_t *values;
    int int_default;         /* INT and BOOL */
    const char *str_default; /* STRING */
    int level;
    void *storage;
    const char *help;
} param_row_t;

static const param_row_t param_table[] = {
    {"priority", MCA_BASE_VAR_TYPE_INT, NULL, 50, NULL, OPAL_INFO_LVL_3,
     &mca_pml_mpiv.priority, "Selection priority of the mpiv PML (ob1 has 20)"},
    {"verbose", MCA_BASE_VAR_TYPE_INT, NULL, 0, NULL, OPAL_INFO_LVL_5, &mca_pml_mpiv.verbose,
     "Verbosity of the mpiv PML: 1 says why mpiv declines a job and warns (peers whose large "
     "messages come in two copies, messages piling up before their receives), 2 shows the "
     "placement (binding, workers and their PUs, progress, lock, each peer's transport and "
     "copy mode, endpoints), 3 adds mpiv's debug log"},
    {"workers", MCA_BASE_VAR_TYPE_INT, NULL, 0, NULL, OPAL_INFO_LVL_4, &mca_pml_mpiv.workers,
     "Worker endpoints (inbound queues) per process, 1..256; 0 = one per PU of the process "
     "binding"},
    {"progress", MCA_BASE_VAR_TYPE_INT, progress_values, MCA_PML_MPIV_PROGRESS_AUTO, NULL,
     OPAL_INFO_LVL_4, &mca_pml_mpiv.progress,
     "Who makes progress: server (a communication-server thread per process, pinned to a "
     "spare PU), inline (threads that wait or poll), auto (server only when a spare PU "
     "exists)"},
    {"lock", MCA_BASE_VAR_TYPE_INT, lock_values, MPIV_P2P_LOCK_MCS, NULL, OPAL_INFO_LVL_5,
     &mca_pml_mpiv.lock,
     "Two-level priority lock guarding the shared matching slow paths (wildcard and "
     "unexpected lists; issuing threads high priority, progress pollers low): mcs "
     "(P-MCS-MCS), hmcs (P-HMCS-MCS, hierarchical over the hwloc levels), ticket (no "
     "parking: a waiting ULT yields and keeps its place in line, which stalls a worker with "
     "thousands of queued ULTs; mcs and hmcs park them)"},
    {"eager_limit", MCA_BASE_VAR_TYPE_INT, NULL, 4096, NULL, OPAL_INFO_LVL_4,
     &mca_pml_mpiv.eager_limit,
     "Largest message (bytes) sent eagerly through a shared-memory packet; larger ones use "
     "rendezvous with a single process_vm_readv copy. 0..1048576; it is also the packet "
     "size. Messages of up to 416 bytes (fewer with queues of under 8 slots) travel inside "
     "the queue whatever this is"},
    {"single_copy", MCA_BASE_VAR_TYPE_INT, single_copy_values, MPIV_P2P_SINGLE_COPY_AUTO, NULL,
     OPAL_INFO_LVL_4, &mca_pml_mpiv.single_copy,
     "How a receiver gets the bytes of a message above the eager limit: auto (it reads the "
     "sender's buffer with process_vm_readv, CMA, where the sender allows it, tried against "
     "each peer at first contact; where not, the sender copies the bytes through shared "
     "memory, 128 KiB in flight per receiver, and the receiver copies them out, said at "
     "verbose level 1), cma (CMA or nothing: mpiv declines the job when CMA does not work "
     "here and fails a peer that denies it), none (always the two copies)"},
    {"packet_count", MCA_BASE_VAR_TYPE_INT, NULL, 1024, NULL, OPAL_INFO_LVL_5,
     &mca_pml_mpiv.packet_count, "Packets in each process's shared-memory packet pool, "
     "1..1048576"},
    {"queue_slots", MCA_BASE_VAR_TYPE_INT, NULL, 1024, NULL, OPAL_INFO_LVL_5,
     &mca_pml_mpiv.queue_slots,
     "Slots (64 bytes each) of each inbound queue, a power of two in 2..1048576"},
    {"idle_time", MCA_BASE_VAR_TYPE_INT, NULL, -1, NULL, OPAL_INFO_LVL_5,
     &mca_pml_mpiv.idle_time,
     "Microseconds a waiting thread keeps polling with nothing arriving before it sleeps, "
     "0..1000000; -1 = 1000, or 50 when the node is oversubscribed (mpi_yield_when_idle)"},
    {"yield_when_idle", MCA_BASE_VAR_TYPE_INT, NULL, -1, NULL, OPAL_INFO_LVL_5,
     &mca_pml_mpiv.yield_when_idle,
     "Waiting threads poll once and yield the PU between polls, for as long as they wait, "
     "instead of polling for pml_mpiv_idle_time and then sleeping: 1 = yes, 0 = no, -1 = "
     "yes when Open MPI's mpi_yield_when_idle is set (by default: when the node has more "
     "processes than PUs)"},
    {"server_cpus", MCA_BASE_VAR_TYPE_STRING, NULL, 0, "", OPAL_INFO_LVL_4,
     &mca_pml_mpiv.server_cpus,
     "Comma-separated PU (OS index) list for the communication-server thread, one per local "
     "rank (wraps around); empty = the last PU of the machine outside the process binding"},
    {"fallback", MCA_BASE_VAR_TYPE_STRING, NULL, 0, "ob1", OPAL_INFO_LVL_4,
     &mca_pml_mpiv.fallback,
     "PML added to the selection list when mpiv is opened, so that --mca pml mpiv,ob1 runs "
     "the job on it when mpiv declines (Open MPI 4.1 honours only the first name otherwise); "
     "empty: none"},
    {"transports", MCA_BASE_VAR_TYPE_STRING, NULL, 0, "shm,ucx", OPAL_INFO_LVL_4,
     &mca_pml_mpiv.transports,
     "Comma-separated transports mpiv may use: shm (shared memory, for peers on this node) "
     "and ucx (the UCX network transport, for peers on other nodes, and for every peer when "
     "shm is not listed; started only when the job spans nodes or shm is not listed; UCX's "
     "own settings such as UCX_TLS and UCX_NET_DEVICES apply). A job that spans nodes "
     "without ucx here, or whose UCX cannot start, is declined"},
    {"ucx_copy_max", MCA_BASE_VAR_TYPE_INT, NULL, 2048, NULL, OPAL_INFO_LVL_5,
     &mca_pml_mpiv.ucx_copy_max,
     "Over UCX: messages of at most this many bytes (mpiv's headers included, 0..65536) are "
     "handed to UCX as copied sends, which UCX packs into its own buffer (on TCP one send() "
     "per message, where UCX 1.13's short path makes a sendmsg() of an I/O vector: measured "
     "faster for small messages on TCP); 0 leaves every message to UCX's own choice (for "
     "networks where that measures better)"},
    {"stats", MCA_BASE_VAR_TYPE_INT, NULL, 0, NULL, OPAL_INFO_LVL_4, &mca_pml_mpiv.stats,
     "At MPI_Finalize each process prints its counters that are not zero (also MPI_T "
     "performance variables pml_mpiv_*) and its high-water marks: 0 = no, 1 = totals, 2 = "
     "totals and per thread. At 1 and 2 the posted receives are counted for posted_max (a "
     "shared atomic add per receive that waits)"},
    {"decline", MCA_BASE_VAR_TYPE_BOOL, NULL, 0, NULL, OPAL_INFO_LVL_9, &mca_pml_mpiv.decline,
     "Always decline in init (tests the fallback)"},
};

static int component_register(void)
{
    for (size_t i = 0; i < sizeof param_table / sizeof param_table[0]; ++i) {
        const param_row_t *row = &param_table[i];
        mca_base_var_enum_t *values = NULL;
        if (MCA_BASE_VAR_TYPE_STRING == row->type) {
            *(char **) row->storage = (char *) row->str_default;
        } else if (MCA_BASE_VAR_TYPE_BOOL == row->type) {
            *(bool *) row->storage = 0 != row->int_default;
        } else {
            *(int *) row->storage = row->int_default;
        }
        if (NULL != row->values) {
            char enum_name[64];
            snprintf(enum_name, sizeof enum_name, "pml_mpiv_%s", row->name);
            (void) mca_base_var_enum_create(enum_name, row->values, &values);
        }
        (void) mca_base_component_var_register(&mca_pml_mpiv_component.pmlm_version, row->name,
                                               row->help, row->type, values, 0, 0, row->level,
                                               MCA_BASE_VAR_SCOPE_READONLY, row->storage);
        if (NULL != values) {
            OBJ_RELEASE(values);
        }
    }
    mca_pml_mpiv_stats_register();
    return OMPI_SUCCESS;
}

static int component_open(void)
{
    mca_pml_mpiv.output = opal_output_open(NULL);
    opal_output_set_verbosity(mca_pml_mpiv.output, mca_pml_mpiv.verbose);
    if (NULL != mca_pml_mpiv.fallback && '\0' != mca_pml_mpiv.fallback[0] &&
        0 != strcmp(mca_pml_mpiv.fallback, "mpiv")) {
        /* Open MPI 4.1 keeps "--mca pml mpiv,ob1" as one include-list entry that only
         * matches mpiv: list the fallback on its own (as pml/monitoring does). */
        opal_pointer_array_add(&mca_pml_base_pml, strdup(mca_pml_mpiv.fallback));
    }
    return OMPI_SUCCESS;
}

static int component_close(void)
{
    if (mca_pml_mpiv.output >= 0) {
        opal_output_close(mca_pml_mpiv.output);
        mca_pml_mpiv.output = -1;
    }
    return OMPI_SUCCESS;
}

/* The engine's log lines go to the component's output stream: errors always, warnings
 * at verbose level 1, information at 3 and debugging at 4. */
static void log_to_opal(int level, const char *message, void *ctx)
{
    (void) ctx;
    if (MPIV_LOG_ERROR == level) {
        opal_output(0, "pml mpiv: %s", message);
    } else {
        /* warnings at 1, information (placement, each peer's copy mode) at 2, debug at 3 */
        opal_output_verbose(level, mca_pml_mpiv.output, "pml mpiv: %s", message);
    }
}

/* The PUs of @p set as a list of ranges ("0-3,8"). */
static void pu_list(const cpu_set_t *set, char *out, size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (int cpu = 0; cpu < CPU_SETSIZE && len + 1 < size; ++cpu) {
        int last = cpu;
        if (!CPU_ISSET(cpu, set)) {
            continue;
        }
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set)) {
            ++last;
        }
        int n = last == cpu ? snprintf(out + len, size - len, "%s%d", len ? "," : "", cpu)
                            : snprintf(out + len, size - len, "%s%d-%d", len ? "," : "", cpu, last);
        if (n < 0) {
            break;
        }
        len += (size_t) n;
        cpu = last;
    }
}

static int count_bound_pus(cpu_set_t *set)
{
    if (0 != sched_getaffinity(0, sizeof *set, set)) {
        CPU_ZERO(set);
        return 1;
    }
    return CPU_COUNT(set);
}

/* The PU for the server thread: from server_cpus by local rank, else the highest online
 * PU outside the process binding; -1 when there is none (no spare PU). */
static int server_cpu(const cpu_set_t *bound)
{
    if (NULL != mca_pml_mpiv.server_cpus && '\0' != mca_pml_mpiv.server_cpus[0]) {
        char *list = strdup(mca_pml_mpiv.server_cpus), *save = NULL;
        int n = 0, pick = -1, first = -1;
        int want = orte_process_info.my_local_rank;
        for (char *tok = strtok_r(list, ",", &save); NULL != tok; tok = strtok_r(NULL, ",", &save), ++n) {
            int cpu = atoi(tok);
            if (0 == n) {
                first = cpu;
            }
            if (n == want) {
                pick = cpu;
            }
        }
        free(list);
        if (pick < 0 && n > 0) {
            /* wrap around */
            char *again = strdup(mca_pml_mpiv.server_cpus);
            int i = 0;
            for (char *tok = strtok_r(again, ",", &save); NULL != tok; tok = strtok_r(NULL, ",", &save), ++i) {
                if (i == want % n) {
                    pick = atoi(tok);
                }
            }
            free(again);
        }
        return pick >= 0 ? pick : first;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int local_procs = orte_process_info.num_local_peers + 1;
    /* A spare PU exists only if the local ranks leave some PU unused. */
    if (online <= 0 || CPU_COUNT(bound) * local_procs >= online) {
        return -1;
    }
    for (int cpu = (int) online - 1; cpu >= 0; --cpu) {
        if (!CPU_ISSET(cpu, bound)) {
            return cpu;
        }
    }
    return -1;
}

/* pml_mpiv_transports as MPIV_P2P_TRANSPORT_* bits; false (said) for an unknown name or an
 * empty list. */
static bool parse_transports(const char *list, unsigned *bits)
{
    const char *p = NULL == list ? "" : list;
    *bits = 0;
    while ('\0' != *p) {
        size_t n = strcspn(p, ",");
        if (3 == n && 0 == strncmp(p, "shm", 3)) {
            *bits |= MPIV_P2P_TRANSPORT_SHM;
        } else if (3 == n && 0 == strncmp(p, "ucx", 3)) {
            *bits |= MPIV_P2P_TRANSPORT_UCX;
        } else {
            opal_output(0, "pml mpiv: pml_mpiv_transports = \"%s\": unknown transport \"%.*s\" "
                           "(known: shm, ucx)", list, (int) n, p);
            return false;
        }
        p += n + (',' == p[n]);
    }
    if (0 == *bits) {
        opal_output(0, "pml mpiv: pml_mpiv_transports is empty (known: shm, ucx)");
        return false;
    }
    return true;
}

static mca_pml_base_module_t *decline(const char *reason)
{
    opal_output_verbose(1, mca_pml_mpiv.output, "pml mpiv: declining: %s", reason);
    return NULL;
}

static mca_pml_base_module_t *component_init(int *priority, bool enable_progress_threads,
                                        bool enable_mpi_threads)
{
    mpiv_p2p_params_t params;
    cpu_set_t bound;
    const void *addr = NULL;
    size_t len = 0;
    int rc, pus;
    unsigned wanted = 0;
    bool multinode;
    (void) enable_progress_threads;

    if (mca_pml_mpiv.decline) {
        return decline("pml_mpiv_decline is set");
    }
    if (!parse_transports(mca_pml_mpiv.transports, &wanted)) {
        return decline("bad pml_mpiv_transports");
    }
    multinode = (orte_vpid_t) (orte_process_info.num_local_peers + 1) != orte_process_info.num_procs;
    if (multinode && 0 == (wanted & MPIV_P2P_TRANSPORT_UCX)) {
        return decline("the job spans several nodes and pml_mpiv_transports has no ucx");
    }
    /* UCX starts only where it carries traffic: a job on several nodes, or ucx alone (and
     * only then is its library loaded). */
    if (!multinode && 0 != (wanted & MPIV_P2P_TRANSPORT_SHM)) {
        wanted &= ~MPIV_P2P_TRANSPORT_UCX;
    }
    if (mca_pml_mpiv.workers < 0 || mca_pml_mpiv.workers > 256) {
        opal_output(0, "pml mpiv: pml_mpiv_workers = %d is out of range (0..256)", mca_pml_mpiv.workers);
        return decline("bad pml_mpiv_workers");
    }
    if (mca_pml_mpiv.eager_limit < 0 || mca_pml_mpiv.packet_count <= 0 || mca_pml_mpiv.queue_slots <= 0) {
        opal_output(0, "pml mpiv: pml_mpiv_eager_limit, pml_mpiv_packet_count and "
                       "pml_mpiv_queue_slots must be positive");
        return decline("bad parameters");
    }
    if (mca_pml_mpiv.idle_time < -1 || mca_pml_mpiv.idle_time > 1000000) {
        opal_output(0, "pml mpiv: pml_mpiv_idle_time = %d is out of range (-1..1000000)",
                    mca_pml_mpiv.idle_time);
        return decline("bad pml_mpiv_idle_time");
    }
    if (mca_pml_mpiv.yield_when_idle < -1 || mca_pml_mpiv.yield_when_idle > 1) {
        opal_output(0, "pml mpiv: pml_mpiv_yield_when_idle = %d is out of range (-1, 0, 1)",
                    mca_pml_mpiv.yield_when_idle);
        return decline("bad pml_mpiv_yield_when_idle");
    }
    if (mca_pml_mpiv.ucx_copy_max < 0 || mca_pml_mpiv.ucx_copy_max > 65536) {
        opal_output(0, "pml mpiv: pml_mpiv_ucx_copy_max = %d is out of range (0..65536)",
                    mca_pml_mpiv.ucx_copy_max);
        return decline("bad pml_mpiv_ucx_copy_max");
    }
    /* Last, after the cheap checks: this loads UCX's library. */
    if (0 != (wanted & MPIV_P2P_TRANSPORT_UCX)) {
        const char *why = mpiv_p2p_ucx_unavailable();
        if (NULL != why) {
            char reason[640];
            snprintf(reason, sizeof reason, "the job %s the UCX transport, and %s",
                     multinode ? "spans several nodes and needs" : "needs", why);
            opal_output(0, "pml mpiv: %s: declining", reason);
            return decline(reason);
        }
    }
    mpiv_set_log_handler(log_to_opal, NULL);
    pus = count_bound_pus(&bound);
    (void) mpiv_p2p_params_default(&params);
    params.self = OMPI_PROC_MY_NAME->vpid;
    params.num_peers = orte_process_info.num_procs;
    params.endpoints = (uint32_t) (mca_pml_mpiv.workers > 0 ? mca_pml_mpiv.workers : pus);
    mca_pml_mpiv.queues = params.endpoints;
    params.queue_slots = (uint32_t) mca_pml_mpiv.queue_slots;
    params.eager_limit = (uint32_t) mca_pml_mpiv.eager_limit;
    params.packet_count = (uint32_t) mca_pml_mpiv.packet_count;
    params.complete = mca_pml_mpiv_complete;
    params.prefetch = mca_pml_mpiv_prefetch;
    params.fault = mca_pml_mpiv_fault;
    params.connect = mca_pml_mpiv_connect_arrival;
    params.lock = (mpiv_p2p_lock_t) mca_pml_mpiv.lock;
    params.single_copy = (mpiv_p2p_single_copy_t) mca_pml_mpiv.single_copy;
    params.idle_us = mca_pml_mpiv.idle_time >= 0 ? (uint32_t) mca_pml_mpiv.idle_time
                     : ompi_mpi_yield_when_idle ? 50u
                                                : 1000u;
    mca_pml_mpiv.yielding = mca_pml_mpiv.yield_when_idle < 0 ? ompi_mpi_yield_when_idle
                                                             : 0 != mca_pml_mpiv.yield_when_idle;
    params.yield_when_idle = mca_pml_mpiv.yielding;
    params.server_cpu = -1;
    params.progress = MPIV_P2P_PROGRESS_INLINE;
    if (MCA_PML_MPIV_PROGRESS_INLINE != mca_pml_mpiv.progress) {
        int cpu = server_cpu(&bound);
        if (MCA_PML_MPIV_PROGRESS_SERVER == mca_pml_mpiv.progress || cpu >= 0) {
            params.progress = MPIV_P2P_PROGRESS_SERVER;
            params.server_cpu = cpu;
        }
    }
    /* Below MPI_THREAD_MULTIPLE the application's MPI calls never overlap; with inline
     * progress nothing else calls the engine, so it may skip its process-local locks. */
    params.serialized = !enable_mpi_threads;
    params.transports = wanted;
    params.ucx_copy_max = (uint32_t) mca_pml_mpiv.ucx_copy_max;
    mca_pml_mpiv.engine_transports = wanted;
    /* Not with UCX: its flusher thread completes sends and delivers arrivals by itself. */
    mca_pml_mpiv.serial = !enable_mpi_threads && MPIV_P2P_PROGRESS_INLINE == params.progress &&
                          0 == (wanted & MPIV_P2P_TRANSPORT_UCX);
    rc = mpiv_p2p_create(&params, &mca_pml_mpiv.engine);
    if (MPIV_OK != rc) {
        opal_output_verbose(1, mca_pml_mpiv.output, "pml mpiv: engine: %s", mpiv_status_string(rc));
        return decline(0 != (wanted & MPIV_P2P_TRANSPORT_UCX)
                           ? "its shared-memory segment or the UCX transport cannot start"
                       : MPIV_P2P_SINGLE_COPY_CMA == params.single_copy
                           ? "shared memory or CMA (process_vm_readv) is unavailable, and "
                             "pml_mpiv_single_copy is cma"
                           : "its shared-memory segment cannot be created or mapped through /proc");
    }
    mca_pml_mpiv.inline_max = mpiv_p2p_inline_max(mca_pml_mpiv.engine);
    mca_pml_mpiv_stats_start();
    (void) mpiv_p2p_address(mca_pml_mpiv.engine, &addr, &len);
    OPAL_MODEX_SEND(rc, 0 != (wanted & MPIV_P2P_TRANSPORT_UCX) ? OPAL_PMIX_GLOBAL : OPAL_PMIX_LOCAL,
                    &mca_pml_mpiv_component.pmlm_version, addr, len);
    if (OPAL_SUCCESS != rc || OMPI_SUCCESS != mca_pml_mpiv_module_init()) {
        mpiv_p2p_destroy(mca_pml_mpiv.engine);
        mca_pml_mpiv.engine = NULL;
        return decline("cannot publish the address through the modex");
    }
    char pus_text[256];
    pu_list(&bound, pus_text, sizeof(pus_text));
    opal_output_verbose(2, mca_pml_mpiv.output,
                        "pml mpiv: selected candidate: bound to PUs %s, %u endpoints, inline up to %zu bytes, eager "
                        "limit %u, %u packets, idle time %u us%s, progress %s (server PU %d), lock %s, "
                        "single copy %s%s",
                        pus_text, params.endpoints, mca_pml_mpiv.inline_max, params.eager_limit,
                        params.packet_count, params.idle_us,
                        mca_pml_mpiv.yielding ? " (waits yield)" : "",
                        MPIV_P2P_PROGRESS_SERVER == params.progress ? "server" : "inline",
                        params.server_cpu, lock_values[params.lock].string,
                        single_copy_values[params.single_copy].string,
                        mca_pml_mpiv.serial ? ", serial (no thread-multiple locks)" : "");
    *priority = mca_pml_mpiv.priority;
    return &mca_pml_mpiv_module;
}

static int component_finalize(void)
{
    mca_pml_mpiv_ep_join_workers();
    mca_pml_mpiv_stats_print(mca_pml_mpiv.stats);
    /* The engine first: its server thread and progress ULTs may still complete requests
     * (a freed send's last notice), which go back to the request lists and caches. */
    mpiv_p2p_destroy(mca_pml_mpiv.engine);
    mca_pml_mpiv.engine = NULL;
    mca_pml_mpiv_module_fini();
    return OMPI_SUCCESS;
}
