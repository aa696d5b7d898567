#include "sched/context.hpp"

#include <pthread.h>

namespace mpiv::sched {

void adopt_thread(context &ctx)
{
#if MPIV_ASAN_FIBERS
    pthread_attr_t attr;
    void *lo = nullptr;
    std::size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &lo, &size);
        pthread_attr_destroy(&attr);
    }
    ctx.set_stack(lo, size);
#endif
#if MPIV_TSAN_FIBERS
    ctx.tsan_fiber = __tsan_get_current_fiber();
#endif
    (void)ctx;
}

} // namespace mpiv::sched
