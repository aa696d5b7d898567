// engine: arrivals (checks, matching hand-off, the pending list), delivery (inline,
// packet, rendezvous; the reads from the sender's memory are engine_cma.cpp), receives,
// probes, batched completions and progress(). See engine.hpp for the design.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <type_traits>

#include "base/backoff.hpp"
#include "base/copy.hpp"
#include "base/log.hpp"
#include "base/stats.hpp"
#include "endpoints/engine_detail.hpp"

namespace mpiv::ep {

namespace {

constexpr int k_drain_batch = 64; // messages per queue per progress() call
static_assert(k_drain_batch <= detail::completion_batch::k_size,
              "a drain's messages fit a batch (further receives they release complete at once)");
// Bytes of a batched receive's buffer prefetched before the completions (the first lines
// of an eager copy; the hardware's own prefetcher follows a longer one).
constexpr std::size_t k_batch_buffer_bytes = 256;

// Spare inmsgs per thread, up to k_spares, in a LIFO list through next_pending (unused
// while an inmsg is spare): in a ping-pong the thread that delivers a message is the one
// that receives the next, and a batch of completions (engine.hpp) frees a whole drain's
// messages at once, which that thread's next drain takes again; so arrivals need no
// malloc. The list is initial-exec TLS (trivial types: no guard, no __tls_get_addr); a
// separate object with a destructor, touched when a thread first keeps a spare, frees
// them at thread exit.
static_assert(std::is_trivially_destructible_v<inmsg>, "spare inmsgs are reused in place");
constexpr unsigned k_spares = detail::completion_batch::k_size;
thread_local inmsg *tl_spares __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local unsigned tl_spare_count __attribute__((tls_model("initial-exec"))) = 0;

struct spare_release {
    ~spare_release()
    {
        while (inmsg *m = tl_spares) {
            tl_spares = m->next_pending;
            delete m;
        }
        tl_spare_count = 0;
    }
};
thread_local spare_release tl_spare_release;

inmsg *alloc_inmsg() noexcept
{
    if (inmsg *m = tl_spares) {
        tl_spares = m->next_pending;
        --tl_spare_count;
        return new (m) inmsg; // fresh node state (inmsg is trivially destructible)
    }
    return new (std::nothrow) inmsg;
}

void free_inmsg(inmsg *m) noexcept
{
    if (tl_spare_count < k_spares) {
        static thread_local bool registered __attribute__((tls_model("initial-exec"))) = false;
        if (!registered) {
            registered = true;
            (void)&tl_spare_release; // registers the thread-exit delete
        }
        m->next_pending = tl_spares;
        tl_spares = m;
        ++tl_spare_count;
    } else {
        delete m;
    }
}

} // namespace

using detail::put;

bool engine::deliver(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept
{
    const wire &w = m.w;
    const std::size_t n = std::min<std::size_t>(w.size, to.capacity);
    {
        using base::stats::add;
        using base::stats::counter;
        add(counter::received);
        add(counter::bytes_received, n);
        const bool ucx = peers_[w.from].ucx; // (checked on arrival: a connected peer)
        add(ucx ? counter::ucx_received : counter::shm_received);
        add(ucx ? counter::ucx_bytes_received : counter::shm_bytes_received, n);
        if (w.kind == wire_kind::eager_inline) {
            add(counter::received_inline);
        } else if (w.kind == wire_kind::eager_packet) {
            add(counter::received_eager);
        } else {
            add(counter::received_rendezvous);
            if ((w.flags & k_wire_gather) != 0) {
                add(counter::received_gather);
            } else if ((w.flags & k_wire_streamed) != 0) {
                add(counter::received_streamed);
            }
        }
    }
    int error = w.size > to.capacity ? MPIV_ERR_TRUNCATE : MPIV_OK;
    wire_kind control = wire_kind::pad; // what the sender waits for: ack, fin or nothing
    switch (w.kind) {
    case wire_kind::eager_inline:
        put(to, 0, w.u.data, std::min(n, k_wire_inline));
        if (n > k_wire_inline) {
            put(to, k_wire_inline, m.more, n - k_wire_inline);
        }
        break;
    case wire_kind::eager_packet:
        put(to, 0, m.packet, n);
        if (shm_.packet_return(w.from, const_cast<void *>(m.packet)) != status::ok) {
            base::log(base::log_level::error, "mpiv: cannot return a packet to peer %u", w.from);
        }
        if ((w.flags & k_wire_sync) != 0) {
            control = wire_kind::ack;
        }
        break;
    case wire_kind::rts:
#if MPIV_HAVE_UCX
        if ((w.flags & k_wire_bulk) != 0) {
            return take_bulk(m, to, user, st); // the bytes come with it over UCX
        }
#endif
        if (w.from != params_.self && !shm_.at(w.from).cma) {
            // This process cannot read the sender: it copies the bytes through shared
            // memory (engine_copy.cpp).
            const bool done = start_pull(m, to, user, st);
            free_inmsg(&m);
            return done;
        }
        if (w.from == params_.self && (w.flags & k_wire_streamed) != 0) {
            // This process's own send: wait until it has written everything.
            const auto *written = reinterpret_cast<const std::size_t *>(w.u.ref.spare);
            base::backoff wait;
            // sync: acquire; pairs with the writer's release store of the count.
            while (__atomic_load_n(written, __ATOMIC_ACQUIRE) < w.size) {
                wait.pause();
            }
        }
        if (n != 0 || (w.flags & k_wire_streamed) != 0) {
            if (w.from != params_.self) {
                base::stats::add(base::stats::counter::cma_reads);
                const int read = read_remote(w.from, to, w, n);
                error = read != MPIV_OK ? read : error;
            } else if ((w.flags & k_wire_gather) != 0) {
                const auto *iov = reinterpret_cast<const struct iovec *>(w.u.ref.where);
                for (std::size_t i = 0, off = 0; off < n; off += iov[i].iov_len, ++i) {
                    put(to, off, iov[i].iov_base, std::min(iov[i].iov_len, n - off));
                }
            } else {
                put(to, 0, reinterpret_cast<const void *>(w.u.ref.where), n);
            }
        }
        control = wire_kind::fin;
        break;
    default:
        error = MPIV_ERR_INTERNAL;
        break;
    }
    st = mpiv_p2p_status_t{w.source, w.tag, n, static_cast<std::size_t>(w.size), error};
    const bool done = control == wire_kind::pad ||
                      send_control(w.from, control, w.u.ref.token, n, user, st);
    free_inmsg(&m);
    return done;
}

inline void engine::complete_recv(recv_op &op, inmsg &m) noexcept
{
    mpiv_p2p_status_t st;
    void *const user = op.user;
    if (deliver(m, op.to, user, st)) {
        params_.complete(user, &st);
    }
}

inline void engine::arrive(comm_state &group, inmsg &m, std::uint32_t queue,
                           detail::completion_batch *batch) noexcept
{
    // An endpoints communicator: the handle of the endpoint the message is for, whose
    // private matching may only be reached through its own queue (whose consumer lock the
    // drain holds).
    comm_state *target = &group;
    if (__builtin_expect(!group.eps.empty(), 0)) {
        if (m.w.dst_ep >= group.eps.size() ||
            (queue != k_no_queue && queue != group.eps[m.w.dst_ep]->queue)) {
            char what[128];
            std::snprintf(what, sizeof what,
                          "a message for endpoint %u of communicator %u (which has %zu here) "
                          "in inbound queue %u",
                          m.w.dst_ep, m.w.cid, group.eps.size(), queue);
            fault(m.w.from, what);
            free_inmsg(&m);
            return;
        }
        target = group.eps[m.w.dst_ep].get();
    }
    comm_state &comm = *target;
    match::envelope env;
    env.source = m.w.source;
    env.tag = m.w.tag;
    env.seq = m.w.seq;
    env.size = m.w.size;
    env.ordered = (m.w.flags & k_wire_unordered) == 0;
    match::match_list matched;
    const status s = comm.match([&](auto &c) { return c.arrive(m, env, matched); });
    if (s != status::ok) {
        // An envelope the communicator cannot take (a source outside it), or no memory for
        // the sender's state: either way later messages of this sender could wait for it
        // for ever; say so (the component ends the job).
        char what[128];
        std::snprintf(what, sizeof what, "a message for communicator %u from rank %d, tag %d: %s",
                      m.w.cid, m.w.source, m.w.tag, mpiv_status_string(to_c(s)));
        fault(m.w.from, what);
        free_inmsg(&m);
        return;
    }
    std::int64_t held = 1; // m, unless it matched; minus messages of its sender it freed
    bool mine = false;     // m matched
    while (match::msg_node *mn = matched.pop()) {
        auto &im = static_cast<inmsg &>(*mn);
        mine = mine || &im == &m;
        base::stats::add(base::stats::counter::recv_posted_matched);
        auto &r = static_cast<recv_op &>(*im.matched_recv());
        if (r.leveled) {
            count_posted(-1);
        }
        base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_received);
        if (batch != nullptr && batch->n < detail::completion_batch::k_size) {
            batch->msg[batch->n++] = &im;
        } else {
            complete_recv(r, im);
        }
        --held;
    }
    if (!mine) {
        base::stats::add(base::stats::counter::unexpected);
        base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_unexpected);
    }
    if (held != 0) {
        count_held(held);
    }
}

