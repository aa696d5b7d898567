#include "base/membarrier.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mpiv::base {

namespace {
long membarrier(int cmd) noexcept { return syscall(SYS_membarrier, cmd, 0, 0); }

bool do_register() noexcept
{
    const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
    const long want = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    return cmds >= 0 && (cmds & want) == want &&
           membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 &&
           membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}
} // namespace

bool membarrier_register() noexcept
{
    static const bool ok = do_register();
    return ok;
}

bool heavy_barrier() noexcept { return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0; }

} // namespace mpiv::base
