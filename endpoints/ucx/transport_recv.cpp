// ucx::transport: the receive path (UCX's AM handlers, per-pair order, held arrivals; see
// the design block in transport.hpp).
#include <cstring>
#include <new>

#include "base/log.hpp"
#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx::detail {

void state::deliver_arrival(worker &wk, const msg_header &h, const unsigned char *hdr,
                            std::size_t hlen, const void *data, std::size_t len, bulk *b) noexcept
{
    // Dropped: a bulk handle is marked taken, and the AM handler frees it.
    const auto drop = [&] {
        ++wk.stats.dropped;
        if (b != nullptr) {
            b->taken = true;
        }
    };
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
        drop();
        return;
    }
    rx_pair &rp = wk.rx[pi][fw];
    if (rp.dead) {
        drop();
        return;
    }
    if (h.seq == rp.expected) {
        ++wk.stats.delivered;
        ++rp.expected;
        p.on_message(p.ctx, wk.index, pi, fw, hdr, hlen, data, len, b);
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
                         m.b != nullptr ? nullptr : m.bytes.get() + m.header_len,
                         m.b != nullptr ? m.b->len : m.payload_len, m.b);
        }
        return;
    }
    if (static_cast<std::int32_t>(h.seq - rp.expected) < 0) {
        base::log(base::log_level::error,
                  "ucx: worker %u: message %u from peer %u worker %u arrived twice (expected %u)",
                  wk.index, h.seq, pi, fw, rp.expected);
        drop();
        return;
    }
    // A bulk payload stays with its handle (in UCX's descriptor, or copied by the handler).
    const std::size_t bytes = hlen + (b != nullptr ? 0 : len);
    const std::size_t counted = hlen + len;
    if (rp.held.size() >= k_max_held || wk.held_bytes + counted > k_max_held_bytes ||
        rp.held.count(h.seq) != 0) {
        base::log(base::log_level::error,
                  "ucx: worker %u: peer %u worker %u overflows the reorder window (%zu held, "
                  "%zu bytes; expected %u, got %u)",
                  wk.index, pi, fw, rp.held.size(), wk.held_bytes, rp.expected, h.seq);
        for (auto &pair : wk.rx[pi]) {
            for (auto &kv : pair.held) {
                wk.held_bytes -= kv.second.header_len + kv.second.payload_len;
                if (kv.second.b != nullptr) {
                    release_bulk(wk, kv.second.b);
                }
            }
            pair.held.clear();
            pair.dead = true;
        }
        drop();
        fail_peer(wk, pi, "reorder window overflow");
        return;
    }
    try {
        held_msg m;
        m.bytes.reset(new unsigned char[bytes > 0 ? bytes : 1]);
        if (hlen > 0) {
            std::memcpy(m.bytes.get(), hdr, hlen);
        }
        if (b == nullptr && len > 0) {
            std::memcpy(m.bytes.get() + hlen, data, len);
        }
        m.header_len = hlen;
        m.payload_len = len;
        m.b = b;
        rp.held.emplace(h.seq, std::move(m));
    } catch (...) {
        base::log(base::log_level::error, "ucx: arrival from peer %u: no memory to hold it", pi);
        fail_peer(wk, pi, "no memory to hold an early arrival");
        drop();
        return;
    }
    wk.held_bytes += counted;
    ++wk.stats.held_early;
}

ucs_status_t state::am_recv(void *arg, const void *header, std::size_t header_len, void *data,
                            std::size_t len, const ucp_am_recv_param_t *param) noexcept
{
    auto *wk = static_cast<worker *>(arg);
    return wk->st->arrival(*wk, header, header_len, data, len, param, false);
}

ucs_status_t state::am_recv_bulk(void *arg, const void *header, std::size_t header_len,
                                 void *data, std::size_t len,
                                 const ucp_am_recv_param_t *param) noexcept
{
    auto *wk = static_cast<worker *>(arg);
    return wk->st->arrival(*wk, header, header_len, data, len, param, true);
}

ucs_status_t state::arrival(worker &wk, const void *header, std::size_t header_len, void *data,
                            std::size_t len, const ucp_am_recv_param_t *param,
                            bool is_bulk) noexcept
{
    if (destroying) {
        return UCS_OK; // teardown: no more deliveries into the caller
    }
    const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (rndv && !is_bulk) {
        // send() always asks for eager; a rendezvous message is not ours.
        base::log(base::log_level::error, "ucx: worker %u: unexpected rendezvous message dropped",
                  wk.index);
        ++wk.stats.dropped;
        return UCS_OK;
    }
    msg_header h;
    if (header_len < sizeof h) {
        base::log(base::log_level::error, "ucx: worker %u: message header of %zu bytes dropped",
                  wk.index, header_len);
        ++wk.stats.dropped;
        return UCS_OK;
    }
    std::memcpy(&h, header, sizeof h);
    const char *bad = nullptr;
    if (h.magic != k_msg_magic) {
        bad = "bad magic";
    } else if (h.from_peer >= p.num_peers) {
        bad = "sender peer out of range";
    } else if (h.to_worker != wk.index) {
        bad = "addressed to another worker";
    } else {
        peer &pr = peers[h.from_peer];
        // sync: acquire; pairs with the release store of 2 in transport::connect().
        const bool known = pr.state.load(std::memory_order_acquire) == 2;
        if (h.from_worker >= (known ? pr.workers : k_max_workers)) {
            bad = "sender worker out of range";
        }
    }
    if (bad != nullptr) {
        base::log(base::log_level::error, "ucx: worker %u: message dropped: %s", wk.index, bad);
        ++wk.stats.dropped;
        return UCS_OK; // (a rendezvous sender completes: UCX answers for a dropped one)
    }
    const auto *hdr = static_cast<const unsigned char *>(header) + sizeof h;
    if (!is_bulk) {
        deliver_arrival(wk, h, hdr, header_len - sizeof h, data, len, nullptr);
        return UCS_OK;
    }
    bulk *b = new_bulk(wk);
    if (b == nullptr) {
        base::log(base::log_level::error, "ucx: worker %u: no memory for a bulk arrival", wk.index);
        fail_peer(wk, h.from_peer, "no memory for a bulk arrival");
        ++wk.stats.dropped;
        return UCS_OK;
    }
    b->len = len;
    b->rndv = rndv;
    if (rndv || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0) {
        b->desc = data; // UCX keeps it if the handler says UCS_INPROGRESS
    }
    if (!rndv) {
        b->data = data;
    }
    if (rndv) {
        ++wk.stats.bulk_rndv;
    }
    deliver_arrival(wk, h, hdr, header_len - sizeof h, nullptr, len, b);
    b->in_callback = false;
    if (b->taken) {
        free_bulk(wk, b); // taken during the call (or dropped): UCX may release its data
        return UCS_OK;
    }
    if (b->desc != nullptr) {
        return UCS_INPROGRESS; // held until receive() or release()
    }
    // Bytes readable only now: copy them for the later receive().
    b->copy.reset(new (std::nothrow) unsigned char[len > 0 ? len : 1]);
    if (!b->copy) {
        base::log(base::log_level::error, "ucx: worker %u: no memory to keep a %zu-byte payload",
                  wk.index, len);
        fail_peer(wk, h.from_peer, "no memory to keep a bulk payload");
        b->data = nullptr;
        b->lost = true;
        return UCS_OK;
    }
    std::memcpy(b->copy.get(), data, len);
    b->data = b->copy.get();
    return UCS_OK;
}

} // namespace mpiv::ep::ucx::detail
