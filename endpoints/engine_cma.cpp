// engine: a rendezvous message's bytes read from the sender's memory with
// process_vm_readv (CMA): a contiguous or gathered send, and a send whose writer is still
// streaming its bytes. See engine.hpp for the design; deliver() (engine_recv.cpp) calls
// these.
#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include <sys/uio.h>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "base/stats.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

namespace {
// Shortens a gather list to its first n bytes (fewer when the list holds fewer).
void cut_at(std::vector<struct iovec> &list, std::size_t n) noexcept
{
    std::size_t total = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
        if (list[i].iov_len >= n - total) {
            list[i].iov_len = n - total;
            list.resize(i + 1);
            return;
        }
        total += list[i].iov_len;
    }
}
} // namespace

int engine::read_streamed(std::uint32_t from, const recv_target &to, const wire &w,
                          std::size_t n) noexcept
{
    // The sender writes its bytes in order and publishes how many are there: read each
    // part once it is, and return only once the sender is done with its buffer (it may
    // free it when the FIN that follows completes the send), even when n < w.size.
    const std::size_t piece = std::min<std::size_t>(n, MPIV_P2P_SINK_PIECE);
    std::unique_ptr<unsigned char[]> bounce;
    if (to.sink != nullptr && n != 0) {
        bounce.reset(new (std::nothrow) unsigned char[piece]);
        if (bounce == nullptr) {
            base::log(base::log_level::error, "mpiv: no memory for a %zu-byte receive piece",
                      piece);
            return MPIV_ERR_NOMEM;
        }
    }
    const auto *src = reinterpret_cast<const unsigned char *>(w.u.ref.where);
    std::size_t ready = 0; // bytes the sender has written, as last read
    std::size_t done = 0;  // bytes delivered
    base::backoff wait;
    for (;;) {
        while (done < std::min(ready, n)) { // what is there, a piece at a time for a sink
            const std::size_t len =
                std::min(std::min(ready, n) - done, to.sink != nullptr ? piece : n);
            void *dest = to.sink != nullptr ? static_cast<void *>(bounce.get())
                                            : static_cast<char *>(to.buf) + done;
            if (shm_.read(from, dest, reinterpret_cast<std::uintptr_t>(src + done), len) !=
                status::ok) {
                return MPIV_ERR_SYSTEM;
            }
            if (to.sink != nullptr) {
                to.sink(to.ctx, done, bounce.get(), len);
            }
            done += len;
        }
        if (done == n && ready == w.size) {
            return MPIV_OK;
        }
        std::uint64_t count = 0;
        if (shm_.read(from, &count, w.u.ref.spare, sizeof count) != status::ok) {
            return MPIV_ERR_SYSTEM;
        }
        // sync: acquire; pairs with the sender's release store of the count: the bytes it
        // covers are read after it (by the next cma_read, on this thread).
        std::atomic_thread_fence(std::memory_order_acquire);
        const std::size_t seen = std::min<std::size_t>(count, w.size); // a faulty count
        if (seen > ready) {
            ready = seen;
            wait.reset();
        } else {
            wait.pause();
        }
    }
}

int engine::read_remote(std::uint32_t from, const recv_target &to, const wire &w,
                        std::size_t n) noexcept
{
    if ((w.flags & k_wire_streamed) != 0) {
        return read_streamed(from, to, w, n);
    }
    // The sender's bytes: one range, or (k_wire_gather) its list of ranges, fetched from
    // the sender and cut at n bytes.
    struct iovec single = {reinterpret_cast<void *>(w.u.ref.where), n};
    const struct iovec *ranges = &single;
    std::size_t count = 1;
    std::vector<struct iovec> list;
    if ((w.flags & k_wire_gather) != 0) {
        try {
            list.resize(static_cast<std::size_t>(w.u.ref.spare));
        } catch (const std::exception &) { // bad_alloc, or length_error for a huge count
            base::log(base::log_level::error, "mpiv: no memory for a %llu-entry gather list",
                      static_cast<unsigned long long>(w.u.ref.spare));
            return MPIV_ERR_NOMEM;
        }
        if (!list.empty() && shm_.read(from, list.data(), w.u.ref.where,
                                       list.size() * sizeof(struct iovec)) != status::ok) {
            return MPIV_ERR_SYSTEM;
        }
        cut_at(list, n);
        ranges = list.data();
        count = list.size();
    }
    if (to.sink == nullptr) {
        const struct iovec local = {to.buf, n};
        return shm_.readv(from, &local, 1, ranges, count) == status::ok ? MPIV_OK
                                                                         : MPIV_ERR_SYSTEM;
    }
    // A sink: read piece by piece through a bounce buffer (below malloc's mmap threshold,
    // so reused from the heap), each piece consumed before the next is read. A piece
    // spans at most k_piece_ranges of the sender's ranges (it is shorter when they are).
    constexpr std::size_t k_piece_ranges = 64;
    const std::size_t piece = std::min<std::size_t>(n, MPIV_P2P_SINK_PIECE);
    std::unique_ptr<unsigned char[]> bounce(new (std::nothrow) unsigned char[piece]);
    if (bounce == nullptr) {
        base::log(base::log_level::error, "mpiv: no memory for a %zu-byte receive piece", piece);
        return MPIV_ERR_NOMEM;
    }
    std::size_t entry = 0;
    std::size_t within = 0; // bytes of ranges[entry] already read
    for (std::size_t done = 0; done < n;) {
        const std::size_t want = std::min(piece, n - done);
        struct iovec part[k_piece_ranges];
        std::size_t parts = 0;
        std::size_t len = 0;
        while (len < want && parts < k_piece_ranges) {
            if (entry == count) {
                base::log(base::log_level::error,
                          "mpiv: gather list of peer %u holds fewer bytes than its message", from);
                return MPIV_ERR_INTERNAL;
            }
            if (within == ranges[entry].iov_len) { // done with it, or empty
                ++entry;
                within = 0;
                continue;
            }
            const std::size_t take = std::min(ranges[entry].iov_len - within, want - len);
            part[parts++] = {static_cast<char *>(ranges[entry].iov_base) + within, take};
            len += take;
            within += take;
        }
        const struct iovec local = {bounce.get(), len};
        if (shm_.readv(from, &local, 1, part, parts) != status::ok) {
            return MPIV_ERR_SYSTEM;
        }
        to.sink(to.ctx, done, bounce.get(), len);
        done += len;
    }
    return MPIV_OK;
}

} // namespace mpiv::ep
