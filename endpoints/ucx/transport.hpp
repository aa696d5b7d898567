// ucx::transport: the UCX (UCP 1.13) network transport core. It moves opaque headers and
// payloads between (process, worker) pairs and knows nothing of MPI matching; the engine
// puts its envelope in the header. Sources: transport.cpp (creation, addresses, progress,
// teardown), transport_send.cpp (slots, eps, sends), transport_recv.cpp (arrivals, order),
// transport_bulk.cpp (bulk messages), transport_datatypes.cpp (UCX generic datatypes),
// ucx_api.cpp (UCX's functions, loaded at run time); transport_detail.hpp holds what they
// share, and it and ucx_api.hpp are the only headers that include UCX's.
//
// Design:
// - Context and workers. One ucp_context per transport (features AM | WAKEUP,
//   mt_workers_shared = 1 because W workers of one context are driven by different
//   threads), and one ucp_worker per mpiv worker, created UCS_THREAD_MODE_SERIALIZED: UCX
//   takes no lock, so the transport's worker lock (try_lock/lock/unlock) is the "one thread
//   at a time" promise. Every call taking a worker index w requires the caller to hold w's
//   lock, except event_fd() (a constant) and signal() (UCX allows it from any thread).
//   The lock's release/acquire pair is also the happens-before edge UCX needs when a
//   worker moves between threads.
// - Addresses. address() gives one blob for the modex: {magic, version, W, per worker:
//   length + UCX worker address}. connect(peer, blob) validates it as untrusted input and
//   stores the W addresses; no ep exists yet. The ep from local worker w to (peer, j) is
//   created on first use by w's owner (lazily, in send() or send_bulk()), with
//   err_mode PEER and an error handler; eps are never shared between workers.
// - Messages. send() is one eager active message (UCP_AM_SEND_FLAG_EAGER: never UCX's
//   rendezvous, so the receiver's handler always has the whole payload). In front of the
//   caller's header goes a 16-byte transport header: magic/version, sender peer, sender
//   worker, receiver worker and the pair's sequence number. UCX 1.13 keeps the header
//   pointer until the send completes (no COPY_HEADER flag before 1.14), so the transport
//   copies both headers into an operation slot of its own that lives until completion.
//   A small message (headers and payload at most params.copy_max bytes; the engine's
//   default is 2 KiB, as UCX_TCP_SENDV_THRESH) is sent with the copier, a generic datatype,
//   as its payload: UCX then packs it all into its own buffer (its bcopy path) and makes
//   one send() of it on TCP. With a contiguous payload UCX 1.13 takes its short path,
//   which always hands TCP an I/O vector (sendmsg) and costs more per message (measured in
//   bench/README, "mpiv over UCX"). Payloads are host memory (the copier reads them).
// - Order. UCX 1.13 promises no AM order, so the transport does: for each pair (local
//   worker -> remote worker) messages are numbered in send order, and the receiving worker
//   delivers them to on_message in that order. An early arrival is copied (header and
//   payload) and held until its turn. Memory bound: at most k_max_held messages per pair
//   and k_max_held_bytes per receiving worker; past either bound the sender is treated as
//   faulty (on_peer_failure, its held messages dropped) rather than growing without limit.
//   The counters (stats()) tell how often UCX actually delivered out of order.
// - Back-pressure. UCX sends never report it (they queue inside UCX), so each pair
//   (worker -> remote worker) counts its send()s not yet completed by UCX and refuses a new one with status::retry_nomem at params.max_inflight; nothing
//   is sent then and no sequence number is used. Per pair: a receiver that does not drain
//   holds back only the traffic to itself.
// - Bulk messages. send_bulk() carries a payload of any size as an active message on
//   its own AM id, in the same per-pair order as send(); UCX picks eager or its own
//   rendezvous by its threshold (always rendezvous for a sync send, whose completion then
//   means the receiver took the bytes). The receiver's on_message gets a bulk handle
//   instead of the bytes, and takes them exactly once, during the call or later, with
//   receive() (into a buffer, or through a sink in offset order; bytes past the capacity
//   are dropped, so truncation needs no bounce buffer) or release(). A rendezvous payload
//   waits in the sender's memory until then: UCX moves it straight into the receive
//   buffer (get or put zero-copy where the transport has them; over TCP, UCX writes into
//   the receiver's buffer from the sender's, served by the sender's progress), and the
//   sender's completion comes when the receiver has it. An eager payload that UCX lends
//   (FLAG_DATA) is kept in UCX's descriptor; one readable only during the callback is
//   copied once if not taken then. Bulk sends do not count toward max_inflight: a
//   rendezvous completes only when its receive is posted, and counting it would let
//   unmatched large sends hold back the message the receiver waits for first.
// - Failure. UCX's ep error handler (err_mode PEER) marks the ep failed; the first failure
//   seen for a peer calls params.on_peer_failure once (from poll() of the worker that saw
//   it). A failed ep is closed with FORCE by the next poll(); later sends or gets to that
//   peer fail with status::system. Operations still in flight complete with an error.
// - Teardown. ~transport closes every ep of every worker (flush; FORCE for failed ones
//   and for peers known to have failed), k_close_batch at a time, progressing all its
//   workers; each batch waits at most 2 s (detail::k_close_timeout_s), then gives up on the
//   flush and lets ucp_worker_destroy release the rest. A flush close of a PEER-mode ep
//   ends only once the peer's worker answers (measured: it does not end while the peer
//   does not progress), so processes should destroy their transports at about the same
//   time, as at finalize. Then it destroys the workers, frees bulk handles never taken
//   and calls ucp_cleanup. Completions still pending are called (ok or an
//   error) before it returns; arrivals during teardown are dropped, never delivered. No
//   other thread may use the transport during destruction, and callbacks must not call
//   back into it then.
// - Trust. Address blobs and incoming transport headers are checked before use
//   (lengths, bounds, magic, peer and worker indices); bad input is refused (invalid_arg,
//   one log line) or dropped, never an abort. UCX parses the worker addresses themselves.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/cacheline.hpp"
#include "base/status.hpp"

