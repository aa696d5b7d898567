/*
 * pml_mpiv_stats.c: observability. The runtime's event counters (mpiv_stats_*: messages
 * by protocol, unexpected arrivals, TLP lock acquisitions and waits, back-pressure, ULT
 * switches, ...) and the engine's levels (messages held before their receives now, and
 * the most at once) as MPI_T performance variables pml_mpiv_<name>, and the per-process
 * summary that pml_mpiv_stats prints at MPI_Finalize.
 * pml_mpiv_posted_max, the high-water mark of the receives waiting in the posted lists,
 * costs a shared atomic add per posted receive, so the engine counts it only while asked
 * (mpiv_p2p_track_posted): while a handle of the variable is started (MPI_T_pvar_start; it
 * is not continuous), and for the whole run under pml_mpiv_stats >= 1.
 * The per-communicator counters (mpiv_stats_comm_*: pml_mpiv_comm_sent, ...) are variables
 * bound to a communicator (MPI_T_BIND_MPI_COMM): one value, that communicator's.
 */
#include "pml_mpiv.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/mca/base/mca_base_pvar.h"
#include "opal/util/output.h"
#include "ompi/communicator/communicator.h"
#include "ompi/runtime/params.h"

#include <mpiv/mpiv.h>

/* The levels, after the counters: the engine's (mpiv_p2p_levels), and the receives that
 * wait in the posted lists now (from three counters, summed on read). */
enum { LEVEL_HELD = 0, LEVEL_HELD_MAX = 1, LEVEL_POSTED = 2, LEVEL_POSTED_MAX = 3 };

/* Started handles of pml_mpiv_posted_max (MPI_T calls these under Open MPI's MPI_T lock).
 * A started handle freed without MPI_T_pvar_stop is not seen (Open MPI sends no STOP):
 * counting then stays on, and the mark keeps counting from the first start. */
static int posted_max_started;

static uint64_t counter_named(const char *want)
{
    const size_t n = mpiv_stats_count();
    for (size_t i = 0; i < n; ++i) {
        const char *name, *unit, *text;
        uint64_t v = 0;
        if (MPIV_OK == mpiv_stats_info(i, &name, &unit, &text) && 0 == strcmp(name, want) &&
            MPIV_OK == mpiv_stats_read(i, &v)) {
            return v;
        }
    }
    return 0;
}

static int read_counter(const struct mca_base_pvar_t *pvar, void *value, void *obj)
{
    uint64_t v = 0;
    (void) obj;
    if (MPIV_OK != mpiv_stats_read((size_t) (uintptr_t) pvar->ctx, &v)) {
        return OPAL_ERROR;
    }
    *(unsigned long long *) value = (unsigned long long) v;
    return OPAL_SUCCESS;
}

static int read_level(const struct mca_base_pvar_t *pvar, void *value, void *obj)
{
    mpiv_p2p_levels_t levels = {0, 0, 0, 0};
    (void) obj;
    if (LEVEL_POSTED == (uintptr_t) pvar->ctx) {
        /* Read in this order, each counter only grows: never below the true level. */
        const uint64_t done = counter_named("recv_posted_matched") + counter_named("recv_cancelled");
        const uint64_t posted = counter_named("recv_posted");
        *(unsigned long long *) value = (unsigned long long) (posted > done ? posted - done : 0);
        return OPAL_SUCCESS;
    }
    if (NULL != mca_pml_mpiv.engine) {
        (void) mpiv_p2p_levels(mca_pml_mpiv.engine, &levels);
    }
    *(unsigned long long *) value =
        (unsigned long long) (LEVEL_HELD == (uintptr_t) pvar->ctx       ? levels.held
                              : LEVEL_HELD_MAX == (uintptr_t) pvar->ctx ? levels.held_max
                                                                        : levels.posted_max);
    return OPAL_SUCCESS;
}

/* pml_mpiv_posted_max: the engine counts posted receives while a handle is started. */
static int notify_posted_max(struct mca_base_pvar_t *pvar, mca_base_pvar_event_t event, void *obj,
                             int *count)
{
    (void) pvar;
    (void) obj;
    switch (event) {
    case MCA_BASE_PVAR_HANDLE_BIND:
        *count = 1;
        break;
    case MCA_BASE_PVAR_HANDLE_START:
        if (1 == ++posted_max_started && NULL != mca_pml_mpiv.engine && mca_pml_mpiv.stats <= 0) {
            (void) mpiv_p2p_track_posted(mca_pml_mpiv.engine, 1);
        }
        break;
    case MCA_BASE_PVAR_HANDLE_STOP:
        if (0 == --posted_max_started && NULL != mca_pml_mpiv.engine && mca_pml_mpiv.stats <= 0) {
            (void) mpiv_p2p_track_posted(mca_pml_mpiv.engine, 0);
        }
        break;
    default:
        break;
    }
    return OPAL_SUCCESS;
}

