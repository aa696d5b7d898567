// engine: peers over the UCX network transport (endpoints/ucx/). See engine.hpp for the
// design; what differs from shared memory:
// - Address. address_ is {magic, shm length, UCX length} and the two transports'
//   addresses; a peer on another node (or every peer but this process, when SHM is not
//   among the transports) is connected over UCX.
// - Lanes. Inbound queue q of a process is also its UCX worker q. A message to lane q of
//   a UCX peer goes through this process's worker q (mod its workers), so all messages of
//   this process to one lane use one UCX pair, which delivers them in send order (the
//   transport restores it): the order an endpoints handle's private matching needs. The
//   sequence number is drawn under the worker's lock once the send is sure to start.
// - Messages are those of shared memory (the wire header, inline payload up to
//   k_inline_max). There are no packets: a message above the inline size goes as an RTS.
//   From one buffer, its bytes ride with it as the UCX bulk payload (k_wire_bulk; UCX
//   sends them eagerly or by its own rendezvous, zero copy where the network allows), and
//   the receive takes them once matched (take_bulk). From a gather list or a streamed
//   send, they come by the two-copy protocol (engine_copy.cpp), each piece inside its
//   FRAG message instead of a copy slot.
// - Progress. progress() polls worker q under inbound queue q's consumer lock (so a
//   handle's private matching has one guard whatever the transport) and then the
//   worker's own lock; the thread remembers the worker it polls, and a push from inside
//   a callback uses it without locking again. A push only tries a worker's lock: when it
//   is busy the message waits in the outbound list (its sends keep their order there),
//   so no sender waits for a poller and no poller for a sender.
// - Waiting. A process with UCX peers never sleeps on its doorbell (UCX arrivals do not
//   ring it): waiters keep polling and yielding.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "base/log.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

namespace {

struct address_header {
    std::uint32_t magic;
    std::uint32_t shm_len;
    std::uint32_t ucx_len;
    std::uint32_t reserved;
};
constexpr std::uint32_t k_address_magic = 0x6d707641; // "mpvA"

} // namespace

#if MPIV_HAVE_UCX
// A bulk send in flight: the send it completes, and its payload.
struct engine::bulk_sent : ucx::completion {
    engine *e;
    std::uint64_t token;
    const void *buf;
    std::size_t len;
    bool sync;
};

// A bulk receive once matched (inside its inmsg's `more`): where the bytes go and what
// completes it; next: the deferred list.
struct engine::bulk_recv : ucx::completion {
    engine *e;
    inmsg *m;
    recv_target to;
    void *user;
    mpiv_p2p_status_t st;
    bulk_recv *next;
};
#endif

status engine::init_ucx() noexcept
{
    const void *shm_addr = nullptr;
    std::size_t shm_len = 0;
    shm_.address(shm_addr, shm_len);
    const void *ucx_addr = nullptr;
    std::size_t ucx_len = 0;
    if ((params_.transports & MPIV_P2P_TRANSPORT_UCX) != 0) {
#if MPIV_HAVE_UCX
        ucx::params p;
        p.self = params_.self;
        p.num_peers = params_.num_peers;
        p.workers = params_.endpoints;
        p.max_inflight = 256; // per pair; past it, sends wait in the outbound list
        p.copy_max = params_.ucx_copy_max;
        p.ctx = this;
        p.on_message = on_ucx_message;
        p.on_peer_failure = on_ucx_failure;
        const status s = ucx::transport::create(p, ucx_);
        if (s != status::ok) {
            base::log(base::log_level::error, "mpiv_p2p_create: the UCX transport cannot start");
            return s;
        }
        ucx_->address(ucx_addr, ucx_len);
        // Relaxed: set before any traffic. A peer may reach this process over UCX before
        // this process connects to it (connections are made on first use): with the
        // transport up, waiters poll its workers from the start.
        ucx_up_.store(true, std::memory_order_relaxed);
        owed_completion_.fn = ucx_sent_later;
        owed_completion_.e = this;
        deferred_.reset(new (std::nothrow) deferred_list[params_.endpoints]);
        if (!deferred_) {
            return status::nomem;
        }
        try {
            flusher_ = std::thread([this] { flusher_main(); });
        } catch (const std::system_error &) {
            base::log(base::log_level::error,
                      "mpiv_p2p_create: cannot start the UCX flusher thread");
            return status::system;
        }
#else
        base::log(base::log_level::error,
                  "mpiv_p2p_create: transports include UCX, but this build has no UCX "
                  "transport (configure found no UCX)");
        return status::param;
#endif
    }
    const address_header h{k_address_magic, static_cast<std::uint32_t>(shm_len),
                           static_cast<std::uint32_t>(ucx_len), 0};
    try {
        address_.resize(sizeof h + shm_len + ucx_len);
    } catch (const std::bad_alloc &) {
        return status::nomem;
    }
    std::memcpy(address_.data(), &h, sizeof h);
    std::memcpy(address_.data() + sizeof h, shm_addr, shm_len);
    if (ucx_len != 0) {
        std::memcpy(address_.data() + sizeof h + shm_len, ucx_addr, ucx_len);
    }
    return status::ok;
}