void engine::count_posted(std::int64_t delta) noexcept
{
    // Relaxed: a statistic; nothing is ordered by it.
    const std::int64_t now = posted_level_.fetch_add(delta, std::memory_order_relaxed) + delta;
    std::int64_t max = posted_max_.load(std::memory_order_relaxed);
    while (now > max && !posted_max_.compare_exchange_weak(max, now, std::memory_order_relaxed)) {
    }
}

void engine::count_held(std::int64_t delta) noexcept
{
    std::int64_t now;
    if (serial_) {
        // Relaxed: calls never overlap (serial_); no locked instruction.
        now = held_.load(std::memory_order_relaxed) + delta;
        held_.store(now, std::memory_order_relaxed);
    } else {
        // Relaxed: a statistic; nothing is ordered by it.
        now = held_.fetch_add(delta, std::memory_order_relaxed) + delta;
    }
    if (delta <= 0) {
        return;
    }
    // Relaxed: a statistic (the largest value seen).
    std::int64_t max = held_max_.load(std::memory_order_relaxed);
    while (now > max && !held_max_.compare_exchange_weak(max, now, std::memory_order_relaxed)) {
    }
    // Relaxed: only decides which thread reports a threshold.
    std::uint64_t at = held_warn_at_.load(std::memory_order_relaxed);
    if (static_cast<std::uint64_t>(now) < at ||
        !held_warn_at_.compare_exchange_strong(at, at * 2, std::memory_order_relaxed)) {
        return;
    }
    base::log(base::log_level::warn,
              "mpiv: %lld messages arrived before their receives and wait in this process's "
              "memory (%llu MiB); MPI makes the receiver keep them: post receives earlier or "
              "pace the senders (next report at %llu)",
              static_cast<long long>(now),
              static_cast<unsigned long long>(static_cast<std::uint64_t>(now) * sizeof(inmsg) >> 20),
              static_cast<unsigned long long>(at * 2));
}

