// ucx::transport: the receive path (UCX's AM handler, per-pair order, held arrivals; see
// the design block in transport.hpp).
#include <cstring>
#include <new>

#include "base/log.hpp"
#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx::detail {

void state::deliver_arrival(worker &wk, const msg_header &h, const unsigned char *hdr,
                            std::size_t hlen, const void *data, std::size_t len) noexcept
{
    const std::uint32_t pi = h.from_peer, fw = h.from_worker;
    try {
        if (wk.rx.empty()) {
            wk.rx.resize(p.num_peers);
        }
        if (wk.rx[pi].size() <= fw) {
            wk.rx[pi].resize(fw + 1);
        }
    } catch (...) {
        base::log(base::log_level::error, "ucx: arrival from peer %u: no memory", pi);
        fail_peer(wk, pi, "no memory for the receive state");
        ++wk.stats.dropped;
        return;
    }
    rx_pair &rp = wk.rx[pi][fw];
    if (rp.dead) {
        ++wk.stats.dropped;
        return;
    }
    if (h.seq == rp.expected) {
        ++wk.stats.delivered;
        ++rp.expected;
        p.on_message(p.ctx, wk.index, pi, fw, hdr, hlen, data, len);
        // Deliver the held ones whose turn has come. on_message cannot add to this pair
        // (it may send, never progress), so the iterator stays valid between calls.
        for (auto it = rp.held.find(rp.expected); it != rp.held.end() && !rp.dead;
             it = rp.held.find(rp.expected)) {
            held_msg m = std::move(it->second);
            rp.held.erase(it);
            wk.held_bytes -= m.header_len + m.payload_len;
            ++wk.stats.delivered;
            ++rp.expected;
            p.on_message(p.ctx, wk.index, pi, fw, m.bytes.get(), m.header_len,
                         m.bytes.get() + m.header_len, m.payload_len);
        }
        return;
    }
    if (static_cast<std::int32_t>(h.seq - rp.expected) < 0) {
        base::log(base::log_level::error,
                  "ucx: worker %u: message %u from peer %u worker %u arrived twice (expected %u)",
                  wk.index, h.seq, pi, fw, rp.expected);
        ++wk.stats.dropped;
        return;
    }
    const std::size_t bytes = hlen + len;
    if (rp.held.size() >= k_max_held || wk.held_bytes + bytes > k_max_held_bytes ||
        rp.held.count(h.seq) != 0) {
        base::log(base::log_level::error,
                  "ucx: worker %u: peer %u worker %u overflows the reorder window (%zu held, "
                  "%zu bytes; expected %u, got %u)",
                  wk.index, pi, fw, rp.held.size(), wk.held_bytes, rp.expected, h.seq);
        for (auto &pair : wk.rx[pi]) {
            for (auto &kv : pair.held) {
                wk.held_bytes -= kv.second.header_len + kv.second.payload_len;
            }
            pair.held.clear();
            pair.dead = true;
        }
        ++wk.stats.dropped;
        fail_peer(wk, pi, "reorder window overflow");
        return;
    }
    try {
        held_msg m;
        m.bytes.reset(new unsigned char[bytes > 0 ? bytes : 1]);
        if (hlen > 0) {
            std::memcpy(m.bytes.get(), hdr, hlen);
        }
        if (len > 0) {
            std::memcpy(m.bytes.get() + hlen, data, len);
        }
        m.header_len = hlen;
        m.payload_len = len;
        rp.held.emplace(h.seq, std::move(m));
    } catch (...) {
        base::log(base::log_level::error, "ucx: arrival from peer %u: no memory to hold it", pi);
        fail_peer(wk, pi, "no memory to hold an early arrival");
        ++wk.stats.dropped;
        return;
    }
    wk.held_bytes += bytes;
    ++wk.stats.held_early;
}

ucs_status_t state::am_recv(void *arg, const void *header, std::size_t header_len, void *data,
                            std::size_t len, const ucp_am_recv_param_t *param) noexcept
{
    auto *wk = static_cast<worker *>(arg);
    state *st = wk->st;
    if (st->destroying) {
        return UCS_OK; // teardown: no more deliveries into the caller
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
        // send() always asks for eager; a rendezvous message is not ours.
        base::log(base::log_level::error, "ucx: worker %u: unexpected rendezvous message dropped",
                  wk->index);
        ++wk->stats.dropped;
        return UCS_OK;
    }
    msg_header h;
    if (header_len < sizeof h) {
        base::log(base::log_level::error, "ucx: worker %u: message header of %zu bytes dropped",
                  wk->index, header_len);
        ++wk->stats.dropped;
        return UCS_OK;
    }
    std::memcpy(&h, header, sizeof h);
    const char *bad = nullptr;
    if (h.magic != k_msg_magic) {
        bad = "bad magic";
    } else if (h.from_peer >= st->p.num_peers) {
        bad = "sender peer out of range";
    } else if (h.to_worker != wk->index) {
        bad = "addressed to another worker";
    } else {
        peer &pr = st->peers[h.from_peer];
        // sync: acquire; pairs with the release store of 2 in transport::connect().
        const bool known = pr.state.load(std::memory_order_acquire) == 2;
        if (h.from_worker >= (known ? pr.workers : k_max_workers)) {
            bad = "sender worker out of range";
        }
    }
    if (bad != nullptr) {
        base::log(base::log_level::error, "ucx: worker %u: message dropped: %s", wk->index, bad);
        ++wk->stats.dropped;
        return UCS_OK;
    }
    st->deliver_arrival(*wk, h, static_cast<const unsigned char *>(header) + sizeof h,
                        header_len - sizeof h, data, len);
    return UCS_OK;
}

} // namespace mpiv::ep::ucx::detail
