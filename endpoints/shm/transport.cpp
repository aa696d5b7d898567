// shm::transport: the segment (layout, creation), peers (mapping, checks, CMA try). See
// transport.hpp for the design.
#include "endpoints/shm/transport.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include <sys/prctl.h>
#include <unistd.h>

#include "base/cacheline.hpp"
#include "base/log.hpp"
#include "base/membarrier.hpp"
#include "endpoints/transport.hpp"

namespace mpiv::shm {

static_assert(ep::is_transport<transport>, "the shared-memory transport meets the contract");

namespace {

constexpr std::uint64_t k_segment_magic = 0x6d70697673656702ull; // "mpivseg" + version 2
constexpr std::uint32_t k_address_version = 2;
constexpr std::size_t k_page = 4096;

// The first page of a segment: what a peer needs to find the queues and the region.
struct segment_header {
    std::atomic<std::uint64_t> magic; // stored last (release) by the owner
    std::uint32_t pid;
    std::uint32_t endpoints;
    std::uint32_t queue_slots;
    std::uint32_t packet_size;
    std::uint64_t queue_offset;
    std::uint64_t queue_stride;
    std::uint64_t region_offset;
    std::uint64_t region_bytes;
    // Copy slots for two-copy transfers: copy_peers blocks of k_copy_stride bytes (the
    // block of peer i holds what the owner sends to i); copy_slots 0: none.
    std::uint64_t copy_offset;
    std::uint32_t copy_peers;
    std::uint32_t copy_slots;
    std::uint32_t copy_piece;
    // The owner's progress-owner thread sleeps on the doorbell (a shared futex) when
    // idle; `sleeping` tells senders to ring it after they push.
    alignas(64) std::atomic<std::uint32_t> doorbell;
    std::atomic<std::uint32_t> sleeping;
    // 1: the owner makes a heavy barrier before it sleeps (shm::ring()).
    std::uint32_t light_ring;
};
static_assert(sizeof(segment_header) <= k_page, "the header fits in the first page");

constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

} // namespace

status transport::check_cma(mpiv_p2p_single_copy_t single_copy, int &error_p) noexcept
{
    error_p = EPERM;
    if (single_copy == MPIV_P2P_SINGLE_COPY_NONE) {
        return status::ok;
    }
    // Let the peers read this process where the Yama module would allow only a debugger
    // (ptrace_scope 1); EINVAL without Yama, which is fine.
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    const std::uint64_t word = k_segment_magic;
    std::uint64_t copy = 0;
    int error = cma_try(static_cast<int>(getpid()), &copy, reinterpret_cast<std::uintptr_t>(&word),
                        sizeof copy);
    if (error == 0 && copy != word) {
        error = EFAULT;
    }
    if (error != 0 && single_copy == MPIV_P2P_SINGLE_COPY_CMA) {
        base::log(base::log_level::error,
                  "mpiv_p2p_create: process_vm_readv (CMA) fails here (%s) and single_copy "
                  "is CMA",
                  std::strerror(error));
        return status::system;
    }
    error_p = error;
    return status::ok;
}

status transport::init(const mpiv_p2p_params_t &params, int cma_self_error) noexcept
{
    try {
        self_ = params.self;
        num_peers_ = params.num_peers;
        single_copy_ = params.single_copy;
        cma_self_error_ = cma_self_error;
        max_message_ = std::min<std::size_t>(params.queue_slots, mpsc_queue<>::k_max_slots) *
                       mpsc_queue<>::k_payload;
        const std::uint32_t packet_size = static_cast<std::uint32_t>(
            round_up(std::max<std::uint32_t>(params.eager_limit, 1), k_cacheline));
        pool::pool_params pp;
        pp.packet_size = packet_size;
        pp.packet_count = params.packet_count;
        pp.workers = params.endpoints;
        pp.private_capacity = std::max<std::uint32_t>(
            1, std::min<std::uint32_t>(64, params.packet_count / params.endpoints));
        pp.private_initial =
            std::min(pp.private_capacity, params.packet_count / (2 * params.endpoints));
        const std::size_t region_bytes = pool::packet_pool<>::region_bytes(pp);
        const std::size_t queue_stride = round_up(mpsc_queue<>::bytes_for(params.queue_slots), k_page);
        const std::size_t queue_offset = k_page;
        const std::size_t region_offset = queue_offset + queue_stride * params.endpoints;
        const std::size_t copy_offset = region_offset + round_up(region_bytes, k_page);
        const bool copies = params.single_copy != MPIV_P2P_SINGLE_COPY_CMA;
        const std::size_t total = copy_offset + (copies ? k_copy_stride * params.num_peers : 0);
        if (region_bytes == 0) {
            base::log(base::log_level::error, "mpiv_p2p_create: no valid pool geometry");
            return status::param;
        }
        status s = segment::create(total, seg_);
        if (s != status::ok) {
            return s;
        }
        auto *base = static_cast<std::byte *>(seg_.base());
        inbound_ = std::vector<mpsc_queue<>>(params.endpoints);
        for (std::uint32_t i = 0; i < params.endpoints; ++i) {
            s = inbound_[i].format(base + queue_offset + i * queue_stride, queue_stride,
                                   params.queue_slots);
            if (s != status::ok) {
                return s;
            }
        }
        s = pool_.init(pp, base + region_offset, round_up(region_bytes, k_page));
        if (s != status::ok) {
            return s;
        }
        auto *h = new (base) segment_header;
        h->pid = static_cast<std::uint32_t>(getpid());
        h->endpoints = params.endpoints;
        h->queue_slots = params.queue_slots;
        h->packet_size = packet_size;
        h->queue_offset = queue_offset;
        h->queue_stride = queue_stride;
        h->region_offset = region_offset;
        h->region_bytes = round_up(region_bytes, k_page);
        h->copy_offset = copy_offset;
        h->copy_peers = copies ? params.num_peers : 0;
        h->copy_slots = copies ? k_copy_slots : 0;
        h->copy_piece = k_copy_piece;
        // The busy words start as the memfd's zero pages (clear): nothing is written, so
        // the blocks of peers never sent to by two copies cost no memory.
        static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                          sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
                      "busy words are plain 32-bit words in shared memory");
        copy_area_ = copies ? reinterpret_cast<unsigned char *>(base + copy_offset) : nullptr;
        h->doorbell.store(0, std::memory_order_relaxed);
        h->sleeping.store(0, std::memory_order_relaxed);
        doorbell_ = &h->doorbell;
        sleeping_ = &h->sleeping;
        light_ring_ = base::membarrier_register();
        h->light_ring = light_ring_ ? 1 : 0;
        if (!light_ring_) {
            base::log(base::log_level::info,
                      "mpiv_p2p_create: membarrier(2) global expedited barriers are not "
                      "available: senders fence after each message they queue");
        }
        // sync: release; pairs with the acquire load in map_geometry(): a peer that reads
        // the magic sees the formatted segment.
        h->magic.store(k_segment_magic, std::memory_order_release);

        addr_.version = k_address_version;
        addr_.pid = h->pid;
        addr_.fd = seg_.fd();
        addr_.self = params.self;
        addr_.bytes = total;
        addr_.probe = reinterpret_cast<std::uintptr_t>(&addr_);

        peers_.reset(new shm::peer[params.num_peers]);
    } catch (const std::bad_alloc &) {
        return status::nomem;
    }
    return status::ok;
}