status engine::connect(std::uint32_t peer, const void *addr, std::size_t len,
                       bool same_node) noexcept
{
    address_header h{};
    if (peer >= params_.num_peers || addr == nullptr || len < sizeof h) {
        base::log(base::log_level::error, "mpiv_p2p_connect: bad peer %u or address length %zu",
                  peer, len);
        return status::invalid_arg;
    }
    std::memcpy(&h, addr, sizeof h);
    if (h.magic != k_address_magic || h.shm_len > len - sizeof h ||
        h.ucx_len != len - sizeof h - h.shm_len) {
        base::log(base::log_level::error,
                  "mpiv_p2p_connect: address of peer %u is malformed (magic %#x, lengths %u "
                  "and %u in %zu bytes)",
                  peer, h.magic, h.shm_len, h.ucx_len, len);
        return status::invalid_arg;
    }
    const auto *parts = static_cast<const unsigned char *>(addr) + sizeof h;
    std::lock_guard<std::mutex> guard(peers_mu_);
    peer_state &p = peers_[peer];
    // (No transport named: shared memory, as before the field existed.)
    const bool shm = (params_.transports & MPIV_P2P_TRANSPORT_SHM) != 0 ||
                     (params_.transports & MPIV_P2P_TRANSPORT_UCX) == 0;
    if (peer == params_.self || (same_node && shm)) {
        const status s = shm_.connect(peer, parts, h.shm_len);
        p.connected = p.connected || s == status::ok;
        return s;
    }
    if (p.connected) {
        return status::ok;
    }
#if MPIV_HAVE_UCX
    if (ucx_ != nullptr && h.ucx_len != 0) {
        const status s = ucx_->connect(peer, parts + h.shm_len, h.ucx_len);
        if (s == status::ok) {
            p.ucx = true;
            p.connected = true;
            // Release: pairs with the acquire load in on_ucx_message().
            p.ucx_ready.store(true, std::memory_order_release);
        }
        return s;
    }
#endif
    base::log(base::log_level::error,
              "mpiv_p2p_connect: peer %u is %s, and %s", peer,
              same_node ? "on this node but shared memory is not among the transports"
                        : "on another node",
              h.ucx_len == 0 ? "it publishes no UCX address" : "this engine has no UCX transport");
    return status::system;
}

status engine::peer_transport(std::uint32_t peer, unsigned &transport_p) const noexcept
{
    if (peer >= params_.num_peers || !peers_[peer].connected) {
        base::log(base::log_level::error, "mpiv_p2p_peer_transport: peer %u is not connected",
                  peer);
        return status::invalid_arg;
    }
    transport_p = peers_[peer].ucx ? MPIV_P2P_TRANSPORT_UCX : MPIV_P2P_TRANSPORT_SHM;
    return status::ok;
}

std::size_t engine::lanes(std::uint32_t peer) const noexcept
{
#if MPIV_HAVE_UCX
    if (peers_[peer].ucx) {
        return ucx_->peer_workers(peer);
    }
#endif
    return shm_.queue_count(peer);
}

#if MPIV_HAVE_UCX

