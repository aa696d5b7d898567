// Intrusive nodes of the matching engine: recv_node (a posted receive) and msg_node (an
// arrived message), plus match_list, the chain in which arrive() hands matches back.
//
// The engine allocates nothing on its data path: the caller embeds these nodes in its own
// objects (the PML's receive request, the descriptor of an eager packet or of a rendezvous
// RTS) and keeps them alive while the engine holds them. Ownership moves like this:
//   post(r)      -> ok: r matched at once, r.matched_msg() now belongs to the caller;
//                   inprogress: the engine holds r until an arrive() returns it matched
//                   or cancel(r) succeeds.
//   arrive(m)    -> the engine holds m until m comes back in a match_list (matched to a
//                   posted receive), or a later post()/mprobe() returns it.
// A node must not be touched by its owner while the engine holds it, except through the
// engine's calls. Nodes may be reused (persistent requests) once handed back.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpiv::match {

class table;
template <class Lock>
class basic_comm;
class private_comm;
class msg_node;

/// Source of a receive that matches any sender (Open MPI's MPI_ANY_SOURCE value).
constexpr std::int32_t k_any_source = -1;
/// Tag of a receive that matches any non-negative tag (Open MPI's MPI_ANY_TAG value).
/// No message may carry this tag.
constexpr std::int32_t k_any_tag = -1;

/// What a message carries for matching and what a matched receive reports (its status).
struct envelope {
    std::int32_t source = 0; ///< sender's rank in the communicator's (remote) group
    std::int32_t tag = 0;    ///< tag; negative tags are internal and never match k_any_tag
    std::uint32_t seq = 0;   ///< sender's sequence number towards this receiver
    std::size_t size = 0;    ///< payload bytes: opaque to matching, reported by probe
    bool ordered = true;     ///< false: sent under allow_overtaking, seq is meaningless
};

/// MPI's matching predicate: does a receive (@p source, @p tag), either of them maybe a
/// wildcard, accept a message with envelope @p env? k_any_tag never matches a negative
/// (internal) tag.
inline bool accepts(std::int32_t source, std::int32_t tag, const envelope &env) noexcept
{
    return (source == k_any_source || source == env.source) &&
           (tag == k_any_tag ? env.tag >= 0 : tag == env.tag);
}

namespace detail {

/// The part of a node the hash table works on: the link of the key's FIFO and the key.
struct link {
    // Next node in whichever single list holds the node: the circular FIFO of its key
    // (the table keeps the tail, tail->next_ is the head), the wildcard list, a peer's
    // list of early arrivals or of any-tag receives, or a match_list.
    link *next_ = nullptr;
    // Overflow chain of a bucket, read in a queue's tail node only: the next spilled
    // queue (its tail pointer and side bit), 0 at the end (see table.hpp).
    std::uintptr_t spill_ = 0;
    std::int32_t source_ = 0; // key: sender (k_any_source in a wildcard receive)
    std::int32_t tag_ = 0;    // key: tag (k_any_tag in a wildcard receive)
    std::uint16_t cid_ = 0;   // key: context id of the communicator
};

} // namespace detail

/// A posted receive. Embed it in the receive request; post it with basic_comm::post().
class recv_node : private detail::link {
  public:
    recv_node() = default;
    recv_node(const recv_node &) = delete;
    recv_node &operator=(const recv_node &) = delete;

    /// The envelope of the message this receive matched: its MPI status.
    /// @return valid once post() returned ok, or once arrive() handed the receive back.
    const envelope &matched_envelope() const noexcept { return env_; }

    /// The message this receive matched; the caller owns it from then on (copy its
    /// payload, then recycle it). nullptr before the match.
    msg_node *matched_msg() const noexcept { return msg_; }

  private:
    friend class table;
    template <class Lock>
    friend class basic_comm;
    friend class private_comm;

    enum class state : std::uint8_t { idle, posted, matched, cancelled };

    std::uint64_t seq_ = 0;     // posting order (communicators that allow wildcards)
    envelope env_{};            // matched message's envelope
    msg_node *msg_ = nullptr;   // matched message
    // Guarded by the bucket lock (specific), the sender's peer lock (any_tag_listed_) or
    // the TLP lock (other wildcards).
    state state_ = state::idle;
    // A receive from one source with any tag, waiting in that sender's list rather than in
    // the list of all wildcards (set by post(); read by cancel()).
    bool any_tag_listed_ = false;
};

/// An arrived message. Embed it in the packet or RTS descriptor; hand it to
/// basic_comm::arrive().
class msg_node : private detail::link {
  public:
    msg_node() = default;
    msg_node(const msg_node &) = delete;
    msg_node &operator=(const msg_node &) = delete;

    /// The envelope given to arrive().
    const envelope &env() const noexcept { return env_; }

    /// The receive this message matched (set by every match, whether arrive() or post()
    /// made it), or nullptr when mprobe() took it.
    recv_node *matched_recv() const noexcept { return recv_; }

  private:
    friend class table;
    friend class match_list;
    template <class Lock>
    friend class basic_comm;
    friend class private_comm;

    envelope env_{};
    // Links in the communicator's list of unexpected messages, in matching order (only
    // in communicators that allow wildcards).
    msg_node *unexp_prev_ = nullptr;
    msg_node *unexp_next_ = nullptr;
    recv_node *recv_ = nullptr; // matched receive
};

/// Matches found by one arrive() call, in the order they were made: the arrived message
/// and any earlier-held messages of the same sender that it put back in sequence.
/// Each element is a msg_node whose matched_recv() is set; the caller now owns both.
class match_list {
  public:
    match_list() = default;
    match_list(const match_list &) = delete;
    match_list &operator=(const match_list &) = delete;

    /// True when no match is left to take.
    bool empty() const noexcept { return head_ == nullptr; }

    /// Take the oldest match. @return the matched message, or nullptr when empty.
    msg_node *pop() noexcept
    {
        detail::link *l = head_;
        if (l == nullptr) {
            return nullptr;
        }
        head_ = l->next_;
        if (head_ == nullptr) {
            tail_ = nullptr;
        }
        return static_cast<msg_node *>(l);
    }

  private:
    template <class Lock>
    friend class basic_comm;
    friend class private_comm;

    void push(msg_node &m) noexcept
    {
        detail::link &l = m;
        l.next_ = nullptr;
        if (tail_ == nullptr) {
            head_ = &l;
        } else {
            tail_->next_ = &l;
        }
        tail_ = &l;
    }

    detail::link *head_ = nullptr;
    detail::link *tail_ = nullptr;
};

} // namespace mpiv::match
