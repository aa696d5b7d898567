// engine: sends (inline, eager, rendezvous, gather, streamed), the push into a peer's
// queue and the per-destination outbound lists. See engine.hpp for the design.
#include <algorithm>
#include <cstring>
#include <new>

#include "base/copy.hpp"
#include "base/log.hpp"
#include "base/stats.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

inline bool engine::push(std::uint32_t peer, wire &w, comm_state *seq_comm, std::int32_t dest,
                         const void *more, std::size_t more_bytes, const void *bulk) noexcept
{
    const bool ucx = peers_[peer].ucx;
    const std::size_t n = ucx ? lanes(peer) : shm_.queue_count(peer);
    // To an endpoints handle: its one queue (from the rank map, mod the peer's queue
    // count), so one sender's messages to it arrive in order and only that queue's drains
    // match them. Otherwise this thread's endpoint, or the next queue with room.
    const bool to_handle = seq_comm != nullptr && seq_comm->priv != nullptr;
    const std::size_t ep = to_handle ? seq_comm->rank_queue[dest] : this_endpoint();
    std::size_t q = ep < n ? ep : ep % n; // the peer may have fewer endpoints
    const std::size_t tries = to_handle ? 1 : n;
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
        // Last, after every write the receiver may read (w itself too: a receiver in this
        // process checks a rendezvous against the sending op's header).
        detail::tsan_pushing();
    };
    for (std::size_t i = 0; i < tries; ++i) {
#if MPIV_HAVE_UCX
        const bool pushed =
            ucx ? send_ucx(peer, q, bytes, len, finish, bulk)
                : shm_.try_push(peer, q, bytes, len, finish);
#else
        const bool pushed = shm_.try_push(peer, q, bytes, len, finish);
#endif
        if (pushed) {
            if (!numbered) {
                w.kind = kind; // the pad was for the queue's copy only (and w is not sent)
            }
            return numbered;
        }
        q = q + 1 == n ? 0 : q + 1;
    }
    return false;
}

inline bool engine::try_send(send_op &op, bool &waits) noexcept
{
    const std::uint32_t ep = this_endpoint();
    void *packet = nullptr;
    if (op.w.kind == wire_kind::eager_packet && op.packet == nullptr &&
        !shm_.packet_get(ep, packet)) {
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
        detail::copy_untracked(packet, op.buf, op.w.size);
        op.w.u.ref.where = shm_.packet_offset(packet);
        op.packet = packet;
    }
    waits = op.queued_ack; // read before the push: op may complete at once after it
    const void *more = nullptr; // inline payload past the header's
    std::size_t more_bytes = 0;
    if (op.w.kind == wire_kind::eager_inline && op.w.inline_bytes > k_wire_inline) {
        more = static_cast<const unsigned char *>(op.buf) + k_wire_inline;
        more_bytes = op.w.inline_bytes - k_wire_inline;
    }
    const void *bulk = nullptr;
#if MPIV_HAVE_UCX
    bulk_sent *sent = nullptr;
    if (op.w.kind == wire_kind::rts && peers_[op.peer].ucx &&
        (op.w.flags & (k_wire_gather | k_wire_streamed)) == 0 && op.w.size != 0) {
        // One buffer: its bytes go with the RTS as a UCX bulk payload (engine_ucx.cpp).
        sent = new_bulk_sent(op);
        if (sent == nullptr) {
            return false; // no memory now: retry later
        }
        op.w.flags |= k_wire_bulk;
        bulk = sent;
    }
#endif
    const std::uint64_t size = op.w.size; // (op may complete once pushed)
    const wire_kind kind = op.w.kind;
    const std::uint8_t flags = op.w.flags;
    if (!push(op.peer, op.w, op.seq_comm, op.dest, more, more_bytes, bulk)) {
#if MPIV_HAVE_UCX
        delete_bulk_sent(sent);
#endif
        return false; // keeps its packet: only a queue slot is missing
    }
    count_sent(op.peer, kind, flags, size);
    if (!waits) {
        op.packet = nullptr; // (a send that waits for ACK/FIN may be done and reused now)
    }
    return true;
}