int engine::poll_ucx(std::size_t q) noexcept
{
    if (ucx_ == nullptr || q >= ucx_->workers()) {
        return 0;
    }
    const auto w = static_cast<std::uint32_t>(q);
    shm::mpsc_queue<> &inbox = shm_.inbound(q);
    // The queue's consumer lock guards the private matching of the handles on lane q (see
    // comm_state), whichever transport their messages come through; not taken in a serial
    // engine (calls never overlap) or when the caller holds it (a poll from inside a
    // drain of that queue).
    const std::uintptr_t me = detail::self();
    const bool take = !serial_ && !inbox.held_by(me);
    if (take && !inbox.try_lock_consumer(me)) {
        return 0;
    }
    if (!ucx_->try_lock(w, me)) {
        if (take) {
            inbox.unlock_consumer();
        }
        return 0;
    }
    ++detail::tl_draining;
    const int n = ucx_->poll(w);
    run_deferred(w);
    --detail::tl_draining;
    ucx_->unlock(w);
    if (take) {
        inbox.unlock_consumer();
    }
    return n;
}

bool engine::lock_worker(std::uint32_t w, bool &held) noexcept
{
    const std::uintptr_t me = detail::self();
    held = ucx_->held_by(w, me); // inside its poll (a completion that sends)
    // Only tries: a sender that waited for a worker's lock would wait for its poller, which
    // holds it nearly all the time and takes it back at once (measured: 16 threads per
    // process, 13 of them in this wait and the rate at 16 % of one thread's). The message
    // waits in the outbound list instead, which the waits' progress drains; and a thread
    // holding a lock that a poller's callback may want never waits for a worker here.
    return held || ucx_->try_lock(w, me);
}

bool engine::send_ucx(std::uint32_t peer, std::size_t q, const void *bytes, std::size_t len,
                      const detail::finish_ref &finish, const void *bulk) noexcept
{
    const auto w = static_cast<std::uint32_t>(q % ucx_->workers());
    bool held = false;
    if (!lock_worker(w, held)) {
        return false;
    }
    bool sent = false;
    auto *const b = static_cast<bulk_sent *>(const_cast<void *>(bulk));
    // (A bulk send is not held back by the pair's count: see ucx::transport.)
    if (b != nullptr || ucx_->has_room(w, peer, static_cast<std::uint32_t>(q))) {
        finish();
        const auto to = static_cast<std::uint32_t>(q);
        const status s =
            b != nullptr
                ? ucx_->send_bulk(w, peer, to, bytes, len, b->buf, b->len, b->sync, b)
                : ucx_->send(w, peer, to, bytes, len, nullptr, 0, &owed_completion_);
        if (s == status::inprogress) {
            // Acq_rel: the flusher's acquire load of a nonzero count sees the send made.
            if (ucx_owed_.fetch_add(1, std::memory_order_acq_rel) == 0) {
                // Under the mutex: the flusher either saw the count or waits already.
                std::lock_guard<std::mutex> guard(flusher_mu_);
                flusher_cv_.notify_one();
            }
        } else if (s != status::ok) {
            // An error after the sequence number was drawn: the peer failed (reported by
            // the transport) or the message was refused; the job ends either way.
            delete b;
            fault(peer, "a UCX send to it failed");
        }
        sent = true;
    }
    if (!held) {
        ucx_->unlock(w);
    }
    return sent;
}

void engine::on_ucx_message(void *ctx, std::uint32_t worker, std::uint32_t peer,
                            std::uint32_t from_worker, const void *header, std::size_t header_len,
                            const void *payload, std::size_t payload_len, ucx::bulk *b) noexcept
{
    (void)from_worker;
    (void)payload;
    auto *e = static_cast<engine *>(ctx);
    const auto refuse = [&](const char *what) {
        if (b != nullptr) {
            e->ucx_->release(worker, b);
        }
        e->fault(peer, what);
    };
    if (header_len < sizeof(wire) || (b == nullptr && payload_len != 0)) {
        refuse("a UCX message of a shape no mpiv message has");
        return;
    }
    wire w;
    std::memcpy(&w, header, sizeof w);
    // The wire's sender must be the UCX sender (the transport checked its own header).
    if (w.from != peer) {
        refuse("a UCX message naming another sender");
        return;
    }
    // Acquire: pairs with the release store in connect().
    if (!e->peers_[peer].ucx_ready.load(std::memory_order_acquire)) {
        // Its first message came before this process needed it: connect it now.
        if (e->params_.connect == nullptr || e->params_.connect(peer) != MPIV_OK ||
            !e->peers_[peer].ucx_ready.load(std::memory_order_acquire)) {
            refuse("a UCX message from a process that cannot be connected");
            return;
        }
    }
    if (b != nullptr && (w.kind != wire_kind::rts || header_len != sizeof w ||
                         (w.flags & (k_wire_gather | k_wire_streamed)) != 0 ||
                         (w.flags & k_wire_bulk) == 0 || w.size != payload_len)) {
        refuse("a UCX bulk message whose header is not a rendezvous of its size");
        return;
    }
    if (w.kind == wire_kind::eager_packet) {
        e->fault(peer, "a packet message over UCX (packets are shared memory only)");
        return;
    }
    if (w.kind == wire_kind::frag) {
        // A FRAG with its piece after the header (two copies over UCX).
        if (w.size != header_len - sizeof w) {
            e->fault(peer, "a UCX FRAG whose length is not its piece's");
            return;
        }
        e->handle_frag(w, static_cast<const unsigned char *>(header) + sizeof w);
        return;
    }
    if (header_len > shm::mpsc_queue<>::k_max_message) {
        e->fault(peer, "a UCX message longer than any mpiv message");
        return;
    }
    e->handle(static_cast<const unsigned char *>(header), header_len, worker, b);
}

