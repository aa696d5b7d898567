// engine: see engine.hpp for the design.
#include "endpoints/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <type_traits>

#include <hwloc.h>
#include <unistd.h>
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "base/backoff.hpp"
#include "base/copy.hpp"
#include "base/futex.hpp"
#include "base/log.hpp"
#include "sched/runtime.hpp"
#include "sched/worker.hpp"
#include "endpoints/shm/cma.hpp"

namespace mpiv::ep {

namespace {

constexpr std::uint64_t k_segment_magic = 0x6d70697673656701ull; // "mpivseg" + version 1
constexpr std::uint32_t k_address_version = 1;
constexpr std::size_t k_page = 4096;
constexpr int k_drain_batch = 64;
constexpr int k_idle_clock_polls = 256; // idle polls between two looks at the clock
constexpr long k_doorbell_timeout_ns = 1000000;  // safety net: re-poll every 1 ms
constexpr std::size_t k_table_buckets = std::size_t{1} << 14;
constexpr std::uint32_t k_max_endpoints = 256;
constexpr std::uint32_t k_max_eager = 1U << 20;
constexpr std::uint32_t k_max_packets = 1U << 20;
constexpr std::uint32_t k_max_idle_us = 1000000; // a second

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
    // The owner's progress-owner thread sleeps on the doorbell (a shared futex) when
    // idle; `sleeping` tells senders to ring it after they push.
    alignas(64) std::atomic<std::uint32_t> doorbell;
    std::atomic<std::uint32_t> sleeping;
};
static_assert(sizeof(segment_header) <= k_page, "the header fits in the first page");

constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

// ThreadSanitizer cannot see the queues' synchronization: a sender and the receiver reach
// one slot through two mappings at different addresses (two engines of one process in
// tests). One process-wide key stands for it: released before every push, acquired after
// every pop.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
char tsan_queue_key;
#endif
inline void tsan_pushing()
{
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&tsan_queue_key);
#endif
}
inline void tsan_popped()
{
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(&tsan_queue_key);
#endif
}
// Fill a packet of our pool. For the same reason TSan cannot order its previous use (the
// receiver returns it through its own mapping): the copy is not instrumented.
inline void copy_to_packet(void *packet, const void *src, std::size_t n)
{
    if (n == 0) {
        return; // src may be NULL (an empty synchronous send): memcpy forbids it
    }
#if defined(__SANITIZE_THREAD__)
    __tsan_ignore_thread_begin();
    std::memcpy(packet, src, n);
    __tsan_ignore_thread_end();
#else
    std::memcpy(packet, src, n);
#endif
}

// Endpoint of the calling thread, assigned round robin on first use (shared by every
// engine of the process: tests may create several). initial-exec, as in sched/worker.hpp:
// no __tls_get_addr call on the data path of a library Open MPI loads with dlopen.
thread_local std::uint32_t tl_endpoint __attribute__((tls_model("initial-exec"))) = UINT32_MAX;

// One spare inmsg per thread: in a ping-pong the thread that delivers a message is the
// one that receives the next, so arrivals need no malloc. The pointer is initial-exec TLS
// (a trivial type: no guard, no __tls_get_addr); a separate object with a destructor,
// touched when a thread first keeps a spare, frees it at thread exit.
static_assert(std::is_trivially_destructible_v<inmsg>, "spare inmsgs are reused in place");
thread_local inmsg *tl_spare __attribute__((tls_model("initial-exec"))) = nullptr;

// Drains of inbound queues the calling thread is inside (see engine::reap()).
thread_local int tl_draining __attribute__((tls_model("initial-exec"))) = 0;
struct spare_release {
    ~spare_release()
    {
        delete tl_spare;
        tl_spare = nullptr;
    }
};
thread_local spare_release tl_spare_release;

inmsg *alloc_inmsg() noexcept
{
    if (inmsg *m = tl_spare) {
        tl_spare = nullptr;
        return new (m) inmsg; // fresh node state (inmsg is trivially destructible)
    }
    return new (std::nothrow) inmsg;
}

void free_inmsg(inmsg *m) noexcept
{
    if (tl_spare == nullptr) {
        static thread_local bool registered __attribute__((tls_model("initial-exec"))) = false;
        if (!registered) {
            registered = true;
            (void)&tl_spare_release; // registers the thread-exit delete
        }
        tl_spare = m;
    } else {
        delete m;
    }
}

} // namespace

engine::engine(const mpiv_p2p_params_t &params) noexcept : params_(params) {}

status engine::create(const mpiv_p2p_params_t &params, std::unique_ptr<engine> &engine_p) noexcept
{
    const auto bad = [](const char *field, unsigned long value) {
        base::log(base::log_level::error, "mpiv_p2p_create: parameter %s = %lu is out of range",
                  field, value);
        return status::param;
    };
    if (params.complete == nullptr) {
        base::log(base::log_level::error, "mpiv_p2p_create: parameter complete is NULL");
        return status::invalid_arg;
    }
    if (params.num_peers == 0) {
        return bad("num_peers", params.num_peers);
    }
    if (params.self >= params.num_peers) {
        return bad("self", params.self);
    }
    if (params.endpoints == 0 || params.endpoints > k_max_endpoints) {
        return bad("endpoints", params.endpoints);
    }
    if (shm::mpsc_queue<>::bytes_for(params.queue_slots) == 0) {
        return bad("queue_slots", params.queue_slots);
    }
    if (params.eager_limit > k_max_eager) {
        return bad("eager_limit", params.eager_limit);
    }
    if (params.packet_count == 0 || params.packet_count > k_max_packets) {
        return bad("packet_count", params.packet_count);
    }
    if (params.idle_us > k_max_idle_us) {
        return bad("idle_us", params.idle_us);
    }
    // Enums are read as integers: a C caller may store any value, and loading one outside
    // the enumerators' range as a C++ enum is undefined.
    const auto enum_value = [](const auto &field) {
        std::underlying_type_t<std::decay_t<decltype(field)>> v;
        std::memcpy(&v, &field, sizeof v);
        return static_cast<unsigned long>(v);
    };
    const unsigned long progress = enum_value(params.progress);
    if (progress != MPIV_P2P_PROGRESS_INLINE && progress != MPIV_P2P_PROGRESS_SERVER) {
        return bad("progress", progress);
    }
    const unsigned long lock = enum_value(params.lock);
    if (lock != MPIV_P2P_LOCK_MCS && lock != MPIV_P2P_LOCK_HMCS && lock != MPIV_P2P_LOCK_TICKET) {
        return bad("lock", lock);
    }
    if (!shm::cma_available()) {
        base::log(base::log_level::error,
                  "mpiv_p2p_create: process_vm_readv (CMA) is not available");
        return status::system;
    }
    std::unique_ptr<engine> e(new (std::nothrow) engine(params));
    if (e == nullptr) {
        return status::nomem;
    }
    const status s = e->init();
    if (s == status::ok) {
        engine_p = std::move(e);
    }
    return s;
}

