/*
 * Initialization and finalization (seed 002, §3.1), configuration, messages, counters.
 *
 * MPI_Init and MPI_Init_thread both ask the library for MPI_THREAD_MULTIPLE, which the
 * progress thread needs, and report to the application the level it asked for (or less, if
 * the library gives less). Without MPI_THREAD_MULTIPLE APSM says so and steps aside: every
 * interceptor then calls the library directly. MPI_Finalize stops and joins the progress
 * thread before the library is finalized.
 */
#define _POSIX_C_SOURCE 200809L
#include "apsm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct apsm_state apsm_g = {
    .world_rank = -1,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
};

/* Used when the library exposes no eager limit: Open MPI's shared-memory default. */
#define APSM_EAGER_FALLBACK 4096
/* Pause of MPIV_APSM_POLL=sleep, in microseconds. */
#define APSM_POLL_SLEEP_DEFAULT_US 20

/* ------------------------------------------------------------------ messages */

static void apsm_vprint(const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    /* One fprintf per line keeps the lines of concurrent threads apart. */
    if (apsm_g.world_rank >= 0) {
        fprintf(stderr, "mpiv-apsm: rank %d: %s\n", apsm_g.world_rank, text);
    } else {
        fprintf(stderr, "mpiv-apsm: %s\n", text);
    }
}

void apsm_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    apsm_vprint(fmt, ap);
    va_end(ap);
}

void apsm_info(const char *fmt, ...)
{
    va_list ap;
    if (!apsm_g.verbose) {
        return;
    }
    va_start(ap, fmt);
    apsm_vprint(fmt, ap);
    va_end(ap);
}

void apsm_mpi_error(const char *call, int rc, const char *consequence)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_SUCCESS != PMPI_Error_string(rc, text, &len)) {
        snprintf(text, sizeof text, "MPI error code %d", rc);
    }
    for (char *nl = strchr(text, '\n'); NULL != nl; nl = strchr(nl, '\n')) {
        *nl = ' '; /* MPICH's error stacks span lines */
    }
    apsm_error("%s failed: %s (MPI error %d); %s", call, text, rc, consequence);
}

/* ------------------------------------------------------------------ configuration */

static bool apsm_env_true(const char *name)
{
    const char *value = getenv(name);
    return NULL != value && '\0' != value[0] && 0 != strcmp(value, "0");
}

/* Parse "<digits>[k|K|m|M|g|G]"; false if text is not such a size. */
static bool apsm_parse_size(const char *text, MPI_Count *size)
{
    char *end = NULL;
    if (text[0] < '0' || text[0] > '9') {
        return false;
    }
    unsigned long long value = strtoull(text, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        ++end;
        break;
    case 'm':
    case 'M':
        shift = 20;
        ++end;
        break;
    case 'g':
    case 'G':
        shift = 30;
        ++end;
        break;
    default:
        break;
    }
    if ('\0' != *end || value > (1ull << 40)) {
        return false;
    }
    *size = (MPI_Count) (value << shift);
    return true;
}

/* Read an integer control variable through MPI_T; false if the library has none by that name. */
static bool apsm_cvar_read(const char *name, long long *value)
{
    int index = -1, count = 0, verbosity, bind, scope, name_len = 0, desc_len = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle handle;
    union {
        int i;
        unsigned u;
        long l;
        unsigned long ul;
        long long ll;
        unsigned long long ull;
    } v = {0};

    if (MPI_SUCCESS != MPI_T_cvar_get_index(name, &index) ||
        MPI_SUCCESS != MPI_T_cvar_get_info(index, NULL, &name_len, &verbosity, &type,
                                           &enumtype, NULL, &desc_len, &bind, &scope) ||
        MPI_SUCCESS != MPI_T_cvar_handle_alloc(index, NULL, &handle, &count)) {
        return false;
    }
    bool ok = 1 == count && MPI_SUCCESS == MPI_T_cvar_read(handle, &v);
    MPI_T_cvar_handle_free(&handle);
    if (!ok) {
        return false;
    }
    if (MPI_INT == type) {
        *value = v.i;
    } else if (MPI_UNSIGNED == type) {
        *value = v.u;
    } else if (MPI_LONG == type) {
        *value = v.l;
    } else if (MPI_UNSIGNED_LONG == type) {
        *value = (long long) v.ul;
    } else if (MPI_LONG_LONG == type) {
        *value = v.ll;
    } else if (MPI_UNSIGNED_LONG_LONG == type) {
        *value = (long long) v.ull;
    } else {
        return false;
    }
    return true;
}

