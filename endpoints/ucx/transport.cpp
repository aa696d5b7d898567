#include "endpoints/ucx/transport.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx {

namespace detail {

status from_ucs(ucs_status_t s) noexcept
{
    switch (s) {
    case UCS_OK: return status::ok;
    case UCS_INPROGRESS: return status::inprogress;
    case UCS_ERR_NO_MEMORY: return status::nomem;
    case UCS_ERR_NO_RESOURCE: return status::retry_nomem;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR: return status::invalid_arg;
    case UCS_ERR_BUSY: return status::busy;
    case UCS_ERR_EXCEEDS_LIMIT: return status::capacity;
    default: return status::system;
    }
}

status ucs_error(const char *call, const char *what, ucs_status_t s) noexcept
{
    base::log(base::log_level::error, "ucx: %s: %s: %s", call, what, api().ucs_status_string(s));
    return from_ucs(s);
}

std::uint32_t fnv1a(const void *data, std::size_t n, std::uint32_t h) noexcept
{
    const auto *b = static_cast<const unsigned char *>(data);
    for (std::size_t i = 0; i < n; ++i) {
        h = (h ^ b[i]) * 16777619u;
    }
    return h;
}

namespace {

status bad_param(const char *field, unsigned long value, const char *rule) noexcept
{
    base::log(base::log_level::error, "ucx: create: params.%s = %lu (%s)", field, value, rule);
    return status::invalid_arg;
}

std::uint32_t load_u32(const unsigned char *p) noexcept
{
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

} // namespace

void state::fail_peer(worker &wk, std::uint32_t peer, const char *reason) noexcept
{
    peers[peer].failed.store(true, std::memory_order_relaxed);
    if (destroying) {
        return;
    }
    // sync: acq_rel exchange; pairs with the same exchange on other workers (report once).
    if (!peers[peer].reported.exchange(true, std::memory_order_acq_rel)) {
        try {
            wk.failed_peers.emplace_back(peer, reason);
        } catch (...) {
            base::log(base::log_level::error, "ucx: peer %u failed (%s); no memory to report it",
                      peer, reason);
        }
    }
}

void state::err_handler(void *arg, ucp_ep_h ep, ucs_status_t s) noexcept
{
    auto *c = static_cast<ep_ctx *>(arg);
    state *st = c->st;
    worker &wk = st->workers[c->w];
    ep_entry &e = wk.tx[c->peer][c->remote_worker];
    base::log(st->destroying ? base::log_level::debug : base::log_level::warn,
              "ucx: ep from worker %u to peer %u worker %u failed: %s", c->w, c->peer,
              c->remote_worker, api().ucs_status_string(s));
    if (e.ep == ep && !e.failed) {
        e.failed = true;
        try {
            wk.to_close.push_back(ep);
            e.ep = nullptr;
        } catch (...) {
            // keep e.ep: the destructor closes it
        }
    }
    st->fail_peer(wk, c->peer, api().ucs_status_string(s));
}

void state::close_all_eps() noexcept
{
    // Every worker's eps, closed together while every worker progresses: a flush close of
    // a PEER-mode ep ends only once the peer's worker answers, and the peers close theirs
    // at the same time (finalize), each progressing its own workers.
    struct pending {
        worker *wk;
        ucp_ep_h ep;
        bool force;
    };
    std::vector<pending> eps;
    try {
        for (std::uint32_t i = 0; i < p.workers; ++i) {
            worker &wk = workers[i];
            if (wk.handle == nullptr) {
                continue;
            }
            for (ucp_ep_h ep : wk.to_close) {
                eps.push_back({&wk, ep, true});
            }
            wk.to_close.clear();
            for (std::size_t pi = 0; pi < wk.tx.size(); ++pi) {
                // A peer known to have failed gets no flush (it would only time out).
                const bool dead = peers[pi].failed.load(std::memory_order_relaxed);
                for (ep_entry &e : wk.tx[pi]) {
                    if (e.ep != nullptr) {
                        eps.push_back({&wk, e.ep, e.failed || dead});
                        e.ep = nullptr;
                    }
                }
            }
        }
    } catch (...) {
        base::log(base::log_level::warn,
                  "ucx: teardown: no memory; eps are left to ucp_worker_destroy");
    }
    std::vector<void *> reqs;
    for (std::uint32_t i = 0; i < p.workers; ++i) {
        try {
            reqs.insert(reqs.end(), workers[i].closing.begin(), workers[i].closing.end());
        } catch (...) {
            for (void *r : workers[i].closing) {
                api().ucp_request_free(r);
            }
        }
        workers[i].closing.clear();
    }
    auto progress_all = [this] {
        for (std::uint32_t i = 0; i < p.workers; ++i) {
            if (workers[i].handle != nullptr) {
                api().ucp_worker_progress(workers[i].handle);
            }
        }
    };
    auto done = [](void *r) {
        if (api().ucp_request_check_status(r) == UCS_INPROGRESS) {
            return false;
        }
        api().ucp_request_free(r);
        return true;
    };
    std::size_t next = 0;
    while (next < eps.size() || !reqs.empty()) {
        // One batch: close up to k_close_batch eps, then progress until their closes end
        // or the batch's time is up.
        for (; next < eps.size() && reqs.size() < k_close_batch; ++next) {
            ucp_request_param_t prm;
            std::memset(&prm, 0, sizeof prm);
            if (eps[next].force) {
                prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
            }
            void *r = api().ucp_ep_close_nbx(eps[next].ep, &prm);
            if (UCS_PTR_IS_ERR(r)) {
                base::log(base::log_level::debug, "ucx: teardown: ucp_ep_close_nbx: %s",
                          api().ucs_status_string(UCS_PTR_STATUS(r)));
            } else if (r != nullptr) {
                try {
                    reqs.push_back(r);
                } catch (...) {
                    api().ucp_request_free(r);
                }
            }
        }
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::duration<double>(k_close_timeout_s);
        for (;;) {
            reqs.erase(std::remove_if(reqs.begin(), reqs.end(), done), reqs.end());
            if (reqs.empty()) {
                break;
            }
            if (std::chrono::steady_clock::now() > deadline) {
                base::log(base::log_level::warn,
                          "ucx: teardown: %zu ep closes did not end in %.1f s (peers not "
                          "progressing?); ucp_worker_destroy releases them",
                          reqs.size(), k_close_timeout_s);
                for (void *r : reqs) {
                    api().ucp_request_free(r);
                }
                reqs.clear();
                break;
            }
            progress_all();
        }
    }
}

} // namespace detail

using detail::api;

using detail::state;
using detail::worker;

bool transport::available(const char **why) noexcept
{
    return detail::load_api(why) != nullptr;
}

status transport::create(const params &p, std::unique_ptr<transport> &out) noexcept
{
    if (p.num_peers == 0 || p.num_peers > (1u << 24)) {
        return detail::bad_param("num_peers", p.num_peers, "must be 1..16777216");
    }
    if (p.self >= p.num_peers) {
        return detail::bad_param("self", p.self, "must be below num_peers");
    }
    if (p.workers == 0 || p.workers > k_max_workers) {
        return detail::bad_param("workers", p.workers, "must be 1..1024");
    }
    if (p.max_inflight == 0 || p.max_inflight > (1u << 20)) {
        return detail::bad_param("max_inflight", p.max_inflight, "must be 1..1048576");
    }
    if (p.copy_max > k_max_payload) {
        return detail::bad_param("copy_max", p.copy_max, "must be 0..65536");
    }
    if (p.on_message == nullptr) {
        return detail::bad_param("on_message", 0, "required");
    }
    const char *why = nullptr;
    if (!available(&why)) {
        base::log(base::log_level::error, "ucx: create: %s", why);
        return status::system;
    }
    std::unique_ptr<transport> t(new (std::nothrow) transport);
    if (!t) {
        return status::nomem;
    }
    try {
        t->st_ = std::make_unique<state>();
        state &st = *t->st_;
        st.self = t.get();
        st.p = p;
        st.workers.reset(new worker[p.workers]);
        st.peers.reset(new detail::peer[p.num_peers]);
    } catch (...) {
        base::log(base::log_level::error, "ucx: create: no memory");
        return status::nomem;
    }
    state &st = *t->st_;
    ucp_config_t *cfg = nullptr;
    ucs_status_t s = api().ucp_config_read(nullptr, nullptr, &cfg);
    if (s != UCS_OK) {
        return detail::ucs_error("create", "ucp_config_read", s);
    }
    ucp_params_t up;
    std::memset(&up, 0, sizeof up);
    up.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                    UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    up.mt_workers_shared = 1; // W workers of this context run on different threads
    up.estimated_num_eps = static_cast<std::size_t>(p.num_peers) * p.workers;
    s = api().ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, cfg, &st.ctx);
    api().ucp_config_release(cfg);
    if (s != UCS_OK) {
        st.ctx = nullptr;
        return detail::ucs_error("create", "ucp_init", s);
    }
    if (const status u = detail::make_datatypes(st); u != status::ok) {
        return u;
    }
    std::size_t max_am_header = SIZE_MAX;
    try {
        st.blob.resize(detail::k_addr_head);
        const std::uint16_t version = detail::k_addr_version;
        const auto wcount = static_cast<std::uint16_t>(p.workers);
        std::memcpy(st.blob.data(), &detail::k_addr_magic, 4);
        std::memcpy(st.blob.data() + 4, &version, 2);
        std::memcpy(st.blob.data() + 6, &wcount, 2);
    } catch (...) {
        return status::nomem;
    }
    for (std::uint32_t i = 0; i < p.workers; ++i) {
        worker &wk = st.workers[i];
        wk.st = &st;
        wk.index = i;
        ucp_worker_params_t wp;
        std::memset(&wp, 0, sizeof wp);
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
        s = api().ucp_worker_create(st.ctx, &wp, &wk.handle);
        if (s != UCS_OK) {
            wk.handle = nullptr;
            return detail::ucs_error("create", "ucp_worker_create", s);
        }
        ucp_worker_attr_t attr;
        std::memset(&attr, 0, sizeof attr);
        attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE | UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
        s = api().ucp_worker_query(wk.handle, &attr);
        if (s != UCS_OK) {
            return detail::ucs_error("create", "ucp_worker_query", s);
        }
        if (attr.thread_mode != UCS_THREAD_MODE_SERIALIZED &&
            attr.thread_mode != UCS_THREAD_MODE_MULTI) {
            base::log(base::log_level::error, "ucx: create: worker %u: thread mode %d, not "
                      "SERIALIZED", i, static_cast<int>(attr.thread_mode));
            return status::system;
        }
        max_am_header = std::min(max_am_header, attr.max_am_header);
        ucp_am_handler_param_t hp;
        std::memset(&hp, 0, sizeof hp);
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                        UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hp.flags = UCP_AM_FLAG_WHOLE_MSG;
        hp.arg = &wk;
        for (const auto &[id, cb] : {std::pair<unsigned, ucp_am_recv_callback_t>{
                                         detail::k_am_id, &state::am_recv},
                                     {detail::k_am_bulk_id, &state::am_recv_bulk}}) {
            hp.id = id;
            hp.cb = cb;
            s = api().ucp_worker_set_am_recv_handler(wk.handle, &hp);
            if (s != UCS_OK) {
                return detail::ucs_error("create", "ucp_worker_set_am_recv_handler", s);
            }
        }
        s = api().ucp_worker_get_efd(wk.handle, &wk.efd);
        if (s != UCS_OK) {
            return detail::ucs_error("create", "ucp_worker_get_efd", s);
        }
        ucp_address_t *addr = nullptr;
        std::size_t addr_len = 0;
        s = api().ucp_worker_get_address(wk.handle, &addr, &addr_len);
        if (s != UCS_OK) {
            return detail::ucs_error("create", "ucp_worker_get_address", s);
        }
        if (addr_len == 0 || addr_len > k_max_worker_address) {
            api().ucp_worker_release_address(wk.handle, addr);
            base::log(base::log_level::error, "ucx: create: worker address of %zu bytes", addr_len);
            return status::system;
        }
        try {
            const auto l = static_cast<std::uint32_t>(addr_len);
            const std::size_t at = st.blob.size();
            st.blob.resize(at + 4 + addr_len);
            std::memcpy(st.blob.data() + at, &l, 4);
            std::memcpy(st.blob.data() + at + 4, addr, addr_len);
        } catch (...) {
            api().ucp_worker_release_address(wk.handle, addr);
            return status::nomem;
        }
        api().ucp_worker_release_address(wk.handle, addr);
    }
    if (max_am_header <= k_transport_header) {
        base::log(base::log_level::error, "ucx: create: UCX's max AM header is %zu bytes, not "
                  "above the transport's %zu", max_am_header, k_transport_header);
        return status::system;
    }
    st.max_header = max_am_header - k_transport_header;
    t->max_header_ = st.max_header;
    t->workers_ = p.workers;
    base::log(base::log_level::debug, "ucx: created: peer %u of %u, %u workers, max AM header %zu",
              p.self, p.num_peers, p.workers, max_am_header);
    out = std::move(t);
    return status::ok;
}