status engine::init() noexcept
{
    try {
        const std::uint32_t packet_size = static_cast<std::uint32_t>(
            round_up(std::max<std::uint32_t>(params_.eager_limit, 1), k_cacheline));
        pool::pool_params pp;
        pp.packet_size = packet_size;
        pp.packet_count = params_.packet_count;
        pp.workers = params_.endpoints;
        pp.private_capacity = std::max<std::uint32_t>(1, std::min<std::uint32_t>(
                                                             64, params_.packet_count / params_.endpoints));
        pp.private_initial = std::min(pp.private_capacity, params_.packet_count / (2 * params_.endpoints));
        const std::size_t region_bytes = pool::packet_pool<>::region_bytes(pp);
        const std::size_t queue_stride = round_up(shm::mpsc_queue<>::bytes_for(params_.queue_slots), k_page);
        const std::size_t queue_offset = k_page;
        const std::size_t region_offset = queue_offset + queue_stride * params_.endpoints;
        const std::size_t total = region_offset + round_up(region_bytes, k_page);
        if (region_bytes == 0) {
            base::log(base::log_level::error, "mpiv_p2p_create: no valid pool geometry");
            return status::param;
        }
        status s = shm::segment::create(total, seg_);
        if (s != status::ok) {
            return s;
        }
        auto *base = static_cast<std::byte *>(seg_.base());
        inbound_ = std::vector<shm::mpsc_queue<>>(params_.endpoints);
        for (std::uint32_t i = 0; i < params_.endpoints; ++i) {
            s = inbound_[i].format(base + queue_offset + i * queue_stride, queue_stride,
                                   params_.queue_slots);
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
        h->endpoints = params_.endpoints;
        h->queue_slots = params_.queue_slots;
        h->packet_size = packet_size;
        h->queue_offset = queue_offset;
        h->queue_stride = queue_stride;
        h->region_offset = region_offset;
        h->region_bytes = round_up(region_bytes, k_page);
        h->doorbell.store(0, std::memory_order_relaxed);
        h->sleeping.store(0, std::memory_order_relaxed);
        doorbell_ = &h->doorbell;
        sleeping_ = &h->sleeping;
        // Release: a peer that reads the magic with acquire sees the formatted segment.
        h->magic.store(k_segment_magic, std::memory_order_release);

        addr_.version = k_address_version;
        addr_.pid = h->pid;
        addr_.fd = seg_.fd();
        addr_.self = params_.self;
        addr_.bytes = total;

        peers_.reset(new peer_state[params_.num_peers]);
        s = match::table::create(k_table_buckets, table_, serial_);
        if (s != status::ok) {
            return s;
        }
        poller_on_.reset(new std::atomic<bool>[sched::runtime::k_max_workers]);
        for (unsigned i = 0; i < sched::runtime::k_max_workers; ++i) {
            poller_on_[i].store(false, std::memory_order_relaxed);
        }
        comms_.reset(new std::atomic<comm_state *>[std::size_t{1} << 16]);
        for (std::size_t i = 0; i < (std::size_t{1} << 16); ++i) {
            comms_[i].store(nullptr, std::memory_order_relaxed);
        }
        if (params_.progress == MPIV_P2P_PROGRESS_SERVER) {
            server_ = std::thread([this] { server_loop(); });
        }
    } catch (const std::bad_alloc &) {
        return status::nomem;
    } catch (const std::system_error &e) {
        base::log(base::log_level::error, "mpiv_p2p_create: cannot start the server thread: %s",
                  e.what());
        return status::system;
    }
    return status::ok;
}

engine::~engine()
{
    // Relaxed: join() orders the server's last accesses before the teardown below.
    stop_.store(true, std::memory_order_relaxed);
    if (server_.joinable()) {
        ring(doorbell_, sleeping_); // it may sleep on the doorbell
        server_.join();
    }
    // Acquire: pairs with each poller's release decrement; they end once no ULT waits.
    while (pollers_live_.load(std::memory_order_acquire) != 0) {
        std::this_thread::yield();
    }
    if (runtime_ref_) {
        (void)sched::runtime::finalize();
    }
    for (inmsg *m = pending_; m != nullptr;) {
        inmsg *next = m->next_pending;
        delete m;
        m = next;
    }
    // Messages nobody received are freed with their communicators (the table goes too).
    const auto free_messages = [](comm_state &c) noexcept {
        try {
            c.match([](auto &m) {
                m.release_messages([](match::msg_node &n) { delete static_cast<inmsg *>(&n); });
            });
        } catch (const std::bad_alloc &) {
            // Leaked: the process is ending its use of mpiv.
        }
    };
    if (comms_ != nullptr) {
        for (std::size_t i = 0; i < (std::size_t{1} << 16); ++i) {
            if (comm_state *c = comms_[i].load(std::memory_order_relaxed)) {
                free_messages(*c);
                delete c;
            }
        }
    }
    for (auto &g : graveyard_) {
        free_messages(*g.comm);
    }
    for (auto &c : kept_) {
        free_messages(*c);
    }
}

void engine::server_loop() noexcept
{
    if (params_.server_cpu >= 0) {
        hwloc_topology_t topo;
        if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0) {
            hwloc_bitmap_t set = hwloc_bitmap_alloc();
            hwloc_bitmap_only(set, static_cast<unsigned>(params_.server_cpu));
            if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0) {
                base::log(base::log_level::warn, "mpiv: cannot pin the server thread to PU %d",
                          params_.server_cpu);
            }
            hwloc_bitmap_free(set);
            hwloc_topology_destroy(topo);
        }
    }
    // Polls while events come; after params_.idle_us without one it sleeps on the
    // doorbell, as a progress owner does (owner_loop()): senders and local posters ring it.
    const auto idle_budget = std::chrono::microseconds(params_.idle_us);
    auto idle_since = std::chrono::steady_clock::now();
    unsigned idle = 0;
    // Relaxed: stop_ only ends the loop; join() in the destructor provides the ordering
    // (and the destructor rings the doorbell).
    while (!stop_.load(std::memory_order_relaxed)) {
        if (progress() > 0) {
            idle = 0;
            continue;
        }
        if (++idle == 1) {
            idle_since = std::chrono::steady_clock::now();
        }
        if (idle <= 64) {
            continue;
        }
        if (idle % k_idle_clock_polls != 0 ||
            std::chrono::steady_clock::now() - idle_since < idle_budget) {
            std::this_thread::yield();
            continue;
        }
        idle = 0;
        const std::uint32_t seen = doorbell_->load(std::memory_order_relaxed);
        sleeping_->fetch_add(1, std::memory_order_relaxed);
        // seq_cst fence: Dekker with ring() (see there).
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (inbound_idle() && !stop_.load(std::memory_order_relaxed)) {
            base::futex_wait_for(*doorbell_, seen, k_doorbell_timeout_ns, true);
        }
        sleeping_->fetch_sub(1, std::memory_order_relaxed);
    }
}

std::uint32_t engine::my_endpoint() noexcept
{
    if (tl_endpoint == UINT32_MAX) {
        // Relaxed: only spreads threads over endpoints.
        tl_endpoint = next_endpoint_.fetch_add(1, std::memory_order_relaxed);
    }
    // No division on the common path (one of the first `endpoints` threads): this runs
    // on every send and poll.
    return tl_endpoint < params_.endpoints ? tl_endpoint : tl_endpoint % params_.endpoints;
}

status engine::connect(std::uint32_t peer, const void *addr, std::size_t len) noexcept
{
    if (peer >= params_.num_peers || addr == nullptr || len != sizeof(address_t)) {
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
    std::lock_guard<std::mutex> guard(peers_mu_);
    peer_state &p = peers_[peer];
    if (p.connected) {
        return status::ok;
    }
    status s = shm::segment::attach(static_cast<int>(a.pid), a.fd, a.bytes, p.seg);
    if (s != status::ok) {
        return s;
    }
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
        p.queues = std::vector<shm::mpsc_queue<>>(endpoints);
    } catch (const std::bad_alloc &) {
        return status::nomem;
    }
    for (std::uint64_t i = 0; i < endpoints; ++i) {
        s = p.queues[i].attach(base + queue_offset + i * queue_stride, queue_stride);
        if (s != status::ok) {
            return s;
        }
    }
    s = p.region.attach(base + region_offset, region_bytes);
    if (s != status::ok) {
        return s;
    }
    p.pid = static_cast<int>(a.pid);
    p.doorbell = &h->doorbell;
    p.sleeping = &h->sleeping;
    p.connected = true;
    return status::ok;
}

namespace {
// The C ABI's MPIV_P2P_ASSERT_* bits as match::k_assert_* flags; false for unknown bits.
bool match_assertions(unsigned assertions, unsigned &flags) noexcept
{
    if ((assertions & ~7U) != 0) {
        return false;
    }
    flags = ((assertions & MPIV_P2P_ASSERT_NO_ANY_SOURCE) != 0 ? match::k_assert_no_any_source : 0U) |
            ((assertions & MPIV_P2P_ASSERT_NO_ANY_TAG) != 0 ? match::k_assert_no_any_tag : 0U) |
            ((assertions & MPIV_P2P_ASSERT_ALLOW_OVERTAKING) != 0 ? match::k_assert_allow_overtaking
                                                                  : 0U);
    return true;
}
} // namespace

