// ucx::transport: the send side (operation slots, eps made on first use, posting an active
// message, send(); see Messages and Back-pressure in the design block of transport.hpp).
#include <cstring>
#include <new>

#include "base/log.hpp"
#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx {

namespace detail {

op_slot *state::take_slot(worker &wk) noexcept
{
    if (wk.free_slots == nullptr) {
        try {
            wk.slots.push_back(std::make_unique<op_slot>());
        } catch (...) {
            return nullptr;
        }
        op_slot *s = wk.slots.back().get();
        s->st = this;
        s->w = wk.index;
        s->next_free = wk.free_slots;
        wk.free_slots = s;
    }
    op_slot *s = wk.free_slots;
    wk.free_slots = s->next_free;
    s->busy = true;
    s->pair = nullptr;
    return s;
}

void state::put_slot(worker &wk, op_slot *slot) noexcept
{
    slot->busy = false;
    slot->done = nullptr;
    slot->sink = nullptr;
    slot->next_free = wk.free_slots;
    wk.free_slots = slot;
}

void state::send_done(void *request, ucs_status_t s, void *user_data) noexcept
{
    auto *slot = static_cast<op_slot *>(user_data);
    state *st = slot->st;
    worker &wk = st->workers[slot->w];
    api().ucp_request_free(request);
    --wk.inflight;
    if (slot->pair != nullptr) {
        --slot->pair->inflight;
    }
    completion *done = slot->done;
    st->put_slot(wk, slot);
    status r = status::ok;
    if (s != UCS_OK) {
        base::log(s == UCS_ERR_CANCELED ? base::log_level::debug : base::log_level::warn,
                  "ucx: completion on worker %u: %s", wk.index, api().ucs_status_string(s));
        r = from_ucs(s);
        if (r == status::ok || r == status::inprogress || is_retry(r)) {
            r = status::system;
        }
    }
    done->fn(done, r);
}

status state::get_ep(worker &wk, std::uint32_t pi, std::uint32_t rw, ep_entry *&out,
                     const char *call) noexcept
{
    peer &pr = peers[pi];
    // sync: acquire; pairs with the release store of 2 in transport::connect().
    if (pr.state.load(std::memory_order_acquire) != 2) {
        base::log(base::log_level::error, "ucx: %s: peer %u is not connected", call, pi);
        return status::invalid_arg;
    }
    if (rw >= pr.workers) {
        base::log(base::log_level::error, "ucx: %s: peer %u has %u workers, not worker %u", call,
                  pi, pr.workers, rw);
        return status::invalid_arg;
    }
    try {
        if (wk.tx.empty()) {
            wk.tx.resize(p.num_peers);
        }
        if (wk.tx[pi].empty()) {
            wk.tx[pi].resize(pr.workers);
        }
    } catch (...) {
        base::log(base::log_level::error, "ucx: %s: no memory for the ep table", call);
        return status::nomem;
    }
    ep_entry &e = wk.tx[pi][rw];
    if (e.failed || pr.failed.load(std::memory_order_relaxed)) {
        if (!e.fail_logged) {
            e.fail_logged = true;
            base::log(base::log_level::error, "ucx: %s: peer %u failed (worker %u -> %u)", call,
                      pi, wk.index, rw);
        }
        return status::system;
    }
    if (e.ep == nullptr) {
        if (!e.ctx) {
            e.ctx.reset(new (std::nothrow) ep_ctx{this, wk.index, pi, rw});
            if (!e.ctx) {
                return status::nomem;
            }
        }
        ucp_ep_params_t ep_params;
        std::memset(&ep_params, 0, sizeof ep_params);
        ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                               UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                               UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.address = reinterpret_cast<const ucp_address_t *>(pr.addrs[rw].data());
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        ep_params.err_handler.cb = &state::err_handler;
        ep_params.err_handler.arg = e.ctx.get();
        const ucs_status_t s = api().ucp_ep_create(wk.handle, &ep_params, &e.ep);
        if (s != UCS_OK) {
            e.ep = nullptr;
            return ucs_error(call, "ucp_ep_create", s);
        }
    }
    out = &e;
    return status::ok;
}

status state::post_am(worker &wk, ep_entry &e, std::uint32_t to_worker, unsigned id,
                      const void *header, std::size_t header_len, const void *payload,
                      std::size_t payload_len, std::uint32_t flags, bool always_request,
                      bool counted, completion *done, const char *call) noexcept
{
    op_slot *slot = take_slot(wk);
    if (slot == nullptr) {
        base::log(base::log_level::error, "ucx: %s: no memory for an operation slot", call);
        return status::nomem;
    }
    // The headers live in the slot until completion (UCX 1.13 keeps the pointer).
    const std::size_t total = k_transport_header + header_len;
    unsigned char *hbuf = slot->inline_hdr;
    if (total > sizeof slot->inline_hdr) {
        if (slot->big_len < total) {
            slot->big.reset(new (std::nothrow) unsigned char[total]);
            slot->big_len = slot->big ? total : 0;
            if (!slot->big) {
                put_slot(wk, slot);
                base::log(base::log_level::error, "ucx: %s: no memory for a %zu-byte header",
                          call, total);
                return status::nomem;
            }
        }
        hbuf = slot->big.get();
    }
    const msg_header h{k_msg_magic, p.self, static_cast<std::uint16_t>(wk.index),
                       static_cast<std::uint16_t>(to_worker), e.next_seq};
    std::memcpy(hbuf, &h, sizeof h);
    if (header_len > 0) {
        std::memcpy(hbuf + sizeof h, header, header_len);
    }
    slot->done = done;
    ucp_request_param_t prm;
    prm.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    if (always_request) {
        prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    }
    prm.flags = flags;
    prm.cb.send = &state::send_done;
    prm.user_data = slot;
    const void *buffer = payload;
    std::size_t count = payload_len;
    // Through the copier (see Messages in transport.hpp): one send() system call on TCP.
    // Never with NO_IMM_CMPL: UCX 1.13 reads the datatype only when it is the sole optional
    // field of op_attr_mask, and would send a contiguous byte from the slot's address.
    const bool copied = !always_request && total + payload_len <= p.copy_max;
    if (copied) {
        slot->buf = const_cast<void *>(payload);
        slot->length = payload_len;
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = copier;
        buffer = slot;
        count = 1;
    }
    void *req = api().ucp_am_send_nbx(e.ep, id, hbuf, total, buffer, count, &prm);
    if (UCS_PTR_IS_ERR(req)) {
        put_slot(wk, slot);
        return ucs_error(call, "ucp_am_send_nbx", UCS_PTR_STATUS(req));
    }
    wk.stats.sent_copied += copied;
    ++e.next_seq;
    if (req == nullptr) {
        put_slot(wk, slot);
        return status::ok;
    }
    ++wk.inflight;
    if (counted) {
        ++e.inflight;
        slot->pair = &e;
    }
    return status::inprogress;
}

} // namespace detail