namespace mpiv::ep::ucx {

/// A bulk message's payload until the receiver takes it (see Bulk messages above).
struct bulk;
/// Receives bytes [offset, offset + len) of a bulk payload; called in offset order.
using sink_fn = void (*)(void *ctx, std::size_t offset, const void *data, std::size_t len);

namespace detail {
struct worker;
struct peer;
struct state;
} // namespace detail

/// Largest number of workers per process accepted in params and in address blobs.
constexpr std::uint32_t k_max_workers = 1024;
/// Largest UCX worker address accepted in a blob (UCX's are a few hundred bytes).
constexpr std::size_t k_max_worker_address = 64 * 1024;
/// Largest payload of send(): larger data goes by send_bulk().
constexpr std::size_t k_max_payload = 64 * 1024;
/// Bounds on held early arrivals (see Order in the design block).
constexpr std::size_t k_max_held = 4096;
constexpr std::size_t k_max_held_bytes = 64 * 1024 * 1024;
/// Bytes of the transport's own header in front of the caller's.
constexpr std::size_t k_transport_header = 16;

/// Creation parameters: plain values, checked in transport::create().
struct params {
    std::uint32_t self = 0;         ///< this process's peer index (< num_peers)
    std::uint32_t num_peers = 0;    ///< number of processes (>= 1)
    std::uint32_t workers = 0;      ///< W: ucp_workers (1..k_max_workers)
    /// per pair (worker -> remote worker): operations not yet completed by UCX (>= 1), so
    /// one slow receiver holds back only the traffic to itself
    std::uint32_t max_inflight = 0;
    /// send()s of at most this many bytes (both headers and the payload) go through the
    /// copier (see Messages above); 0: none (0..k_max_payload)
    std::uint32_t copy_max = 0;
    void *ctx = nullptr;            ///< passed to the callbacks
    /// An arrived message, called inside poll(worker) on the polling thread, in send
    /// order for each (peer, from_worker) -> worker pair. header and payload are readable
    /// only during the call. A bulk message comes with @p b set, payload null and
    /// payload_len its size: the callee owns b and must pass it to receive() or release()
    /// on @p worker exactly once, now or later. It may call send(), send_bulk(),
    /// receive() and release() on @p worker (its lock is held), but not poll(). Required.
    void (*on_message)(void *ctx, std::uint32_t worker, std::uint32_t peer,
                       std::uint32_t from_worker, const void *header, std::size_t header_len,
                       const void *payload, std::size_t payload_len, bulk *b) = nullptr;
    /// A peer failed (UCX error on an ep to it, or a protocol fault): called once per peer,
    /// inside poll() of the worker that saw it, with a reason (UCX's status string).
    /// Optional.
    void (*on_peer_failure)(void *ctx, std::uint32_t peer, const char *reason) = nullptr;
};

/// Completion of an operation that returned status::inprogress: fn(done, status) is
/// called exactly once, from a later poll(w) of the worker that started it (or from
/// ~transport), with status::ok or an error.
struct completion {
    void (*fn)(completion *, status);
};

/// Counters of one worker (read by its lock holder).
struct counters {
    std::uint64_t delivered = 0;  ///< messages given to on_message
    std::uint64_t held_early = 0; ///< arrivals ahead of their turn (UCX reordered them)
    std::uint64_t dropped = 0;    ///< invalid or unwanted arrivals dropped
    std::uint64_t bulk_rndv = 0;  ///< bulk payloads that came by UCX's rendezvous
    std::uint64_t sent_copied = 0; ///< send()s through the copier (see Messages above)
};

class transport {
  public:
    /// Whether UCX's library loads here (opened on the first call, see ucx_api.hpp); if not,
    /// *why (when why is not null) is a one-line reason. Thread-safe.
    static bool available(const char **why) noexcept;
    /// Check @p p (an error line names the bad field), create the context and the workers.
    /// @return ok, invalid_arg (bad params), system (UCX's library does not load: logged
    /// with the reason), or the mapped UCX error (logged).
    static status create(const params &p, std::unique_ptr<transport> &out) noexcept;
    ~transport();
    transport(const transport &) = delete;
    transport &operator=(const transport &) = delete;