status engine::comm_create(std::uint16_t cid, std::int32_t size, unsigned assertions,
                           comm_state *&comm_p) noexcept
{
    unsigned flags = 0;
    if (!match_assertions(assertions, flags)) {
        return status::invalid_arg;
    }
    std::unique_ptr<comm_state> c(new (std::nothrow) comm_state);
    if (c == nullptr) {
        return status::nomem;
    }
    c->cid = cid;
    match::comm_params cp;
    cp.cid = cid;
    cp.size = size;
    cp.assertions = flags;
    status s = status::invalid_arg;
    switch (params_.lock) {
    case MPIV_P2P_LOCK_MCS:
        s = comm_mcs::create(*table_, cp, c->mcs);
        break;
    case MPIV_P2P_LOCK_HMCS:
        s = comm_hmcs::create(*table_, cp, c->hmcs);
        break;
    case MPIV_P2P_LOCK_TICKET:
        s = comm_ticket::create(*table_, cp, c->ticket);
        break;
    }
    if (s != status::ok) {
        return s;
    }
    inmsg *mine = nullptr;
    {
        std::lock_guard<std::mutex> guard(pending_mu_);
        if (comms_[cid].load(std::memory_order_relaxed) != nullptr) {
            base::log(base::log_level::error, "mpiv_p2p_comm_create: context id %u is in use", cid);
            return status::invalid_arg;
        }
        // Take this context id's early arrivals, keeping their arrival order.
        inmsg **tail = &mine;
        for (inmsg **pp = &pending_; *pp != nullptr;) {
            inmsg *m = *pp;
            if (m->w.cid == cid) {
                *pp = m->next_pending;
                m->next_pending = nullptr;
                *tail = m;
                tail = &m->next_pending;
            } else {
                pp = &m->next_pending;
            }
        }
        // Release: an arrival that loads the pointer with acquire sees the built state.
        comms_[cid].store(c.get(), std::memory_order_release);
    }
    comm_state *raw = c.release();
    // Early arrivals are matched only now; a new arrival of the same sender may overtake
    // them into arrive(), and the sequence numbers put it back in order.
    while (mine != nullptr) {
        inmsg *next = mine->next_pending;
        arrive(*raw, *mine);
        mine = next;
    }
    comm_p = raw;
    reap(); // communicators destroyed from inside a drain
    return status::ok;
}

unsigned engine::comm_assertions(comm_state &comm) noexcept
{
    const unsigned flags = comm.match([](auto &m) { return m.assertions(); });
    return ((flags & match::k_assert_no_any_source) != 0 ? MPIV_P2P_ASSERT_NO_ANY_SOURCE : 0U) |
           ((flags & match::k_assert_no_any_tag) != 0 ? MPIV_P2P_ASSERT_NO_ANY_TAG : 0U) |
           ((flags & match::k_assert_allow_overtaking) != 0 ? MPIV_P2P_ASSERT_ALLOW_OVERTAKING
                                                            : 0U);
}

status engine::comm_set_assertions(comm_state &comm, unsigned assertions) noexcept
{
    unsigned flags = 0;
    if (!match_assertions(assertions, flags)) {
        return status::invalid_arg;
    }
    return comm.match([flags](auto &m) { return m.set_assertions(flags); });
}

status engine::comm_destroy(comm_state *comm) noexcept
{
    {
        std::lock_guard<std::mutex> guard(pending_mu_);
        if (comms_[comm->cid].load(std::memory_order_relaxed) != comm) {
            return status::invalid_handle;
        }
        // seq_cst: with the fence below, Dekker with the drains (drain_mark()): a drain
        // that starts after the marks loads the cleared pointer.
        comms_[comm->cid].store(nullptr, std::memory_order_seq_cst);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    grave g;
    try {
        g.marks.reserve(inbound_.size());
        for (const auto &q : inbound_) {
            g.marks.push_back(q.drain_mark());
        }
        g.comm.reset(comm);
        std::lock_guard<std::mutex> guard(graveyard_mu_);
        graveyard_.push_back(std::move(g));
    } catch (const std::bad_alloc &) {
        (void)g.comm.release(); // leaked rather than freed while a drain may read it
        return status::ok;
    }
    reap();
    return status::ok;
}

void engine::reap() noexcept
{
    std::lock_guard<std::mutex> guard(graveyard_mu_);
    for (std::size_t i = 0; i < graveyard_.size();) {
        grave &g = graveyard_[i];
        bool over = true;
        if (serial_) {
            over = tl_draining == 0; // drains run on this thread only
        } else {
            for (std::size_t q = 0; q < inbound_.size() && over; ++q) {
                over = inbound_[q].drained_since(g.marks[q]);
            }
        }
        if (!over) {
            ++i;
            continue;
        }
        if (g.comm->match([](auto &m) { return m.holds_messages(); })) {
            base::log(base::log_level::debug,
                      "mpiv: communicator %u freed while messages wait in it: its state is "
                      "kept until finalize", g.comm->cid);
            try {
                kept_.push_back(std::move(g.comm));
            } catch (const std::bad_alloc &) {
                (void)g.comm.release(); // leaked, never freed under its table entries
            }
        }
        g.comm.reset(); // freed (a kept one was moved out)
        if (i + 1 != graveyard_.size()) {
            g = std::move(graveyard_.back());
        }
        graveyard_.pop_back();
    }
}

inline bool engine::push(std::uint32_t peer, wire &w, comm_state *seq_comm, std::int32_t dest,
                         const void *more, std::size_t more_bytes) noexcept
{
    peer_state &p = peers_[peer];
    const std::size_t n = p.queues.size();
    const std::size_t ep = my_endpoint();
    std::size_t q = ep < n ? ep : ep % n; // the peer may have fewer endpoints
    // The header, then (inline payload past k_wire_inline) the rest, in one message: the
    // queue copies it once a slot is claimed, and only then is the sequence number drawn
    // (into w, which the queue reads after finish()). A header alone goes from w itself.
    alignas(8) unsigned char message[shm::mpsc_queue<>::k_max_message];
    const std::size_t len = sizeof w + more_bytes;
    const void *const bytes = more_bytes != 0 ? static_cast<const void *>(message) : &w;
    const wire_kind kind = w.kind;
    bool numbered = true;
    const auto finish = [&] {
        if (seq_comm != nullptr) {
            std::uint32_t seq = 0;
            bool ordered = true;
            numbered = seq_comm->match([&](auto &m) {
                return m.next_send_seq(dest, seq, ordered);
            }) == status::ok;
            w.seq = seq;
            w.flags = static_cast<std::uint8_t>((w.flags & ~k_wire_unordered) |
                                                (ordered ? 0 : k_wire_unordered));
            if (!numbered) {
                // First contact and no memory for the sequence state: the slot is claimed
                // and must be published; the receiver skips it and the send is retried.
                w.kind = wire_kind::pad;
            }
        }
        if (more_bytes != 0) {
            std::memcpy(message, &w, sizeof w);
            std::memcpy(message + sizeof w, more, more_bytes);
        }
    };
    tsan_pushing();
    for (std::size_t i = 0; i < n; ++i) {
        if (p.queues[q].try_push(bytes, len, finish) == status::ok) {
            if (!numbered) {
                w.kind = kind; // the pad was for the queue's copy only (and w is not sent)
            }
            ring(p.doorbell, p.sleeping);
            return numbered;
        }
        q = q + 1 == n ? 0 : q + 1;
    }
    return false;
}

inline void engine::ring(std::atomic<std::uint32_t> *doorbell,
                         std::atomic<std::uint32_t> *sleeping) noexcept
{
    // Dekker with the sleeper in owner_loop(): our push (or completion) and this load on
    // one side, its increment of `sleeping` and its emptiness check on the other, each
    // separated by a seq_cst fence: one of us sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping->load(std::memory_order_relaxed) != 0) {
        doorbell->fetch_add(1, std::memory_order_relaxed);
        base::futex_wake_shared(*doorbell, 1);
    }
}

inline bool engine::try_send(send_op &op, bool &waits) noexcept
{
    const std::uint32_t ep = my_endpoint();
    void *packet = nullptr;
    if (op.w.kind == wire_kind::eager_packet && op.packet == nullptr &&
        pool_.get(ep, packet) != status::ok) {
        // No packet: go rendezvous rather than wait. Unexpected messages keep their packets
        // until their receives, which may come only after this message (MPI's progress
        // rule: Isend(1), Isend(2) against Recv(2), Recv(1) completes).
        if (!op.queued_ack && (op.w.u.ref.token = tokens_.issue(&op)) == 0) {
            return false; // no memory to name it: retry later
        }
        op.w.kind = wire_kind::rts;
        op.w.u.ref.where = reinterpret_cast<std::uintptr_t>(op.buf);
        op.queued_ack = true;
    }
    if (op.w.kind == wire_kind::eager_packet && op.packet == nullptr) {
        copy_to_packet(packet, op.buf, op.w.size);
        std::uint64_t offset = 0;
        (void)pool_.region().offset_of(packet, offset);
        op.w.u.ref.where = offset;
        op.packet = packet;
    }
    waits = op.queued_ack; // read before the push: op may complete at once after it
    const void *more = nullptr; // inline payload past the header's
    std::size_t more_bytes = 0;
    if (op.w.kind == wire_kind::eager_inline && op.w.inline_bytes > k_wire_inline) {
        more = static_cast<const unsigned char *>(op.buf) + k_wire_inline;
        more_bytes = op.w.inline_bytes - k_wire_inline;
    }
    if (!push(op.peer, op.w, op.seq_comm, op.dest, more, more_bytes)) {
        return false; // keeps its packet: only a queue slot is missing
    }
    if (!waits) {
        op.packet = nullptr; // (a send that waits for ACK/FIN may be done and reused now)
    }
    return true;
}

