// ucx_api: UCX's functions, loaded at run time (see ucx_api.hpp).
#include "endpoints/ucx/ucx_api.hpp"

#include <dlfcn.h>

#include <cstdio>

#include "config.h"

namespace mpiv::ep::ucx::detail {

ucx_api g_api{};

namespace {

constexpr const char *k_soname = "libucp.so.0";

struct loaded {
    const ucx_api *api = nullptr;
    char why[512] = {};
};

template <class F> bool bind(void *lib, F &fn, const char *name) noexcept
{
    void *sym = dlsym(lib, name);
    fn = reinterpret_cast<F>(sym); // (POSIX: a function's address, as dlsym gives it)
    return sym != nullptr;
}

void *open_ucp(loaded &r) noexcept
{
    void *lib = dlopen(k_soname, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
        return lib;
    }
    const char *err = dlerror();
    int n = std::snprintf(r.why, sizeof r.why, "cannot load UCX: %s",
                          err != nullptr ? err : k_soname);
#ifdef MPIV_UCX_LIBDIR
    // Where configure found UCX (installed outside the loader's search path).
    static const char path[] = MPIV_UCX_LIBDIR "/libucp.so.0";
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr && n > 0 && static_cast<std::size_t>(n) < sizeof r.why) {
        err = dlerror();
        // (Cut short if it does not fit: a one-line reason.)
        std::snprintf(r.why + n, sizeof r.why - n, "; %.400s", err != nullptr ? err : path);
    }
#else
    (void)n;
#endif
    return lib;
}

loaded load() noexcept
{
    loaded r;
    void *lib = open_ucp(r);
    if (lib == nullptr) {
        return r;
    }
    ucx_api &a = g_api;
    const char *missing = nullptr;
#define MPIV_UCX_BIND(_fn)                                                                    \
    if (missing == nullptr && !bind(lib, a._fn, #_fn)) {                                      \
        missing = #_fn;                                                                       \
    }
    MPIV_UCX_BIND(ucp_get_version)
    MPIV_UCX_BIND(ucp_config_read)
    MPIV_UCX_BIND(ucp_config_release)
    MPIV_UCX_BIND(ucp_init_version)
    MPIV_UCX_BIND(ucp_cleanup)
    MPIV_UCX_BIND(ucp_worker_create)
    MPIV_UCX_BIND(ucp_worker_destroy)
    MPIV_UCX_BIND(ucp_worker_query)
    MPIV_UCX_BIND(ucp_worker_get_address)
    MPIV_UCX_BIND(ucp_worker_release_address)
    MPIV_UCX_BIND(ucp_worker_progress)
    MPIV_UCX_BIND(ucp_worker_set_am_recv_handler)
    MPIV_UCX_BIND(ucp_worker_get_efd)
    MPIV_UCX_BIND(ucp_worker_arm)
    MPIV_UCX_BIND(ucp_worker_signal)
    MPIV_UCX_BIND(ucp_ep_create)
    MPIV_UCX_BIND(ucp_ep_close_nbx)
    MPIV_UCX_BIND(ucp_am_send_nbx)
    MPIV_UCX_BIND(ucp_am_recv_data_nbx)
    MPIV_UCX_BIND(ucp_am_data_release)
    MPIV_UCX_BIND(ucp_request_check_status)
    MPIV_UCX_BIND(ucp_request_free)
    MPIV_UCX_BIND(ucp_dt_create_generic)
    MPIV_UCX_BIND(ucp_dt_destroy)
    MPIV_UCX_BIND(ucs_status_string) // (libucs, which libucp needs: in its lookup scope)
#undef MPIV_UCX_BIND
    // (On a failure lib stays open: closing a half-bound UCX is not worth the risk.)
    if (missing != nullptr) {
        std::snprintf(r.why, sizeof r.why, "cannot use UCX: %s has no %s", k_soname, missing);
        return r;
    }
    unsigned major = 0, minor = 0, release = 0;
    a.ucp_get_version(&major, &minor, &release);
    if (major != UCP_API_MAJOR || minor < UCP_API_MINOR) {
        std::snprintf(r.why, sizeof r.why,
                      "cannot use UCX: %s is UCX %u.%u.%u, and this mpiv was built for UCX "
                      "%u.%u or a later %u.x",
                      k_soname, major, minor, release, static_cast<unsigned>(UCP_API_MAJOR),
                      static_cast<unsigned>(UCP_API_MINOR), static_cast<unsigned>(UCP_API_MAJOR));
        return r;
    }
    r.api = &a;
    return r;
}

} // namespace

const ucx_api *load_api(const char **why) noexcept
{
    // A function-local static: initialized once, by the first caller, while others wait.
    static const loaded r = load();
    if (r.api == nullptr && why != nullptr) {
        *why = r.why;
    }
    return r.api;
}

} // namespace mpiv::ep::ucx::detail