transport::~transport()
{
    if (!st_) {
        return;
    }
    state &st = *st_;
    st.destroying = true;
    st.close_all_eps();
    for (std::uint32_t i = 0; i < st.p.workers; ++i) {
        worker &wk = st.workers[i];
        if (wk.handle != nullptr) {
            api().ucp_worker_destroy(wk.handle);
            wk.handle = nullptr;
        }
        // Operations UCX never completed (their requests went with the worker).
        for (auto &slot : wk.slots) {
            if (slot->busy) {
                completion *done = slot->done;
                slot->busy = false;
                slot->early.clear();
                --wk.inflight;
                if (slot->pair != nullptr) {
                    --slot->pair->inflight;
                }
                if (done != nullptr) {
                    done->fn(done, status::system);
                }
            }
        }
        // Bulk payloads never taken (their descriptors went with the worker).
        while (wk.live != nullptr) {
            st.free_bulk(wk, wk.live);
        }
    }
    if (st.ctx != nullptr) {
        detail::destroy_datatypes(st);
        api().ucp_cleanup(st.ctx);
        st.ctx = nullptr;
    }
}

void transport::address(const void *&addr, std::size_t &len) const noexcept
{
    addr = st_->blob.data();
    len = st_->blob.size();
}

status transport::connect(std::uint32_t pi, const void *addr, std::size_t len) noexcept
{
    state &st = *st_;
    if (pi >= st.p.num_peers) {
        base::log(base::log_level::error, "ucx: connect: peer %u out of range (%u peers)", pi,
                  st.p.num_peers);
        return status::invalid_arg;
    }
    auto refuse = [pi](const char *why, std::size_t a, std::size_t b) {
        base::log(base::log_level::error, "ucx: connect: peer %u: address blob %s (%zu, %zu)", pi,
                  why, a, b);
        return status::invalid_arg;
    };
    if (addr == nullptr || len < detail::k_addr_head) {
        return refuse("truncated: length, header", len, detail::k_addr_head);
    }
    const auto *b = static_cast<const unsigned char *>(addr);
    std::uint16_t version, wcount;
    std::memcpy(&version, b + 4, 2);
    std::memcpy(&wcount, b + 6, 2);
    if (detail::load_u32(b) != detail::k_addr_magic) {
        return refuse("has a bad magic: got, want", detail::load_u32(b), detail::k_addr_magic);
    }
    if (version != detail::k_addr_version) {
        return refuse("has another version: got, want", version, detail::k_addr_version);
    }
    if (wcount == 0 || wcount > k_max_workers) {
        return refuse("has a bad worker count: got, max", wcount, k_max_workers);
    }
    std::vector<std::vector<unsigned char>> addrs;
    try {
        addrs.resize(wcount);
        std::size_t at = detail::k_addr_head;
        for (std::uint32_t i = 0; i < wcount; ++i) {
            if (len - at < 4) {
                return refuse("truncated: at, length", at, len);
            }
            const std::uint32_t l = detail::load_u32(b + at);
            at += 4;
            if (l == 0 || l > k_max_worker_address) {
                return refuse("has a bad worker address length: worker, length", i, l);
            }
            if (len - at < l) {
                return refuse("truncated: address runs past the end: at + length, blob length",
                              at + l, len);
            }
            addrs[i].assign(b + at, b + at + l);
            at += l;
        }
        if (at != len) {
            return refuse("has trailing bytes: used, length", at, len);
        }
    } catch (...) {
        base::log(base::log_level::error, "ucx: connect: peer %u: no memory", pi);
        return status::nomem;
    }
    detail::peer &pr = st.peers[pi];
    std::uint32_t expect = 0;
    // sync: acq_rel on success (claims the peer: only one connect fills it); relaxed on failure.
    if (!pr.state.compare_exchange_strong(expect, 1, std::memory_order_acq_rel,
                                          std::memory_order_relaxed)) {
        base::log(base::log_level::error, "ucx: connect: peer %u is already connected", pi);
        return status::invalid_arg;
    }
    pr.workers = wcount;
    pr.addrs = std::move(addrs);
    // sync: release; pairs with the acquire loads in get_ep() and am_recv().
    pr.state.store(2, std::memory_order_release);
    return status::ok;
}

