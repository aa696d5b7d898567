// engine: see engine.hpp for the design. This file: creation and teardown, peers
// (connect), communicators (create, assertions, destroy and reap).
#include "endpoints/engine.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <type_traits>

#include <sys/mman.h>
#include <unistd.h>

#include "base/log.hpp"
#include "sched/runtime.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

namespace {

// The matching table's initial size: 2^14 buckets (1 MiB), entries for 49,152 keys alive at
// once (posted receives and unexpected messages of distinct keys). The table grows 4x at a
// time once an insert meets a chain of 8 keys, or a chain of 2 in a table whose entries
// are full (see matching/table.hpp). Not larger from the start: a fixed table four times
// larger was slower at 65,536 ULTs (bench/README.md).
constexpr std::size_t k_table_buckets = std::size_t{1} << 14;
constexpr std::uint32_t k_max_eager = 1U << 20;
constexpr std::uint32_t k_max_packets = 1U << 20;
constexpr std::uint32_t k_max_idle_us = 1000000; // a second
constexpr std::uint32_t k_max_ucx_copy = 65536;
} // namespace

std::size_t engine::poll_states_bytes() noexcept
{
    return sizeof(ult_poll_state) * sched::runtime::k_max_workers;
}

void engine::unmap_poll_states::operator()(ult_poll_state *p) const noexcept
{
    munmap(p, poll_states_bytes());
}

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
    if (params.endpoints == 0 || params.endpoints > shm::transport::k_max_endpoints) {
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
    if (params.ucx_copy_max > k_max_ucx_copy) {
        return bad("ucx_copy_max", params.ucx_copy_max);
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
    const unsigned long single_copy = enum_value(params.single_copy);
    if (single_copy != MPIV_P2P_SINGLE_COPY_AUTO && single_copy != MPIV_P2P_SINGLE_COPY_CMA &&
        single_copy != MPIV_P2P_SINGLE_COPY_NONE) {
        return bad("single_copy", single_copy);
    }
    int cma_error = 0; // of a read of this process's own memory
    const status checked = shm::transport::check_cma(params.single_copy, cma_error);
    if (checked != status::ok) {
        return checked;
    }
    std::unique_ptr<engine> e(new (std::nothrow) engine(params));
    if (e == nullptr) {
        return status::nomem;
    }
    const status s = e->init(cma_error);
    if (s == status::ok) {
        engine_p = std::move(e);
    }
    return s;
}

status engine::init(int cma_self_error) noexcept
{
    try {
        status s = shm_.init(params_, cma_self_error);
        if (s != status::ok) {
            return s;
        }
        inline_max_ = std::min(k_inline_max, shm_.max_message() - (sizeof(wire) - k_wire_inline));
        s = init_ucx();
        if (s != status::ok) {
            return s;
        }
        peers_.reset(new peer_state[params_.num_peers]);
        s = match::table::create(k_table_buckets, table_, serial_);
        if (s != status::ok) {
            return s;
        }
        // Zero-filled is the initial state (no waiter, no poller).
        static_assert(std::is_trivial_v<ult_poll_state>, "used as mapped, zero-filled");
        void *polls = mmap(nullptr, poll_states_bytes(), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (polls == MAP_FAILED) {
            return status::nomem;
        }
        ult_poll_.reset(static_cast<ult_poll_state *>(polls));
        comms_.reset(new std::atomic<comm_state *>[std::size_t{1} << 16]);
        for (std::size_t i = 0; i < (std::size_t{1} << 16); ++i) {
            comms_[i].store(nullptr, std::memory_order_relaxed);
        }
        // Peers map this segment through /proc/<pid>/fd: where this process cannot map its
        // own that way (no /proc), no peer could, and the caller should decline now rather
        // than fail at the first contact (this also connects the engine to itself).
        s = connect(params_.self, address_.data(), address_.size(), true);
        if (s != status::ok) {
            base::log(base::log_level::error,
                      "mpiv_p2p_create: this process cannot map its own segment through "
                      "/proc/%d/fd, so no peer could",
                      static_cast<int>(getpid()));
            return s;
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
        shm_.ring_self(); // it may sleep on the doorbell
        server_.join();
    }
#if MPIV_HAVE_UCX
    stop_flusher(); // (before the transport goes)
#endif
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
    const auto free_one = [](comm_state &c) noexcept {
        try {
            c.match([](auto &m) {
                m.release_messages([](match::msg_node &n) { delete static_cast<inmsg *>(&n); });
            });
        } catch (const std::bad_alloc &) {
            // Leaked: the process is ending its use of mpiv.
        }
    };
    const auto free_messages = [&free_one](comm_state &c) noexcept {
        if (c.eps.empty()) {
            free_one(c);
        }
        for (auto &h : c.eps) {
            free_one(*h);
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
#if MPIV_HAVE_UCX
    free_deferred();
    // Now, while every member lives: its teardown completes what UCX has not.
    ucx_.reset();
#endif
}

status engine::peer_single_copy(std::uint32_t peer, bool &single_p, int &error_p) const noexcept
{
    if (peer >= params_.num_peers || !peers_[peer].connected) {
        base::log(base::log_level::error, "mpiv_p2p_peer_single_copy: peer %u is not connected",
                  peer);
        return status::invalid_arg;
    }
    single_p = shm_.at(peer).cma;
    error_p = shm_.at(peer).cma_error;
    return status::ok;
}

std::uint32_t engine::bind_endpoint() noexcept
{
    const sched::worker *const w = sched::worker::current();
    // Relaxed: only spreads threads over endpoints.
    detail::tl_endpoint =
        w != nullptr ? w->id() : next_endpoint_.fetch_add(1, std::memory_order_relaxed);
    return detail::tl_endpoint;
}

std::uint32_t engine::my_endpoint() noexcept { return this_endpoint(); }

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

status engine::make_match(comm_state &c, match::table &table, std::int32_t size,
                          unsigned flags) noexcept
{
    match::comm_params cp;
    cp.cid = c.cid;
    cp.size = size;
    cp.assertions = flags;
    switch (params_.lock) {
    case MPIV_P2P_LOCK_MCS:
        return comm_mcs::create(table, cp, c.mcs);
    case MPIV_P2P_LOCK_HMCS:
        return comm_hmcs::create(table, cp, c.hmcs);
    case MPIV_P2P_LOCK_TICKET:
        return comm_ticket::create(table, cp, c.ticket);
    }
    return status::invalid_arg;
}

inmsg *engine::take_pending(std::uint16_t cid) noexcept
{
    inmsg *mine = nullptr;
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
    return mine;
}

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
    const status s = make_match(*c, *table_, size, flags);
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
        mine = take_pending(cid); // this context id's early arrivals, in arrival order
        // Release: an arrival that loads the pointer with acquire sees the built state.
        comms_[cid].store(c.get(), std::memory_order_release);
    }
    comm_state *raw = c.release();
    arrive_early(*raw, mine);
    comm_p = raw;
    reap(); // communicators destroyed from inside a drain
    return status::ok;
}

status engine::comm_create_endpoints(std::uint16_t cid, std::int32_t size,
                                     const std::uint32_t *rank_peer, const std::uint16_t *rank_ep,
                                     const std::uint16_t *rank_queue,
                                     comm_state **handles_p, std::uint32_t capacity) noexcept
{
    // Handles of this process, in endpoint order; every peer's endpoints numbered 0, 1, ...
    // in rank order (a rank map that says otherwise is refused).
    if (size < 1 || rank_peer == nullptr || rank_ep == nullptr || handles_p == nullptr) {
        base::log(base::log_level::error, "mpiv_p2p_comm_create_endpoints: bad arguments");
        return status::invalid_arg;
    }
    std::unique_ptr<comm_state> g(new (std::nothrow) comm_state);
    if (g == nullptr) {
        return status::nomem;
    }
    g->cid = cid;
    try {
        g->rank_eps.assign(rank_ep, rank_ep + size);
        g->rank_queues.assign(rank_queue != nullptr ? rank_queue : rank_ep,
                              (rank_queue != nullptr ? rank_queue : rank_ep) + size);
        std::vector<std::uint32_t> my_queue; // by endpoint index
        std::vector<std::uint32_t> next(params_.num_peers, 0);
        for (std::int32_t r = 0; r < size; ++r) {
            if (rank_peer[r] >= params_.num_peers || rank_ep[r] != next[rank_peer[r]]) {
                base::log(base::log_level::error,
                          "mpiv_p2p_comm_create_endpoints: rank %d is endpoint %u of peer %u "
                          "(expected peer < %u, endpoint %u)",
                          r, rank_ep[r], rank_peer[r], params_.num_peers,
                          rank_peer[r] < params_.num_peers ? next[rank_peer[r]] : 0U);
                return status::invalid_arg;
            }
            ++next[rank_peer[r]];
            if (rank_peer[r] == params_.self) {
                my_queue.push_back(g->rank_queues[static_cast<std::size_t>(r)] %
                                   static_cast<std::uint32_t>(shm_.inbound_count()));
            }
        }
        const std::uint32_t mine = next[params_.self];
        if (mine == 0 || mine > capacity || mine > UINT16_MAX) {
            base::log(base::log_level::error,
                      "mpiv_p2p_comm_create_endpoints: this process has %u endpoints (room for %u)",
                      mine, capacity);
            return status::invalid_arg;
        }
        for (std::uint32_t k = 0; k < mine; ++k) {
            std::unique_ptr<comm_state> h(new comm_state);
            h->cid = cid;
            h->group = g.get();
            h->rank_ep = g->rank_eps.data();
            h->rank_queue = g->rank_queues.data();
            h->queue = my_queue[k]; // as senders pick it
            h->inbox = serial_ ? nullptr : &shm_.inbound(h->queue);
            match::comm_params cp;
            cp.cid = cid;
            cp.size = size;
            const status s = match::private_comm::create(cp, h->priv);
            if (s != status::ok) {
                return s;
            }
            g->eps.push_back(std::move(h));
        }
        g->live_handles = mine;
    } catch (const std::bad_alloc &) {
        return status::nomem;
    }
    inmsg *early = nullptr;
    {
        std::lock_guard<std::mutex> guard(pending_mu_);
        if (comms_[cid].load(std::memory_order_relaxed) != nullptr) {
            base::log(base::log_level::error,
                      "mpiv_p2p_comm_create_endpoints: context id %u is in use", cid);
            return status::invalid_arg;
        }
        // Early arrivals are matched before the group is published: a handle's matching
        // runs under its queue's consumer lock once drains can find it, and they come
        // first in its order (no drain can add to pending_ or reach the handles meanwhile).
        early = take_pending(cid);
        arrive_early(*g, early);
        // Release: an arrival that loads the pointer with acquire sees the built state.
        comms_[cid].store(g.get(), std::memory_order_release);
    }
    comm_state *raw = g.release();
    for (std::size_t k = 0; k < raw->eps.size(); ++k) {
        handles_p[k] = raw->eps[k].get();
    }
    reap();
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
    return locked_match(comm, [flags](auto &m) { return m.set_assertions(flags); });
}

status engine::comm_destroy(comm_state *comm) noexcept
{
    {
        std::lock_guard<std::mutex> guard(pending_mu_);
        if (comm->group != nullptr) {
            // An endpoints handle: its state lives as long as its group, which goes with
            // the last handle (arrivals for a destroyed handle are erroneous and kept).
            comm_state *g = comm->group;
            if (comms_[g->cid].load(std::memory_order_relaxed) != g || comm->destroyed) {
                return status::invalid_handle;
            }
            comm->destroyed = true;
            if (--g->live_handles != 0) {
                return status::ok;
            }
            comm = g;
        }
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
        g.marks.reserve(shm_.inbound_count());
        for (std::size_t q = 0; q < shm_.inbound_count(); ++q) {
            g.marks.push_back(shm_.inbound(q).drain_mark());
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
            over = detail::tl_draining == 0; // drains run on this thread only
        } else {
            for (std::size_t q = 0; q < shm_.inbound_count() && over; ++q) {
                over = shm_.inbound(q).drained_since(g.marks[q]);
            }
        }
        if (!over) {
            ++i;
            continue;
        }
        if (g.comm->holds_messages()) {
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

} // namespace mpiv::ep
