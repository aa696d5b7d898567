// shm::transport: the shared-memory transport of the point-to-point engine (the contract
// every transport meets is in endpoints/transport.hpp; the protocols above it are in
// endpoints/engine*.cpp).
//
// Design:
// - Segment. One memfd segment per process: a header page, one inbound mpsc_queue per
//   worker endpoint, a packet region (pool::packet_pool) for eager payloads, and, where
//   single-copy reads may fail, k_copy_slots copy slots per peer (two copies). Peers map
//   it through /proc/<pid>/fd/<fd> (the address goes through the modex). This process
//   drains only its own queues; it writes into peers' queues and reads their packets.
// - Small messages go into one of the peer's queues (try_push: claims slots, lets the
//   caller finish the header once claimed, copies, publishes; never blocks: a full queue
//   says so and the caller retries later). A message of up to k_max_message bytes.
// - Eager payloads go by reference: the sender copies into a packet of its own region and
//   sends the packet's offset; the receiver reads the packet in its mapping of the
//   sender's segment and gives it back (packet_region::put, lock-free, cross-process).
// - Large messages: the receiver reads the sender's memory with process_vm_readv (CMA),
//   tried per peer at connect. Where that is denied, the engine's two-copy protocol moves
//   the bytes through the copy slots (engine_copy.cpp).
// - Doorbell. A process whose progress owner sleeps does so on its header's doorbell (a
//   shared futex word), counting itself in `sleeping`; ring() after a push wakes it.
//   Pusher and sleeper form a Dekker pair (each stores, then loads the other's word).
//   Where membarrier(2) works (light ring, announced in the header), the sleeper makes a
//   heavy barrier before its last look and the pusher only a compiler barrier: a full
//   fence per push would wait for the slot's cache line to leave the receiver's core.
//   Otherwise both sides fence (model: contrib/model/doorbell.pml).
// - Trust. The peer's header is its word: connect() reads each geometry field once and
//   checks that queues, region and copy slots lie inside the mapping without overlap. The
//   queues and the region check their own stamps and offsets.
// - Threads. connect() is serialized by the caller; everything else may run in any thread:
//   pushes are lock-free among producers, each inbound queue has one drainer at a time (its
//   consumer try-lock), the pool is per worker plus lock-free shared structures.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <sys/uio.h>

#include <mpiv/mpiv_p2p.h>

#include "base/futex.hpp"
#include "base/status.hpp"
#include "endpoints/shm/cma.hpp"
#include "endpoints/shm/mpsc_queue.hpp"
#include "endpoints/shm/segment.hpp"
#include "pool/packet_pool.hpp"