void mca_pml_mpiv_stats_start(void)
{
    /* The summary reports posted_max: count from the start. */
    if (mca_pml_mpiv.stats >= 1 && NULL != mca_pml_mpiv.engine) {
        (void) mpiv_p2p_track_posted(mca_pml_mpiv.engine, 1);
    }
}

/* The communicator a handle of a variable bound to communicators names. MPI_T_pvar_handle_alloc
 * takes a reference to the MPI_Comm (MPI 4.0 §15.3.7), which Open MPI passes on as it is;
 * Open MPI's own components take the communicator itself: both are accepted. */
static ompi_communicator_t *bound_comm(void *obj)
{
    ompi_communicator_t *comm = (ompi_communicator_t *) obj;
    if (NULL == obj) {
        return NULL;
    }
    if (((opal_object_t *) obj)->obj_class != OBJ_CLASS(ompi_communicator_t)) {
        comm = *(ompi_communicator_t **) obj;
    }
    if (NULL == comm || ((opal_object_t *) comm)->obj_class != OBJ_CLASS(ompi_communicator_t)) {
        return NULL;
    }
    return comm;
}

static int bind_comm(struct mca_base_pvar_t *pvar, mca_base_pvar_event_t event, void *obj,
                     int *count)
{
    (void) pvar;
    if (MCA_BASE_PVAR_HANDLE_BIND == event) {
        if (NULL == bound_comm(obj)) {
            return OPAL_ERR_BAD_PARAM;
        }
        *count = 1;
    }
    return OPAL_SUCCESS;
}

static int read_comm_counter(const struct mca_base_pvar_t *pvar, void *value, void *obj)
{
    ompi_communicator_t *comm = bound_comm(obj);
    uint64_t v = 0;
    /* A communicator mpiv keeps no state for (MPI_COMM_NULL, freed: the handle must be
     * freed before its communicator) is an error, not 0 (a counter's handle would go
     * back). */
    if (NULL == comm || NULL == comm->c_pml_comm ||
        MPIV_OK != mpiv_p2p_comm_stats_read((mpiv_p2p_comm_t *) comm->c_pml_comm,
                                            (size_t) (uintptr_t) pvar->ctx, &v)) {
        return OPAL_ERR_BAD_PARAM;
    }
    *(unsigned long long *) value = (unsigned long long) v;
    return OPAL_SUCCESS;
}

/* One read-only, unbound variable pml_mpiv_<name> of class @p var_class: continuous, or
 * (with @p notify) counted while a handle is started. */
static void register_pvar(const char *name, const char *description, int var_class,
                          mca_base_get_value_fn_t read, mca_base_notify_fn_t notify, uintptr_t ctx)
{
    (void) mca_base_component_pvar_register(
        &mca_pml_mpiv_component.pmlm_version, name, description, OPAL_INFO_LVL_4, var_class,
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL, MCA_BASE_VAR_BIND_NO_OBJECT,
        MCA_BASE_PVAR_FLAG_READONLY | (NULL == notify ? MCA_BASE_PVAR_FLAG_CONTINUOUS : 0), read,
        NULL, notify, (void *) ctx);
}

