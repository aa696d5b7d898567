// private_comm: the MPI matching rules of one endpoint of an endpoints communicator,
// matched by one thread at a time (the engine's caller serializes every call).
//
// Design. An endpoint's traffic is what one worker matches alone: every message to it
// arrives through one inbound queue of its process (the engine picks the queue from the
// endpoint's index, sender and receiver alike), and each sender endpoint's messages enter
// that queue in the order it sent them. So the arrival order of one sender's messages is
// its sending order, and matching needs no sequence numbers, no per-sender reordering, no
// hash table and no lock: two lists in the order MPI wants them.
// - Posted receives wait in one list in posting order, wildcards included; an arrival
//   takes the first one that accepts it (MPI: the earliest-posted matching receive).
// - Unexpected messages wait in one list in arrival order; a receive, probe or mprobe
//   takes (or reports) the first one it accepts (MPI: the earliest-sent matching message of
//   each sender, which is the earliest arrived).
// - k_any_tag never matches a negative (internal) tag.
// Both lists are singly linked through the node's link and searched from the head: O(1)
// when the first entry matches (the common case with one thread per endpoint), O(length)
// otherwise, as in MPICH's queues. No call is ever concurrent with another on the same
// object (the engine holds the consumer lock of the endpoint's queue around each one), so
// there are no atomics here except the assertions word, which any thread may read.
// Assertions (MPI-4 info keys): no_any_source and no_any_tag refuse those wildcards;
// allow_overtaking changes nothing (order is the queue's, and costs nothing to keep).
// Memory: 64 B per endpoint plus the nodes, which live in the caller's objects.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>

#include "base/log.hpp"
#include "base/status.hpp"
#include "matching/comm.hpp"
#include "matching/node.hpp"

namespace mpiv::match {

/// Matching state of one endpoint. Not thread-safe: calls must not overlap (the caller
/// serializes them), except assertions(), cid() and size(), which any thread may call.
class private_comm {
  public:
    /// Create the state of an endpoint of a communicator of @p params.size ranks.
    /// @return ok; invalid_arg (size < 1 or unknown assertion bits); nomem.
    [[nodiscard]] static status create(const comm_params &params,
                                       std::unique_ptr<private_comm> &comm_p) noexcept
    {
        if (params.size < 1 || (params.assertions & ~k_all) != 0) {
            base::log(base::log_level::error,
                      "match: endpoint of communicator %u: size %d or assertions %#x are invalid",
                      static_cast<unsigned>(params.cid), static_cast<int>(params.size),
                      params.assertions);
            return status::invalid_arg;
        }
        comm_p.reset(new (std::nothrow) private_comm(params));
        return comm_p != nullptr ? status::ok : status::nomem;
    }

    private_comm(const private_comm &) = delete;
    private_comm &operator=(const private_comm &) = delete;

    /// Post a receive (as basic_comm::post): ok, matched at once (r.matched_msg() belongs
    /// to the caller); inprogress, queued; invalid_arg, a source out of range or a wildcard
    /// the assertions exclude. O(1) when no message waits; else O(unexpected messages).
    [[nodiscard]] status post(recv_node &r, std::int32_t source, std::int32_t tag) noexcept
    {
        if (!valid_pattern(source, tag)) {
            base::log(base::log_level::error,
                      "match: endpoint of communicator %u: receive (source %d, tag %d) is invalid",
                      static_cast<unsigned>(cid_), static_cast<int>(source),
                      static_cast<int>(tag));
            return status::invalid_arg;
        }
        detail::link &l = r;
        l.cid_ = cid_;
        l.source_ = source;
        l.tag_ = tag;
        r.msg_ = nullptr;
        if (msg_node *m = take(unexp_, source, tag)) {
            bind(r, *m);
            return status::ok;
        }
        r.state_ = recv_node::state::posted;
        append(posted_, l);
        return status::inprogress;
    }

    /// Deliver an arrival (as basic_comm::arrive): matched to the earliest-posted receive
    /// that accepts it (then appended to @p matched), or kept unexpected. @p env.seq and
    /// @p env.ordered are ignored: arrivals come in sending order.
    /// @return ok; invalid_arg (source out of range or tag k_any_tag; m untouched).
    [[nodiscard]] status arrive(msg_node &m, const envelope &env, match_list &matched) noexcept
    {
        if (env.source < 0 || env.source >= size_ || env.tag == k_any_tag) {
            base::log(base::log_level::error,
                      "match: endpoint of communicator %u: message (source %d, tag %d) is invalid",
                      static_cast<unsigned>(cid_), static_cast<int>(env.source),
                      static_cast<int>(env.tag));
            return status::invalid_arg;
        }
        m.env_ = env;
        m.recv_ = nullptr;
        detail::link *prev = nullptr;
        for (detail::link *l = posted_.head; l != nullptr; prev = l, l = l->next_) {
            if (accepts(l->source_, l->tag_, env)) {
                unlink(posted_, *l, prev);
                bind(static_cast<recv_node &>(*l), m);
                matched.push(m);
                return status::ok;
            }
        }
        detail::link &ml = m;
        ml.cid_ = cid_;
        ml.source_ = env.source;
        ml.tag_ = env.tag;
        append(unexp_, ml);
        return status::ok;
    }

    /// The earliest unexpected message a receive (@p source, @p tag) would match, left in
    /// place (MPI_Iprobe). @return ok; not_found; invalid_arg as for post().
    [[nodiscard]] status probe(std::int32_t source, std::int32_t tag, envelope &env_p) noexcept
    {
        if (!valid_pattern(source, tag)) {
            return status::invalid_arg;
        }
        for (detail::link *l = unexp_.head; l != nullptr; l = l->next_) {
            const msg_node &m = static_cast<msg_node &>(*l);
            if (accepts(source, tag, m.env_)) {
                env_p = m.env_;
                return status::ok;
            }
        }
        return status::not_found;
    }