void engine::arrive_early(comm_state &comm, inmsg *first) noexcept
{
    // Early arrivals are matched only now; a new arrival of the same sender may overtake
    // them into arrive(), and the sequence numbers put it back in order (an endpoints
    // group's are matched before it is published: see comm_create_endpoints()).
    while (first != nullptr) {
        inmsg *next = first->next_pending;
        arrive(comm, *first, k_no_queue);
        first = next;
    }
}

void engine::fault(std::uint32_t peer, const char *what) noexcept
{
    // A message can only be blamed on the other, connected, peer it names: one that names
    // this process or no connected peer may come from anyone.
    if (peer >= params_.num_peers || peer == params_.self || !peers_[peer].connected) {
        peer = MPIV_P2P_PEER_UNKNOWN;
    }
    std::atomic<bool> &reported =
        peer < params_.num_peers ? peers_[peer].faulted : unknown_faulted_;
    // Relaxed: only makes the report once per peer.
    if (reported.exchange(true, std::memory_order_relaxed)) {
        return;
    }
    if (params_.fault != nullptr) {
        params_.fault(peer < params_.num_peers ? peer : MPIV_P2P_PEER_UNKNOWN, what);
    } else if (peer < params_.num_peers) {
        base::log(base::log_level::error, "mpiv: peer %u wrote invalid data into shared memory: %s",
                  peer, what);
    } else {
        base::log(base::log_level::error,
                  "mpiv: invalid data in shared memory, from a peer that cannot be named: %s",
                  what);
    }
}