bool transport::try_lock(std::uint32_t w, std::uintptr_t holder) noexcept
{
    std::atomic<std::uintptr_t> &l = st_->workers[w].holder;
    // A compare-exchange: a failed attempt must not overwrite the holder's name.
    // sync: acquire; pairs with the release in unlock() (the previous owner's UCX calls
    // happen before ours). Relaxed on failure: nothing is taken.
    std::uintptr_t free_word = 0;
    return l.load(std::memory_order_relaxed) == 0 &&
           l.compare_exchange_strong(free_word, holder, std::memory_order_acquire,
                                     std::memory_order_relaxed);
}

void transport::lock(std::uint32_t w, std::uintptr_t holder) noexcept
{
    base::backoff bo;
    while (!try_lock(w, holder)) {
        bo.pause();
    }
}

void transport::unlock(std::uint32_t w) noexcept
{
    // sync: release; pairs with the acquire in try_lock().
    st_->workers[w].holder.store(0, std::memory_order_release);
}

bool transport::held_by(std::uint32_t w, std::uintptr_t holder) const noexcept
{
    // Relaxed: the word names a holder from its compare-exchange to its release store of
    // 0 (a failed attempt writes nothing); the caller's own stores happen before this
    // load, so it never sees its own name after its release, and no other holder's name
    // equals it.
    return st_->workers[w].holder.load(std::memory_order_relaxed) == holder;
}

