#include "base/log.hpp"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace mpiv::base {
namespace {

void stderr_handler(int level, const char *message, void *)
{
    static const int verbosity = [] {
        const char *v = std::getenv("MPIV_VERBOSE");
        return v != nullptr ? std::atoi(v) : 0;
    }();
    if (level <= verbosity) {
        std::fprintf(stderr, "mpiv: %s\n", message);
    }
}

struct handler {
    log_func func;
    void *ctx;
};

std::mutex g_handler_mutex;
handler g_handler{stderr_handler, nullptr};

} // namespace

void set_log_handler(log_func func, void *ctx) noexcept
{
    std::lock_guard<std::mutex> guard(g_handler_mutex);
    g_handler = handler{func != nullptr ? func : stderr_handler, func != nullptr ? ctx : nullptr};
}

void log(log_level level, const char *fmt, ...) noexcept
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    handler h;
    {
        std::lock_guard<std::mutex> guard(g_handler_mutex);
        h = g_handler;
    }
    h.func(static_cast<int>(level), message, h.ctx);
}

} // namespace mpiv::base
