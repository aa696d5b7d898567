// engine: rendezvous in two copies, for receivers that cannot read the sender's memory
// (CMA denied, or single_copy NONE): CTS from the receiver, FRAGs through the sender's copy
// slots. See engine.hpp ("Two copies") for the design.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "base/log.hpp"
#include "base/stats.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

using shm::k_copy_page;
using shm::k_copy_piece;
using shm::k_copy_slots;

bool engine::push_at(std::uint32_t peer, std::size_t q, const wire &w) noexcept
{
    detail::tsan_pushing();
#if MPIV_HAVE_UCX
    if (peers_[peer].ucx) {
        return send_ucx(peer, q, &w, sizeof w, [] {});
    }
#endif
    return shm_.try_push(peer, q, &w, sizeof w, [] {});
}

bool engine::start_pull(inmsg &m, const recv_target &to, void *user,
                        mpiv_p2p_status_t &st) noexcept
{
    const wire &w = m.w;
    const std::size_t n = std::min<std::size_t>(w.size, to.capacity);
    st = mpiv_p2p_status_t{w.source, w.tag, n, static_cast<std::size_t>(w.size),
                           w.size > to.capacity ? MPIV_ERR_TRUNCATE : MPIV_OK};
    std::uint64_t mine = 0;
    pull_state *ps = nullptr;
    if (n != 0) {
        ps = new (std::nothrow) pull_state;
        if (ps != nullptr) {
            ps->peer = w.from;
            ps->to = to;
            ps->user = user;
            ps->total = n;
            ps->received = 0;
            ps->st = st;
            mine = pulls_.issue(ps);
        }
        if (mine == 0) {
            // No memory to wait for the bytes: the receive fails, and the sender, asked
            // for none, completes; nothing waits for ever.
            delete ps;
            base::log(base::log_level::error,
                      "mpiv: no memory to receive a %zu-byte message from peer %u in two copies",
                      n, w.from);
            st.bytes = 0;
            st.error = MPIV_ERR_NOMEM;
        }
    }
    if (mine == 0) {
        // Nothing to copy: the receive is done once the CTS is in the sender's queue.
        return send_control(w.from, wire_kind::cts, w.u.ref.token, 0, user, st, 0);
    }
    // After this push the FRAGs may complete the receive on any thread.
    (void)send_control(w.from, wire_kind::cts, w.u.ref.token, n, nullptr, st, mine);
    return false;
}

void engine::handle_cts(const wire &w) noexcept
{
    // As a FIN: the token must name a live rendezvous send of ours to that peer, and the
    // receiver may ask for at most its bytes. Redeemed now: no FIN or second CTS for it
    // is accepted, and the stream item alone owns the send until it completes.
    send_op *op = tokens_.peek(w.u.ref.token);
    const char *bad = nullptr;
    if (op == nullptr || op->peer != w.from || op->w.kind != wire_kind::rts) {
        bad = "names no rendezvous send of ours to it";
    } else if (w.size > op->w.size) {
        bad = "asks for more bytes than the message has";
    } else if (w.size != 0 && w.u.ref.spare == 0) {
        bad = "asks for bytes but gives no token for them";
    } else if (!peers_[w.from].ucx && shm_.copy_block(w.from) == nullptr) {
        bad = "asks for two copies, which this process does not keep slots for";
    } else if ((op = tokens_.redeem(w.u.ref.token)) == nullptr) {
        bad = "names a send that is no longer waiting";
    }
    if (bad != nullptr) {
        char what[128];
        std::snprintf(what, sizeof what, "a CTS for %llu bytes with token %#llx %s",
                      static_cast<unsigned long long>(w.size),
                      static_cast<unsigned long long>(w.u.ref.token), bad);
        fault(w.from, what);
        return;
    }
    op->pull_token = w.u.ref.spare;
    op->pull_total = w.size;
    op->pulled = 0;
    op->iov_index = 0;
    op->iov_within = 0;
    op->pull_slot = 0;
    op->pending = 0;
    outbound item{};
    item.op = op;
    item.stream = true;
    post_outbound(w.from, item);
}

