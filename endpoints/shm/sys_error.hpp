// Names of the errno values the shm transport reports, for log lines that say both the
// symbol (what a user searches for) and strerror's text.
#pragma once

#include <cerrno>

namespace mpiv::shm::detail {

/// "EPERM" and the like for the errors our system calls document; "errno" otherwise.
inline const char *errno_name(int err) noexcept
{
    switch (err) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case ESRCH: return "ESRCH";
    case EINTR: return "EINTR";
    case EBADF: return "EBADF";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case EFBIG: return "EFBIG";
    case ENOSPC: return "ENOSPC";
    case ENOSYS: return "ENOSYS";
    case ENODEV: return "ENODEV";
    default: return "errno";
    }
}

} // namespace mpiv::shm::detail