void engine::handle_control(const wire &w) noexcept
{
    // The token must name a live send of this process to the peer that answers, of the
    // kind that waits for this answer (ACK: synchronous eager; FIN: rendezvous).
    send_op *op = tokens_.peek(w.u.ref.token);
    const wire_kind expects = w.kind == wire_kind::ack ? wire_kind::eager_packet : wire_kind::rts;
    if (op == nullptr || op->peer != w.from || op->w.kind != expects ||
        (op = tokens_.redeem(w.u.ref.token)) == nullptr) {
        char what[96];
        std::snprintf(what, sizeof what, "%s with token %#llx, which names no send of ours to it",
                      w.kind == wire_kind::ack ? "an ACK" : "a FIN",
                      static_cast<unsigned long long>(w.u.ref.token));
        fault(w.from, what);
        return;
    }
    mpiv_p2p_status_t st{op->dest, op->w.tag, op->w.size, op->w.size, MPIV_OK};
    params_.complete(op->user, &st);
}

inline bool engine::valid_arrival(const wire &w, std::size_t more_bytes) noexcept
{
    if (w.from < params_.num_peers && peers_[w.from].connected) {
        if (w.kind == wire_kind::eager_inline) {
            if (w.inline_bytes == w.size && w.size <= k_wire_inline) {
                return true;
            }
        } else if (w.kind == wire_kind::eager_packet &&
                   w.size <= shm_.packet_size(w.from)) {
            return true;
        }
    }
    return valid_arrival_slow(w, more_bytes);
}