status transport::try_cma(std::uint32_t peer, shm::peer &p, const address_t &a) noexcept
{
    // Can this process read the peer's memory? Read its address record where it says it
    // is and compare it with the modex copy (the peer may deny it: Yama, seccomp, ...).
    p.cma = peer == self_;
    p.cma_error = 0;
    if (!p.cma && single_copy_ != MPIV_P2P_SINGLE_COPY_NONE) {
        if (cma_self_error_ != 0) {
            p.cma_error = cma_self_error_;
        } else {
            address_t theirs{};
            p.cma_error = cma_try(static_cast<int>(a.pid), &theirs, a.probe, sizeof theirs);
            if (p.cma_error == 0 && std::memcmp(&theirs, &a, sizeof a) != 0) {
                p.cma_error = EFAULT;
            }
        }
        p.cma = p.cma_error == 0;
        if (!p.cma) {
            const bool fatal = single_copy_ == MPIV_P2P_SINGLE_COPY_CMA;
            base::log(fatal ? base::log_level::error : base::log_level::info,
                      "mpiv_p2p_connect: process_vm_readv from peer %u (pid %u) fails (%s)%s",
                      peer, a.pid, std::strerror(p.cma_error),
                      fatal ? " and single_copy is CMA"
                            : ": its large messages come in two copies through shared memory");
            if (fatal) {
                return status::system;
            }
        }
    }
    return status::ok;
}

status transport::connect(std::uint32_t peer, const void *addr, std::size_t len) noexcept
{
    if (peer >= num_peers_ || addr == nullptr || len != sizeof(address_t)) {
        base::log(base::log_level::error, "mpiv_p2p_connect: bad peer %u or address length %zu",
                  peer, len);
        return status::invalid_arg;
    }
    address_t a;
    std::memcpy(&a, addr, sizeof a);
    if (a.version != k_address_version || a.self != peer) {
        base::log(base::log_level::error,
                  "mpiv_p2p_connect: address of peer %u is malformed (version %u, self %u)", peer,
                  a.version, a.self);
        return status::invalid_arg;
    }
    shm::peer &p = peers_[peer];
    if (p.connected) {
        return status::ok;
    }
    status s = segment::attach(static_cast<int>(a.pid), a.fd, a.bytes, p.seg);
    if (s != status::ok) {
        return s;
    }
    s = map_geometry(peer, p, a);
    if (s != status::ok) {
        return s;
    }
    s = try_cma(peer, p, a);
    if (s != status::ok) {
        return s;
    }
    if (!p.cma && p.copy_data == nullptr) {
        base::log(base::log_level::error,
                  "mpiv_p2p_connect: peer %u keeps no copy slots (its single_copy is CMA) and "
                  "this process cannot read its memory",
                  peer);
        return status::system;
    }
    p.pid = static_cast<int>(a.pid);
    p.connected = true;
    return status::ok;
}