/*
 * The library's eager limit: the first of these control variables that exists and is
 * positive. Open MPI ob1 over shared memory (vader in 4.x, sm in 5.x); MPICH ch4 shared
 * memory (a message up to one queue cell goes eagerly); MPICH ch3. *source names it.
 */
static MPI_Count apsm_library_eager_limit(const char **source)
{
    static const char *const names[] = {"btl_vader_eager_limit", "btl_sm_eager_limit",
                                        "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE",
                                        "MPIR_CVAR_CH3_EAGER_MAX_MSG_SIZE"};
    MPI_Count limit = APSM_EAGER_FALLBACK;
    int provided;
    *source = "built-in default";
    if (MPI_SUCCESS != MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided)) {
        return limit;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        long long value = 0;
        if (apsm_cvar_read(names[i], &value) && value > 0) {
            limit = (MPI_Count) value;
            *source = names[i];
            break;
        }
    }
    MPI_T_finalize();
    return limit;
}

/* Parse MPIV_APSM_POLL into apsm_g.poll and apsm_g.poll_sleep_ns; false (and neither
 * changed) if malformed. */
static bool apsm_parse_poll(const char *text)
{
    static const struct {
        const char *name;
        enum apsm_poll poll;
    } modes[] = {{"auto", APSM_POLL_AUTO},
                 {"spin", APSM_POLL_SPIN},
                 {"yield", APSM_POLL_YIELD},
                 {"sleep", APSM_POLL_SLEEP}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; ++i) {
        if (0 == strcmp(text, modes[i].name)) {
            apsm_g.poll = modes[i].poll;
            return true;
        }
    }
    if (0 == strncmp(text, "sleep:", 6)) {
        char *end = NULL;
        long us = strtol(text + 6, &end, 10);
        if (end != text + 6 && '\0' == *end && us > 0 && us <= 1000000) {
            apsm_g.poll = APSM_POLL_SLEEP;
            apsm_g.poll_sleep_ns = us * 1000;
            return true;
        }
    }
    return false;
}

/* Parse MPIV_APSM_WAIT into apsm_g.wait; false (unchanged) if malformed. */
static bool apsm_parse_wait(const char *text)
{
    static const char *const names[] = {"auto", "yield", "library"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        if (0 == strcmp(text, names[i])) {
            apsm_g.wait = (enum apsm_wait) i;
            return true;
        }
    }
    return false;
}

static void apsm_configure(void)
{
    const char *source = "MPIV_APSM_EAGER_LIMIT";
    const char *text = getenv("MPIV_APSM_EAGER_LIMIT");
    if (NULL == text || !apsm_parse_size(text, &apsm_g.eager_limit)) {
        if (NULL != text) {
            apsm_error("MPIV_APSM_EAGER_LIMIT='%s' is not a size (e.g. 65536, 64k): using the "
                       "library's eager limit",
                       text);
        }
        apsm_g.eager_limit = apsm_library_eager_limit(&source);
    }
    const char *poll = getenv("MPIV_APSM_POLL");
    apsm_g.poll = APSM_POLL_AUTO;
    apsm_g.poll_sleep_ns = APSM_POLL_SLEEP_DEFAULT_US * 1000;
    if (NULL != poll && !apsm_parse_poll(poll)) {
        apsm_error("MPIV_APSM_POLL='%s' is not auto, spin, yield, sleep or sleep:<us>: using "
                   "auto",
                   poll);
    }
    const char *wait = getenv("MPIV_APSM_WAIT");
    apsm_g.wait = APSM_WAIT_AUTO;
    if (NULL != wait && !apsm_parse_wait(wait)) {
        apsm_error("MPIV_APSM_WAIT='%s' is not auto, yield or library: using auto", wait);
    }
    apsm_info("eager limit %lld bytes (%s)", (long long) apsm_g.eager_limit, source);
}

static const char *apsm_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE:
        return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
        return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
        return "MPI_THREAD_SERIALIZED";
    default:
        return "MPI_THREAD_MULTIPLE";
    }
}

/*
 * Is the MPI library the application runs with the one this build expects? A preloaded
 * library of the wrong family would pass handles of another ABI and crash later.
 */
