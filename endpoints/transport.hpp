// transport.hpp: what the point-to-point engine needs from a transport, and how it picks
// one per peer.
//
// The engine (engine*.cpp) holds the protocols: the wire header and its kinds (inline,
// eager, rendezvous, gather, streamed, ACK, FIN, two-copy CTS/FRAG), matching hand-off,
// ordering, the outbound lists (back-pressure per destination), waits and progress. A
// transport moves bytes between processes and knows nothing of MPI. Each one provides:
//
// - Address and connect. address() gives the bytes this process publishes in the modex;
//   connect(peer, addr, len) makes the peer reachable from them. The address is input
//   from another process: every field is checked, a bad one is status::invalid_arg and a
//   log line, never a crash. connect() may be called again for a connected peer (the
//   address is still checked, then nothing changes); calls are serialized by the engine.
// - Limits. The largest small message (header and inline payload), the number of inbound
//   lanes a peer has (shared memory: its queues; UCX: its workers), the largest eager
//   payload.
// - Small messages. try_push(peer, lane, bytes, len, finish): claims room in the peer's
//   lane, lets the engine finish the header (finish(): it draws the sender's sequence
//   number only once room is claimed, so a message that waits holds no number), copies
//   and publishes; false when there is no room, and nothing was sent (the engine keeps
//   the message in that peer's outbound list and retries from progress()). Messages of
//   one lane arrive in the order they were pushed: the engine's per-handle matching of
//   endpoints communicators relies on it. A transport never blocks a push.
// - Eager payloads. Shared memory sends them by reference (a packet of the sender's
//   region, read by the receiver, given back after delivery); a network transport carries
//   them in the message.
// - Large messages. Shared memory: the receiver reads the sender's bytes after the match
//   (process_vm_readv, or the two-copy slots where that is denied), then sends FIN, which
//   completes the send. UCX: the bytes travel with the envelope as one bulk message, eager
//   or by UCX's own rendezvous, which the receiver takes once matched; UCX's completion
//   completes the send (no FIN).
// - Inbound. The engine drains lane q of this process (one drainer at a time: the lane's
//   consumer lock) and gets each message as bytes it may read during the call.
// - Waking. A push wakes the peer's sleeping progress owner (shared memory: a futex
//   doorbell in its segment). UCX arrivals ring no doorbell: while the UCX transport runs,
//   waiters keep polling its workers instead of sleeping.
//
// is_transport<T> checks the part of the contract with one shape for every transport
// (address, connect, limits, the small-message push); shm::transport (endpoints/shm/)
// asserts it. The UCX transport (endpoints/ucx/) moves opaque headers and payloads
// between (process, worker) pairs, and engine_ucx.cpp adapts the engine's messages to it.
// The engine picks a transport per peer (same node: shared memory; another node, or
// pml_mpiv_transports ucx: UCX) with a branch on a flag of the peer, not a virtual call,
// so the shared-memory path stays as short as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "base/status.hpp"

namespace mpiv::ep {

namespace detail {
struct finish_probe {
    void operator()() const noexcept {}
};
template <class T, class = void> struct is_transport : std::false_type {};
template <class T>
struct is_transport<
    T, std::void_t<
           decltype(std::declval<const T &>().address(std::declval<const void *&>(),
                                                      std::declval<std::size_t &>())),
           std::enable_if_t<std::is_same_v<
               decltype(std::declval<T &>().connect(std::uint32_t{}, std::declval<const void *>(),
                                                    std::size_t{})),
               status>>,
           std::enable_if_t<std::is_same_v<decltype(std::declval<const T &>().max_message()),
                                           std::size_t>>,
           std::enable_if_t<std::is_same_v<
               decltype(std::declval<const T &>().queue_count(std::uint32_t{})), std::size_t>>,
           std::enable_if_t<std::is_same_v<
               decltype(std::declval<T &>().try_push(std::uint32_t{}, std::size_t{},
                                                     std::declval<const void *>(), std::size_t{},
                                                     detail::finish_probe{})),
               bool>>>> : std::true_type {};
} // namespace detail

/// Whether @p T has the common part of a transport's interface (see above).
template <class T> inline constexpr bool is_transport = detail::is_transport<T>::value;

} // namespace mpiv::ep