void engine::copy_piece(send_op &op, unsigned char *to, std::size_t len) noexcept
{
    if ((op.w.flags & k_wire_gather) == 0) {
        detail::copy_untracked(to, static_cast<const unsigned char *>(op.buf) + op.pulled, len);
        return;
    }
    // A gather send: the next len bytes of its ranges, from where the last piece ended.
    const auto *iov = reinterpret_cast<const struct iovec *>(op.w.u.ref.where);
    const std::uint64_t count = op.w.u.ref.spare;
    std::size_t done = 0;
    while (done < len && op.iov_index < count) {
        const struct iovec &r = iov[op.iov_index];
        const std::size_t take = std::min<std::size_t>(r.iov_len - op.iov_within, len - done);
        detail::copy_untracked(to + done, static_cast<const unsigned char *>(r.iov_base) + op.iov_within,
                     take);
        done += take;
        op.iov_within += take;
        if (op.iov_within == r.iov_len) {
            ++op.iov_index;
            op.iov_within = 0;
        }
    }
}

bool engine::stream_out(std::uint32_t peer, send_op &op, int &events) noexcept
{
#if MPIV_HAVE_UCX
    if (peers_[peer].ucx) {
        return stream_out_ucx(peer, op, events);
    }
#endif
    unsigned char *const block = shm_.copy_block(peer);
    auto *const busy = reinterpret_cast<std::atomic<std::uint32_t> *>(block);
    unsigned char *const data = block + k_copy_page;
    const bool streamed = (op.w.flags & k_wire_streamed) != 0;
    const auto *const ready = reinterpret_cast<const std::size_t *>(op.w.u.ref.spare);
    // Every FRAG of this transfer goes into one queue of the receiver, in order.
    const std::size_t q = static_cast<std::uint32_t>(op.pull_token) % shm_.queue_count(peer);
    while (op.pulled < op.pull_total) {
        const std::uint32_t slot = op.pull_slot % k_copy_slots;
        if (op.pending == 0) {
            // sync: acquire; pairs with the receiver's release store in handle_frag(): it
            // has copied the slot's last piece out before this one overwrites it.
            if (busy[slot].load(std::memory_order_acquire) != 0) {
                return false;
            }
            const std::size_t len =
                std::min<std::uint64_t>(k_copy_piece, op.pull_total - op.pulled);
            // sync: acquire; pairs with the writer's release store of its count
            // (mpiv_p2p_isend_streamed): the bytes it covers are there.
            if (streamed && __atomic_load_n(ready, __ATOMIC_ACQUIRE) < op.pulled + len) {
                return false;
            }
            copy_piece(op, data + std::size_t{slot} * k_copy_piece, len);
            // Relaxed: the FRAG's push (the queue's release) publishes it with the bytes.
            busy[slot].store(1, std::memory_order_relaxed);
            op.pending = static_cast<std::uint32_t>(len);
        }
        wire f{};
        f.kind = wire_kind::frag;
        f.from = params_.self;
        f.size = op.pending;
        f.u.ref.where = slot;
        f.u.ref.token = op.pull_token;
        f.u.ref.spare = op.pulled;
        if (!push_at(peer, q, f)) {
            return false;
        }
        base::stats::add(base::stats::counter::two_copy_pieces);
        op.pulled += op.pending;
        op.pending = 0;
        ++op.pull_slot;
        ++events;
    }
    // A streamed send completes only once its writer is done with the buffer, even when
    // the receiver took fewer bytes.
    // sync: acquire; pairs with the writer's last release store of its count.
    return !streamed || __atomic_load_n(ready, __ATOMIC_ACQUIRE) == op.w.size;
}