engine::bulk_sent *engine::new_bulk_sent(const send_op &op) noexcept
{
    auto *b = new (std::nothrow) bulk_sent;
    if (b != nullptr) {
        b->fn = ucx_bulk_sent;
        b->e = this;
        b->token = op.w.u.ref.token;
        b->buf = op.buf;
        b->len = op.w.size;
        b->sync = (op.w.flags & k_wire_sync) != 0;
    }
    return b;
}

void engine::delete_bulk_sent(bulk_sent *b) noexcept
{
    delete b;
}

void engine::ucx_bulk_sent(ucx::completion *c, status s) noexcept
{
    auto *b = static_cast<bulk_sent *>(c);
    engine *const e = b->e;
    // Relaxed: set by the destructor on this thread, before the transport completes what
    // is left (then the sends' storage and the token table may be gone).
    if (!e->stop_.load(std::memory_order_relaxed)) {
        if (send_op *op = e->tokens_.redeem(b->token)) {
            // (A failed send's peer is reported through on_ucx_failure.)
            mpiv_p2p_status_t st{op->dest, op->w.tag, op->w.size, op->w.size,
                                 s == status::ok ? MPIV_OK : MPIV_ERR_INTERNAL};
            e->params_.complete(op->user, &st);
        }
    }
    delete b;
    // Release: pairs with the flusher's acquire load.
    e->ucx_owed_.fetch_sub(1, std::memory_order_release);
}

bool engine::take_bulk(inmsg &m, const recv_target &to, void *user,
                       mpiv_p2p_status_t &st) noexcept
{
    const wire &w = m.w;
    const std::size_t n = std::min<std::size_t>(w.size, to.capacity);
    // The receive's state lives in the message, which lives until the bytes are in.
    static_assert(sizeof(bulk_recv) <= sizeof m.more && alignof(bulk_recv) <= 8,
                  "a bulk receive's state fits in its message");
    auto *r = new (m.more) bulk_recv;
    r->fn = ucx_took;
    r->e = this;
    r->m = &m;
    r->to = to;
    r->user = user;
    r->st = mpiv_p2p_status_t{w.source, w.tag, n, static_cast<std::size_t>(w.size),
                              w.size > to.capacity ? MPIV_ERR_TRUNCATE : MPIV_OK};
    r->next = nullptr;
    if (ucx_->held_by(m.lane, detail::self())) {
        // Matched inside the poll of the worker that holds the bytes: take them now.
        if (!start_bulk(*r)) {
            return false; // ucx_took() completes the receive
        }
        st = r->st;
        delete &m;
        return true;
    }
    // Elsewhere (a receive posted later, mrecv, another worker's poll): the worker's next
    // poll takes them. No wait for its lock here, where matching locks may be held.
    deferred_list &d = deferred_[m.lane];
    std::lock_guard<std::mutex> guard(d.mu);
    (d.tail != nullptr ? d.tail->next : d.head) = r;
    d.tail = r;
    d.any.store(true, std::memory_order_relaxed);
    return false;
}

bool engine::start_bulk(bulk_recv &r) noexcept
{
    inmsg &m = *r.m;
    auto *b = static_cast<ucx::bulk *>(m.bulk);
    if (ucx::transport::rendezvous(b)) {
        base::stats::add(base::stats::counter::ucx_rndv);
    }
    const status s = ucx_->receive(m.lane, b, r.to.buf, r.to.capacity, r.to.sink, r.to.ctx, &r);
    if (s == status::inprogress) {
        return false;
    }
    if (s != status::ok) {
        r.st.bytes = 0; // (said by the transport) the bytes are lost
        r.st.error = MPIV_ERR_INTERNAL;
    }
    return true;
}

