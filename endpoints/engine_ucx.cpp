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
//   k_inline_max). There are no packets: a message above the inline size goes by
//   rendezvous, and its bytes come by the two-copy protocol (engine_copy.cpp) with each
//   piece inside its FRAG message instead of a copy slot. TODO(#20): a zero-copy get
//   (ucx::transport::expose/get) for contiguous buffers.
// - Progress. progress() polls worker q under inbound queue q's consumer lock (so a
//   handle's private matching has one guard whatever the transport) and then the
//   worker's own lock; the thread remembers the worker it polls, and a push from inside
//   a callback uses it without locking again, or only tries another worker's lock (two
//   pollers never wait for each other's worker).
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

// The UCX worker whose poll the calling thread is inside (its lock held), or none.
constexpr std::uint32_t k_no_worker = ~std::uint32_t{0};
thread_local std::uint32_t tl_ucx_polled __attribute__((tls_model("initial-exec"))) = k_no_worker;

} // namespace

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
    // engine (calls never overlap) or inside a drain of that queue.
    const bool take = !serial_ && detail::tl_drained_queue != &inbox;
    if (take && !inbox.try_lock_consumer()) {
        return 0;
    }
    if (!ucx_->try_lock(w)) {
        if (take) {
            inbox.unlock_consumer();
        }
        return 0;
    }
    ++detail::tl_draining;
    const void *const outer = detail::tl_drained_queue;
    detail::tl_drained_queue = &inbox;
    const std::uint32_t outer_polled = tl_ucx_polled;
    tl_ucx_polled = w;
    const int n = ucx_->poll(w);
    tl_ucx_polled = outer_polled;
    detail::tl_drained_queue = outer;
    --detail::tl_draining;
    ucx_->unlock(w);
    if (take) {
        inbox.unlock_consumer();
    }
    return n;
}

bool engine::lock_worker(std::uint32_t w, bool &held) noexcept
{
    held = tl_ucx_polled == w;
    if (held) {
        return true;
    }
    // Inside another worker's poll, or holding an outbound list's lock (which a poller's
    // callback may wait for), only try: no thread waits for a worker's lock while holding
    // a lock that a holder of a worker's lock may wait for.
    if (tl_ucx_polled != k_no_worker || detail::tl_out_locked) {
        return ucx_->try_lock(w);
    }
    ucx_->lock(w);
    return true;
}