void engine::handle_frag(const wire &w, const unsigned char *piece) noexcept
{
    const char *bad = nullptr;
    pull_state *ps = pulls_.peek(w.u.ref.token);
    const bool known = w.from < params_.num_peers && peers_[w.from].connected &&
                       peers_[w.from].ucx == (piece != nullptr);
    shm::peer *p = known && piece == nullptr ? &shm_.at(w.from) : nullptr;
    if (ps == nullptr || !known || ps->peer != w.from) {
        bad = "names no receive of ours from it";
    } else if (ps->busy.exchange(true, std::memory_order_acquire)) {
        // sync: acquire; pairs with the release store below: the previous FRAG's
        // drainer (maybe another thread) left received up to date.
        bad = "arrived while another of the same transfer was being copied";
        ps = nullptr; // not ours to release
    } else if ((p != nullptr && (w.u.ref.where >= p->copy_slots || w.size > p->copy_piece)) ||
               w.size == 0 || w.u.ref.spare != ps->received ||
               w.size > ps->total - ps->received) {
        bad = "does not continue its transfer (slot, offset or length)";
    }
    if (bad != nullptr) {
        if (ps != nullptr && known && ps->peer == w.from) {
            // sync: release; pairs with the acquire exchange above.
            ps->busy.store(false, std::memory_order_release);
        }
        char what[160];
        std::snprintf(what, sizeof what,
                      "a FRAG of %llu bytes at offset %llu in slot %llu with token %#llx %s",
                      static_cast<unsigned long long>(w.size),
                      static_cast<unsigned long long>(w.u.ref.spare),
                      static_cast<unsigned long long>(w.u.ref.where),
                      static_cast<unsigned long long>(w.u.ref.token), bad);
        fault(w.from, what);
        return;
    }
    if (piece != nullptr) {
        detail::put(ps->to, ps->received, piece, w.size); // in the message (UCX)
    } else {
        const std::size_t slot = static_cast<std::size_t>(w.u.ref.where);
        detail::put(ps->to, ps->received, p->copy_data + slot * p->copy_piece, w.size);
        // sync: release; pairs with the sender's acquire load in stream_out(): the bytes
        // are copied out before it writes the slot again.
        p->copy_busy[slot].store(0, std::memory_order_release);
    }
    ps->received += w.size;
    if (ps->received != ps->total) {
        // sync: release; pairs with the acquire exchange above (the next FRAG's drainer).
        ps->busy.store(false, std::memory_order_release);
        return;
    }
    // The last piece: the token dies first (a later FRAG naming it is refused), and the
    // receive completes. Only a holder of busy redeems, so this cannot fail.
    if (pulls_.redeem(w.u.ref.token) == ps) {
        const mpiv_p2p_status_t st = ps->st;
        void *const user = ps->user;
        delete ps;
        if (user != nullptr) { // (an mrecv may pass none)
            params_.complete(user, &st);
        }
    }
}

#if MPIV_HAVE_UCX
bool engine::stream_out_ucx(std::uint32_t peer, send_op &op, int &events) noexcept
{
    // Each piece travels inside its FRAG (the transport copies the message), in one lane
    // of the receiver (in order); no copy slots.
    constexpr std::size_t k_piece = 4096;
    const std::size_t piece = std::min(k_piece, ucx_->max_header() - sizeof(wire));
    const bool streamed = (op.w.flags & k_wire_streamed) != 0;
    const auto *const ready = reinterpret_cast<const std::size_t *>(op.w.u.ref.spare);
    const std::size_t q = static_cast<std::uint32_t>(op.pull_token) % lanes(peer);
    alignas(8) unsigned char message[sizeof(wire) + k_piece];
    while (op.pulled < op.pull_total) {
        const std::size_t len = std::min<std::uint64_t>(piece, op.pull_total - op.pulled);
        // sync: acquire; pairs with the writer's release store of its count.
        if (streamed && __atomic_load_n(ready, __ATOMIC_ACQUIRE) < op.pulled + len) {
            return false;
        }
        wire f{};
        f.kind = wire_kind::frag;
        f.from = params_.self;
        f.size = len;
        f.u.ref.token = op.pull_token;
        f.u.ref.spare = op.pulled;
        std::memcpy(message, &f, sizeof f);
        // The bytes are copied only once the send is sure to start (copy_piece moves the
        // gather position).
        if (!send_ucx(peer, q, message, sizeof f + len,
                      [&] { copy_piece(op, message + sizeof f, len); })) {
            return false;
        }
        base::stats::add(base::stats::counter::two_copy_pieces);
        op.pulled += len;
        ++events;
    }
    // sync: acquire; pairs with the writer's last release store of its count.
    return !streamed || __atomic_load_n(ready, __ATOMIC_ACQUIRE) == op.w.size;
}
#endif

} // namespace mpiv::ep
