// packet_pool: the locality-aware packet pool of seed 000 §3.3.
//
// Design:
// - Packets live in a caller-supplied region (packet_region: packets, per-packet states and
//   a shared lock-free stack, all addressed by index/offset so that the region may be a
//   shared-memory segment mapped by several processes). In front of the shared stack, each
//   worker has a private fixed-capacity deque (private_deque) in this process's memory.
// - get(worker): pop_top of the worker's deque (the packet it used last, still in its
//   cache), else pop the shared stack, else steal the bottom (least recently used) packet
//   of another worker's deque, starting at a random victim and sweeping all of them once.
//   Nothing found: status::retry_nopacket (back-pressure; the caller makes progress, which
//   returns packets, and retries). A get never blocks on an empty pool.
// - server_get(): the communication server's path: the shared stack first (packets no
//   worker has touched lately), then steal.
// - put(worker, p): push_top on the worker's deque; when the deque is full its bottom (LRU)
//   packet is evicted to the shared stack. The private deques act as caches and the shared
//   stack as the memory behind them.
// - Return path of other processes (a receiver gives a packet back to its owner) and of
//   threads that are not workers: region().put(p), which only uses the shared structures.
// - Invariants: every packet is in exactly one of: handed out, the shared stack, one
//   private deque. Packets never leave the region. A get hands out a packet only after
//   removing it from a structure under that structure's synchronization (deque lock, stack
//   CAS), so no packet is handed out twice.
// - Ordering: the deque lock (acquire/release) and the stack head (release push, acquire
//   pop) carry the packet contents from the putter to the next getter, whichever path the
//   packet takes (private, evicted, stolen, returned by another process).
// - Threads: get/put on worker w are thread-safe, but the design assumes worker w's deque
//   is used mostly by one thread (the worker, and its ULTs) plus an occasional stealer;
//   server_get and region().put are thread-safe from anywhere.
// - Memory: the region (see packet_region.hpp) plus, per process, 256 bytes per worker and
//   4 bytes per private slot (rounded up to 128-byte lines per worker).
// - When not to use: when packets must be returned to the worker that allocated them (a
//   put goes to the putter's deque); when a getter must wait for a packet (wrap get in
//   progress-and-retry: the pool itself never waits).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/cacheline.hpp"
#include "base/status.hpp"
#include "pool/packet_region.hpp"
#include "pool/private_deque.hpp"

namespace mpiv::pool {

/// Geometry and initial distribution of a packet_pool.
struct pool_params {
    std::uint32_t packet_size = 0;      ///< bytes per packet (header + payload), a multiple of k_cacheline
    std::uint32_t packet_count = 0;     ///< packets in the region, 1 .. packet_region::k_max_packets
    std::uint32_t workers = 0;          ///< number of private deques, >= 1
    std::uint32_t private_capacity = 0; ///< slots per private deque, >= 1; a put into a full deque evicts
    std::uint32_t private_initial = 0;  ///< packets each deque starts with (<= private_capacity);
                                        ///< the other packet_count - workers * private_initial start shared
};

template <template <class> class Atom = std::atomic> class packet_pool {
  public:
    packet_pool() = default;
    packet_pool(const packet_pool &) = delete;
    packet_pool &operator=(const packet_pool &) = delete;

    /// @brief Bytes of region init() needs for @p params.
    /// @return the size, or 0 when the geometry is invalid
    /// @context thread-safe, pure
    static std::size_t region_bytes(const pool_params &params) noexcept
    {
        return packet_region<Atom>::bytes_for(params.packet_size, params.packet_count);
    }

    /// @brief Format @p region as this pool's packets and distribute them: packets
    /// w * private_initial .. (w+1) * private_initial - 1 to worker w's deque, the rest to the
    /// shared stack.
    /// @param[in] params geometry and distribution (see pool_params)
    /// @param[in] region memory for the packets, aligned to k_false_sharing, possibly a
    ///            shared-memory segment; it must outlive the pool and any attached view
    /// @param[in] bytes size of @p region, at least region_bytes(params)
    /// @return status::ok; status::invalid_arg (logged) for bad parameters, a region that
    ///         is too small or misaligned, or a second init; status::nomem
    /// @context not thread-safe; once, before any other call
    [[nodiscard]] status init(const pool_params &params, void *region, std::size_t bytes) noexcept;

    /// @brief Get a packet for worker @p worker: its private deque, else the shared stack,
    /// else a steal from another worker.
    /// @param[in] worker the caller's worker index, < workers()
    /// @param[out] packet_p the packet (packet_size bytes, k_cacheline aligned), written only
    ///             on success
    /// @return status::ok; status::retry_nopacket when no packet is free anywhere (progress,
    ///         then retry); status::invalid_arg (logged) for a bad worker index;
    ///         status::not_initialized (logged) before init()
    /// @context thread-safe; hot path (a private hit takes the worker's uncontended lock
    ///          once); never blocks on an empty pool; may yield while a lock is contended
    [[nodiscard]] status get(std::uint32_t worker, void *&packet_p) noexcept;

    /// @brief Get a packet for the communication server: the shared stack, else a steal.
    /// @param[out] packet_p the packet, written only on success
    /// @return status::ok; status::retry_nopacket; status::not_initialized (logged) before
    ///         init()
    /// @context thread-safe (any thread, e.g. several inline progress callers); may yield
    ///          while a deque lock is contended
    [[nodiscard]] status server_get(void *&packet_p) noexcept;

    /// @brief Give a packet back into worker @p worker's deque (the putter's, not necessarily
    /// the getter's); a full deque evicts its least recently used packet to the shared stack.
    /// @param[in] worker the caller's worker index, < workers()
    /// @param[in] packet a packet obtained from this pool (any path, any worker)
    /// @return status::ok; status::invalid_arg (logged) for a bad worker index or a packet
    ///         that is already free (put twice); status::invalid_handle (logged) when
    ///         @p packet is not the start of a packet of this pool; status::not_initialized
    ///         (logged) before init(). On error nothing changes.
    /// @context thread-safe; hot path; may yield while a lock is contended
    [[nodiscard]] status put(std::uint32_t worker, void *packet) noexcept;

    /// The shared half: offsets for descriptors (offset_of/packet_at) and the return path
    /// for threads that are not workers (region().put()).
    packet_region<Atom> &region() noexcept { return region_; }

    std::uint32_t workers() const noexcept { return nworkers_; }

  private:
    friend struct packet_pool_test_access;

    struct alignas(k_false_sharing) worker_state {
        private_deque<Atom> deque;
        // Victim choice for this worker's steals (splitmix64 sequence). Racy updates by
        // two threads using the same worker index only repeat a victim.
        Atom<std::uint64_t> steal_seed{0};
    };

    /// Log and classify a worker index >= nworkers_ (cold path of get/put).
    [[nodiscard]] status bad_worker(std::uint32_t worker) const noexcept;

    /// Pop the bottom of some worker's deque other than @p thief's, starting at a victim
    /// drawn from @p seed.
    [[nodiscard]] status steal(std::uint32_t thief, std::uint64_t seed,
                               std::uint32_t &index_p) noexcept;

    packet_region<Atom> region_;
    std::unique_ptr<worker_state[]> workers_;
    std::uint32_t nworkers_ = 0;
    // Victim choice for server_get(), shared by all its callers.
    alignas(k_false_sharing) Atom<std::uint64_t> server_seed_{0};
};

} // namespace mpiv::pool

#include "pool/packet_pool_inl.hpp"