bool engine::valid_arrival_slow(const wire &w, std::size_t more_bytes) noexcept
{
    char what[128];
    if (w.from >= params_.num_peers || !peers_[w.from].connected) {
        std::snprintf(what, sizeof what, "a message names sender %u, not a connected peer",
                      w.from);
        fault(w.from, what);
        return false;
    }
    switch (w.kind) {
    case wire_kind::eager_inline:
        if (w.inline_bytes != w.size || w.size > k_inline_max ||
            (w.size > k_wire_inline && w.size - k_wire_inline > more_bytes)) {
            std::snprintf(what, sizeof what,
                          "an inline message of %llu bytes (%u inline, %zu in the queue)",
                          static_cast<unsigned long long>(w.size), w.inline_bytes,
                          more_bytes + k_wire_inline);
            fault(w.from, what);
            return false;
        }
        return true;
    case wire_kind::eager_packet:
        if (w.size > shm_.packet_size(w.from)) {
            std::snprintf(what, sizeof what, "a packet message of %llu bytes (packets hold %u)",
                          static_cast<unsigned long long>(w.size),
                          shm_.packet_size(w.from));
            fault(w.from, what);
            return false;
        }
        return true;
    default: // rts
        break;
    }
    if ((w.flags & k_wire_gather) != 0 && w.u.ref.spare > 256 && w.u.ref.spare - 256 > w.size) {
        std::snprintf(what, sizeof what, "a gather list of %llu ranges for %llu bytes",
                      static_cast<unsigned long long>(w.u.ref.spare),
                      static_cast<unsigned long long>(w.size));
        fault(w.from, what);
        return false;
    }
    if (w.from == params_.self) {
        // Its addresses are read in this process: it must be one of our live sends, as the
        // send itself described it.
        const send_op *op = tokens_.peek(w.u.ref.token);
        constexpr std::uint8_t k_layout = k_wire_gather | k_wire_streamed;
        if (op == nullptr || op->peer != params_.self || op->w.kind != wire_kind::rts ||
            op->w.size != w.size || op->w.u.ref.where != w.u.ref.where ||
            op->w.u.ref.spare != w.u.ref.spare || (op->w.flags & k_layout) != (w.flags & k_layout)) {
            fault(w.from,
                  "a rendezvous message claims to come from this process but matches none of "
                  "its sends");
            return false;
        }
    }
    return true;
}

void engine::handle(const unsigned char *msg, std::size_t bytes, std::uint32_t queue,
                    void *bulk, detail::completion_batch *batch) noexcept
{
    wire_kind kind;
    std::memcpy(&kind, msg + offsetof(wire, kind), sizeof kind);
    switch (kind) {
    case wire_kind::ack:
    case wire_kind::fin:
    case wire_kind::cts:
    case wire_kind::frag: {
        // Control messages: a header alone, handled from a copy.
        wire w;
        std::memcpy(&w, msg, sizeof w);
        switch (kind) {
        case wire_kind::cts: handle_cts(w); break;
        case wire_kind::frag: handle_frag(w); break;
        default: handle_control(w); break;
        }
        return;
    }
    case wire_kind::eager_inline:
    case wire_kind::eager_packet:
    case wire_kind::rts:
        break;
    case wire_kind::pad:
        return;
    default: {
        std::uint32_t from;
        std::memcpy(&from, msg + offsetof(wire, from), sizeof from);
        char what[64];
        std::snprintf(what, sizeof what, "a message of unknown kind %u",
                      static_cast<unsigned>(kind));
        fault(from, what);
        return;
    }
    }
    inmsg *m = alloc_inmsg();
    if (m == nullptr) {
        base::log(base::log_level::error, "mpiv: out of memory receiving a message; aborting");
        std::abort();
    }
    std::memcpy(&m->w, msg, sizeof m->w); // straight from the drained copy
    const wire &w = m->w;
    const std::size_t more_bytes = bytes - sizeof w;
    m->packet = nullptr;
    m->next_pending = nullptr;
    m->bulk = bulk;
    m->lane = queue;
    if (!valid_arrival(w, more_bytes)) {
        free_inmsg(m);
        return;
    }
    if (__builtin_expect(((w.flags & k_wire_bulk) != 0) != (bulk != nullptr), 0)) {
        // (A UCX arrival's handle was checked against its header in on_ucx_message().)
        fault(w.from, "a message whose bytes should come by UCX but do not");
        free_inmsg(m);
        return;
    }
    if (w.kind == wire_kind::eager_packet) {
        void *p = nullptr;
        if (!shm_.packet_at(w.from, w.u.ref.where, p)) {
            fault(w.from, "a packet offset outside its packet region");
            free_inmsg(m);
            return;
        }
        m->packet = p;
    }
    if (w.kind == wire_kind::eager_inline && w.size > k_wire_inline) {
        std::memcpy(m->more, msg + sizeof w, w.size - k_wire_inline);
    }
    // Acquire: pairs with the release store in comm_create(). seq_cst: Dekker with
    // comm_destroy() (see there).
    comm_state *c = comms_[w.cid].load(std::memory_order_seq_cst);
    if (c == nullptr) {
        std::lock_guard<std::mutex> guard(pending_mu_);
        c = comms_[w.cid].load(std::memory_order_relaxed);
        if (c == nullptr) {
            inmsg **tail = &pending_;
            while (*tail != nullptr) {
                tail = &(*tail)->next_pending;
            }
            *tail = m;
            return;
        }
    }
    arrive(*c, *m, queue, batch);
}

