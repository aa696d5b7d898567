// The UCX functions the transport calls, loaded at run time: libmpiv has no link-time
// dependency on UCX's libraries. A node without UCX (or with a broken install) still loads
// libmpiv and runs single-node jobs over shared memory; only a job that needs the UCX
// transport is refused, with the loader's reason (mpiv_p2p_ucx_unavailable()).
//
// libucp is opened with dlopen() on first use: its soname first (the loader's search path,
// LD_LIBRARY_PATH included), then the directory configure found UCX in. It is never
// closed. A UCX older than the headers this mpiv was built with (same major version, an
// earlier minor one) is refused. Each member has the type of the UCX function of the same
// name, as declared by those headers (ucp_init() is an inline wrapper: the table has
// ucp_init_version, called with the headers' API version).
#pragma once

#include <ucp/api/ucp.h>

namespace mpiv::ep::ucx::detail {

struct ucx_api {
    decltype(&::ucp_get_version) ucp_get_version;
    decltype(&::ucp_config_read) ucp_config_read;
    decltype(&::ucp_config_release) ucp_config_release;
    decltype(&::ucp_init_version) ucp_init_version;
    decltype(&::ucp_cleanup) ucp_cleanup;
    decltype(&::ucp_worker_create) ucp_worker_create;
    decltype(&::ucp_worker_destroy) ucp_worker_destroy;
    decltype(&::ucp_worker_query) ucp_worker_query;
    decltype(&::ucp_worker_get_address) ucp_worker_get_address;
    decltype(&::ucp_worker_release_address) ucp_worker_release_address;
    decltype(&::ucp_worker_progress) ucp_worker_progress;
    decltype(&::ucp_worker_set_am_recv_handler) ucp_worker_set_am_recv_handler;
    decltype(&::ucp_worker_get_efd) ucp_worker_get_efd;
    decltype(&::ucp_worker_arm) ucp_worker_arm;
    decltype(&::ucp_worker_signal) ucp_worker_signal;
    decltype(&::ucp_ep_create) ucp_ep_create;
    decltype(&::ucp_ep_close_nbx) ucp_ep_close_nbx;
    decltype(&::ucp_am_send_nbx) ucp_am_send_nbx;
    decltype(&::ucp_am_recv_data_nbx) ucp_am_recv_data_nbx;
    decltype(&::ucp_am_data_release) ucp_am_data_release;
    decltype(&::ucp_request_check_status) ucp_request_check_status;
    decltype(&::ucp_request_free) ucp_request_free;
    decltype(&::ucp_dt_create_generic) ucp_dt_create_generic;
    decltype(&::ucp_dt_destroy) ucp_dt_destroy;
    decltype(&::ucs_status_string) ucs_status_string;
};

/// The table, loaded on the first call (thread-safe; later calls return the same result):
/// nullptr when libucp cannot be opened or lacks one of the functions, and then *why (if
/// why is not null) is a one-line reason that stays valid.
const ucx_api *load_api(const char **why) noexcept;

extern ucx_api g_api; // (filled by load_api())

/// The table; only after load_api() returned it (as every transport has: create() loads
/// it first).
inline const ucx_api &api() noexcept
{
    return g_api;
}

} // namespace mpiv::ep::ucx::detail