void engine::post_outbound(std::uint32_t peer, const outbound &item) noexcept
{
    peer_state &p = peers_[peer];
    std::lock_guard<base::tas_lock> guard(p.out_mu);
    try {
        p.out.push_back(item);
    } catch (const std::bad_alloc &) {
        base::log(base::log_level::error,
                  "mpiv: out of memory queueing a message for peer %u; aborting", peer);
        std::abort();
    }
    if (!item.stream) {
        base::stats::add(base::stats::counter::backpressure);
    }
    // Relaxed: hints for progress() and the sends to this peer; the lock orders the list
    // itself, and a thread always sees its own earlier increments (its sends stay in
    // order).
    p.out_count.fetch_add(1, std::memory_order_relaxed);
    outbound_count_.fetch_add(1, std::memory_order_relaxed);
    // A server or progress owner asleep on this process's doorbell must retry the list.
    shm_.ring_self();
}

bool engine::send_control(std::uint32_t peer, wire_kind kind, std::uint64_t token,
                          std::uint64_t bytes, void *user, const mpiv_p2p_status_t &st,
                          std::uint64_t spare) noexcept
{
    outbound item{};
    item.control.kind = kind;
    item.control.from = params_.self;
    item.control.size = bytes;
    item.control.u.ref.token = token;
    item.control.u.ref.spare = spare;
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
        std::unique_lock<base::tas_lock> lock(p.out_mu, std::try_to_lock);
        if (!lock.owns_lock()) {
            return 0;
        }
        while (!p.out.empty() && ndone < k_batch) {
            outbound &item = p.out.front();
            bool waits = true;
            if (item.stream) {
                send_op &op = *item.op;
                const mpiv_p2p_status_t st{op.dest, op.w.tag, op.w.size, op.w.size, MPIV_OK};
                void *const user = op.user;
                const std::uint32_t peer = static_cast<std::uint32_t>(&p - peers_.get());
                if (!stream_out(peer, op, events)) {
                    break; // its slots or the peer's queue are full: later items wait
                }
                done[ndone++] = {user, st};
            } else if (item.op != nullptr) {
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
                              std::int32_t dest, std::int32_t tag, std::size_t bytes,
                              unsigned flags) noexcept
{
    detail::bind_to_handle(comm);
    w = wire{};
    w.dst_ep = comm.rank_ep != nullptr ? comm.rank_ep[dest] : 0;
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
    fill_wire(op.w, comm, self_rank, dest, tag, bytes, flags);
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
    fill_wire(w, comm, self_rank, dest, tag, bytes, 0);
    w.kind = wire_kind::eager_inline;
    w.inline_bytes = static_cast<std::uint16_t>(bytes);
    const std::size_t head = std::min(bytes, k_wire_inline);
    if (bytes != 0) {
        base::copy_small(w.u.data, buf, head);
    }
    if (!push(peer, w, &comm, dest, static_cast<const unsigned char *>(buf) + head,
              bytes - head)) {
        return false;
    }
    count_sent(peer, wire_kind::eager_inline, 0, bytes);
    base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_sent);
    base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_bytes_sent, bytes);
    return true;
}

inline void engine::count_sent(std::uint32_t peer, wire_kind kind, std::uint8_t flags,
                               std::uint64_t bytes) noexcept
{
    using base::stats::add;
    using base::stats::counter;
    const bool ucx = peers_[peer].ucx;
    add(ucx ? counter::ucx_sent : counter::shm_sent);
    add(ucx ? counter::ucx_bytes_sent : counter::shm_bytes_sent, bytes);
    switch (kind) {
    case wire_kind::eager_inline:
        add(counter::sent_inline);
        add(counter::bytes_inline, bytes);
        break;
    case wire_kind::eager_packet:
        add(counter::sent_eager);
        add(counter::bytes_eager, bytes);
        break;
    default: // rts
        add(counter::sent_rendezvous);
        add(counter::bytes_rendezvous, bytes);
        if ((flags & k_wire_gather) != 0) {
            add(counter::sent_gather);
        } else if ((flags & k_wire_streamed) != 0) {
            add(counter::sent_streamed);
        }
        break;
    }
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
        w.inline_bytes = static_cast<std::uint16_t>(bytes);
        if (bytes != 0) {
            base::copy_small(w.u.data, buf, std::min(bytes, k_wire_inline));
        }
    } else if (bytes <= params_.eager_limit && !peers_[peer].ucx) {
        w.kind = wire_kind::eager_packet; // (no packets over UCX: rendezvous)
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
    // Started: pushed now or queued (op.seq_comm is the communicator: init_send()).
    base::stats::add_comm(op.seq_comm->stats_key, base::stats::comm_counter::comm_sent);
    base::stats::add_comm(op.seq_comm->stats_key, base::stats::comm_counter::comm_bytes_sent,
                          w.size);
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

} // namespace mpiv::ep