status engine::irecv(comm_state &comm, std::int32_t source, std::int32_t tag,
                     const recv_target &to, void *user, recv_op &op, mpiv_p2p_status_t &st) noexcept
{
    if (to.sink == nullptr && to.buf == nullptr && to.capacity != 0) {
        return status::invalid_arg;
    }
    detail::bind_to_handle(comm);
    op.type = op_type::recv;
    op.comm = &comm;
    op.user = user;
    // Field by field, in 8-byte loads: the caller has just written `to` with 8-byte stores
    // (mpiv_p2p_irecv builds it from its arguments), and a 16-byte load spanning two of
    // them cannot take them from the store buffer: it would wait until every older store
    // reached the cache, among them a send's queue slot, whose line the receiving core
    // holds (that wait was a quarter of a worker's time with 16 ULTs per process sending
    // then receiving). Relaxed atomic loads, because the compiler never merges them.
    op.to.buf = __atomic_load_n(&to.buf, __ATOMIC_RELAXED);
    op.to.capacity = __atomic_load_n(&to.capacity, __ATOMIC_RELAXED);
    op.to.sink = __atomic_load_n(&to.sink, __ATOMIC_RELAXED);
    op.to.ctx = __atomic_load_n(&to.ctx, __ATOMIC_RELAXED);
    // Relaxed: see track_posted(). (op may complete on another thread once posted: the
    // flag is read from the local afterwards.)
    const bool leveled = track_posted_.load(std::memory_order_relaxed);
    op.leveled = leveled;
    const status s = locked_match(comm, [&](auto &c) { return c.post(op, source, tag); });
    if (s == status::ok) {
        count_held(-1); // an unexpected message
        base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_received);
        if (!deliver(static_cast<inmsg &>(*op.matched_msg()), to, user, st)) {
            return status::inprogress; // its ACK or FIN waits for room (or its bytes, two copies)
        }
    } else if (s == status::inprogress) {
        base::stats::add(base::stats::counter::recv_posted);
        base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_recv_posted);
        if (leveled) {
            count_posted(1);
        }
    }
    return s;
}

status engine::cancel(recv_op &op) noexcept
{
    const status s = locked_match(*op.comm, [&](auto &c) { return c.cancel(op); });
    if (s == status::ok) {
        base::stats::add(base::stats::counter::recv_cancelled);
        if (op.leveled) {
            count_posted(-1);
        }
    }
    return s;
}

status engine::iprobe(comm_state &comm, std::int32_t source, std::int32_t tag,
                      mpiv_p2p_status_t &st) noexcept
{
    detail::bind_to_handle(comm);
    match::envelope env;
    const status s = locked_match(comm, [&](auto &c) { return c.probe(source, tag, env); });
    if (s == status::ok) {
        st = mpiv_p2p_status_t{env.source, env.tag, 0, env.size, MPIV_OK};
    }
    return s;
}

status engine::improbe(comm_state &comm, std::int32_t source, std::int32_t tag, inmsg *&msg_p,
                       mpiv_p2p_status_t &st) noexcept
{
    detail::bind_to_handle(comm);
    match::msg_node *m = nullptr;
    const status s = locked_match(comm, [&](auto &c) { return c.mprobe(source, tag, m); });
    if (s == status::ok) {
        count_held(-1); // taken out of the table: the message handle holds it now
        base::stats::add_comm(comm.stats_key, base::stats::comm_counter::comm_received);
        const match::envelope &env = m->env();
        st = mpiv_p2p_status_t{env.source, env.tag, 0, env.size, MPIV_OK};
        msg_p = static_cast<inmsg *>(m);
    }
    return s;
}