void engine::post_outbound(std::uint32_t peer, const outbound &item) noexcept
{
    peer_state &p = peers_[peer];
    std::lock_guard<base::ticket_lock> guard(p.out_mu);
    try {
        p.out.push_back(item);
    } catch (const std::bad_alloc &) {
        base::log(base::log_level::error,
                  "mpiv: out of memory queueing a message for peer %u; aborting", peer);
        std::abort();
    }
    // Relaxed: hints for progress() and the sends to this peer; the lock orders the list
    // itself, and a thread always sees its own earlier increments (its sends stay in
    // order).
    p.out_count.fetch_add(1, std::memory_order_relaxed);
    outbound_count_.fetch_add(1, std::memory_order_relaxed);
    // A server or progress owner asleep on this process's doorbell must retry the list.
    ring(doorbell_, sleeping_);
}

bool engine::send_control(std::uint32_t peer, wire_kind kind, std::uint64_t token,
                          std::uint64_t bytes, void *user, const mpiv_p2p_status_t &st) noexcept
{
    outbound item{};
    item.control.kind = kind;
    item.control.from = params_.self;
    item.control.size = bytes;
    item.control.u.ref.token = token;
    // Behind what already waits for this peer, or pushed now.
    if (peers_[peer].out_count.load(std::memory_order_relaxed) == 0 &&
        push(peer, item.control, nullptr, 0)) {
        return true;
    }
    item.user = user;
    item.st = st;
    post_outbound(peer, item);
    return false;
}

int engine::drain_peer(peer_state &p) noexcept
{
    // Completions run once the lock is released (they may send, or free the op).
    constexpr std::size_t k_batch = 16;
    struct completion {
        void *user;
        mpiv_p2p_status_t st;
    } done[k_batch];
    std::size_t ndone = 0;
    int events = 0;
    {
        std::unique_lock<base::ticket_lock> lock(p.out_mu, std::try_to_lock);
        if (!lock.owns_lock()) {
            return 0;
        }
        while (!p.out.empty() && ndone < k_batch) {
            outbound &item = p.out.front();
            bool waits = true;
            if (item.op != nullptr) {
                send_op &op = *item.op;
                // Read before sending: a send that waits for ACK/FIN may complete (and its
                // storage be reused) as soon as it is pushed.
                const mpiv_p2p_status_t st{op.dest, op.w.tag, op.w.size, op.w.size, MPIV_OK};
                void *const user = op.user;
                if (!try_send(op, waits)) {
                    break; // the peer's queues are full: later items would wait too
                }
                if (!waits) {
                    done[ndone++] = {user, st};
                }
            } else {
                const std::uint32_t peer = static_cast<std::uint32_t>(&p - peers_.get());
                if (!push(peer, item.control, nullptr, 0)) {
                    break;
                }
                if (item.user != nullptr) {
                    done[ndone++] = {item.user, item.st};
                }
            }
            p.out.pop_front();
            p.out_count.fetch_sub(1, std::memory_order_relaxed);
            outbound_count_.fetch_sub(1, std::memory_order_relaxed);
            ++events;
        }
    }
    for (std::size_t i = 0; i < ndone; ++i) {
        params_.complete(done[i].user, &done[i].st);
    }
    return events;
}

int engine::drain_outbound() noexcept
{
    int events = 0;
    for (std::uint32_t i = 0; i < params_.num_peers; ++i) {
        // Relaxed: a hint; drain_peer() reads the list under its lock.
        if (peers_[i].out_count.load(std::memory_order_relaxed) != 0) {
            events += drain_peer(peers_[i]);
        }
    }
    return events;
}

inline bool engine::valid_target(comm_state &comm, std::uint32_t peer, std::int32_t dest,
                                 unsigned flags) noexcept
{
    return peer < params_.num_peers && peers_[peer].connected &&
           (flags & ~MPIV_P2P_SEND_SYNC) == 0 && dest >= 0 &&
           dest < comm.match([](auto &m) { return m.size(); });
}

inline void engine::fill_wire(wire &w, const comm_state &comm, std::int32_t self_rank,
                              std::int32_t tag, std::size_t bytes, unsigned flags) noexcept
{
    w = wire{};
    w.flags = (flags & MPIV_P2P_SEND_SYNC) != 0 ? k_wire_sync : 0;
    w.cid = comm.cid;
    w.from = params_.self;
    w.source = self_rank;
    w.tag = tag;
    w.size = bytes;
}

inline bool engine::prepare_send(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                                 std::int32_t dest, std::int32_t tag, std::size_t bytes,
                                 unsigned flags, void *user, send_op &op) noexcept
{
    if (!valid_target(comm, peer, dest, flags)) {
        return false;
    }
    init_send(comm, peer, self_rank, dest, tag, bytes, flags, user, op);
    return true;
}

inline void engine::init_send(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                              std::int32_t dest, std::int32_t tag, std::size_t bytes,
                              unsigned flags, void *user, send_op &op) noexcept
{
    op.type = op_type::send;
    op.peer = peer;
    op.dest = dest;
    op.user = user;
    op.buf = nullptr;
    op.seq_comm = &comm;
    op.packet = nullptr;
    fill_wire(op.w, comm, self_rank, tag, bytes, flags);
}

inline bool engine::send_inline_now(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                                    std::int32_t dest, std::int32_t tag, const void *buf,
                                    std::size_t bytes) noexcept
{
    // The common small send, without the op: the message goes straight into a queue
    // slot. Anything else (sends to this peer queued before it, full queues, no memory
    // for the peer's sequence state) takes the general path; nothing was sent.
    // Relaxed: a hint (see post_outbound()).
    if (peers_[peer].out_count.load(std::memory_order_relaxed) != 0) {
        return false;
    }
    wire w;
    fill_wire(w, comm, self_rank, tag, bytes, 0);
    w.kind = wire_kind::eager_inline;
    w.inline_bytes = static_cast<std::uint32_t>(bytes);
    const std::size_t head = std::min(bytes, k_wire_inline);
    if (bytes != 0) {
        base::copy_small(w.u.data, buf, head);
    }
    return push(peer, w, &comm, dest, static_cast<const unsigned char *>(buf) + head,
                bytes - head);
}

status engine::isend(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                     std::int32_t dest, std::int32_t tag, const void *buf, std::size_t bytes,
                     unsigned flags, void *user, send_op &op, mpiv_p2p_status_t &st) noexcept
{
    if ((buf == nullptr && bytes != 0) || !valid_target(comm, peer, dest, flags)) {
        return status::invalid_arg;
    }
    if (flags == 0 && bytes <= inline_max_) {
        if (send_inline_now(comm, peer, self_rank, dest, tag, buf, bytes)) {
            st = mpiv_p2p_status_t{dest, tag, bytes, bytes, MPIV_OK};
            return status::ok;
        }
        if (user == nullptr) {
            return status::retry_nomem; // no request to complete later: nothing was sent
        }
    }
    init_send(comm, peer, self_rank, dest, tag, bytes, flags, user, op);
    op.buf = buf;
    wire &w = op.w;
    if ((w.flags & k_wire_sync) == 0 && bytes <= inline_max_) {
        w.kind = wire_kind::eager_inline;
        w.inline_bytes = static_cast<std::uint32_t>(bytes);
        if (bytes != 0) {
            base::copy_small(w.u.data, buf, std::min(bytes, k_wire_inline));
        }
    } else if (bytes <= params_.eager_limit) {
        w.kind = wire_kind::eager_packet;
    } else {
        w.kind = wire_kind::rts;
        w.u.ref.where = reinterpret_cast<std::uintptr_t>(buf);
    }
    return launch(op, st);
}