namespace mpiv::shm {

/// Two copies: the slots a sender's segment keeps for each receiver, and their size. Per
/// receiver: a page with one busy word per slot (the receiver clears them), then the slots.
constexpr std::uint32_t k_copy_slots = 4;
constexpr std::uint32_t k_copy_piece = 32768;
constexpr std::size_t k_copy_page = 4096;
constexpr std::size_t k_copy_stride = k_copy_page + std::size_t{k_copy_slots} * k_copy_piece;

/// A connected peer as this transport sees it: views into its segment.
struct peer {
    segment seg;
    std::atomic<std::uint32_t> *doorbell = nullptr; // in the peer's segment header
    std::atomic<std::uint32_t> *sleeping = nullptr;
    bool light_ring = false; // ring() with a compiler barrier only (see there)
    int pid = 0;
    bool connected = false; // mapped and checked
    std::vector<mpsc_queue<>> queues;
    pool::packet_region<> region;
    bool cma = false;  // this process reads the peer's rendezvous buffers with CMA
    int cma_error = 0; // errno of the failed try at connect
    // The copy slots its segment keeps for this process (two copies): busy words, then
    // copy_slots pieces of copy_piece bytes; null when it keeps none.
    std::atomic<std::uint32_t> *copy_busy = nullptr;
    unsigned char *copy_data = nullptr;
    std::uint32_t copy_slots = 0;
    std::uint32_t copy_piece = 0;
};

/// Wake a sleeper on @p doorbell (see the design block). @p light: the sleeper makes a
/// heavy barrier (base::heavy_barrier) before it sleeps, and covers this process.
inline void ring(std::atomic<std::uint32_t> *doorbell, std::atomic<std::uint32_t> *sleeping,
                 bool light) noexcept
{
    // Dekker with the sleeper (engine::doze): our push (or completion) and this load on
    // one side, its increment of `sleeping` and its emptiness check on the other, each
    // separated by a seq_cst fence: one of us sees the other. Light: the sleeper's heavy
    // barrier runs a full barrier on this thread too, so a compiler barrier does here.
    if (light) {
        std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (sleeping->load(std::memory_order_relaxed) != 0) {
        doorbell->fetch_add(1, std::memory_order_relaxed);
        base::futex_wake_shared(*doorbell, 1);
    }
}

class transport {
  public:
    static constexpr std::uint32_t k_max_endpoints = 256;

    /// Whether this process can be read with CMA (lets any peer try it: PR_SET_PTRACER);
    /// @p error_p is the errno of its own try (0: it works; EPERM when @p single_copy is
    /// NONE). An error, logged, when it fails and @p single_copy is CMA.
    [[nodiscard]] static status check_cma(mpiv_p2p_single_copy_t single_copy,
                                          int &error_p) noexcept;

    transport() noexcept = default;
    transport(const transport &) = delete;
    transport &operator=(const transport &) = delete;

    /// Create the segment for @p params (checked by the engine; connect() to itself next).
    /// @p cma_self_error: check_cma()'s error.
    [[nodiscard]] status init(const mpiv_p2p_params_t &params, int cma_self_error) noexcept;

    /// This process's address for the modex.
    void address(const void *&addr, std::size_t &len) const noexcept
    {
        addr = &addr_;
        len = sizeof addr_;
    }
    /// Map @p peer's segment from its address (untrusted: checked; also when the peer is
    /// connected already, which is then left as it is). Calls are serialized by the caller.
    [[nodiscard]] status connect(std::uint32_t peer, const void *addr, std::size_t len) noexcept;

    shm::peer &at(std::uint32_t peer) noexcept { return peers_[peer]; }
    const shm::peer &at(std::uint32_t peer) const noexcept { return peers_[peer]; }

    // --- Limits
    /// Largest message this process's queues hold (the configured slots). A peer's queues
    /// are checked by try_push() against the peer's own geometry.
    std::size_t max_message() const noexcept { return max_message_; }
    std::size_t queue_count(std::uint32_t peer) const noexcept { return peers_[peer].queues.size(); }

    // --- Small messages
    /// Push @p len bytes (built by @p finish once the slots are claimed) into @p peer's
    /// queue @p q and ring its doorbell. False: the queue is full, nothing was claimed.
    template <class Finish>
    [[gnu::always_inline]] bool try_push(std::uint32_t peer, std::size_t q, const void *bytes,
                                         std::size_t len, Finish &&finish) noexcept
    {
        shm::peer &p = peers_[peer];
        if (p.queues[q].try_push(bytes, len, finish) != status::ok) {
            return false;
        }
        ring(p.doorbell, p.sleeping, p.light_ring);
        return true;
    }

    // --- Eager payloads by reference
    /// A packet of this process's region for worker endpoint @p ep; false when none is free.
    bool packet_get(std::uint32_t ep, void *&packet_p) noexcept
    {
        return pool_.get(ep, packet_p) == status::ok;
    }
    std::uint64_t packet_offset(void *packet) noexcept
    {
        std::uint64_t offset = 0;
        (void)pool_.region().offset_of(packet, offset);
        return offset;
    }
    /// The packet at @p offset in @p peer's region; false for an offset outside it.
    bool packet_at(std::uint32_t peer, std::uint64_t offset, void *&packet_p) noexcept
    {
        return peers_[peer].region.packet_at(offset, packet_p) == status::ok;
    }
    /// Give a packet read from @p peer's region back to it.
    [[nodiscard]] status packet_return(std::uint32_t peer, void *packet) noexcept
    {
        return peers_[peer].region.put(packet);
    }
    std::uint32_t packet_size(std::uint32_t peer) const noexcept
    {
        return peers_[peer].region.packet_size();
    }

    // --- Large messages: the receiver reads the sender (CMA)
    [[nodiscard]] status read(std::uint32_t peer, void *local, std::uintptr_t remote,
                              std::size_t n) const noexcept
    {
        return cma_read(peers_[peer].pid, local, remote, n);
    }
    [[nodiscard]] status readv(std::uint32_t peer, const struct iovec *local, std::size_t nlocal,
                               const struct iovec *remote, std::size_t nremote) const noexcept
    {
        return cma_readv(peers_[peer].pid, local, nlocal, remote, nremote);
    }
    /// This segment's copy slots for receiver @p peer (two copies; null without them).
    unsigned char *copy_block(std::uint32_t peer) const noexcept
    {
        return copy_area_ == nullptr ? nullptr : copy_area_ + std::size_t{peer} * k_copy_stride;
    }

    // --- Inbound
    std::size_t inbound_count() const noexcept { return inbound_.size(); }
    mpsc_queue<> &inbound(std::size_t q) noexcept { return inbound_[q]; }
    /// No message seen in any inbound queue (a hint).
    bool inbound_idle() noexcept
    {
        for (auto &q : inbound_) {
            if (!q.empty_hint()) {
                return false;
            }
        }
        return true;
    }

    // --- Doorbell (this process's)
    std::atomic<std::uint32_t> &doorbell() noexcept { return *doorbell_; }
    std::atomic<std::uint32_t> &sleeping() noexcept { return *sleeping_; }
    void ring_self() noexcept { ring(doorbell_, sleeping_, light_ring_); }
    /// This process's sleeper makes a heavy barrier before it sleeps (see ring()).
    bool light_ring() const noexcept { return light_ring_; }

  private:
    friend struct transport_test_access;

    // Address published through the modex.
    struct address_t {
        std::uint32_t version;
        std::uint32_t pid;
        std::int32_t fd;
        std::uint32_t self;
        std::uint64_t bytes;
        std::uint64_t probe; // the address of this record in its owner: a peer's CMA try
    };
    // connect(): whether this process can read @p p's memory (p.cma, p.cma_error); an
    // error when it cannot and single_copy is CMA.
    status try_cma(std::uint32_t peer, shm::peer &p, const address_t &a) noexcept;
    status map_geometry(std::uint32_t peer, shm::peer &p, const address_t &a) noexcept;

    std::uint32_t self_ = 0;
    std::uint32_t num_peers_ = 0;
    mpiv_p2p_single_copy_t single_copy_ = MPIV_P2P_SINGLE_COPY_AUTO;
    std::size_t max_message_ = 0;
    int cma_self_error_ = 0; // errno of check_cma()'s try on this process (0: it works)
    address_t addr_{};
    segment seg_;
    pool::packet_pool<> pool_;
    std::vector<mpsc_queue<>> inbound_;
    std::unique_ptr<shm::peer[]> peers_;
    unsigned char *copy_area_ = nullptr; // this segment's copy slots (null: CMA only)
    std::atomic<std::uint32_t> *doorbell_ = nullptr;
    std::atomic<std::uint32_t> *sleeping_ = nullptr;
    bool light_ring_ = false;
};

} // namespace mpiv::shm