void mca_pml_mpiv_stats_register(void)
{
    const size_t n = mpiv_stats_count();
    for (size_t i = 0; i < n; ++i) {
        const char *name, *unit, *text;
        char description[512];
        if (MPIV_OK != mpiv_stats_info(i, &name, &unit, &text)) {
            continue;
        }
        snprintf(description, sizeof(description), "%s (%s; all threads of the process)", text,
                 unit);
        register_pvar(name, description, MCA_BASE_PVAR_CLASS_COUNTER, read_counter, NULL, i);
    }
    const size_t m = mpiv_stats_comm_count();
    for (size_t i = 0; i < m; ++i) {
        const char *name, *unit, *text;
        char description[512];
        if (MPIV_OK != mpiv_stats_comm_info(i, &name, &unit, &text)) {
            continue;
        }
        snprintf(description, sizeof(description),
                 "%s (%s; all threads of the process; bound to a communicator)", text, unit);
        (void) mca_base_component_pvar_register(
            &mca_pml_mpiv_component.pmlm_version, name, description, OPAL_INFO_LVL_4,
            MCA_BASE_PVAR_CLASS_COUNTER, MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,
            MCA_BASE_VAR_BIND_MPI_COMM, MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS,
            read_comm_counter, NULL, bind_comm, (void *) (uintptr_t) i);
    }
    register_pvar("unexpected_now",
                  "Messages that arrived and wait for their receives now (unexpected, or held "
                  "for their sender's order)",
                  MCA_BASE_PVAR_CLASS_LEVEL, read_level, NULL, LEVEL_HELD);
    register_pvar("unexpected_max",
                  "The most messages that waited for their receives at once (high-water mark "
                  "of unexpected_now since MPI_Init)",
                  MCA_BASE_PVAR_CLASS_HIGHWATERMARK, read_level, NULL, LEVEL_HELD_MAX);
    register_pvar("posted_now",
                  "Receives posted that wait for their message now (recv_posted - "
                  "recv_posted_matched - recv_cancelled)",
                  MCA_BASE_PVAR_CLASS_LEVEL, read_level, NULL, LEVEL_POSTED);
    register_pvar("posted_max",
                  "The most receives that waited in the posted lists at once (high-water mark; "
                  "not continuous: counted while a handle is started, at the cost of a shared "
                  "atomic add per receive that waits; under pml_mpiv_stats >= 1 for the whole run)",
                  MCA_BASE_PVAR_CLASS_HIGHWATERMARK, read_level, notify_posted_max,
                  LEVEL_POSTED_MAX);
}

/* One line per counter that is not zero ("NAME VALUE UNIT"), at level 2 followed by the
 * values of the exited threads and of each live thread. */
void mca_pml_mpiv_stats_print(int level)
{
    enum { MAX_THREADS = 64 };
    const size_t n = mpiv_stats_count();
    mpiv_p2p_levels_t levels = {0, 0, 0, 0};
    char line[1024];
    if (level <= 0) {
        return;
    }
    if (NULL != mca_pml_mpiv.engine) {
        (void) mpiv_p2p_levels(mca_pml_mpiv.engine, &levels);
    }
    opal_output(0, "pml mpiv stats: rank %d (pid %d): counters that are not zero%s",
                (int) OMPI_PROC_MY_NAME->vpid, (int) getpid(),
                level >= 2 ? " [exited threads | each live thread]" : "");
    for (size_t i = 0; i < n; ++i) {
        const char *name, *unit, *text;
        uint64_t total = 0, values[MAX_THREADS];
        size_t threads = 0;
        if (MPIV_OK != mpiv_stats_info(i, &name, &unit, &text) ||
            MPIV_OK != mpiv_stats_read(i, &total) || 0 == total) {
            continue;
        }
        int len = snprintf(line, sizeof(line), "pml mpiv stats: rank %d: %-24s %20" PRIu64 " %s",
                           (int) OMPI_PROC_MY_NAME->vpid, name, total, unit);
        if (level >= 2 &&
            MPIV_OK == mpiv_stats_read_threads(i, values, MAX_THREADS, &threads)) {
            const size_t shown = threads < MAX_THREADS ? threads : MAX_THREADS;
            for (size_t t = 0; t < shown && len > 0 && (size_t) len < sizeof(line); ++t) {
                len += snprintf(line + len, sizeof(line) - (size_t) len, "%s%" PRIu64,
                                0 == t ? " [" : (1 == t ? " | " : " "), values[t]);
            }
            if (len > 0 && (size_t) len < sizeof(line)) {
                snprintf(line + len, sizeof(line) - (size_t) len, "%s]",
                         threads > shown ? " ..." : "");
            }
        }
        opal_output(0, "%s", line);
    }
    opal_output(0, "pml mpiv stats: rank %d: %-24s %20" PRIu64 " messages",
                (int) OMPI_PROC_MY_NAME->vpid, "unexpected_max", levels.held_max);
    opal_output(0, "pml mpiv stats: rank %d: %-24s %20" PRIu64 " receives",
                (int) OMPI_PROC_MY_NAME->vpid, "posted_max", levels.posted_max);
}