status engine::isend_gather(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                            std::int32_t dest, std::int32_t tag, const struct iovec *iov,
                            std::size_t iovcnt, unsigned flags, void *user, send_op &op,
                            mpiv_p2p_status_t &st) noexcept
{
    if (iov == nullptr && iovcnt != 0) {
        return status::invalid_arg;
    }
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_base == nullptr && iov[i].iov_len != 0) {
            return status::invalid_arg;
        }
        bytes += iov[i].iov_len;
    }
    if (!prepare_send(comm, peer, self_rank, dest, tag, bytes, flags, user, op)) {
        return status::invalid_arg;
    }
    wire &w = op.w;
    w.kind = wire_kind::rts;
    w.flags |= k_wire_gather;
    w.u.ref.where = reinterpret_cast<std::uintptr_t>(iov);
    w.u.ref.spare = iovcnt;
    return launch(op, st);
}

status engine::isend_streamed(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                              std::int32_t dest, std::int32_t tag, const void *buf,
                              std::size_t bytes, const std::size_t *ready, unsigned flags,
                              void *user, send_op &op, mpiv_p2p_status_t &st) noexcept
{
    static_assert(sizeof(std::size_t) == sizeof(std::uint64_t), "the receiver reads 8 bytes");
    if ((buf == nullptr && bytes != 0) ||
        !prepare_send(comm, peer, self_rank, dest, tag, bytes, flags, user, op)) {
        return status::invalid_arg;
    }
    op.buf = buf;
    wire &w = op.w;
    w.kind = wire_kind::rts;
    w.flags |= k_wire_streamed;
    w.u.ref.where = reinterpret_cast<std::uintptr_t>(buf);
    w.u.ref.spare = reinterpret_cast<std::uintptr_t>(ready);
    return launch(op, st);
}

inline status engine::launch(send_op &op, mpiv_p2p_status_t &st) noexcept
{
    wire &w = op.w;
    op.queued_ack = (w.flags & k_wire_sync) != 0 || w.kind == wire_kind::rts;
    if (op.queued_ack) {
        // The name the receiver's ACK or FIN gives back (see token_table).
        w.u.ref.token = tokens_.issue(&op);
        if (w.u.ref.token == 0) {
            base::log(base::log_level::error, "mpiv: no memory to name a send that waits");
            return status::nomem;
        }
    }
    bool waits = true;
    // Sends wait behind those queued for the same peer (a thread's sends keep their
    // order); a queued send, inline ones too, is in progress until it is pushed. After a
    // successful push of a message that waits for ACK/FIN, op may complete on another
    // thread at any time: read nothing from it afterwards.
    const std::int32_t dest = op.dest;
    const std::int32_t tag = w.tag;
    const std::size_t bytes = w.size;
    const std::uint32_t peer = op.peer;
    // Relaxed: a hint (see post_outbound()).
    if (peers_[peer].out_count.load(std::memory_order_relaxed) != 0 || !try_send(op, waits)) {
        outbound item{};
        item.op = &op;
        post_outbound(peer, item);
        return status::inprogress;
    }
    if (waits) {
        return status::inprogress;
    }
    st = mpiv_p2p_status_t{dest, tag, bytes, bytes, MPIV_OK};
    return status::ok;
}

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

// Hands bytes of a message to a receive's buffer or sink. Inline: delivering a small
// message is mostly this call.
[[gnu::always_inline]] inline void put(const recv_target &to, std::size_t offset,
                                       const void *data, std::size_t n) noexcept
{
    if (n == 0) {
        return;
    }
    if (to.sink != nullptr) {
        to.sink(to.ctx, offset, data, n);
    } else if (n <= base::k_copy_small_max) {
        base::copy_small(static_cast<char *>(to.buf) + offset, data, n);
    } else {
        std::memcpy(static_cast<char *>(to.buf) + offset, data, n);
    }
}
} // namespace