    /// This process's address blob for the modex (valid for the transport's lifetime).
    void address(const void *&addr, std::size_t &len) const noexcept;
    /// Record @p peer's blob (untrusted: checked; invalid_arg and a log line if malformed,
    /// or if the peer is out of range or already connected). Thread-safe (any thread,
    /// no worker lock); eps are created later, lazily.
    status connect(std::uint32_t peer, const void *addr, std::size_t len) noexcept;

    /// Largest caller header of send(): UCX's max AM header (min over workers) minus
    /// k_transport_header.
    std::size_t max_header() const noexcept { return max_header_; }
    /// Largest payload of send().
    static constexpr std::size_t max_payload() noexcept { return k_max_payload; }
    std::uint32_t workers() const noexcept { return workers_; }

    /// The holder of a worker lock taken without an identity (never asked about).
    static constexpr std::uintptr_t k_anonymous = 1;
    /// Worker ownership: a test-and-test-and-set lock, not fair; lock() spins, then yields
    /// (the ULT when the caller is one, else the thread). Not recursive. @p holder names
    /// the taker for held_by(): any value but 0 that no other live holder uses; a caller
    /// that will ask held_by() (the engine) must pass its identity, not the default.
    bool try_lock(std::uint32_t w, std::uintptr_t holder = k_anonymous) noexcept;
    void lock(std::uint32_t w, std::uintptr_t holder = k_anonymous) noexcept;
    void unlock(std::uint32_t w) noexcept;
    /// Whether @p holder (the caller's own identity) holds worker @p w's lock: exact for
    /// the caller, whose own stores of the lock word are the only ones naming it.
    bool held_by(std::uint32_t w, std::uintptr_t holder) const noexcept;