using detail::api;
using detail::state;
using detail::worker;

status transport::send(std::uint32_t w, std::uint32_t pi, std::uint32_t to_worker,
                       const void *header, std::size_t header_len, const void *payload,
                       std::size_t payload_len, completion *done) noexcept
{
    state &st = *st_;
    if (w >= workers_ || pi >= st.p.num_peers || header_len > max_header_ ||
        payload_len > k_max_payload || (header_len > 0 && header == nullptr) ||
        (payload_len > 0 && payload == nullptr) || done == nullptr) {
        base::log(base::log_level::error,
                  "ucx: send: bad arguments (worker %u of %u, peer %u of %u, header %zu of %zu, "
                  "payload %zu of %zu, header %s, payload %s, done %s)",
                  w, workers_, pi, st.p.num_peers, header_len, max_header_, payload_len,
                  k_max_payload, header ? "set" : "null", payload ? "set" : "null",
                  done ? "set" : "null");
        return status::invalid_arg;
    }
    worker &wk = st.workers[w];
    detail::ep_entry *e = nullptr;
    status r = st.get_ep(wk, pi, to_worker, e, "send");
    if (r != status::ok) {
        return r;
    }
    if (e->inflight >= st.p.max_inflight) {
        return status::retry_nomem;
    }
    return st.post_am(wk, *e, to_worker, detail::k_am_id, header, header_len, payload,
                      payload_len, UCP_AM_SEND_FLAG_EAGER, false, true, done, "send");
}

bool transport::has_room(std::uint32_t w, std::uint32_t peer, std::uint32_t to_worker) const noexcept
{
    const worker &wk = st_->workers[w];
    if (peer >= wk.tx.size() || to_worker >= wk.tx[peer].size()) {
        return true; // no operation on that pair yet
    }
    return wk.tx[peer][to_worker].inflight < st_->p.max_inflight;
}

} // namespace mpiv::ep::ucx