int engine::read_streamed(std::uint32_t from, const recv_target &to, const wire &w,
                          std::size_t n) noexcept
{
    // The sender writes its bytes in order and publishes how many are there: read each
    // part once it is, and return only once the sender is done with its buffer (it may
    // free it when the FIN that follows completes the send), even when n < w.size.
    const pid_t pid = peers_[from].pid;
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
            if (shm::cma_read(pid, dest, reinterpret_cast<std::uintptr_t>(src + done), len) !=
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
        if (shm::cma_read(pid, &count, w.u.ref.spare, sizeof count) != status::ok) {
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
    const pid_t pid = peers_[from].pid;
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
        if (!list.empty() && shm::cma_read(pid, list.data(), w.u.ref.where,
                                           list.size() * sizeof(struct iovec)) != status::ok) {
            return MPIV_ERR_SYSTEM;
        }
        cut_at(list, n);
        ranges = list.data();
        count = list.size();
    }
    if (to.sink == nullptr) {
        const struct iovec local = {to.buf, n};
        return shm::cma_readv(pid, &local, 1, ranges, count) == status::ok ? MPIV_OK
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
        if (shm::cma_readv(pid, &local, 1, part, parts) != status::ok) {
            return MPIV_ERR_SYSTEM;
        }
        to.sink(to.ctx, done, bounce.get(), len);
        done += len;
    }
    return MPIV_OK;
}

bool engine::deliver(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept
{
    const wire &w = m.w;
    const std::size_t n = std::min<std::size_t>(w.size, to.capacity);
    int error = w.size > to.capacity ? MPIV_ERR_TRUNCATE : MPIV_OK;
    wire_kind control = wire_kind::pad; // what the sender waits for: ack, fin or nothing
    switch (w.kind) {
    case wire_kind::eager_inline:
        put(to, 0, w.u.data, std::min(n, k_wire_inline));
        if (n > k_wire_inline) {
            put(to, k_wire_inline, m.more, n - k_wire_inline);
        }
        break;
    case wire_kind::eager_packet:
        put(to, 0, m.packet, n);
        if (peers_[w.from].region.put(const_cast<void *>(m.packet)) != status::ok) {
            base::log(base::log_level::error, "mpiv: cannot return a packet to peer %u", w.from);
        }
        if ((w.flags & k_wire_sync) != 0) {
            control = wire_kind::ack;
        }
        break;
    case wire_kind::rts:
        if (w.from == params_.self && (w.flags & k_wire_streamed) != 0) {
            // This process's own send: wait until it has written everything.
            const auto *written = reinterpret_cast<const std::size_t *>(w.u.ref.spare);
            base::backoff wait;
            // sync: acquire; pairs with the writer's release store of the count.
            while (__atomic_load_n(written, __ATOMIC_ACQUIRE) < w.size) {
                wait.pause();
            }
        }
        if (n != 0 || (w.flags & k_wire_streamed) != 0) {
            if (w.from != params_.self) {
                const int read = read_remote(w.from, to, w, n);
                error = read != MPIV_OK ? read : error;
            } else if ((w.flags & k_wire_gather) != 0) {
                const auto *iov = reinterpret_cast<const struct iovec *>(w.u.ref.where);
                for (std::size_t i = 0, off = 0; off < n; off += iov[i].iov_len, ++i) {
                    put(to, off, iov[i].iov_base, std::min(iov[i].iov_len, n - off));
                }
            } else {
                put(to, 0, reinterpret_cast<const void *>(w.u.ref.where), n);
            }
        }
        control = wire_kind::fin;
        break;
    default:
        error = MPIV_ERR_INTERNAL;
        break;
    }
    st = mpiv_p2p_status_t{w.source, w.tag, n, static_cast<std::size_t>(w.size), error};
    const bool done = control == wire_kind::pad ||
                      send_control(w.from, control, w.u.ref.token, n, user, st);
    free_inmsg(&m);
    return done;
}

inline void engine::complete_recv(recv_op &op, inmsg &m) noexcept
{
    mpiv_p2p_status_t st;
    void *const user = op.user;
    if (deliver(m, op.to, user, st)) {
        params_.complete(user, &st);
    }
}

inline void engine::arrive(comm_state &comm, inmsg &m) noexcept
{
    match::envelope env;
    env.source = m.w.source;
    env.tag = m.w.tag;
    env.seq = m.w.seq;
    env.size = m.w.size;
    env.ordered = (m.w.flags & k_wire_unordered) == 0;
    match::match_list matched;
    const status s = comm.match([&](auto &c) { return c.arrive(m, env, matched); });
    if (s != status::ok) {
        // An envelope the communicator cannot take (a source outside it), or no memory for
        // the sender's state: either way later messages of this sender could wait for it
        // for ever; say so (the component ends the job).
        char what[128];
        std::snprintf(what, sizeof what, "a message for communicator %u from rank %d, tag %d: %s",
                      m.w.cid, m.w.source, m.w.tag, mpiv_status_string(to_c(s)));
        fault(m.w.from, what);
        free_inmsg(&m);
        return;
    }
    while (match::msg_node *mn = matched.pop()) {
        auto &im = static_cast<inmsg &>(*mn);
        complete_recv(static_cast<recv_op &>(*im.matched_recv()), im);
    }
}

void engine::fault(std::uint32_t peer, const char *what) noexcept
{
    // A message can only be blamed on the other, connected, peer it names: one that names
    // this process or no connected peer may come from anyone.
    if (peer >= params_.num_peers || peer == params_.self || !peers_[peer].connected) {
        peer = MPIV_P2P_PEER_UNKNOWN;
    }
    std::atomic<bool> &reported =
        peer < params_.num_peers ? peers_[peer].faulted : unknown_faulted_;
    // Relaxed: only makes the report once per peer.
    if (reported.exchange(true, std::memory_order_relaxed)) {
        return;
    }
    if (params_.fault != nullptr) {
        params_.fault(peer < params_.num_peers ? peer : MPIV_P2P_PEER_UNKNOWN, what);
    } else if (peer < params_.num_peers) {
        base::log(base::log_level::error, "mpiv: peer %u wrote invalid data into shared memory: %s",
                  peer, what);
    } else {
        base::log(base::log_level::error,
                  "mpiv: invalid data in shared memory, from a peer that cannot be named: %s",
                  what);
    }
}

void engine::handle_control(const wire &w) noexcept
{
    // The token must name a live send of this process to the peer that answers, of the
    // kind that waits for this answer (ACK: synchronous eager; FIN: rendezvous).
    send_op *op = tokens_.peek(w.u.ref.token);
    const wire_kind expects = w.kind == wire_kind::ack ? wire_kind::eager_packet : wire_kind::rts;
    if (op == nullptr || op->peer != w.from || op->w.kind != expects ||
        (op = tokens_.redeem(w.u.ref.token)) == nullptr) {
        char what[96];
        std::snprintf(what, sizeof what, "%s with token %#llx, which names no send of ours to it",
                      w.kind == wire_kind::ack ? "an ACK" : "a FIN",
                      static_cast<unsigned long long>(w.u.ref.token));
        fault(w.from, what);
        return;
    }
    mpiv_p2p_status_t st{op->dest, op->w.tag, op->w.size, op->w.size, MPIV_OK};
    params_.complete(op->user, &st);
}

inline bool engine::valid_arrival(const wire &w, std::size_t more_bytes) noexcept
{
    if (w.from < params_.num_peers && peers_[w.from].connected) {
        if (w.kind == wire_kind::eager_inline) {
            if (w.inline_bytes == w.size && w.size <= k_wire_inline) {
                return true;
            }
        } else if (w.kind == wire_kind::eager_packet &&
                   w.size <= peers_[w.from].region.packet_size()) {
            return true;
        }
    }
    return valid_arrival_slow(w, more_bytes);
}

bool engine::valid_arrival_slow(const wire &w, std::size_t more_bytes) noexcept
{
    char what[128];
    if (w.from >= params_.num_peers || !peers_[w.from].connected) {
        std::snprintf(what, sizeof what, "a message names sender %u, not a connected peer",
                      w.from);
        fault(w.from, what);
        return false;
    }
    switch (w.kind) {
    case wire_kind::eager_inline:
        if (w.inline_bytes != w.size || w.size > k_inline_max ||
            (w.size > k_wire_inline && w.size - k_wire_inline > more_bytes)) {
            std::snprintf(what, sizeof what,
                          "an inline message of %llu bytes (%u inline, %zu in the queue)",
                          static_cast<unsigned long long>(w.size), w.inline_bytes,
                          more_bytes + k_wire_inline);
            fault(w.from, what);
            return false;
        }
        return true;
    case wire_kind::eager_packet:
        if (w.size > peers_[w.from].region.packet_size()) {
            std::snprintf(what, sizeof what, "a packet message of %llu bytes (packets hold %u)",
                          static_cast<unsigned long long>(w.size),
                          peers_[w.from].region.packet_size());
            fault(w.from, what);
            return false;
        }
        return true;
    default: // rts
        break;
    }
    if ((w.flags & k_wire_gather) != 0 && w.u.ref.spare > 256 && w.u.ref.spare - 256 > w.size) {
        std::snprintf(what, sizeof what, "a gather list of %llu ranges for %llu bytes",
                      static_cast<unsigned long long>(w.u.ref.spare),
                      static_cast<unsigned long long>(w.size));
        fault(w.from, what);
        return false;
    }
    if (w.from == params_.self) {
        // Its addresses are read in this process: it must be one of our live sends, as the
        // send itself described it.
        const send_op *op = tokens_.peek(w.u.ref.token);
        constexpr std::uint8_t k_layout = k_wire_gather | k_wire_streamed;
        if (op == nullptr || op->peer != params_.self || op->w.kind != wire_kind::rts ||
            op->w.size != w.size || op->w.u.ref.where != w.u.ref.where ||
            op->w.u.ref.spare != w.u.ref.spare || (op->w.flags & k_layout) != (w.flags & k_layout)) {
            fault(w.from,
                  "a rendezvous message claims to come from this process but matches none of "
                  "its sends");
            return false;
        }
    }
    return true;
}

void engine::handle(const unsigned char *msg, std::size_t bytes) noexcept
{
    wire_kind kind;
    std::memcpy(&kind, msg + offsetof(wire, kind), sizeof kind);
    switch (kind) {
    case wire_kind::ack:
    case wire_kind::fin: {
        wire w;
        std::memcpy(&w, msg, sizeof w);
        handle_control(w);
        return;
    }
    case wire_kind::eager_inline:
    case wire_kind::eager_packet:
    case wire_kind::rts:
        break;
    case wire_kind::pad:
        return;
    default: {
        std::uint32_t from;
        std::memcpy(&from, msg + offsetof(wire, from), sizeof from);
        char what[64];
        std::snprintf(what, sizeof what, "a message of unknown kind %u",
                      static_cast<unsigned>(kind));
        fault(from, what);
        return;
    }
    }
    inmsg *m = alloc_inmsg();
    if (m == nullptr) {
        base::log(base::log_level::error, "mpiv: out of memory receiving a message; aborting");
        std::abort();
    }
    std::memcpy(&m->w, msg, sizeof m->w); // straight from the drained copy
    const wire &w = m->w;
    const std::size_t more_bytes = bytes - sizeof w;
    m->packet = nullptr;
    m->next_pending = nullptr;
    if (!valid_arrival(w, more_bytes)) {
        free_inmsg(m);
        return;
    }
    if (w.kind == wire_kind::eager_packet) {
        void *p = nullptr;
        if (peers_[w.from].region.packet_at(w.u.ref.where, p) != status::ok) {
            fault(w.from, "a packet offset outside its packet region");
            free_inmsg(m);
            return;
        }
        m->packet = p;
    }
    if (w.kind == wire_kind::eager_inline && w.size > k_wire_inline) {
        std::memcpy(m->more, msg + sizeof w, w.size - k_wire_inline);
    }
    // Acquire: pairs with the release store in comm_create(). seq_cst: Dekker with
    // comm_destroy() (see there).
    comm_state *c = comms_[w.cid].load(std::memory_order_seq_cst);
    if (c == nullptr) {
        std::lock_guard<std::mutex> guard(pending_mu_);
        c = comms_[w.cid].load(std::memory_order_relaxed);
        if (c == nullptr) {
            inmsg **tail = &pending_;
            while (*tail != nullptr) {
                tail = &(*tail)->next_pending;
            }
            *tail = m;
            return;
        }
    }
    arrive(*c, *m);
}

status engine::irecv(comm_state &comm, std::int32_t source, std::int32_t tag,
                     const recv_target &to, void *user, recv_op &op, mpiv_p2p_status_t &st) noexcept
{
    if (to.sink == nullptr && to.buf == nullptr && to.capacity != 0) {
        return status::invalid_arg;
    }
    op.type = op_type::recv;
    op.comm = &comm;
    op.user = user;
    op.to = to;
    const status s = comm.match([&](auto &c) { return c.post(op, source, tag); });
    if (s == status::ok && !deliver(static_cast<inmsg &>(*op.matched_msg()), to, user, st)) {
        return status::inprogress; // its ACK or FIN waits for room: completed with it
    }
    return s;
}

status engine::cancel(recv_op &op) noexcept
{
    return op.comm->match([&](auto &c) { return c.cancel(op); });
}

status engine::iprobe(comm_state &comm, std::int32_t source, std::int32_t tag,
                      mpiv_p2p_status_t &st) noexcept
{
    match::envelope env;
    const status s = comm.match([&](auto &c) { return c.probe(source, tag, env); });
    if (s == status::ok) {
        st = mpiv_p2p_status_t{env.source, env.tag, 0, env.size, MPIV_OK};
    }
    return s;
}

status engine::improbe(comm_state &comm, std::int32_t source, std::int32_t tag, inmsg *&msg_p,
                       mpiv_p2p_status_t &st) noexcept
{
    match::msg_node *m = nullptr;
    const status s = comm.match([&](auto &c) { return c.mprobe(source, tag, m); });
    if (s == status::ok) {
        const match::envelope &env = m->env();
        st = mpiv_p2p_status_t{env.source, env.tag, 0, env.size, MPIV_OK};
        msg_p = static_cast<inmsg *>(m);
    }
    return s;
}

status engine::mrecv(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept
{
    return deliver(m, to, user, st) ? status::ok : status::inprogress;
}

int engine::progress() noexcept
{
    int events = 0;
    // Relaxed: a hint; drain_outbound() reads the list under its mutex.
    if (outbound_count_.load(std::memory_order_relaxed) != 0) {
        events += drain_outbound();
    }
    const std::size_t n = inbound_.size();
    std::size_t next = my_endpoint(); // own queue first, then the others round the ring
    for (std::size_t i = 0; i < n; ++i) {
        shm::mpsc_queue<> &q = inbound_[next];
        next = next + 1 == n ? 0 : next + 1;
        if (q.empty_hint()) {
            continue;
        }
        const auto on_message = [this](const void *payload, std::size_t bytes) {
            tsan_popped();
            handle(static_cast<const unsigned char *>(payload), bytes);
        };
        ++tl_draining;
        const int k = serial_ ? q.drain_serial(on_message, k_drain_batch)
                              : q.drain(on_message, k_drain_batch);
        --tl_draining;
        if (k > 0) {
            events += k;
        }
    }
    return events;
}

// ------------------------------------------------------------------ waiting

namespace {
// A pthread's waiter (one wait at a time per thread). It is not thread-local storage: a
// waker may still read it (owner, asleep) after the decrement that let the wait return,
// and the thread may exit right then. Waiters of exited threads are recycled through a
// process-wide free list and never freed; a late access then meets a reused waiter and
// costs at most a spurious wake-up.
struct waiter_pool {
    std::mutex mu;
    std::vector<waiter *> free;
    std::vector<std::unique_ptr<waiter>> all; // owns every pthread waiter ever made
};
waiter_pool &pthread_waiters()
{
    static waiter_pool *pool = new waiter_pool; // never destroyed: threads may outlive exit()
    return *pool;
}
thread_local waiter *tl_waiter __attribute__((tls_model("initial-exec"))) = nullptr;
struct waiter_release {
    ~waiter_release()
    {
        if (tl_waiter != nullptr) {
            waiter_pool &p = pthread_waiters();
            std::lock_guard<std::mutex> guard(p.mu);
            p.free.push_back(tl_waiter); // capacity reserved when the waiter was made
            tl_waiter = nullptr;
        }
    }
};
thread_local waiter_release tl_waiter_release;

waiter &my_pthread_waiter()
{
    if (tl_waiter == nullptr) {
        waiter_pool &p = pthread_waiters();
        std::lock_guard<std::mutex> guard(p.mu);
        if (!p.free.empty()) {
            tl_waiter = p.free.back();
            p.free.pop_back();
        } else {
            try {
                p.all.push_back(std::make_unique<waiter>());
                p.free.reserve(p.all.size());
                tl_waiter = p.all.back().get();
            } catch (const std::bad_alloc &) {
                base::log(base::log_level::error, "mpiv: out of memory starting a wait; aborting");
                std::abort();
            }
        }
        (void)&tl_waiter_release; // registers the thread-exit hand-back
    }
    return *tl_waiter;
}
// Progress polls before a pthread parks or takes ownership: long when it waits alone
// (latency), short when other threads wait too (they need the CPU more).
constexpr int k_spin_polls_alone = 4096;
constexpr int k_spin_polls_crowd = 64;
constexpr long k_park_timeout_ns = 10000000;     // parked: re-check ownership every 10 ms
} // namespace

waiter *engine::wait_begin(std::int32_t count) noexcept
{
    if (sched::worker::current_ult() != nullptr) {
        auto *w = new (std::nothrow) waiter;
        auto *s = new (std::nothrow) sched::sync(count);
        if (w == nullptr || s == nullptr) {
            base::log(base::log_level::error, "mpiv: out of memory starting a wait; aborting");
            std::abort();
        }
        w->ult_sync = s;
        return w;
    }
    waiter &w = my_pthread_waiter();
    w.begun = count;
    // Release: pairs with the acquire in wake(); the count is set before any registration.
    w.remaining.store(count, std::memory_order_release);
    return &w;
}

void engine::wait_settle(waiter *w, std::int32_t total) noexcept
{
    // The completers still to come took w before the wait ended and wake it at once;
    // nothing here depends on progress.
    base::backoff wait;
    // Acquire: pairs with the acq_rel decrement in wake().
    while (w->begun - w->remaining.load(std::memory_order_acquire) < total) {
        wait.pause();
    }
}

void engine::wake(waiter *w) noexcept
{
    if (sched::sync *s = w->ult_sync) {
        // The waiting ULT may free w and s as soon as the last signal lands.
        (void)s->signal();
        return;
    }
    // acq_rel: the completion's writes happen before the waiter sees remaining <= 0.
    // Serial: the waiter is this thread (or one that takes over through the caller's own
    // synchronization), so a plain decrement does.
    std::int32_t before;
    if (serial_) {
        before = w->remaining.load(std::memory_order_relaxed);
        w->remaining.store(before - 1, std::memory_order_release);
    } else {
        before = w->remaining.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (before == 1) {
        // seq_cst: Dekker with owner_loop() (its owner store, then its remaining check).
        const bool owner = w->owner.load(std::memory_order_seq_cst);
        // seq_cst: Dekker with sleep_on_word() (its asleep store, then its remaining
        // check): a waiter that is not asleep sees the completion without a system call.
        if (w->asleep.load(std::memory_order_seq_cst)) {
            w->word.fetch_add(1, std::memory_order_release);
            base::futex_wake(w->word, 1);
        }
        // seq_cst (the decrement above is the RMW half of the Dekker with owner_loop's
        // sleeping increment + fence): ring only an owner asleep on the doorbell.
        if (owner && sleeping_->load(std::memory_order_seq_cst) != 0) {
            doorbell_->fetch_add(1, std::memory_order_relaxed);
            base::futex_wake_shared(*doorbell_, 1);
        }
    }
}

void engine::wait_end(waiter *w) noexcept
{
    if (sched::sync *s = w->ult_sync) {
        // Inline progress: the waiting ULTs poll, yielding between polls; with a server
        // thread they block until the completion signals them.
        if (!s->test() && params_.progress != MPIV_P2P_PROGRESS_SERVER) {
            progress();
            if (!s->test()) {
                // seq_cst: Dekker with the poller's exit (its clear of poller_on_, then
                // its load of ult_waiters_).
                ult_waiters_.fetch_add(1, std::memory_order_seq_cst);
                ensure_poller(sched::worker::current()->id());
                (void)s->wait();
                ult_waiters_.fetch_sub(1, std::memory_order_relaxed);
            }
        } else {
            (void)s->wait();
        }
        delete s;
        delete w;
        return;
    }
    pthread_wait(*w);
}

struct engine::poller_arg {
    engine *e;
    std::uint32_t worker;
};

void engine::ensure_poller(std::uint32_t worker) noexcept
{
    if (worker >= sched::runtime::k_max_workers ||
        poller_on_[worker].exchange(true, std::memory_order_seq_cst)) {
        return;
    }
    // Pollers are ULTs of the application's runtime: hold a reference on it so that it
    // outlives them (released by the destructor once they are gone).
    std::call_once(runtime_ref_once_, [this] { runtime_ref_ = sched::runtime::init(nullptr) == status::ok; });
    auto *arg = new (std::nothrow) poller_arg{this, worker};
    sched::runtime *rt = sched::runtime::get();
    std::uint64_t handle = 0;
    // Relaxed: the destructor waits for the count to drop back to zero.
    pollers_live_.fetch_add(1, std::memory_order_relaxed);
    if (arg == nullptr || rt == nullptr ||
        rt->spawn(&engine::poller_main, arg, static_cast<int>(worker), true, handle) != status::ok) {
        base::log(base::log_level::error, "mpiv: cannot start the progress ULT on worker %u; aborting",
                  worker);
        std::abort();
    }
}

// A worker's poller: drives progress while ULTs of the process wait, yielding to them
// between polls; it ends when no ULT waits any more.
void *engine::poller_main(void *raw) noexcept
{
    auto *arg = static_cast<poller_arg *>(raw);
    engine &e = *arg->e;
    const std::uint32_t worker = arg->worker;
    delete arg;
    for (;;) {
        e.progress();
        if (e.ult_waiters_.load(std::memory_order_seq_cst) == 0) {
            e.poller_on_[worker].store(false, std::memory_order_seq_cst);
            // A waiter that came in between found poller_on_ still set: take over again.
            if (e.ult_waiters_.load(std::memory_order_seq_cst) == 0 ||
                e.poller_on_[worker].exchange(true, std::memory_order_seq_cst)) {
                break;
            }
        }
        sched::worker::yield_current();
    }
    // Release: the destructor's acquire load sees this poller's last accesses done.
    e.pollers_live_.fetch_sub(1, std::memory_order_release);
    return nullptr;
}

bool engine::inbound_idle() noexcept
{
    for (auto &q : inbound_) {
        if (!q.empty_hint()) {
            return false;
        }
    }
    // Relaxed: a hint, as in progress().
    return outbound_count_.load(std::memory_order_relaxed) == 0;
}

void engine::pthread_wait(waiter &w) noexcept
{
    if (serial_) {
        pthread_wait_slow(w, k_spin_polls_alone); // the only waiter
        return;
    }
    // Relaxed: only sizes the spin.
    const int spins = pthread_waiters_.fetch_add(1, std::memory_order_relaxed) == 0
                          ? k_spin_polls_alone
                          : k_spin_polls_crowd;
    pthread_wait_slow(w, spins);
    pthread_waiters_.fetch_sub(1, std::memory_order_relaxed);
}

void engine::pthread_wait_slow(waiter &w, int spins) noexcept
{
    const bool inline_progress = params_.progress != MPIV_P2P_PROGRESS_SERVER;
    // One look (and one poll), then the PU handed on; true when the wait is over.
    const auto look_then_yield = [&] {
        // Acquire: pairs with the acq_rel decrement in wake().
        if (w.remaining.load(std::memory_order_acquire) <= 0 ||
            (inline_progress && progress() > 0 &&
             w.remaining.load(std::memory_order_acquire) <= 0)) {
            return true;
        }
        std::this_thread::yield();
        return false;
    };
    if (params_.yield_when_idle != 0) {
        // More processes than PUs: the peer this wait depends on may need this PU. Poll
        // once, then yield it, for as long as the wait lasts: no spin (it would hold the
        // PU for the rest of the time slice) and no sleep (a futex wake-up per message).
        while (!look_then_yield()) {
        }
        return;
    }
    for (int i = 0; i < spins; ++i) {
        // Acquire: pairs with the acq_rel decrement in wake().
        if (w.remaining.load(std::memory_order_acquire) <= 0) {
            return;
        }
        if (inline_progress) {
            progress();
        }
    }
    // Watch phase, for up to params_.idle_us: a waiter in a crowd (and any waiter when a
    // server thread drives progress) keeps looking but yields the PU between looks, so
    // that the thread whose message just came in, or the server, runs at once. Parking
    // instead costs a futex wake-up per message, tens of microseconds on a virtual
    // machine: with 16 threads per core the ping-pong rate is several times lower.
    if (spins == k_spin_polls_crowd || !inline_progress) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::microseconds(params_.idle_us);
        do {
            if (look_then_yield()) {
                return;
            }
        } while (std::chrono::steady_clock::now() < deadline);
    }
    if (!inline_progress) {
        // The server drives progress: sleep until the completions arrive.
        for (;;) {
            const std::uint32_t seen = w.word.load(std::memory_order_acquire);
            if (w.remaining.load(std::memory_order_acquire) <= 0) {
                return;
            }
            sleep_on_word(w, seen);
        }
    }
    for (;;) {
        bool own = false;
        {
            std::lock_guard<std::mutex> guard(park_mu_);
            if (w.promoted.load(std::memory_order_relaxed) || !owner_taken_) {
                own = true;
                owner_taken_ = true;
                w.promoted.store(false, std::memory_order_relaxed);
                unpark_locked(w);
            } else if (!w.parked) {
                w.next = parked_;
                parked_ = &w;
                w.parked = true;
            }
        }
        if (own) {
            owner_loop(w);
            leave_owner();
            return;
        }
        // Parked: woken by our completion or by a promotion.
        const std::uint32_t seen = w.word.load(std::memory_order_acquire);
        if (w.remaining.load(std::memory_order_acquire) <= 0) {
            std::lock_guard<std::mutex> guard(park_mu_);
            unpark_locked(w);
            if (!w.promoted.load(std::memory_order_relaxed)) {
                return;
            }
            // Promoted while completing: pass ownership on.
            w.promoted.store(false, std::memory_order_relaxed);
            promote_next_locked();
            return;
        }
        if (!w.promoted.load(std::memory_order_acquire)) {
            sleep_on_word(w, seen);
        }
    }
}

void engine::sleep_on_word(waiter &w, std::uint32_t seen) noexcept
{
    // seq_cst: Dekker with wake() (see there); promotions always call futex_wake.
    w.asleep.store(true, std::memory_order_seq_cst);
    if (w.remaining.load(std::memory_order_seq_cst) > 0 &&
        !w.promoted.load(std::memory_order_seq_cst)) {
        base::futex_wait_for(w.word, seen, k_park_timeout_ns, false);
    }
    w.asleep.store(false, std::memory_order_relaxed);
}

void engine::owner_loop(waiter &w) noexcept
{
    // seq_cst: Dekker with wake() (its decrement, then its load of owner).
    w.owner.store(true, std::memory_order_seq_cst);
    // The owner sleeps only after params_.idle_us without an event. A shorter bound (a
    // count of polls) traps two processes in a slow mode: waking a sleeper takes tens of
    // microseconds on a virtual machine, during which its peer runs out of polls and falls
    // asleep too, and so on, one sleep per message.
    const auto idle_budget = std::chrono::microseconds(params_.idle_us);
    auto idle_since = std::chrono::steady_clock::now();
    int idle = 0;
    while (w.remaining.load(std::memory_order_seq_cst) > 0) {
        if (progress() > 0) {
            idle = 0;
            continue;
        }
        if (++idle == 1) {
            idle_since = std::chrono::steady_clock::now();
        }
        if (idle % k_idle_clock_polls != 0 ||
            std::chrono::steady_clock::now() - idle_since < idle_budget) {
            continue;
        }
        idle = 0;
        const std::uint32_t seen = doorbell_->load(std::memory_order_relaxed);
        sleeping_->fetch_add(1, std::memory_order_relaxed);
        // seq_cst fence: Dekker with ring() (see there).
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (inbound_idle() && w.remaining.load(std::memory_order_seq_cst) > 0) {
            base::futex_wait_for(*doorbell_, seen, k_doorbell_timeout_ns, true);
        }
        sleeping_->fetch_sub(1, std::memory_order_relaxed);
    }
    w.owner.store(false, std::memory_order_relaxed);
}

void engine::leave_owner() noexcept
{
    std::lock_guard<std::mutex> guard(park_mu_);
    promote_next_locked();
}

void engine::unpark_locked(waiter &w) noexcept
{
    if (!w.parked) {
        return;
    }
    for (waiter **pp = &parked_; *pp != nullptr; pp = &(*pp)->next) {
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    }
    w.parked = false;
}

void engine::promote_next_locked() noexcept
{
    waiter *p = parked_;
    if (p == nullptr) {
        owner_taken_ = false;
        return;
    }
    parked_ = p->next;
    p->parked = false;
    // Release: the promoted thread reads promoted with acquire after its futex wake.
    p->promoted.store(true, std::memory_order_release);
    p->word.fetch_add(1, std::memory_order_release);
    base::futex_wake(p->word, 1);
}

} // namespace mpiv::ep