std::uint32_t transport::peer_workers(std::uint32_t peer) const noexcept
{
    return st_->peers[peer].workers;
}

int transport::poll(std::uint32_t w) noexcept
{
    state &st = *st_;
    worker &wk = st.workers[w];
    const std::uint64_t before = wk.stats.delivered;
    int n = static_cast<int>(api().ucp_worker_progress(wk.handle));
    n += static_cast<int>(wk.stats.delivered - before);
    if (!wk.to_close.empty()) {
        for (ucp_ep_h ep : wk.to_close) {
            ucp_request_param_t prm;
            std::memset(&prm, 0, sizeof prm);
            prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
            void *r = api().ucp_ep_close_nbx(ep, &prm);
            if (UCS_PTR_IS_PTR(r)) {
                try {
                    wk.closing.push_back(r);
                } catch (...) {
                    api().ucp_request_free(r);
                }
            }
        }
        wk.to_close.clear();
    }
    if (!wk.closing.empty()) {
        auto done = [](void *r) {
            if (api().ucp_request_check_status(r) == UCS_INPROGRESS) {
                return false;
            }
            api().ucp_request_free(r);
            return true;
        };
        wk.closing.erase(std::remove_if(wk.closing.begin(), wk.closing.end(), done),
                         wk.closing.end());
    }
    if (!wk.failed_peers.empty()) {
        auto failed = std::move(wk.failed_peers);
        wk.failed_peers.clear();
        for (const auto &f : failed) {
            ++n;
            if (st.p.on_peer_failure != nullptr) {
                st.p.on_peer_failure(st.p.ctx, f.first, f.second);
            }
        }
    }
    return n;
}

int transport::event_fd(std::uint32_t w) const noexcept { return st_->workers[w].efd; }

status transport::arm(std::uint32_t w) noexcept
{
    const ucs_status_t s = api().ucp_worker_arm(st_->workers[w].handle);
    if (s == UCS_OK) {
        return status::ok;
    }
    if (s == UCS_ERR_BUSY) {
        return status::busy;
    }
    return detail::ucs_error("arm", "ucp_worker_arm", s);
}

void transport::signal(std::uint32_t w) noexcept
{
    const ucs_status_t s = api().ucp_worker_signal(st_->workers[w].handle);
    if (s != UCS_OK) {
        (void)detail::ucs_error("signal", "ucp_worker_signal", s);
    }
}

counters transport::stats(std::uint32_t w) const noexcept { return st_->workers[w].stats; }

} // namespace mpiv::ep::ucx
