// extern "C" entry points of <mpiv/mpiv.h> and <mpiv/mpiv_cid.h> that belong to base/.
#include <mpiv/mpiv.h>
#include <mpiv/mpiv_cid.h>

#include "base/cid.hpp"
#include "base/log.hpp"
#include "base/stats.hpp"

namespace stats = mpiv::base::stats;

extern "C" MPIV_API mpiv_status_t mpiv_set_log_handler(mpiv_log_func_t func, void *ctx)
{
    mpiv::base::set_log_handler(func, ctx);
    return MPIV_OK;
}

extern "C" MPIV_API size_t mpiv_stats_count(void) { return stats::k_counters; }

extern "C" MPIV_API mpiv_status_t mpiv_stats_info(size_t index, const char **name_p,
                                                  const char **unit_p, const char **description_p)
{
    if (index >= stats::k_counters || name_p == nullptr || unit_p == nullptr ||
        description_p == nullptr) {
        mpiv::base::log(mpiv::base::log_level::error,
                        "mpiv_stats_info: index %zu out of range (%zu counters) or a NULL output",
                        index, stats::k_counters);
        return MPIV_ERR_INVALID_ARG;
    }
    const stats::info &i = stats::describe(index);
    *name_p = i.name;
    *unit_p = i.unit;
    *description_p = i.description;
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_stats_read(size_t index, uint64_t *value_p)
{
    if (index >= stats::k_counters || value_p == nullptr) {
        mpiv::base::log(mpiv::base::log_level::error,
                        "mpiv_stats_read: index %zu out of range (%zu counters) or a NULL output",
                        index, stats::k_counters);
        return MPIV_ERR_INVALID_ARG;
    }
    *value_p = stats::read(static_cast<stats::counter>(index));
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_stats_read_threads(size_t index, uint64_t *values,
                                                          size_t capacity, size_t *count_p)
{
    if (index >= stats::k_counters || (values == nullptr && capacity != 0) || count_p == nullptr) {
        mpiv::base::log(mpiv::base::log_level::error,
                        "mpiv_stats_read_threads: index %zu out of range (%zu counters) or a "
                        "NULL argument",
                        index, stats::k_counters);
        return MPIV_ERR_INVALID_ARG;
    }
    *count_p = stats::read_threads(static_cast<stats::counter>(index), values, capacity);
    return MPIV_OK;
}

extern "C" MPIV_API size_t mpiv_stats_comm_count(void) { return stats::k_comm_counters; }

extern "C" MPIV_API mpiv_status_t mpiv_stats_comm_info(size_t index, const char **name_p,
                                                       const char **unit_p,
                                                       const char **description_p)
{
    if (index >= stats::k_comm_counters || name_p == nullptr || unit_p == nullptr ||
        description_p == nullptr) {
        mpiv::base::log(mpiv::base::log_level::error,
                        "mpiv_stats_comm_info: index %zu out of range (%zu counters) or a NULL "
                        "output",
                        index, stats::k_comm_counters);
        return MPIV_ERR_INVALID_ARG;
    }
    const stats::info &i = stats::describe_comm(index);
    *name_p = i.name;
    *unit_p = i.unit;
    *description_p = i.description;
    return MPIV_OK;
}

extern "C" MPIV_API mpiv_status_t mpiv_cid_agree(const mpiv_cid_ops_t *ops, uint32_t *id_p)
{
    if (ops == nullptr || id_p == nullptr) {
        mpiv::base::log(mpiv::base::log_level::error, "mpiv_cid_agree: NULL argument");
        return MPIV_ERR_INVALID_ARG;
    }
    return static_cast<mpiv_status_t>(mpiv::base::cid_agreement::process().agree(*ops, *id_p));
}
