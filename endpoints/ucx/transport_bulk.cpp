// ucx::transport: bulk messages (send_bulk, receive, release; see "Bulk messages" in the
// design block of transport.hpp).
#include <algorithm>
#include <cstring>
#include <new>

#include "base/log.hpp"
#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx {

namespace detail {

bulk *state::new_bulk(worker &wk) noexcept
{
    auto *b = new (std::nothrow) bulk;
    if (b == nullptr) {
        return nullptr;
    }
    b->worker = wk.index;
    b->next = wk.live;
    if (wk.live != nullptr) {
        wk.live->prev = b;
    }
    wk.live = b;
    return b;
}

void state::free_bulk(worker &wk, bulk *b) noexcept
{
    (b->prev != nullptr ? b->prev->next : wk.live) = b->next;
    if (b->next != nullptr) {
        b->next->prev = b->prev;
    }
    delete b;
}

void state::release_bulk(worker &wk, bulk *b) noexcept
{
    b->taken = true;
    if (b->in_callback) {
        return; // the handler returns UCS_OK: UCX releases the data (answers a rendezvous)
    }
    if (b->desc != nullptr) {
        api().ucp_am_data_release(wk.handle, b->desc); // (a rendezvous sender completes)
    }
    free_bulk(wk, b);
}

void state::recv_done(void *request, ucs_status_t s, std::size_t, void *user_data) noexcept
{
    auto *slot = static_cast<op_slot *>(user_data);
    state *st = slot->st;
    worker &wk = st->workers[slot->w];
    api().ucp_request_free(request);
    --wk.inflight;
    slot->early.clear();
    completion *done = slot->done;
    st->put_slot(wk, slot);
    status r = status::ok;
    if (s != UCS_OK) {
        base::log(base::log_level::error, "ucx: worker %u: bulk receive failed: %s", wk.index,
                  api().ucs_status_string(s));
        r = from_ucs(s);
        if (r == status::ok || r == status::inprogress || is_retry(r)) {
            r = status::system;
        }
    }
    done->fn(done, r);
}

} // namespace detail

using detail::api;

using detail::state;
using detail::worker;

std::size_t transport::length(const bulk *b) noexcept
{
    return b->len;
}

bool transport::rendezvous(const bulk *b) noexcept
{
    return b->rndv;
}

status transport::send_bulk(std::uint32_t w, std::uint32_t pi, std::uint32_t to_worker,
                            const void *header, std::size_t header_len, const void *payload,
                            std::size_t payload_len, bool sync, completion *done) noexcept
{
    state &st = *st_;
    if (w >= workers_ || pi >= st.p.num_peers || header_len > max_header_ ||
        (header_len > 0 && header == nullptr) || (payload_len > 0 && payload == nullptr) ||
        done == nullptr) {
        base::log(base::log_level::error,
                  "ucx: send_bulk: bad arguments (worker %u of %u, peer %u of %u, header %zu of "
                  "%zu, header %s, payload %s, done %s)",
                  w, workers_, pi, st.p.num_peers, header_len, max_header_,
                  header ? "set" : "null", payload ? "set" : "null", done ? "set" : "null");
        return status::invalid_arg;
    }
    worker &wk = st.workers[w];
    detail::ep_entry *e = nullptr;
    const status r = st.get_ep(wk, pi, to_worker, e, "send_bulk");
    if (r != status::ok) {
        return r;
    }
    // Always a request (the completion comes from a later poll, never inside this call,
    // whose caller may hold locks that a completion's continuation takes), and not counted
    // toward the pair's max_inflight (see Bulk messages).
    return st.post_am(wk, *e, to_worker, detail::k_am_bulk_id, header, header_len, payload,
                      payload_len, sync ? UCP_AM_SEND_FLAG_RNDV : 0, true, false, done,
                      "send_bulk");
}

status transport::receive(std::uint32_t w, bulk *b, void *buf, std::size_t capacity, sink_fn sink,
                          void *sink_ctx, completion *done) noexcept
{
    state &st = *st_;
    if (w >= workers_ || b == nullptr || b->worker != w || b->taken ||
        (sink == nullptr && buf == nullptr && capacity != 0) || done == nullptr) {
        base::log(base::log_level::error,
                  "ucx: receive: bad arguments (worker %u of %u, handle %s of worker %u, buffer "
                  "%s, capacity %zu, done %s)",
                  w, workers_, b == nullptr ? "null" : (b->taken ? "taken" : "live"),
                  b == nullptr ? 0u : b->worker, buf ? "set" : "null", capacity,
                  done ? "set" : "null");
        return status::invalid_arg;
    }
    worker &wk = st.workers[w];
    if (b->lost) {
        st.release_bulk(wk, b);
        return status::nomem; // (logged when it was lost)
    }
    if (capacity == 0 && sink == nullptr) {
        st.release_bulk(wk, b); // no byte wanted: a rendezvous sender completes unread
        return status::ok;
    }
    if (!b->rndv) {
        // Eager bytes at hand: write them, then give UCX its descriptor back.
        detail::op_slot one;
        one.buf = buf;
        one.capacity = capacity;
        one.sink = sink;
        one.sink_ctx = sink_ctx;
        detail::feed(one, 0, b->data, b->len);
        st.release_bulk(wk, b);
        return status::ok;
    }
    detail::op_slot *slot = st.take_slot(wk);
    if (slot == nullptr) {
        base::log(base::log_level::error, "ucx: receive: no memory for an operation slot");
        st.release_bulk(wk, b);
        return status::nomem;
    }
    slot->done = done;
    slot->buf = buf;
    slot->capacity = capacity;
    slot->length = b->len;
    slot->next = 0;
    slot->sink = sink;
    slot->sink_ctx = sink_ctx;
    ucp_request_param_t prm;
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.recv_am = &state::recv_done;
    prm.user_data = slot;
    void *target = buf;
    std::size_t count = b->len;
    if (sink != nullptr || capacity < b->len) {
        // Not one buffer that holds it all: through the unpacker (slot is its state).
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = st.unpacker;
        target = slot;
        count = 1;
    }
    void *const desc = b->desc;
    b->desc = nullptr; // UCX owns it after the call, whatever the result
    st.release_bulk(wk, b);
    void *req = api().ucp_am_recv_data_nbx(wk.handle, desc, target, count, &prm);
    if (req == nullptr) {
        st.put_slot(wk, slot);
        return status::ok;
    }
    if (UCS_PTR_IS_ERR(req)) {
        slot->early.clear();
        st.put_slot(wk, slot);
        return detail::ucs_error("receive", "ucp_am_recv_data_nbx", UCS_PTR_STATUS(req));
    }
    ++wk.inflight;
    return status::inprogress;
}

void transport::release(std::uint32_t w, bulk *b) noexcept
{
    if (w >= workers_ || b == nullptr || b->worker != w || b->taken) {
        base::log(base::log_level::error, "ucx: release: bad arguments (worker %u of %u, handle %s)",
                  w, workers_, b == nullptr ? "null" : (b->taken ? "taken" : "of another worker"));
        return;
    }
    st_->release_bulk(st_->workers[w], b);
}

} // namespace mpiv::ep::ucx
