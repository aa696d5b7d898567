// extern "C" entry points of <mpiv/mpiv.h> that belong to base/.
#include <mpiv/mpiv.h>

#include "base/log.hpp"

extern "C" MPIV_API mpiv_status_t mpiv_set_log_handler(mpiv_log_func_t func, void *ctx)
{
    mpiv::base::set_log_handler(func, ctx);
    return MPIV_OK;
}
