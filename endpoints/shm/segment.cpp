#include "endpoints/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/log.hpp"
#include "endpoints/shm/sys_error.hpp"

namespace mpiv::shm {
namespace {

status log_errno(const char *call, const char *what)
{
    const int err = errno;
    base::log(base::log_level::error, "shm: %s(%s) failed: %s (%s)", call, what,
              detail::errno_name(err), std::strerror(err));
    return status::system;
}

/// Map @p bytes of @p fd shared, read-write.
status map_shared(int fd, std::size_t bytes, const char *what, void *&base_p)
{
    void *const p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        return log_errno("mmap", what);
    }
    base_p = p;
    return status::ok;
}

} // namespace

segment::segment(segment &&other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1))
{
}

segment &segment::operator=(segment &&other) noexcept
{
    if (this != &other) {
        reset();
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
        fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
}

void segment::reset() noexcept
{
    if (base_ != nullptr) {
        munmap(base_, size_);
    }
    if (fd_ >= 0) {
        close(fd_);
    }
    base_ = nullptr;
    size_ = 0;
    fd_ = -1;
}

status segment::create(std::size_t bytes, segment &out_p) noexcept
{
    if (bytes == 0) {
        base::log(base::log_level::error, "shm: cannot create an empty segment");
        return status::invalid_arg;
    }
    segment s;
    s.fd_ = memfd_create("mpiv-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (s.fd_ < 0) {
        return log_errno("memfd_create", "mpiv-shm");
    }
    char what[64];
    std::snprintf(what, sizeof(what), "memfd %d, %zu bytes", s.fd_, bytes);
    if (ftruncate(s.fd_, static_cast<off_t>(bytes)) != 0) {
        return log_errno("ftruncate", what);
    }
    // Nobody (another process of this user included) may change the size any more: a
    // shrink would make every mapping of it fault (SIGBUS) past the new end.
    if (fcntl(s.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        return log_errno("fcntl(F_ADD_SEALS)", what);
    }
    const status st = map_shared(s.fd_, bytes, what, s.base_);
    if (st != status::ok) {
        return st;
    }
    s.size_ = bytes;
    out_p = std::move(s);
    return status::ok;
}

status segment::attach(int owner_pid, int owner_fd, std::size_t bytes, segment &out_p) noexcept
{
    if (bytes == 0 || owner_pid <= 0 || owner_fd < 0) {
        base::log(base::log_level::error,
                  "shm: cannot attach %zu bytes of pid %d fd %d (need bytes > 0, a pid, an fd)",
                  bytes, owner_pid, owner_fd);
        return status::invalid_arg;
    }
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", owner_pid, owner_fd);
    const int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return log_errno("open", path);
    }
    // The mapping outlives the descriptor: close it on every path.
    struct fd_closer {
        int fd;
        ~fd_closer() { close(fd); }
    } closer{fd};
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        return log_errno("fstat", path);
    }
    // A segment whose size can still change could make the mapping fault (SIGBUS) later.
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
        base::log(base::log_level::error, "shm: %s is not sealed against shrinking", path);
        return status::invalid_arg;
    }
    // Mapping past the end of the file would succeed and then fault (SIGBUS) on access.
    if (st.st_size < 0 || static_cast<unsigned long long>(st.st_size) < bytes) {
        base::log(base::log_level::error, "shm: %s has %lld bytes, %zu requested", path,
                  static_cast<long long>(st.st_size), bytes);
        return status::invalid_arg;
    }
    segment s;
    const status ms = map_shared(fd, bytes, path, s.base_);
    if (ms != status::ok) {
        return ms;
    }
    s.size_ = bytes;
    out_p = std::move(s);
    return status::ok;
}

} // namespace mpiv::shm