status engine::mrecv(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept
{
    return deliver(m, to, user, st) ? status::ok : status::inprogress;
}

void engine::complete_batch(detail::completion_batch &b) noexcept
{
    const int n = b.n;
    b.n = 0;
    // First every line the completions will write, so that their misses overlap: the
    // start of each eager message's buffer, and (params.prefetch) each request.
    for (int i = 0; i < n; ++i) {
        const auto &r = static_cast<const recv_op &>(*b.msg[i]->matched_recv());
        const wire &w = b.msg[i]->w;
        if (r.to.sink == nullptr && r.to.buf != nullptr && w.kind != wire_kind::rts) {
            const std::size_t bytes = std::min<std::size_t>(
                {static_cast<std::size_t>(w.size), r.to.capacity, k_batch_buffer_bytes});
            const auto first = reinterpret_cast<std::uintptr_t>(r.to.buf) & ~std::uintptr_t{k_cacheline - 1};
            const auto end = reinterpret_cast<std::uintptr_t>(r.to.buf) + bytes;
            for (std::uintptr_t line = first; line < end; line += k_cacheline) {
                base::prefetch(reinterpret_cast<const void *>(line));
            }
        }
        if (params_.prefetch != nullptr) {
            params_.prefetch(r.user);
        }
    }
    for (int i = 0; i < n; ++i) {
        complete_recv(static_cast<recv_op &>(*b.msg[i]->matched_recv()), *b.msg[i]);
    }
    base::stats::add(base::stats::counter::batched_completions, static_cast<std::uint64_t>(n));
}

template <bool Batch> inline int engine::drain_inbound() noexcept
{
    int events = 0;
    [[maybe_unused]] detail::completion_batch batch;
    detail::completion_batch *const mine = Batch ? &batch : nullptr;
    const std::size_t n = shm_.inbound_count();
    std::size_t next = this_endpoint(); // own queue first, then the others round the ring
    for (std::size_t i = 0; i < n; ++i) {
        shm::mpsc_queue<> &q = shm_.inbound(next);
        const auto index = static_cast<std::uint32_t>(next);
        next = next + 1 == n ? 0 : next + 1;
        if (q.empty_hint()) {
            continue;
        }
        const auto on_message = [this, index, mine](const void *payload, std::size_t bytes) {
            detail::tsan_popped();
            handle(static_cast<const unsigned char *>(payload), bytes, index, nullptr, mine);
        };
        ++detail::tl_draining;
        const int k = serial_ ? q.drain_serial(on_message, k_drain_batch)
                              : q.drain(on_message, k_drain_batch, detail::self());
        --detail::tl_draining;
        if (Batch && batch.n != 0) {
            complete_batch(batch);
        }
        if (k > 0) {
            events += k;
        }
    }
    return events;
}

int engine::drain_batched() noexcept { return drain_inbound<true>(); }

int engine::progress() noexcept
{
    int events = 0;
    // Relaxed: a hint; drain_outbound() reads the list under its mutex.
    if (outbound_count_.load(std::memory_order_relaxed) != 0) {
        events += drain_outbound();
    }
    // A worker running many ULTs completes each drain's receives after it, together.
    events += __builtin_expect(sched::worker::prefetching(), 0) ? drain_batched()
                                                                : drain_inbound<false>();
#if MPIV_HAVE_UCX
    // Relaxed: a hint, set once the UCX transport is up (before any traffic).
    if (ucx_up_.load(std::memory_order_relaxed)) {
        for (std::size_t q = 0; q < shm_.inbound_count(); ++q) {
            events += poll_ucx(q);
        }
    }
#endif
    return events;
}

} // namespace mpiv::ep