    /// Take the earliest unexpected message a receive would match (MPI_Improbe).
    /// @return ok; not_found; invalid_arg as for post().
    [[nodiscard]] status mprobe(std::int32_t source, std::int32_t tag, msg_node *&msg_p) noexcept
    {
        if (!valid_pattern(source, tag)) {
            return status::invalid_arg;
        }
        msg_node *m = take(unexp_, source, tag);
        if (m == nullptr) {
            return status::not_found;
        }
        m->recv_ = nullptr;
        msg_p = m;
        return status::ok;
    }

    /// Cancel a posted receive. @return ok (removed); not_found (already matched, or never
    /// posted, or cancelled). O(posted receives).
    [[nodiscard]] status cancel(recv_node &r) noexcept
    {
        if (r.state_ != recv_node::state::posted) {
            return status::not_found;
        }
        detail::link *prev = nullptr;
        for (detail::link *l = posted_.head; l != nullptr; prev = l, l = l->next_) {
            if (l == static_cast<detail::link *>(&r)) {
                unlink(posted_, *l, prev);
                r.state_ = recv_node::state::cancelled;
                return status::ok;
            }
        }
        return status::not_found;
    }

    /// Sends from this endpoint carry no sequence number: the queue keeps their order.
    /// @return ok (seq_p 0, ordered_p false); invalid_arg (dest out of range).
    /// @context any thread (reads the size only)
    [[nodiscard]] status next_send_seq(std::int32_t dest, std::uint32_t &seq_p,
                                       bool &ordered_p) const noexcept
    {
        if (dest < 0 || dest >= size_) {
            return status::invalid_arg;
        }
        seq_p = 0;
        ordered_p = false;
        return status::ok;
    }

    /// Change the assertions (MPI_Comm_set_info). @return ok; invalid_arg (unknown bits);
    /// busy (a wildcard is posted that the new assertions exclude: nothing changed).
    [[nodiscard]] status set_assertions(unsigned assertions) noexcept
    {
        if ((assertions & ~k_all) != 0) {
            base::log(base::log_level::error,
                      "match: endpoint of communicator %u: assertions %#x are invalid",
                      static_cast<unsigned>(cid_), assertions);
            return status::invalid_arg;
        }
        for (const detail::link *l = posted_.head; l != nullptr; l = l->next_) {
            if ((l->source_ == k_any_source && (assertions & k_assert_no_any_source) != 0) ||
                (l->tag_ == k_any_tag && (assertions & k_assert_no_any_tag) != 0)) {
                return status::busy;
            }
        }
        // Relaxed: read as a hint by other threads; this object's calls are serialized.
        assertions_.store(assertions, std::memory_order_relaxed);
        return status::ok;
    }

    std::uint16_t cid() const noexcept { return cid_; }
    std::int32_t size() const noexcept { return size_; }
    /// The k_assert_* flags. @context any thread
    unsigned assertions() const noexcept { return assertions_.load(std::memory_order_relaxed); }
    /// Whether unexpected messages wait here.
    bool holds_messages() const noexcept { return unexp_.head != nullptr; }
    /// Hand every unexpected message to @p fn, which owns it from then on.
    template <class Fn> void release_messages(Fn &&fn)
    {
        detail::link *l = unexp_.head;
        unexp_ = list{};
        while (l != nullptr) {
            detail::link *next = l->next_; // fn may free the node
            fn(static_cast<msg_node &>(*l));
            l = next;
        }
    }

  private:
    static constexpr unsigned k_all =
        k_assert_no_any_source | k_assert_no_any_tag | k_assert_allow_overtaking;

    struct list {
        detail::link *head = nullptr;
        detail::link *tail = nullptr;
    };

    explicit private_comm(const comm_params &params) noexcept
        : cid_(params.cid), size_(params.size), assertions_(params.assertions)
    {
    }

    bool valid_pattern(std::int32_t source, std::int32_t tag) const noexcept
    {
        const unsigned a = assertions();
        if (source == k_any_source ? (a & k_assert_no_any_source) != 0
                                   : source < 0 || source >= size_) {
            return false;
        }
        return tag != k_any_tag || (a & k_assert_no_any_tag) == 0;
    }
    static void bind(recv_node &r, msg_node &m) noexcept
    {
        r.state_ = recv_node::state::matched;
        r.msg_ = &m;
        r.env_ = m.env_;
        m.recv_ = &r;
    }
    static void append(list &q, detail::link &l) noexcept
    {
        l.next_ = nullptr;
        if (q.tail == nullptr) {
            q.head = &l;
        } else {
            q.tail->next_ = &l;
        }
        q.tail = &l;
    }
    static void unlink(list &q, detail::link &l, detail::link *prev) noexcept
    {
        (prev == nullptr ? q.head : prev->next_) = l.next_;
        if (q.tail == &l) {
            q.tail = prev;
        }
        l.next_ = nullptr;
    }
    /// Remove and return the first message of @p q a receive (@p source, @p tag) accepts.
    static msg_node *take(list &q, std::int32_t source, std::int32_t tag) noexcept
    {
        detail::link *prev = nullptr;
        for (detail::link *l = q.head; l != nullptr; prev = l, l = l->next_) {
            msg_node &m = static_cast<msg_node &>(*l);
            if (accepts(source, tag, m.env_)) {
                unlink(q, *l, prev);
                return &m;
            }
        }
        return nullptr;
    }

    const std::uint16_t cid_;
    const std::int32_t size_;
    std::atomic<unsigned> assertions_;
    list posted_;
    list unexp_;
};

} // namespace mpiv::match
