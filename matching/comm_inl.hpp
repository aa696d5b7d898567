// Implementation of basic_comm (comm.hpp): hot paths, inline because the class is a
// template over the lock type. See comm.hpp for the design.
#pragma once

#include <algorithm>
#include <map>
#include <new>
#include <utility>
#include <vector>

#include "base/log.hpp"
#include "base/stats.hpp"
#include "matching/comm.hpp"

namespace mpiv::match {

template <class Lock>
status basic_comm<Lock>::create(table &t, const comm_params &params,
                                std::unique_ptr<basic_comm> &comm_p) noexcept
{
    constexpr unsigned all =
        k_assert_no_any_source | k_assert_no_any_tag | k_assert_allow_overtaking;
    if (params.size < 1 || (params.assertions & ~all) != 0) {
        base::log(
            base::log_level::error, "match: communicator %u: size %d or assertions %#x are invalid",
            static_cast<unsigned>(params.cid), static_cast<int>(params.size), params.assertions);
        return status::invalid_arg;
    }
    // Value-initialized: every slot starts as nullptr. Allocated even with
    // allow_overtaking: ordered messages may come once the assertion is lifted.
    std::unique_ptr<peer_slot[]> peers(
        new (std::nothrow) peer_slot[static_cast<std::size_t>(params.size)]());
    if (peers == nullptr) {
        base::log(base::log_level::error, "match: communicator %u: no memory for %d peers",
                  static_cast<unsigned>(params.cid), static_cast<int>(params.size));
        return status::nomem;
    }
    std::unique_ptr<basic_comm> c(new (std::nothrow) basic_comm(t, params, std::move(peers)));
    if (c == nullptr) {
        base::log(base::log_level::error, "match: communicator %u: no memory",
                  static_cast<unsigned>(params.cid));
        return status::nomem;
    }
    comm_p = std::move(c);
    return status::ok;
}

template <class Lock>
basic_comm<Lock>::basic_comm(table &t, const comm_params &params,
                             std::unique_ptr<peer_slot[]> peers) noexcept
    : table_(t), cid_(params.cid), size_(params.size), peers_(std::move(peers)),
      assertions_(params.assertions), wild_allowed_(wild_for(params.assertions))
{
}

template <class Lock>
basic_comm<Lock>::~basic_comm()
{
    for (std::int32_t i = 0; i < size_; ++i) {
        // Relaxed: destruction follows the last call, ordered by the caller.
        delete peers_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
    }
}

template <class Lock>
void basic_comm<Lock>::bind(recv_node &r, msg_node &m) noexcept
{
    r.state_ = recv_node::state::matched;
    r.msg_ = &m;
    r.env_ = m.env_;
    m.recv_ = &r;
}

template <class Lock>
bool basic_comm<Lock>::valid_pattern(std::int32_t source, std::int32_t tag) const noexcept
{
    const unsigned a = assertions();
    if (source == k_any_source ? (a & k_assert_no_any_source) != 0
                               : source < 0 || source >= size_) {
        return false;
    }
    return tag != k_any_tag || (a & k_assert_no_any_tag) == 0;
}

// ---------------------------------------------------------------- posting side

template <class Lock>
status basic_comm<Lock>::post(recv_node &r, std::int32_t source, std::int32_t tag) noexcept
{
    if (!valid_pattern(source, tag)) {
        base::log(base::log_level::error,
                  "match: communicator %u: receive (source %d, tag %d) is invalid",
                  static_cast<unsigned>(cid_), static_cast<int>(source), static_cast<int>(tag));
        return status::invalid_arg;
    }
    detail::link &l = as_link(r);
    l.cid_ = cid_;
    l.source_ = source;
    l.tag_ = tag;
    r.msg_ = nullptr;
    r.state_ = recv_node::state::posted;
    r.any_tag_listed_ = false;
    if (source == k_any_source) {
        return post_wild(r);
    }
    if (tag == k_any_tag) {
        return post_any_tag(r);
    }
    return post_specific(r);
}

template <class Lock>
status basic_comm<Lock>::post_specific(recv_node &r) noexcept
{
    {
        table::queue_guard q(table_, key_of(as_link(r)));
        if (!q.holds(side::msg)) {
            // sync: acquire; pairs with the release fetch_add in post_wild()
            r.seq_ = post_seq_.load(std::memory_order_acquire);
            q.push_back(as_link(r), side::recv);
            return status::inprogress;
        }
        if (!wild()) { // no unexpected list to leave
            bind(r, as_msg(*q.pop_front()));
            return status::ok;
        }
    }
    return post_specific_slow(r);
}

template <class Lock>
status basic_comm<Lock>::post_specific_slow(recv_node &r) noexcept
{
    // An unexpected message waits: it must leave the unexpected list too.
    base::lock_guard<Lock> g(tlp_);
    table::queue_guard q(table_, key_of(as_link(r)));
    if (q.holds(side::msg)) {
        msg_node &m = as_msg(*q.pop_front());
        if (wild()) { // read again: the mode may have changed since post_specific()
            unexp_unlink(m);
        }
        bind(r, m);
        return status::ok;
    }
    // sync: acquire; pairs with the release fetch_add in post_wild()
    r.seq_ = post_seq_.load(std::memory_order_acquire);
    q.push_back(as_link(r), side::recv);
    return status::inprogress;
}

template <class Lock>
status basic_comm<Lock>::post_wild(recv_node &r) noexcept
{
    base::lock_guard<Lock> g(tlp_);
    const detail::link &l = as_link(r);
    if (!wild()) {
        // Both wildcard assertions were set while this post was on its way.
        base::log(base::log_level::error,
                  "match: communicator %u: wildcard receive after mpi_assert_no_any_source "
                  "and mpi_assert_no_any_tag were set",
                  static_cast<unsigned>(cid_));
        return status::invalid_arg;
    }
    if (msg_node *m = take_unexpected(l.source_, l.tag_)) {
        base::stats::add(base::stats::counter::wildcard_matches);
        bind(r, *m);
        return status::ok;
    }
    // Count the wildcard before drawing its number (see "Why the fast arrival may ignore
    // wildcards" in comm.hpp); relaxed, the release below publishes it.
    wild_posted_.fetch_add(1, std::memory_order_relaxed);
    // sync: release; pairs with the acquire loads in post_specific()
    r.seq_ = post_seq_.fetch_add(2, std::memory_order_release) + 1;
    as_link(r).next_ = nullptr;
    if (wild_tail_ == nullptr) {
        wild_head_ = &r;
    } else {
        as_link(*wild_tail_).next_ = &as_link(r);
    }
    wild_tail_ = &r;
    return status::inprogress;
}

template <class Lock>
status basic_comm<Lock>::post_any_tag(recv_node &r) noexcept
{
    detail::link &l = as_link(r);
    detail::peer *p = nullptr;
    if (peer_of(l.source_, p) != status::ok) {
        return post_wild(r); // no memory for the peer: the wildcard list serves as well
    }
    lock_peer(*p);
    // sync: acquire; pairs with the release store in set_assertions() (the counts it
    // rebuilt). Relaxed count: see "Any-tag receives" in comm.hpp.
    if (wild_allowed_.load(std::memory_order_acquire) &&
        p->any_tag_unexpected.load(std::memory_order_relaxed) == 0) {
        // sync: acq_rel; release pairs with the acquire loads in post_specific(), acquire
        // with the release RMW of earlier wildcards (their wild_posted_ increments, see
        // "Why the fast arrival may ignore wildcards" in comm.hpp)
        r.seq_ = post_seq_.fetch_add(2, std::memory_order_acq_rel) + 1;
        l.next_ = nullptr;
        if (p->any_tail == nullptr) {
            p->any_head = &r;
        } else {
            as_link(*p->any_tail).next_ = &l;
        }
        p->any_tail = &r;
        r.any_tag_listed_ = true;
        // Relaxed, no RMW: written under the peer lock only.
        p->any_posted.store(p->any_posted.load(std::memory_order_relaxed) + 1,
                            std::memory_order_relaxed);
        unlock_peer(*p);
        return status::inprogress;
    }
    unlock_peer(*p);
    return post_wild(r); // a message it may take waits: take it under the TLP lock
}

template <class Lock>
void basic_comm<Lock>::any_tag_unlink(detail::peer &p, recv_node &r, recv_node *prev) noexcept
{
    recv_node *next = static_cast<recv_node *>(as_link(r).next_);
    if (prev == nullptr) {
        p.any_head = next;
    } else {
        as_link(*prev).next_ = next;
    }
    if (p.any_tail == &r) {
        p.any_tail = prev;
    }
    // Relaxed, no RMW: written under the peer lock only.
    p.any_posted.store(p.any_posted.load(std::memory_order_relaxed) - 1,
                       std::memory_order_relaxed);
}

template <class Lock>
inline void basic_comm<Lock>::lock_peer(detail::peer &p) noexcept
{
    if (!table_.serial()) {
        base::tas_acquire(p.lock);
    }
}

template <class Lock>
inline void basic_comm<Lock>::unlock_peer(detail::peer &p) noexcept
{
    if (!table_.serial()) {
        base::tas_release(p.lock);
    }
}

template <class Lock>
msg_node *basic_comm<Lock>::take_unexpected(std::int32_t source, std::int32_t tag) noexcept
{
    if (source != k_any_source && tag != k_any_tag) {
        table::queue_guard q(table_, key{cid_, source, tag});
        if (!q.holds(side::msg)) {
            return nullptr;
        }
        msg_node &m = as_msg(*q.pop_front());
        if (wild()) {
            unexp_unlink(m);
        }
        return &m;
    }
    // Empty in no-wild mode.
    for (msg_node *m = unexp_head_; m != nullptr; m = m->unexp_next_) {
        if (accepts(source, tag, m->env_)) {
            // m is the head of its key's FIFO: every earlier message of its key would
            // have been accepted first, and both lists keep a key's messages in order.
            table::queue_guard q(table_, key_of(as_link(*m)));
            q.pop_front();
            unexp_unlink(*m);
            return m;
        }
    }
    return nullptr;
}

template <class Lock>
status basic_comm<Lock>::probe(std::int32_t source, std::int32_t tag, envelope &env_p) noexcept
{
    if (!valid_pattern(source, tag)) {
        base::log(base::log_level::error,
                  "match: communicator %u: probe (source %d, tag %d) is invalid",
                  static_cast<unsigned>(cid_), static_cast<int>(source), static_cast<int>(tag));
        return status::invalid_arg;
    }
    if (source != k_any_source && tag != k_any_tag) {
        table::queue_guard q(table_, key{cid_, source, tag});
        if (!q.holds(side::msg)) {
            return status::not_found;
        }
        env_p = as_msg(*q.front()).env_;
        return status::ok;
    }
    base::lock_guard<Lock> g(tlp_);
    for (const msg_node *m = unexp_head_; m != nullptr; m = m->unexp_next_) {
        if (accepts(source, tag, m->env_)) {
            env_p = m->env_;
            return status::ok;
        }
    }
    return status::not_found;
}

template <class Lock>
status basic_comm<Lock>::mprobe(std::int32_t source, std::int32_t tag, msg_node *&msg_p) noexcept
{
    if (!valid_pattern(source, tag)) {
        base::log(base::log_level::error,
                  "match: communicator %u: mprobe (source %d, tag %d) is invalid",
                  static_cast<unsigned>(cid_), static_cast<int>(source), static_cast<int>(tag));
        return status::invalid_arg;
    }
    const bool specific = source != k_any_source && tag != k_any_tag;
    if (specific) {
        table::queue_guard q(table_, key{cid_, source, tag});
        if (!q.holds(side::msg)) {
            return status::not_found;
        }
        if (!wild()) {
            msg_node &m = as_msg(*q.pop_front());
            m.recv_ = nullptr;
            msg_p = &m;
            return status::ok;
        }
    }
    base::lock_guard<Lock> g(tlp_);
    msg_node *m = take_unexpected(source, tag);
    if (m == nullptr) {
        return status::not_found;
    }
    m->recv_ = nullptr;
    msg_p = m;
    return status::ok;
}

template <class Lock>
status basic_comm<Lock>::cancel(recv_node &r) noexcept
{
    detail::link &l = as_link(r);
    if (l.source_ != k_any_source && l.tag_ != k_any_tag) {
        table::queue_guard q(table_, key_of(l));
        if (r.state_ != recv_node::state::posted) {
            return status::not_found;
        }
        if (!q.remove(l)) {
            base::log(base::log_level::error, "match: posted receive missing from its queue");
            return status::internal;
        }
        r.state_ = recv_node::state::cancelled;
        return status::ok;
    }
    if (r.any_tag_listed_) {
        detail::peer &p = existing_peer(l.source_);
        lock_peer(p);
        const bool posted = r.state_ == recv_node::state::posted;
        if (posted) {
            recv_node *prev = nullptr;
            for (recv_node *a = p.any_head; a != &r;
                 a = static_cast<recv_node *>(as_link(*a).next_)) {
                prev = a;
            }
            any_tag_unlink(p, r, prev);
            r.state_ = recv_node::state::cancelled;
        }
        unlock_peer(p);
        return posted ? status::ok : status::not_found;
    }
    base::lock_guard<Lock> g(tlp_);
    if (r.state_ != recv_node::state::posted) {
        return status::not_found;
    }
    recv_node *prev = nullptr;
    for (recv_node *w = wild_head_; w != &r; w = static_cast<recv_node *>(as_link(*w).next_)) {
        prev = w;
    }
    wild_unlink(r, prev);
    r.state_ = recv_node::state::cancelled;
    return status::ok;
}

template <class Lock>
void basic_comm<Lock>::wild_unlink(recv_node &r, recv_node *prev) noexcept
{
    recv_node *next = static_cast<recv_node *>(as_link(r).next_);
    if (prev == nullptr) {
        wild_head_ = next;
    } else {
        as_link(*prev).next_ = as_link(r).next_;
    }
    if (wild_tail_ == &r) {
        wild_tail_ = prev;
    }
    wild_posted_.fetch_sub(1, std::memory_order_relaxed);
}

template <class Lock>
detail::peer &basic_comm<Lock>::existing_peer(std::int32_t source) noexcept
{
    // Relaxed: the peer exists and the caller's own synchronization orders its creation
    // before this call. A message of this source in the unexpected list was appended
    // under the TLP lock the caller holds, by an arrival that had its peer (or by
    // rebuild_unexpected()); a listed any-tag receive was listed by a post that made the
    // peer and happens before the caller's cancel().
    return *peers_[static_cast<std::size_t>(source)].load(std::memory_order_relaxed);
}

template <class Lock>
void basic_comm<Lock>::unexp_append(msg_node &m, detail::peer &p) noexcept
{
    if (m.env_.tag >= 0) {
        // Relaxed, no RMW: written under the TLP lock only (see comm.hpp).
        p.any_tag_unexpected.store(p.any_tag_unexpected.load(std::memory_order_relaxed) + 1,
                                   std::memory_order_relaxed);
    }
    m.unexp_next_ = nullptr;
    m.unexp_prev_ = unexp_tail_;
    if (unexp_tail_ == nullptr) {
        unexp_head_ = &m;
    } else {
        unexp_tail_->unexp_next_ = &m;
    }
    unexp_tail_ = &m;
}

template <class Lock>
void basic_comm<Lock>::unexp_unlink(msg_node &m) noexcept
{
    if (m.env_.tag >= 0) {
        detail::peer &p = existing_peer(m.env_.source);
        // Relaxed, no RMW: written under the TLP lock only (see comm.hpp).
        p.any_tag_unexpected.store(p.any_tag_unexpected.load(std::memory_order_relaxed) - 1,
                                   std::memory_order_relaxed);
    }
    if (m.unexp_prev_ == nullptr) {
        unexp_head_ = m.unexp_next_;
    } else {
        m.unexp_prev_->unexp_next_ = m.unexp_next_;
    }
    if (m.unexp_next_ == nullptr) {
        unexp_tail_ = m.unexp_prev_;
    } else {
        m.unexp_next_->unexp_prev_ = m.unexp_prev_;
    }
}

// ---------------------------------------------------------------- arrival side

template <class Lock>
status basic_comm<Lock>::arrive(msg_node &m, const envelope &env, match_list &matched) noexcept
{
    if (env.source < 0 || env.source >= size_ || env.tag == k_any_tag) {
        base::log(base::log_level::error,
                  "match: communicator %u: message (source %d, tag %d) is invalid",
                  static_cast<unsigned>(cid_), static_cast<int>(env.source),
                  static_cast<int>(env.tag));
        return status::invalid_arg;
    }
    // Ordered arrivals match under their peer's lock, for sender order; unordered ones
    // too while wildcards are allowed, for the peer's any-tag receives (see comm.hpp).
    detail::peer *p = nullptr;
    if (env.ordered || wild()) {
        const status s = peer_of(env.source, p);
        if (s != status::ok) {
            return s;
        }
    }
    detail::link &l = as_link(m);
    l.cid_ = cid_;
    l.source_ = env.source;
    l.tag_ = env.tag;
    m.env_ = env;
    m.recv_ = nullptr;
    if (!env.ordered) {
        if (p != nullptr) {
            lock_peer(*p);
        }
        if (!match_arrival(m, matched, p)) { // wildcards allowed since: again, locked
            const status s = peer_of(env.source, p);
            if (s != status::ok) {
                return s;
            }
            lock_peer(*p);
            (void) match_arrival(m, matched, p); // true with a peer
        }
        if (p != nullptr) {
            unlock_peer(*p);
        }
        return status::ok;
    }
    lock_peer(*p);
    if (env.seq != p->expected) {
        hold(*p, m);
    } else {
        msg_node *next = &m;
        do {
            (void) match_arrival(*next, matched, p); // true with a peer
            ++p->expected;
            next = take_held(*p);
        } while (next != nullptr);
    }
    unlock_peer(*p);
    return status::ok;
}

template <class Lock>
bool basic_comm<Lock>::match_arrival(msg_node &m, match_list &matched, detail::peer *p) noexcept
{
    detail::link &l = as_link(m);
    // Relaxed: a hint. While a wildcard is posted the bucket-lock step below only hands
    // over to the slow path, so go there at once; the slow path decides under its own locks
    // whatever this load saw (no-wild mode keeps the count at 0).
    if (wild_posted_.load(std::memory_order_relaxed) != 0) {
        return match_arrival_slow(m, matched, p);
    }
    {
        table::queue_guard q(table_, key_of(l));
        const bool wild_mode = wild();
        if (wild_mode && p == nullptr) {
            return false;
        }
        // Relaxed: the bucket lock orders this load after the increment of any wildcard
        // posted before the key's head, and the peer lock after that of any wildcard
        // posted before the peer's first any-tag receive (see comm.hpp); a stale non-zero
        // only costs the slow path. No-wild mode has no wildcard to look for.
        if (!wild_mode || wild_posted_.load(std::memory_order_relaxed) == 0) {
            recv_node *specific = q.holds(side::recv) ? &as_recv(*q.front()) : nullptr;
            // In no-wild mode only an erroneous program has any-tag receives posted.
            recv_node *any = p != nullptr && l.tag_ >= 0 ? p->any_head : nullptr;
            if (specific != nullptr && (any == nullptr || specific->seq_ < any->seq_)) {
                q.pop_front();
                bind(*specific, m);
                matched.push(m);
                return true;
            }
            if (any != nullptr) {
                base::stats::add(base::stats::counter::wildcard_matches);
                any_tag_unlink(*p, *any, nullptr);
                bind(*any, m);
                matched.push(m);
                return true;
            }
            if (!wild_mode) {
                q.push_back(l, side::msg); // unexpected; no list but its FIFO
                return true;
            }
        }
    }
    return match_arrival_slow(m, matched, p);
}

template <class Lock>
bool basic_comm<Lock>::match_arrival_slow(msg_node &m, match_list &matched,
                                          detail::peer *p) noexcept
{
    detail::link &l = as_link(m);
    base::low_priority_guard<Lock> g(tlp_);
    table::queue_guard q(table_, key_of(l));
    const bool wild_mode = wild(); // the mode may have changed since match_arrival() looked
    if (wild_mode && p == nullptr) {
        return false;
    }
    // The earliest-posted of the three candidates; numbers never tie.
    recv_node *specific = q.holds(side::recv) ? &as_recv(*q.front()) : nullptr;
    recv_node *any = p != nullptr && l.tag_ >= 0 ? p->any_head : nullptr;
    recv_node *prev = nullptr;
    recv_node *wild = wild_mode ? wild_head_ : nullptr; // empty in no-wild mode anyway
    while (wild != nullptr && !accepts(as_link(*wild).source_, as_link(*wild).tag_, m.env_)) {
        prev = wild;
        wild = static_cast<recv_node *>(as_link(*wild).next_);
    }
    const auto earlier = [](const recv_node *a, const recv_node *b) {
        return a != nullptr && (b == nullptr || a->seq_ < b->seq_);
    };
    if (earlier(wild, specific) && earlier(wild, any)) {
        base::stats::add(base::stats::counter::wildcard_matches);
        wild_unlink(*wild, prev);
        bind(*wild, m);
    } else if (earlier(any, specific)) {
        base::stats::add(base::stats::counter::wildcard_matches);
        any_tag_unlink(*p, *any, nullptr);
        bind(*any, m);
    } else if (specific != nullptr) {
        q.pop_front();
        bind(*specific, m);
    } else {
        q.push_back(l, side::msg);
        if (wild_mode) {
            unexp_append(m, *p);
        }
        return true;
    }
    matched.push(m);
    return true;
}

template <class Lock>
inline status basic_comm<Lock>::peer_of(std::int32_t rank, detail::peer *&peer_p) noexcept
{
    // sync: acquire; pairs with the release CAS in new_peer() (the peer's initialized
    // fields)
    detail::peer *p = peers_[static_cast<std::size_t>(rank)].load(std::memory_order_acquire);
    if (p == nullptr) {
        return new_peer(rank, peer_p); // first contact: out of line, off the message path
    }
    peer_p = p;
    return status::ok;
}

template <class Lock>
status basic_comm<Lock>::new_peer(std::int32_t rank, detail::peer *&peer_p) noexcept
{
    peer_slot &slot = peers_[static_cast<std::size_t>(rank)];
    detail::peer *fresh = new (std::nothrow) detail::peer;
    if (fresh == nullptr) {
        base::log(base::log_level::error, "match: communicator %u: no memory for peer %d",
                  static_cast<unsigned>(cid_), static_cast<int>(rank));
        return status::nomem;
    }
    detail::peer *p = nullptr;
    // sync: release (publish fresh) / acquire on failure (read the winner's peer); pairs
    // with the acquire load in peer_of()
    if (slot.compare_exchange_strong(p, fresh, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        p = fresh;
    } else {
        delete fresh;
    }
    peer_p = p;
    return status::ok;
}

template <class Lock>
void basic_comm<Lock>::hold(detail::peer &p, msg_node &m) noexcept
{
    // Sorted by distance from the expected number, which is wrap-around safe.
    const std::uint32_t dist = m.env_.seq - p.expected;
    detail::link **pos = &p.held;
    while (*pos != nullptr && as_msg(**pos).env_.seq - p.expected < dist) {
        pos = &(*pos)->next_;
    }
    as_link(m).next_ = *pos;
    *pos = &as_link(m);
}

template <class Lock>
bool basic_comm<Lock>::holds_messages() noexcept
{
    base::lock_guard<Lock> g(tlp_);
    if (!wild() || unexp_head_ != nullptr) {
        return true;
    }
    for (std::int32_t i = 0; i < size_; ++i) {
        // Relaxed: no call runs concurrently (see the declaration).
        const detail::peer *p = peers_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
        if (p != nullptr && p->held != nullptr) {
            return true;
        }
    }
    return false;
}

template <class Lock>
template <class Fn>
void basic_comm<Lock>::release_messages(Fn &&fn)
{
    std::vector<msg_node *> all; // collected first: fn may free what the walks read
    table_.for_each_queue(cid_, side::msg, [&all](detail::link &tail) {
        detail::link *n = &tail;
        do {
            n = n->next_;
            all.push_back(&as_msg(*n));
        } while (n != &tail);
    });
    for (std::int32_t i = 0; i < size_; ++i) {
        // Relaxed: no call runs concurrently (see the declaration).
        detail::peer *p = peers_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
        for (detail::link *h = p != nullptr ? p->held : nullptr; h != nullptr; h = h->next_) {
            all.push_back(&as_msg(*h));
        }
        if (p != nullptr) {
            p->held = nullptr;
        }
    }
    for (msg_node *m : all) {
        fn(*m);
    }
}

template <class Lock>
msg_node *basic_comm<Lock>::take_held(detail::peer &p) noexcept
{
    detail::link *h = p.held;
    if (h == nullptr || as_msg(*h).env_.seq != p.expected) {
        return nullptr;
    }
    p.held = h->next_;
    return &as_msg(*h);
}

template <class Lock>
status basic_comm<Lock>::next_send_seq(std::int32_t dest, std::uint32_t &seq_p,
                                       bool &ordered_p) noexcept
{
    if (dest < 0 || dest >= size_) {
        base::log(base::log_level::error, "match: communicator %u: destination %d is invalid",
                  static_cast<unsigned>(cid_), static_cast<int>(dest));
        return status::invalid_arg;
    }
    if ((assertions() & k_assert_allow_overtaking) != 0) {
        seq_p = 0;
        ordered_p = false;
        return status::ok;
    }
    ordered_p = true;
    detail::peer *p = nullptr;
    const status s = peer_of(dest, p);
    if (s != status::ok) {
        return s;
    }
    // Relaxed: only the numbers' uniqueness and order matter; the transport orders the
    // messages themselves. A serial table's calls never overlap: no locked increment.
    if (table_.serial()) {
        seq_p = p->next_send.load(std::memory_order_relaxed);
        p->next_send.store(seq_p + 1, std::memory_order_relaxed);
    } else {
        seq_p = p->next_send.fetch_add(1, std::memory_order_relaxed);
    }
    return status::ok;
}

// ---------------------------------------------------------------- assertions

template <class Lock>
status basic_comm<Lock>::set_assertions(unsigned assertions) noexcept
{
    constexpr unsigned all =
        k_assert_no_any_source | k_assert_no_any_tag | k_assert_allow_overtaking;
    if ((assertions & ~all) != 0) {
        base::log(base::log_level::error, "match: communicator %u: assertions %#x are invalid",
                  static_cast<unsigned>(cid_), assertions);
        return status::invalid_arg;
    }
    base::lock_guard<Lock> g(tlp_);
    table::all_guard every_bucket(table_);
    const bool from = wild();
    const bool to = wild_for(assertions);
    if (from && !to) {
        // Relaxed: wild_posted_ changes only under tlp_, which we hold; any_posted under
        // peer locks, so an any-tag post racing with this call is missed (see "Mode
        // changes" in comm.hpp).
        bool posted = wild_posted_.load(std::memory_order_relaxed) != 0;
        for_each_peer([&posted](detail::peer &p) {
            posted = posted || p.any_posted.load(std::memory_order_relaxed) != 0;
        });
        if (posted) {
            base::log(base::log_level::warn,
                      "match: communicator %u: mpi_assert_no_any_source and "
                      "mpi_assert_no_any_tag not applied: a wildcard receive is posted",
                      static_cast<unsigned>(cid_));
            return status::busy;
        }
        unexp_head_ = nullptr; // the messages stay in their FIFOs
        unexp_tail_ = nullptr;
        for_each_peer([](detail::peer &p) {
            p.any_tag_unexpected.store(0, std::memory_order_relaxed); // under tlp_
        });
    } else if (!from && to) {
        try {
            rebuild_unexpected();
        } catch (const std::bad_alloc &) {
            base::log(base::log_level::error,
                      "match: communicator %u: no memory to allow wildcards again",
                      static_cast<unsigned>(cid_));
            return status::nomem;
        }
    }
    // sync: release; pairs with the acquire load in post_any_tag() (the counts above)
    wild_allowed_.store(to, std::memory_order_release);
    assertions_.store(assertions, std::memory_order_relaxed);
    return status::ok;
}

template <class Lock>
template <class Fn>
void basic_comm<Lock>::for_each_peer(Fn &&fn) noexcept
{
    for (std::int32_t i = 0; i < size_; ++i) {
        // sync: acquire; pairs with the release CAS in new_peer() (the peer's fields)
        detail::peer *p = peers_[static_cast<std::size_t>(i)].load(std::memory_order_acquire);
        if (p != nullptr) {
            fn(*p);
        }
    }
}

template <class Lock>
void basic_comm<Lock>::rebuild_unexpected()
{
    // Each sender's FIFOs (one per tag), each in its order. Nothing is linked before every
    // allocation has succeeded: a bad_alloc leaves the communicator as it was.
    std::map<std::int32_t, std::vector<std::vector<msg_node *>>> by_source;
    table_.for_each_queue(cid_, side::msg, [&by_source](detail::link &tail) {
        std::vector<msg_node *> fifo;
        detail::link *n = &tail;
        do {
            n = n->next_; // the head first: tail.next_
            fifo.push_back(&as_msg(*n));
        } while (n != &tail);
        by_source[tail.source_].push_back(std::move(fifo));
    });
    std::size_t most = 0; // FIFOs of one sender
    std::vector<detail::peer *> peer_of_source; // in by_source's order
    peer_of_source.reserve(by_source.size());
    for (const auto &entry : by_source) {
        most = std::max(most, entry.second.size());
        detail::peer *p = nullptr; // counts the sender's messages (see comm.hpp)
        if (peer_of(entry.first, p) != status::ok) {
            throw std::bad_alloc();
        }
        peer_of_source.push_back(p);
    }
    std::vector<std::size_t> at;
    at.reserve(most);
    unexp_head_ = nullptr;
    unexp_tail_ = nullptr;
    std::size_t source_index = 0;
    for (auto &entry : by_source) {
        detail::peer &p = *peer_of_source[source_index++];
        auto &fifos = entry.second;
        at.assign(fifos.size(), 0);
        // Merge taking only heads, so each FIFO keeps its order: an unordered head may go
        // anywhere, ordered heads go oldest number first (wrap-around safe).
        for (;;) {
            std::size_t best = fifos.size();
            for (std::size_t i = 0; i < fifos.size(); ++i) {
                if (at[i] == fifos[i].size()) {
                    continue;
                }
                const envelope &e = fifos[i][at[i]]->env_;
                if (!e.ordered) {
                    best = i;
                    break;
                }
                if (best == fifos.size() ||
                    static_cast<std::int32_t>(e.seq - fifos[best][at[best]]->env_.seq) < 0) {
                    best = i;
                }
            }
            if (best == fifos.size()) {
                break;
            }
            unexp_append(*fifos[best][at[best]++], p);
        }
    }
}

} // namespace mpiv::match
