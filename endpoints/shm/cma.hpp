// Cross-memory attach (CMA): single-copy reads from another process's address space with
// process_vm_readv, for the rendezvous protocol (DESIGN.md "Data path": the receiver copies
// the sender's buffer straight into the user buffer, then sends FIN).
//
// Permissions: the kernel checks ptrace attach rights on the remote process (same user and
// no stricter policy). Yama's kernel.yama.ptrace_scope = 1 limits that to descendants, so
// sibling MPI ranks fail with EPERM unless the target called prctl(PR_SET_PTRACER, ...);
// a seccomp filter may deny the call outright. cma_available() probes only this process,
// so it cannot see a policy that concerns others: cma_try() on a known word of the peer
// does (the engine's connect), and the engine copies through shared memory where it fails.
//
// When not to use: for small messages (a system call per read; the eager path copies
// through shared memory instead), or to read memory the peer may unmap concurrently
// (that is an EFAULT at best, a read of a reused page at worst).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "base/status.hpp"

namespace mpiv::shm {

/// @brief Copy @p n bytes at address @p remote of process @p pid into @p local.
/// @param[in] pid the process to read from
/// @param[out] local destination, @p n bytes in this process
/// @param[in] remote source address in @p pid's address space
/// @param[in] n bytes; 0 is a no-op
/// @return status::ok when all @p n bytes were copied; status::invalid_arg (logged) for a
///         null @p local with n > 0; status::system (logged, naming EPERM, ESRCH, EFAULT...)
///         otherwise. On failure @p local may hold part of the data.
/// @context thread-safe; blocking system call (not for a ULT's hot path if @p n is large)
[[nodiscard]] status cma_read(int pid, void *local, std::uintptr_t remote,
                              std::size_t n) noexcept;

/// @brief Gather-scatter read: copy the bytes described by @p remote (in order, addresses
/// in @p pid's address space) into the bytes described by @p local (in order).
///
/// The two lists may split the bytes differently; their totals must be equal. Any number
/// of entries is accepted (the calls are cut at IOV_MAX), and partial transfers are
/// resumed where they stopped, even in the middle of an entry.
/// @param[in] pid the process to read from
/// @param[in] local destination entries in this process (zero-length entries allowed)
/// @param[in] nlocal number of @p local entries
/// @param[in] remote source entries in @p pid
/// @param[in] nremote number of @p remote entries
/// @return status::ok when every byte was copied; status::invalid_arg (logged) when the
///         totals differ or a list is null with a non-zero count; status::system (logged)
///         otherwise
/// @context thread-safe; blocking system calls
[[nodiscard]] status cma_readv(int pid, const struct iovec *local, std::size_t nlocal,
                               const struct iovec *remote, std::size_t nremote) noexcept;

/// @brief One quiet read of @p n bytes at @p remote in process @p pid into @p local: the
/// CMA check against a real peer.
/// @return 0 when all @p n bytes were read; else the errno (EFAULT for a short read),
///         not logged
/// @context thread-safe; one system call
int cma_try(int pid, void *local, std::uintptr_t remote, std::size_t n) noexcept;

/// @brief Whether process_vm_readv works here at all (kernel support, seccomp): probed once
/// with a read of this process's own memory, then cached.
/// @return true when the probe succeeded
/// @context thread-safe; the first call makes one system call, the others none
bool cma_available() noexcept;

} // namespace mpiv::shm