void engine::run_deferred(std::uint32_t w) noexcept
{
    deferred_list &d = deferred_[w];
    // Relaxed: a hint. A receive deferred just after this load is started by a later
    // poll, which its own waiter keeps making.
    if (!d.any.load(std::memory_order_relaxed)) {
        return;
    }
    bulk_recv *r = nullptr;
    {
        std::lock_guard<std::mutex> guard(d.mu);
        r = d.head;
        d.head = d.tail = nullptr;
        d.any.store(false, std::memory_order_relaxed);
    }
    while (r != nullptr) {
        bulk_recv *const next = r->next;
        if (start_bulk(*r)) {
            void *const user = r->user;
            const mpiv_p2p_status_t st = r->st;
            delete r->m;
            params_.complete(user, &st);
        }
        r = next;
    }
}

void engine::ucx_took(ucx::completion *c, status s) noexcept
{
    auto *r = static_cast<bulk_recv *>(c);
    engine *const e = r->e;
    void *const user = r->user;
    mpiv_p2p_status_t st = r->st;
    delete r->m; // (r lives inside it)
    if (s != status::ok) {
        st.bytes = 0; // (said by the transport)
        st.error = MPIV_ERR_INTERNAL;
    }
    // Relaxed: as in ucx_bulk_sent().
    if (!e->stop_.load(std::memory_order_relaxed)) {
        e->params_.complete(user, &st);
    }
}

void engine::free_deferred() noexcept
{
    for (std::size_t w = 0; deferred_ && w < ucx_->workers(); ++w) {
        for (bulk_recv *r = deferred_[w].head; r != nullptr;) {
            bulk_recv *const next = r->next;
            delete r->m;
            r = next;
        }
        deferred_[w].head = deferred_[w].tail = nullptr;
    }
}

void engine::ucx_sent_later(ucx::completion *c, status) noexcept
{
    // (A failed send's peer is reported through on_ucx_failure; the message was a copy.)
    // Release: pairs with the flusher's acquire load.
    static_cast<owed_completion *>(c)->e->ucx_owed_.fetch_sub(1, std::memory_order_release);
}

void engine::flusher_main() noexcept
{
    std::unique_lock<std::mutex> lock(flusher_mu_);
    for (;;) {
        // Acquire: pairs with the increment in send_ucx().
        flusher_cv_.wait(lock, [this] {
            return flusher_stop_ || ucx_owed_.load(std::memory_order_acquire) > 0;
        });
        if (flusher_stop_) {
            return;
        }
        lock.unlock();
        // Poll as a waiter would (each worker under its lane's consumer lock); when a
        // round finds nothing, back off from yielding to sleeps of up to a millisecond (a
        // peer outside MPI may take long to read its socket).
        unsigned idle = 0;
        // Acquire: as above; relaxed stop: a hint, rechecked under the mutex.
        while (ucx_owed_.load(std::memory_order_acquire) > 0 &&
               !stop_.load(std::memory_order_relaxed)) {
            int events = 0;
            for (std::size_t q = 0; q < ucx_->workers(); ++q) {
                events += poll_ucx(q);
            }
            if (events != 0) {
                idle = 0;
            } else if (++idle < 64) {
                std::this_thread::yield();
            } else {
                std::this_thread::sleep_for(
                    std::chrono::microseconds(std::min(1000u, 16u << std::min(idle - 64, 6u))));
            }
        }
        lock.lock();
    }
}

void engine::stop_flusher() noexcept
{
    if (!flusher_.joinable()) {
        return;
    }
    {
        std::lock_guard<std::mutex> guard(flusher_mu_);
        flusher_stop_ = true;
    }
    flusher_cv_.notify_one();
    flusher_.join();
}

void engine::on_ucx_failure(void *ctx, std::uint32_t peer, const char *reason) noexcept
{
    auto *e = static_cast<engine *>(ctx);
    char what[160];
    std::snprintf(what, sizeof what, "its UCX connection failed (%s)", reason);
    e->fault(peer, what);
}

#endif

} // namespace mpiv::ep
