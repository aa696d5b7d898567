#include "endpoints/shm/cma.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "base/log.hpp"
#include "endpoints/shm/sys_error.hpp"

namespace mpiv::shm {
namespace {

#ifdef IOV_MAX
constexpr std::size_t k_iov_max = IOV_MAX;
#else
constexpr std::size_t k_iov_max = 1024; // Linux's UIO_MAXIOV
#endif

/// Entries copied to the stack when a transfer resumes inside an entry: small, since this
/// may run on a ULT's stack.
constexpr std::size_t k_resume_batch = 32;

/// A position inside an iovec list.
struct cursor {
    const struct iovec *v;
    std::size_t count;
    std::size_t index = 0;
    std::size_t offset = 0; // bytes already done in v[index]

    /// Skip empty entries so that a batch never starts with one.
    void skip_empty() noexcept
    {
        while (index < count && v[index].iov_len == offset) {
            ++index;
            offset = 0;
        }
    }

    /// The entries from here, for one call: the caller's array itself when we are at the
    /// start of an entry, else a copy in @p scratch with the first entry trimmed.
    const struct iovec *batch(struct iovec *scratch, unsigned long &n_p) const noexcept
    {
        const std::size_t left = count - index;
        if (offset == 0) {
            n_p = static_cast<unsigned long>(std::min(left, k_iov_max));
            return v + index;
        }
        const std::size_t n = std::min(left, k_resume_batch);
        std::copy(v + index, v + index + n, scratch);
        scratch[0].iov_base = static_cast<char *>(scratch[0].iov_base) + offset;
        scratch[0].iov_len -= offset;
        n_p = static_cast<unsigned long>(n);
        return scratch;
    }

    void advance(std::size_t bytes) noexcept
    {
        while (bytes > 0) {
            const std::size_t step = std::min(bytes, v[index].iov_len - offset);
            bytes -= step;
            offset += step;
            if (offset == v[index].iov_len) {
                ++index;
                offset = 0;
            }
        }
    }

    std::uintptr_t address() const noexcept
    {
        return index < count ? reinterpret_cast<std::uintptr_t>(v[index].iov_base) + offset : 0;
    }
};

/// Sum of the entries' lengths; false on overflow.
bool total_of(const struct iovec *v, std::size_t n, std::size_t &total_p) noexcept
{
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (v[i].iov_len > SIZE_MAX - total) {
            return false;
        }
        total += v[i].iov_len;
    }
    total_p = total;
    return true;
}

const char *hint(int err) noexcept
{
    switch (err) {
    case EPERM: return ": no ptrace access to that process (see kernel.yama.ptrace_scope)";
    case ESRCH: return ": no such process";
    case EFAULT: return ": a remote or local address is not mapped";
    case ENOSYS: return ": CMA is not supported here";
    default: return "";
    }
}

} // namespace

status cma_readv(int pid, const struct iovec *local, std::size_t nlocal,
                 const struct iovec *remote, std::size_t nremote) noexcept
{
    std::size_t local_total = 0;
    std::size_t remote_total = 0;
    if ((local == nullptr && nlocal != 0) || (remote == nullptr && nremote != 0) ||
        !total_of(local, nlocal, local_total) || !total_of(remote, nremote, remote_total) ||
        local_total != remote_total) {
        base::log(base::log_level::error,
                  "shm: cma read from pid %d: %zu local entries (%zu bytes) do not match %zu "
                  "remote entries (%zu bytes)",
                  pid, nlocal, local_total, nremote, remote_total);
        return status::invalid_arg;
    }
    cursor to{local, nlocal};
    cursor from{remote, nremote};
    std::size_t left = local_total;
    while (left > 0) {
        to.skip_empty();
        from.skip_empty();
        struct iovec to_scratch[k_resume_batch];
        struct iovec from_scratch[k_resume_batch];
        unsigned long n_to = 0;
        unsigned long n_from = 0;
        const struct iovec *const to_batch = to.batch(to_scratch, n_to);
        const struct iovec *const from_batch = from.batch(from_scratch, n_from);
        const ssize_t got = process_vm_readv(pid, to_batch, n_to, from_batch, n_from, 0);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            // Zero bytes for a non-empty request would loop forever: report it as a fault.
            const int err = got < 0 ? errno : EFAULT;
            base::log(base::log_level::error,
                      "shm: process_vm_readv(pid %d, remote %#llx, %zu of %zu bytes left) "
                      "failed: %s (%s)%s",
                      pid, static_cast<unsigned long long>(from.address()), left, local_total,
                      detail::errno_name(err), std::strerror(err), hint(err));
            return status::system;
        }
        const auto done = static_cast<std::size_t>(got);
        to.advance(done);
        from.advance(done);
        left -= done;
    }
    return status::ok;
}

status cma_read(int pid, void *local, std::uintptr_t remote, std::size_t n) noexcept
{
    if (n == 0) {
        return status::ok;
    }
    if (local == nullptr) {
        base::log(base::log_level::error, "shm: cma read of %zu bytes into a null buffer", n);
        return status::invalid_arg;
    }
    const struct iovec to{local, n};
    const struct iovec from{reinterpret_cast<void *>(remote), n};
    return cma_readv(pid, &to, 1, &from, 1);
}

int cma_try(int pid, void *local, std::uintptr_t remote, std::size_t n) noexcept
{
    const struct iovec to{local, n};
    const struct iovec from{reinterpret_cast<void *>(remote), n};
    ssize_t got;
    do {
        got = process_vm_readv(pid, &to, 1, &from, 1, 0);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
        return errno;
    }
    return static_cast<std::size_t>(got) == n ? 0 : EFAULT;
}

bool cma_available() noexcept
{
    static const bool available = [] {
        const std::uint64_t source = 0x6d7069765f636d61ull;
        std::uint64_t target = 0;
        const struct iovec to{&target, sizeof(target)};
        const struct iovec from{const_cast<std::uint64_t *>(&source), sizeof(source)};
        const ssize_t got = process_vm_readv(getpid(), &to, 1, &from, 1, 0);
        if (got != static_cast<ssize_t>(sizeof(source)) || target != source) {
            const int err = got < 0 ? errno : 0;
            base::log(base::log_level::warn, "shm: CMA unavailable: process_vm_readv: %s (%s)",
                      detail::errno_name(err), err != 0 ? std::strerror(err) : "short read");
            return false;
        }
        return true;
    }();
    return available;
}

} // namespace mpiv::shm
