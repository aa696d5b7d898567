#include "base/status.hpp"

extern "C" MPIV_API const char *mpiv_status_string(mpiv_status_t status)
{
    switch (status) {
    case MPIV_OK: return "success";
    case MPIV_INPROGRESS: return "operation in progress";
    case MPIV_ERR_INVALID_ARG: return "invalid argument";
    case MPIV_ERR_INVALID_HANDLE: return "invalid handle (not issued by this runtime)";
    case MPIV_ERR_ALREADY_JOINED: return "ULT already joined";
    case MPIV_ERR_NOT_INITIALIZED: return "mpiv runtime not initialized";
    case MPIV_ERR_NOT_ULT: return "caller is not a ULT";
    case MPIV_ERR_BUSY: return "resource busy (live ULTs or objects in use)";
    case MPIV_ERR_OVERSIGNALED: return "sync signalled more times than its count";
    case MPIV_ERR_DEADLOCK: return "operation would deadlock (waits for itself)";
    case MPIV_ERR_PARAM: return "invalid runtime parameter";
    case MPIV_ERR_NOT_FOUND: return "no such element";
    case MPIV_ERR_TRUNCATE: return "message truncated";
    case MPIV_ERR_RETRY_LOCK: return "lock busy: retry";
    case MPIV_ERR_RETRY_NOPACKET: return "packet pool exhausted: retry after progress";
    case MPIV_ERR_RETRY_NOMEM: return "queue full: retry after progress";
    case MPIV_ERR_NOMEM: return "out of memory";
    case MPIV_ERR_SYSTEM: return "system call failed";
    case MPIV_ERR_CAPACITY: return "capacity limit reached";
    case MPIV_ERR_TOPOLOGY: return "hardware topology (hwloc) error or empty cpuset";
    case MPIV_ERR_INTERNAL: return "internal error in mpiv";
    }
    return "unknown mpiv status code";
}
