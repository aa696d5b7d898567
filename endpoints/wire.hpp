// wire: what the engine's messages carry (the header in a queue slot, its kinds and flags)
// and the records of its operations (an arrived message, a send, a receive and where its
// bytes go), stored in the caller's mpiv_p2p_op_t. Part of endpoints/engine.hpp, which
// includes it; the design is there.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <mpiv/mpiv_p2p.h>

#include "endpoints/shm/mpsc_queue.hpp"
#include "matching/node.hpp"

namespace mpiv::ep {

struct comm_state;

/// Kinds of wire messages.
/// pad: a claimed slot whose message could not be finished (no memory for the sender's
/// sequence state); the receiver skips it.
/// cts: a receiver without CMA asks for a rendezvous message's bytes (two copies);
/// frag: one piece of them, in the sender's copy slot for that receiver.
enum class wire_kind : std::uint8_t { eager_inline = 1, eager_packet, rts, ack, fin, pad, cts, frag };

/// Wire flags.
constexpr std::uint8_t k_wire_sync = 1; // the sender waits for an ACK after the match
// rts: where is the sender's list of u.ref.spare struct iovec (its bytes in order)
constexpr std::uint8_t k_wire_gather = 2;
// sent while the communicator allowed overtaking: no sequence number, matched as it comes
constexpr std::uint8_t k_wire_unordered = 4;
// rts: the sender is still writing the bytes; u.ref.spare is the address of its count of
// bytes written (mpiv_p2p_isend_streamed)
constexpr std::uint8_t k_wire_streamed = 8;
// rts over UCX (a contiguous buffer): the bytes come as the UCX bulk payload of this
// message (ucx::transport::send_bulk); no FIN: the send completes when UCX says so.
constexpr std::uint8_t k_wire_bulk = 16;

/// The payload of one queue slot.
struct wire {
    wire_kind kind;
    std::uint8_t flags;
    std::uint16_t cid;
    std::uint32_t from; // sender's peer index
    std::int32_t source;
    std::int32_t tag;
    std::uint32_t seq;
    std::uint16_t inline_bytes;
    std::uint16_t dst_ep; // endpoints communicators: the receiving handle's endpoint index
    std::uint64_t size; // message bytes
    union {
        unsigned char data[24]; // eager_inline payload
        struct {
            // eager_packet: offset in the sender's region; rts: address; frag: slot index
            std::uint64_t where;
            // sender's send_op (sync eager, rts; echoed by ack/fin/cts); frag: the
            // receiver's pull_state (from the cts)
            std::uint64_t token;
            // rts with k_wire_gather: entries in the list; cts: the receiver's token;
            // frag: the piece's offset in the message
            std::uint64_t spare;
        } ref;
    } u;
};
static_assert(sizeof(wire) == 56, "a wire header fills one queue slot's payload");
// An inline message carries its first k_wire_inline bytes in the header and the rest in
// the queue slots that follow it (a message of up to mpsc_queue::k_max_message bytes).
constexpr std::size_t k_wire_inline = sizeof(wire{}.u.data);
constexpr std::size_t k_inline_more = shm::mpsc_queue<>::k_max_message - sizeof(wire);
constexpr std::size_t k_inline_max = k_wire_inline + k_inline_more;
static_assert(k_inline_max == MPIV_P2P_INLINE_MAX, "the C ABI names the largest inline size");

/// An arrived message while the engine owns it.
struct inmsg : match::msg_node {
    wire w;               // as received (data holds inline payload)
    const void *packet;   // eager_packet: the payload in the sender's segment
    inmsg *next_pending;  // pending list of an unknown context id
    void *bulk;           // k_wire_bulk: the UCX bulk handle of its bytes (ucx::bulk)
    std::uint32_t lane;   // k_wire_bulk: the UCX worker it came through
    // inline payload past the header's k_wire_inline; k_wire_bulk: the receive's state
    // once matched (engine_ucx.cpp)
    alignas(8) unsigned char more[k_inline_more];
};


/// Operation storage (inside mpiv_p2p_op_t).
enum class op_type : std::uint8_t { none, send, recv };

/// A send until it is pushed (then, for sync and rendezvous sends, until ACK/FIN).
/// The sequence number is drawn only once the message has claimed its queue slot (see
/// engine::push): a number drawn by a stuck send would make the receiver hold every later
/// message of that sender until it is pushed.
struct send_op {
    op_type type;
    bool queued_ack;         // waiting for ACK/FIN
    std::uint32_t peer;
    std::int32_t dest;       // rank in the communicator (reported in the status)
    void *user;
    const void *buf;
    comm_state *seq_comm;    // draw w.seq from this communicator at the push; or null
    void *packet;            // eager packet acquired for this send, not yet pushed
    wire w;                  // prepared header
    // Two copies (after a CTS; only the drainer of the peer's outbound list touches these):
    std::uint64_t pull_token;  // the receiver's token, echoed in each FRAG
    std::uint64_t pull_total;  // bytes the receiver wants
    std::uint64_t pulled;      // bytes pushed in FRAGs so far
    std::uint64_t iov_index;   // gather: the range the next piece starts in
    std::uint64_t iov_within;  //   and the bytes of it already copied
    std::uint32_t pull_slot;   // the copy slot of the next piece (counts up, mod slots)
    std::uint32_t pending;     // bytes in that slot, copied but not pushed yet (0: none)
};

/// Where a received message goes: the first `capacity` bytes into `buf`, or, when `sink`
/// is set, to the sink in order (see mpiv_p2p_irecv_sink).
struct recv_target {
    void *buf = nullptr;
    std::size_t capacity = 0;
    mpiv_p2p_sink_fn sink = nullptr;
    void *ctx = nullptr;
};

/// A receive whose bytes come in FRAGs (two copies; named to the sender by a token).
struct pull_state {
    std::atomic<bool> busy{false}; // a drainer is in it (FRAGs in two queues: a fault)
    std::uint32_t peer;
    recv_target to;
    void *user;
    std::uint64_t total;    // bytes wanted (the cts's size)
    std::uint64_t received; // bytes copied out so far (FRAGs come in order)
    mpiv_p2p_status_t st;   // reported once all arrived
};

struct recv_op : match::recv_node {
    op_type type;
    bool leveled; // counted in engine::posted_level_ (set before it is posted)
    comm_state *comm;
    void *user;
    recv_target to;
};

} // namespace mpiv::ep
