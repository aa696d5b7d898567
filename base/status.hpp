// The core's status type: the C codes of <mpiv/mpiv_status.h> as a [[nodiscard]] enum.
#pragma once

#include <mpiv/mpiv_status.h>

namespace mpiv {

enum class [[nodiscard]] status : int {
    ok = MPIV_OK,
    inprogress = MPIV_INPROGRESS,
    invalid_arg = MPIV_ERR_INVALID_ARG,
    invalid_handle = MPIV_ERR_INVALID_HANDLE,
    already_joined = MPIV_ERR_ALREADY_JOINED,
    not_initialized = MPIV_ERR_NOT_INITIALIZED,
    not_ult = MPIV_ERR_NOT_ULT,
    busy = MPIV_ERR_BUSY,
    oversignaled = MPIV_ERR_OVERSIGNALED,
    deadlock = MPIV_ERR_DEADLOCK,
    param = MPIV_ERR_PARAM,
    not_found = MPIV_ERR_NOT_FOUND,
    truncate = MPIV_ERR_TRUNCATE,
    retry_lock = MPIV_ERR_RETRY_LOCK,
    retry_nopacket = MPIV_ERR_RETRY_NOPACKET,
    retry_nomem = MPIV_ERR_RETRY_NOMEM,
    nomem = MPIV_ERR_NOMEM,
    system = MPIV_ERR_SYSTEM,
    capacity = MPIV_ERR_CAPACITY,
    topology = MPIV_ERR_TOPOLOGY,
    internal = MPIV_ERR_INTERNAL,
};

constexpr mpiv_status_t to_c(status s) noexcept { return static_cast<mpiv_status_t>(s); }
constexpr bool is_error(status s) noexcept { return static_cast<int>(s) < 0; }
constexpr bool is_retry(status s) noexcept { return MPIV_STATUS_IS_RETRY(static_cast<int>(s)); }

} // namespace mpiv