static bool apsm_library_matches(void)
{
    /* Large enough for every library (MPICH's MPI_MAX_LIBRARY_VERSION_STRING is 8192). */
    static char version[8192];
    int len = 0;
    if (MPI_SUCCESS != PMPI_Get_library_version(version, &len)) {
        return true; /* nothing to compare with */
    }
#if defined(OPEN_MPI)
    bool ok = NULL != strstr(version, "Open MPI");
    const char *built_for = "Open MPI", *other = "libmpiv-apsm-mpich.so";
#else
    bool ok = NULL == strstr(version, "Open MPI");
    const char *built_for = "MPICH", *other = "libmpiv-apsm.so";
#endif
    if (!ok) {
        int first_line = (int) strcspn(version, "\n");
        apsm_error("this library was built for %s but the application runs with \"%.*s\": use "
                   "%s instead",
                   built_for, first_line < 60 ? first_line : 60, version, other);
    }
    return ok;
}

/* ------------------------------------------------------------------ MPI entry points */

static int apsm_init(int *argc, char ***argv, int required, int *provided)
{
    int actual = MPI_THREAD_SINGLE;
    if (!apsm_library_matches()) {
        return MPI_ERR_OTHER;
    }
    int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &actual);
    if (MPI_SUCCESS != rc) {
        return rc;
    }
    apsm_g.initialized = true;
    apsm_g.thread_level = required < actual ? required : actual;
    *provided = apsm_g.thread_level;
    PMPI_Comm_rank(MPI_COMM_WORLD, &apsm_g.world_rank);
    apsm_g.verbose = apsm_env_true("MPIV_APSM_VERBOSE");
    if (actual < MPI_THREAD_MULTIPLE) {
        apsm_error("the MPI library provides %s, not MPI_THREAD_MULTIPLE: running without the "
                   "progress thread (no asynchronous progress)",
                   apsm_level_name(actual));
        return MPI_SUCCESS;
    }
    apsm_configure();
    if (0 != apsm_progress_start()) {
        return MPI_SUCCESS;
    }
    /* sync: release; publishes the configuration; pairs with the acquire load in apsm_on() */
    atomic_store_explicit(&apsm_g.active, true, memory_order_release);
    return MPI_SUCCESS;
}

MPIV_API int MPI_Init(int *argc, char ***argv)
{
    int provided = MPI_THREAD_SINGLE;
    if (apsm_env_true("MPIV_APSM_DISABLE")) {
        return PMPI_Init(argc, argv);
    }
    return apsm_init(argc, argv, MPI_THREAD_SINGLE, &provided);
}

MPIV_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    if (apsm_env_true("MPIV_APSM_DISABLE")) {
        return PMPI_Init_thread(argc, argv, required, provided);
    }
    return apsm_init(argc, argv, required, provided);
}

MPIV_API int MPI_Query_thread(int *provided)
{
    if (!apsm_g.initialized) {
        return PMPI_Query_thread(provided);
    }
    *provided = apsm_g.thread_level;
    return MPI_SUCCESS;
}

MPIV_API int MPI_Finalize(void)
{
    if (apsm_on()) {
        /* No other thread may call MPI during MPI_Finalize, so nothing races with this. */
        atomic_store_explicit(&apsm_g.active, false, memory_order_relaxed);
        apsm_progress_stop();
    }
    return PMPI_Finalize();
}

MPIV_API mpiv_status_t mpiv_apsm_counters_get(mpiv_apsm_counters_t *counters_p)
{
    if (NULL == counters_p) {
        return MPIV_ERR_INVALID_ARG;
    }
    bool on = apsm_on();
    mpiv_apsm_counters_t c = {
        .queued = atomic_load_explicit(&apsm_g.queued, memory_order_relaxed),
        .completed = atomic_load_explicit(&apsm_g.completed, memory_order_relaxed),
        .cancelled = atomic_load_explicit(&apsm_g.cancelled, memory_order_relaxed),
        .released = atomic_load_explicit(&apsm_g.released, memory_order_relaxed),
        .yielding_waits = atomic_load_explicit(&apsm_g.yielding_waits, memory_order_relaxed),
        .eager_limit = on ? (uint64_t) apsm_g.eager_limit : 0,
        .progress_thread = on,
    };
    *counters_p = c;
    return MPIV_OK;
}
