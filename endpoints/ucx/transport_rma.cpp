// ucx::transport: exposures and remote reads (see the design block in transport.hpp).
#include <cstring>
#include <mutex>
#include <new>

#include "base/log.hpp"
#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx {

namespace {

struct key_header {
    std::uint32_t magic;
    std::uint16_t version;
    std::uint16_t rkey_len;
    std::uint64_t base;
    std::uint64_t length;
    std::uint32_t check; // fnv1a over base, length and the rkey bytes
    std::uint32_t zero;
};
static_assert(sizeof(key_header) == detail::k_key_head, "key header size");

std::uint32_t key_check(const key_header &k, const void *rkey) noexcept
{
    std::uint32_t h = detail::fnv1a(&k.base, sizeof k.base);
    h = detail::fnv1a(&k.length, sizeof k.length, h);
    return detail::fnv1a(rkey, k.rkey_len, h);
}

} // namespace

status transport::expose(std::uint32_t w, const void *buf, std::size_t len, exposure *&out) noexcept
{
    detail::state &st = *st_;
    if (w >= workers_ || buf == nullptr || len == 0) {
        base::log(base::log_level::error, "ucx: expose: bad arguments (worker %u of %u, buffer %s, "
                  "%zu bytes: a buffer of at least one byte)", w, workers_,
                  buf ? "set" : "null", len);
        return status::invalid_arg;
    }
    auto *e = new (std::nothrow) exposure;
    if (e == nullptr) {
        base::log(base::log_level::error, "ucx: expose: no memory");
        return status::nomem;
    }
    ucp_mem_map_params_t mp;
    std::memset(&mp, 0, sizeof mp);
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = const_cast<void *>(buf);
    mp.length = len;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(st.ctx, &mp, &memh);
    if (s != UCS_OK) {
        delete e;
        return detail::ucs_error("expose", "ucp_mem_map", s);
    }
    void *rkey = nullptr;
    std::size_t rkey_len = 0;
    s = ucp_rkey_pack(st.ctx, memh, &rkey, &rkey_len);
    if (s != UCS_OK) {
        ucp_mem_unmap(st.ctx, memh);
        delete e;
        return detail::ucs_error("expose", "ucp_rkey_pack", s);
    }
    if (rkey_len > k_max_key - detail::k_key_head) {
        base::log(base::log_level::error, "ucx: expose: UCX's packed rkey has %zu bytes (at most "
                  "%zu fit in a key)", rkey_len, k_max_key - detail::k_key_head);
        ucp_rkey_buffer_release(rkey);
        ucp_mem_unmap(st.ctx, memh);
        delete e;
        return status::capacity;
    }
    key_header k{detail::k_key_magic, detail::k_key_version, static_cast<std::uint16_t>(rkey_len),
                 reinterpret_cast<std::uintptr_t>(buf), len, 0, 0};
    k.check = key_check(k, rkey);
    std::memcpy(e->key_, &k, sizeof k);
    std::memcpy(e->key_ + sizeof k, rkey, rkey_len);
    ucp_rkey_buffer_release(rkey);
    e->key_len_ = sizeof k + rkey_len;
    e->memh_ = memh;
    {
        std::lock_guard<std::mutex> g(st.exp_mutex);
        e->next_ = st.exposures;
        if (st.exposures != nullptr) {
            st.exposures->prev_ = e;
        }
        st.exposures = e;
    }
    out = e;
    return status::ok;
}

void transport::withdraw(exposure *e) noexcept
{
    if (e == nullptr) {
        return;
    }
    detail::state &st = *st_;
    {
        std::lock_guard<std::mutex> g(st.exp_mutex);
        if (e->prev_ != nullptr) {
            e->prev_->next_ = e->next_;
        } else {
            st.exposures = e->next_;
        }
        if (e->next_ != nullptr) {
            e->next_->prev_ = e->prev_;
        }
    }
    const ucs_status_t s = ucp_mem_unmap(st.ctx, static_cast<ucp_mem_h>(e->memh_));
    if (s != UCS_OK) {
        (void)detail::ucs_error("withdraw", "ucp_mem_unmap", s);
    }
    delete e;
}

status transport::get(std::uint32_t w, std::uint32_t pi, std::uint32_t from_worker,
                      const void *key, std::size_t key_len, std::uint64_t remote_addr,
                      void *local, std::size_t len, completion *done) noexcept
{
    detail::state &st = *st_;
    if (w >= workers_ || pi >= st.p.num_peers || (len > 0 && local == nullptr) ||
        done == nullptr) {
        base::log(base::log_level::error, "ucx: get: bad arguments (worker %u of %u, peer %u of "
                  "%u, local %s, done %s)", w, workers_, pi, st.p.num_peers,
                  local ? "set" : "null", done ? "set" : "null");
        return status::invalid_arg;
    }
    // The key is untrusted: its frame, check word and range are verified before UCX sees it.
    key_header k;
    const char *bad = nullptr;
    if (key == nullptr || key_len < sizeof k || key_len > k_max_key) {
        bad = "bad length";
    } else {
        std::memcpy(&k, key, sizeof k);
        const auto *rkey = static_cast<const unsigned char *>(key) + sizeof k;
        if (k.magic != detail::k_key_magic || k.version != detail::k_key_version || k.zero != 0) {
            bad = "bad magic or version";
        } else if (k.rkey_len != key_len - sizeof k) {
            bad = "rkey length does not match the key length";
        } else if (key_check(k, rkey) != k.check) {
            bad = "check word mismatch";
        } else if (k.length == 0 || k.base + k.length < k.base) {
            bad = "bad exposed range";
        } else if (remote_addr < k.base || len > k.length ||
                   remote_addr - k.base > k.length - len) {
            bad = "range outside the exposure";
        }
    }
    if (bad != nullptr) {
        base::log(base::log_level::error, "ucx: get: key from peer %u refused: %s (key %zu bytes, "
                  "address 0x%llx, %zu bytes)", pi, bad, key_len,
                  static_cast<unsigned long long>(remote_addr), len);
        return status::invalid_arg;
    }
    if (len == 0) {
        return status::ok;
    }
    detail::worker &wk = st.workers[w];
    detail::ep_entry *e = nullptr;
    status r = st.get_ep(wk, pi, from_worker, e, "get");
    if (r != status::ok) {
        return r;
    }
    if (e->inflight >= st.p.max_inflight) {
        return status::retry_nomem;
    }
    ucp_rkey_h rkey = nullptr;
    ucs_status_t s =
        ucp_ep_rkey_unpack(e->ep, static_cast<const unsigned char *>(key) + sizeof k, &rkey);
    if (s != UCS_OK) {
        return detail::ucs_error("get", "ucp_ep_rkey_unpack", s);
    }
    detail::op_slot *slot = st.take_slot(wk);
    if (slot == nullptr) {
        ucp_rkey_destroy(rkey);
        base::log(base::log_level::error, "ucx: get: no memory for an operation slot");
        return status::nomem;
    }
    slot->done = done;
    slot->rkey = rkey;
    ucp_request_param_t prm;
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = &detail::state::send_done;
    prm.user_data = slot;
    void *req = ucp_get_nbx(e->ep, local, len, remote_addr, rkey, &prm);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
        ucp_rkey_destroy(rkey);
        st.put_slot(wk, slot);
        return req == nullptr ? status::ok
                              : detail::ucs_error("get", "ucp_get_nbx", UCS_PTR_STATUS(req));
    }
    ++wk.inflight;
    ++e->inflight;
    slot->pair = e;
    return status::inprogress;
}

} // namespace mpiv::ep::ucx
