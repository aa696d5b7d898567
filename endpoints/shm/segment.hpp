// segment: one shared-memory mapping that needs no file-system name.
//
// The owner creates an anonymous memory file (memfd_create) and maps it; a peer process on
// the same node maps the very same file by opening the owner's descriptor through
// /proc/<owner pid>/fd/<fd>, which needs only the owner's (pid, fd) pair: that is what the
// owner publishes (modex). Nothing is left behind when processes die, however they die:
// the memory goes away with the last mapping or descriptor, and there is no name in
// /dev/shm to unlink.
//
// Lifetime: the owner keeps its descriptor open for as long as peers may attach (a
// descriptor that was closed, or a dead owner, makes attach() fail with status::system).
// An attached segment holds only its mapping: the descriptor is closed right after mmap.
//
// Permissions: opening /proc/<pid>/fd/<fd> needs ptrace read access to the owner (same
// user, same or a child PID namespace, or CAP_SYS_PTRACE).
//
// Size: the owner seals the file against shrinking and growing once it has its size, so no
// process can make the mappings fault (SIGBUS) by truncating it; attach() refuses a file
// without that seal.
//
// When not to use: across nodes, or with peers that cannot see the owner's /proc (another
// PID namespace, e.g. separate containers): publish a named POSIX segment instead.
#pragma once

#include <cstddef>

#include "base/status.hpp"

namespace mpiv::shm {

class segment {
  public:
    segment() noexcept = default;
    ~segment() { reset(); }
    segment(segment &&other) noexcept;
    segment &operator=(segment &&other) noexcept;
    segment(const segment &) = delete;
    segment &operator=(const segment &) = delete;

    /// @brief Create a zero-filled segment of @p bytes (owner side): memfd_create
    /// (MFD_CLOEXEC, MFD_ALLOW_SEALING), ftruncate, seals (shrink, grow, seal), mmap
    /// MAP_SHARED.
    /// @param[in] bytes size, > 0 (mapped in whole pages; size() is @p bytes)
    /// @param[out] out_p receives the segment (its previous mapping is released), written
    ///             only on success
    /// @return status::ok, status::invalid_arg (logged) for 0 bytes, or status::system
    ///         (logged with the failing call and errno text)
    /// @context thread-safe; not on a hot path (system calls)
    [[nodiscard]] static status create(std::size_t bytes, segment &out_p) noexcept;

    /// @brief Map a peer's segment (peer side) through /proc/<owner_pid>/fd/<owner_fd>.
    /// @param[in] owner_pid process that created the segment
    /// @param[in] owner_fd its fd() in that process
    /// @param[in] bytes size to map, > 0 and at most the segment's size
    /// @param[out] out_p receives the segment (fd() is -1), written only on success
    /// @return status::ok; status::invalid_arg (logged) for 0 bytes, a negative pid or fd,
    ///         a segment smaller than @p bytes or one not sealed against shrinking;
    ///         status::system (logged with the failing
    ///         call and errno text: a dead owner, a closed descriptor, no permission)
    /// @context thread-safe; not on a hot path (system calls)
    [[nodiscard]] static status attach(int owner_pid, int owner_fd, std::size_t bytes,
                                       segment &out_p) noexcept;

    /// Start of this process's mapping (page aligned), nullptr when empty.
    void *base() const noexcept { return base_; }
    /// Bytes mapped (0 when empty).
    std::size_t size() const noexcept { return size_; }
    /// The memory file's descriptor for a created segment (publish it with the pid); -1 for
    /// an attached or empty one.
    int fd() const noexcept { return fd_; }

  private:
    /// Unmap and close: the segment becomes empty.
    void reset() noexcept;

    void *base_ = nullptr;  // this process's mapping
    std::size_t size_ = 0;  // bytes mapped
    int fd_ = -1;           // owner only: the memfd
};

} // namespace mpiv::shm