status transport::map_geometry(std::uint32_t peer, shm::peer &p, const address_t &a) noexcept
{
    auto *base = static_cast<std::byte *>(p.seg.base());
    auto *h = reinterpret_cast<segment_header *>(base);
    // Acquire: pairs with the owner's release store of the magic in init().
    if (h->magic.load(std::memory_order_acquire) != k_segment_magic) {
        base::log(base::log_level::error, "mpiv_p2p_connect: segment of peer %u is not an mpiv segment", peer);
        return status::invalid_arg;
    }
    // The geometry is the peer's word: each field is read once, and the queues and the
    // region it places must lie inside the mapping, after the header, without overlap.
    const std::uint64_t endpoints = h->endpoints;
    const std::uint64_t queue_offset = h->queue_offset;
    const std::uint64_t queue_stride = h->queue_stride;
    const std::uint64_t region_offset = h->region_offset;
    const std::uint64_t region_bytes = h->region_bytes;
    if (endpoints == 0 || endpoints > k_max_endpoints || queue_offset < sizeof(segment_header) ||
        queue_stride == 0 || queue_stride > a.bytes || queue_offset > a.bytes ||
        queue_offset + endpoints * queue_stride > region_offset || region_offset > a.bytes ||
        region_bytes > a.bytes - region_offset) {
        base::log(base::log_level::error,
                  "mpiv_p2p_connect: segment of peer %u has a bad geometry (%llu endpoints, "
                  "queues at %llu + n * %llu, region at %llu, %llu bytes, segment %llu bytes)",
                  peer, static_cast<unsigned long long>(endpoints),
                  static_cast<unsigned long long>(queue_offset),
                  static_cast<unsigned long long>(queue_stride),
                  static_cast<unsigned long long>(region_offset),
                  static_cast<unsigned long long>(region_bytes),
                  static_cast<unsigned long long>(a.bytes));
        return status::invalid_arg;
    }
    try {
        p.queues = std::vector<mpsc_queue<>>(endpoints);
    } catch (const std::bad_alloc &) {
        return status::nomem;
    }
    for (std::uint64_t i = 0; i < endpoints; ++i) {
        const status s = p.queues[i].attach(base + queue_offset + i * queue_stride, queue_stride);
        if (s != status::ok) {
            return s;
        }
    }
    const status s = p.region.attach(base + region_offset, region_bytes);
    if (s != status::ok) {
        return s;
    }
    // The copy slots it keeps for this process, if any (read once, checked like the rest).
    const std::uint64_t copy_offset = h->copy_offset;
    const std::uint64_t copy_peers = h->copy_peers;
    const std::uint64_t copy_slots = h->copy_slots;
    const std::uint64_t copy_piece = h->copy_piece;
    if (copy_slots != 0) {
        if (copy_slots != k_copy_slots || copy_piece != k_copy_piece || copy_peers != num_peers_ ||
            copy_offset < region_offset + region_bytes || copy_offset > a.bytes ||
            copy_peers * k_copy_stride > a.bytes - copy_offset) {
            base::log(base::log_level::error,
                      "mpiv_p2p_connect: segment of peer %u has bad copy slots (%llu x %llu "
                      "bytes for %llu peers at %llu, segment %llu bytes)",
                      peer, static_cast<unsigned long long>(copy_slots),
                      static_cast<unsigned long long>(copy_piece),
                      static_cast<unsigned long long>(copy_peers),
                      static_cast<unsigned long long>(copy_offset),
                      static_cast<unsigned long long>(a.bytes));
            return status::invalid_arg;
        }
        auto *mine = reinterpret_cast<unsigned char *>(base + copy_offset + self_ * k_copy_stride);
        p.copy_busy = reinterpret_cast<std::atomic<std::uint32_t> *>(mine);
        p.copy_data = mine + k_copy_page;
        p.copy_slots = k_copy_slots;
        p.copy_piece = k_copy_piece;
    }
    p.doorbell = &h->doorbell;
    p.sleeping = &h->sleeping;
    p.light_ring = light_ring_ && h->light_ring == 1;
    return status::ok;
}

} // namespace mpiv::shm