bool engine::send_ucx(std::uint32_t peer, std::size_t q, const void *bytes, std::size_t len,
                      const detail::finish_ref &finish) noexcept
{
    const auto w = static_cast<std::uint32_t>(q % ucx_->workers());
    bool held = false;
    if (!lock_worker(w, held)) {
        return false;
    }
    bool sent = false;
    if (ucx_->has_room(w, peer, static_cast<std::uint32_t>(q))) {
        finish();
        const status s = ucx_->send(w, peer, static_cast<std::uint32_t>(q), bytes, len, nullptr,
                                    0, &owed_completion_);
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
                            const void *payload, std::size_t payload_len) noexcept
{
    (void)from_worker;
    auto *e = static_cast<engine *>(ctx);
    if (header_len < sizeof(wire) || payload_len != 0) {
        e->fault(peer, "a UCX message of a shape no mpiv message has");
        return;
    }
    // The wire's sender must be the UCX sender (the transport checked its own header).
    std::uint32_t from;
    std::memcpy(&from, static_cast<const unsigned char *>(header) + offsetof(wire, from),
                sizeof from);
    if (from != peer) {
        e->fault(peer, "a UCX message naming another sender");
        return;
    }
    // Acquire: pairs with the release store in connect().
    if (!e->peers_[peer].ucx_ready.load(std::memory_order_acquire)) {
        // Its first message came before this process needed it: connect it now.
        if (e->params_.connect == nullptr || e->params_.connect(peer) != MPIV_OK ||
            !e->peers_[peer].ucx_ready.load(std::memory_order_acquire)) {
            e->fault(peer, "a UCX message from a process that cannot be connected");
            return;
        }
    }
    wire_kind kind;
    std::memcpy(&kind, static_cast<const unsigned char *>(header) + offsetof(wire, kind),
                sizeof kind);
    if (kind == wire_kind::eager_packet) {
        e->fault(peer, "a packet message over UCX (packets are shared memory only)");
        return;
    }
    if (kind == wire_kind::frag) {
        // A FRAG with its piece after the header (two copies over UCX).
        wire w;
        std::memcpy(&w, header, sizeof w);
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
    e->handle(static_cast<const unsigned char *>(header), header_len, worker);
}

void engine::expose_ucx(send_op &op) noexcept
{
    if ((op.w.flags & (k_wire_gather | k_wire_streamed)) != 0 || op.w.size == 0) {
        return; // the bytes are not one buffer, or there are none: two copies
    }
    const auto w = static_cast<std::uint32_t>(my_endpoint() % ucx_->workers());
    bool held = false;
    if (!lock_worker(w, held)) {
        return; // two copies rather than wait
    }
    ucx::exposure *e = nullptr;
    const status s = ucx_->expose(w, op.buf, op.w.size, e);
    if (!held) {
        ucx_->unlock(w);
    }
    if (s != status::ok) {
        return; // (said by the transport) two copies
    }
    if (e->key_len() > k_inline_more) {
        ucx_->withdraw(e); // a key longer than a message can carry: two copies
        return;
    }
    op.exposure = e;
    op.w.flags |= k_wire_key;
    op.w.inline_bytes = static_cast<std::uint16_t>(e->key_len());
    op.w.u.ref.spare = w;
}

void engine::withdraw_ucx(send_op &op) noexcept
{
    if (op.exposure != nullptr) {
        ucx_->withdraw(static_cast<ucx::exposure *>(op.exposure));
        op.exposure = nullptr;
    }
}

// A zero-copy read in flight: what its completion needs (the FIN, then the receive).
struct engine::get_state : ucx::completion {
    engine *e;
    std::uint32_t peer;
    std::uint64_t token; // the sender's, for the FIN
    std::uint64_t n;
    void *user;
    mpiv_p2p_status_t st;
};

bool engine::start_get(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st,
                       bool &done) noexcept
{
    const wire &w = m.w;
    const std::size_t n = std::min<std::size_t>(w.size, to.capacity);
    if (to.sink != nullptr || n == 0) {
        return false; // bytes for a sink, or none: the CTS path
    }
    auto *g = new (std::nothrow) get_state;
    if (g == nullptr) {
        return false;
    }
    g->fn = ucx_got;
    g->e = this;
    g->peer = w.from;
    g->token = w.u.ref.token;
    g->n = n;
    g->user = user;
    g->st = mpiv_p2p_status_t{w.source, w.tag, n, static_cast<std::size_t>(w.size),
                              w.size > to.capacity ? MPIV_ERR_TRUNCATE : MPIV_OK};
    const auto wk = static_cast<std::uint32_t>(my_endpoint() % ucx_->workers());
    const auto from_worker = static_cast<std::uint32_t>(w.u.ref.spare);
    bool held = false;
    if (!lock_worker(wk, held)) {
        delete g;
        return false; // two copies rather than wait
    }
    status s = status::retry_nomem;
    if (ucx_->has_room(wk, w.from, from_worker)) {
        s = ucx_->get(wk, w.from, from_worker, m.more, w.inline_bytes, w.u.ref.where, to.buf, n,
                      g);
    }
    if (!held) {
        ucx_->unlock(wk);
    }
    if (is_retry(s)) {
        delete g;
        return false; // the pair is busy: two copies
    }
    base::stats::add(base::stats::counter::ucx_reads);
    st = g->st;
    if (s == status::inprogress) {
        done = false; // ucx_got() sends the FIN and completes the receive
        return true;
    }
    if (s != status::ok) {
        // The key or its range was refused (said by the transport): the message is lost.
        delete g;
        fault(w.from, "a rendezvous key that UCX refuses");
        st.bytes = 0;
        st.error = MPIV_ERR_INTERNAL;
        done = true;
        return true;
    }
    done = send_control(g->peer, wire_kind::fin, g->token, n, user, g->st, 0);
    delete g;
    return true;
}

void engine::ucx_got(ucx::completion *c, status s) noexcept
{
    auto *g = static_cast<get_state *>(c);
    engine *const e = g->e;
    if (s != status::ok) {
        e->fault(g->peer, "a UCX read of its buffer failed");
        g->st.bytes = 0;
        g->st.error = MPIV_ERR_INTERNAL;
    }
    // The FIN lets the sender withdraw its buffer and complete; then the receive completes
    // (now, or once the FIN is pushed).
    if (e->send_control(g->peer, wire_kind::fin, g->token, g->n, g->user, g->st, 0)) {
        e->params_.complete(g->user, &g->st);
    }
    delete g;
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