    /// One message to (peer, to_worker) through worker w. The header is copied; the
    /// payload must stay valid until completion. header_len <= max_header(),
    /// payload_len <= max_payload().
    /// @return ok (complete; @p done is not called), inprogress (done->fn later, from
    /// poll(w)), retry_nomem (max_inflight operations in flight: nothing sent; poll and
    /// retry), invalid_arg, system (the peer failed) or a mapped UCX error.
    /// @context holds w's lock; hot path.
    status send(std::uint32_t w, std::uint32_t peer, std::uint32_t to_worker, const void *header,
                std::size_t header_len, const void *payload, std::size_t payload_len,
                completion *done) noexcept;

    /// A bulk message (see Bulk messages): like send(), with a payload of any size that
    /// must stay valid until completion, never retry_nomem. @p sync: UCX's rendezvous
    /// always, so that completion means the receiver has taken the payload.
    /// @return inprogress (done->fn always later, from poll(w)), invalid_arg, system or a
    /// mapped UCX error.
    /// @context holds w's lock.
    status send_bulk(std::uint32_t w, std::uint32_t peer, std::uint32_t to_worker,
                     const void *header, std::size_t header_len, const void *payload,
                     std::size_t payload_len, bool sync, completion *done) noexcept;
    /// Take bulk payload @p b (given to on_message on worker w): its first @p capacity
    /// bytes go into @p buf, or, when @p sink is set, to sink(sink_ctx, ...) in offset
    /// order; the rest is dropped. b is consumed whatever the result.
    /// @return ok (all written), inprogress (done->fn later, from poll(w)), or an error
    /// (the payload is lost; logged).
    /// @context holds w's lock.
    status receive(std::uint32_t w, bulk *b, void *buf, std::size_t capacity, sink_fn sink,
                   void *sink_ctx, completion *done) noexcept;
    /// Give bulk payload @p b back unread (a rendezvous sender completes). @context holds
    /// w's lock.
    void release(std::uint32_t w, bulk *b) noexcept;
    /// Size of @p b's payload, and whether it comes by UCX's rendezvous.
    static std::size_t length(const bulk *b) noexcept;
    static bool rendezvous(const bulk *b) noexcept;

    /// Progress worker w: UCX callbacks, deliveries, completions. Returns the number of
    /// events (UCX progress count + deliveries). Must not be called from a callback.
    int poll(std::uint32_t w) noexcept;
    /// Whether send() on worker w to (peer, to_worker) would start now rather than
    /// say retry_nomem (fewer than max_inflight operations in flight on that pair).
    /// @context holds w's lock.
    bool has_room(std::uint32_t w, std::uint32_t peer, std::uint32_t to_worker) const noexcept;
    /// The number of workers of connected @p peer (from its address). Any thread, after
    /// connect() returned ok.
    std::uint32_t peer_workers(std::uint32_t peer) const noexcept;

    /// Sleeping: wait on event_fd(w) after arm(w) returned ok. arm(): ok, busy (events are
    /// pending: poll first; UCX's UCS_ERR_BUSY; not a retry-class status because the
    /// caller polls rather than retries the same call), or a mapped error.
    int event_fd(std::uint32_t w) const noexcept;
    status arm(std::uint32_t w) noexcept;
    /// Wake a thread sleeping on event_fd(w). Any thread, no lock.
    void signal(std::uint32_t w) noexcept;

    counters stats(std::uint32_t w) const noexcept;

  private:
    friend struct detail::state;
    friend struct transport_test_access; // white-box tests (reordering, bad arrivals)
    transport() = default;

    std::uint32_t workers_ = 0;
    std::size_t max_header_ = 0;
    std::unique_ptr<detail::state> st_;
};

} // namespace mpiv::ep::ucx
