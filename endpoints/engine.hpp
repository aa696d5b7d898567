// engine: the point-to-point engine of one process: the protocols over its transports
// (the C ABI is <mpiv/mpiv_p2p.h>; the Open MPI component drives it).
// Sources: engine.cpp (creation, peers, communicators), engine_send.cpp (sends, outbound
// lists), engine_recv.cpp (arrivals, delivery, receives, progress), engine_cma.cpp
// (rendezvous bytes read from the sender with CMA), engine_copy.cpp (rendezvous in two
// copies, without CMA), engine_wait.cpp (waiting, the server thread); engine_detail.hpp
// holds what they share, wire.hpp the wire header and the operation records.
//
// Design:
// - Transports. The protocols below are written against endpoints/transport.hpp; the
//   shared-memory transport (shm::transport: a memfd segment per process with one inbound
//   queue per worker endpoint, a packet region for eager payloads, CMA reads, copy slots
//   for two copies, the doorbell) carries every peer's traffic today.
// - Wire. A queue slot carries a 56-byte wire header: kind, envelope (cid, source, tag,
//   sequence), size, and either payload inline (24 bytes in the header, up to 392 more in
//   the following slots of the same queue message: 416 in all), a packet offset in the
//   sender's region, or (rendezvous) the sender's buffer address or its list of ranges
//   (gather). A token naming the sender's operation (token_table: an index and a
//   generation, never an address) comes back in ACK (synchronous eager send, after the
//   match) and FIN (rendezvous, after the receiver's process_vm_readv copy).
// - Two copies where CMA is denied (params.single_copy; tried per peer at connect, by
//   reading the peer's address record in its memory). A receiver that cannot read the
//   sender of a matched RTS sends CTS instead of reading: the sender's token, the bytes it
//   wants (the receive may be shorter: truncation) and a token of its own naming the
//   receive (pull_state, in pulls_). The sender redeems its token (no FIN can complete the
//   send now), and the send becomes a stream item at the head of that peer's outbound
//   list: it copies the bytes, a piece at a time, into the k_copy_slots slots its segment
//   keeps for that receiver, and pushes a FRAG (slot, offset, length, receiver's token)
//   for each, always into the same queue of the receiver (so FRAGs arrive in order). The
//   receiver copies a FRAG's bytes out and clears the slot's busy word; the sender reuses
//   a slot only once it is clear. The send completes once every piece is pushed (and, for
//   a streamed send, its writer is done); the receive once every piece is copied. Slots
//   are per receiver, so a receiver that does not drain its queues stalls only transfers
//   to itself (a pool shared between receivers could be held by one of them).
// - Trust. Nothing another process writes is used unchecked: the geometry of its segment
//   (connect), queue stamps and positions (mpsc_queue), packet lists and offsets (pool),
//   every wire field (sender index, kind, sizes, tokens; a rendezvous claiming to come
//   from this process must name one of its own live sends). An invalid message is
//   dropped and reported through params.fault, once per peer (the component then ends
//   the job): it never makes this process read or write outside what it owns or maps.
// - Matching. Each communicator is a match::basic_comm (full MPI rules) whose TLP lock
//   kind is an engine parameter (P-MCS-MCS, P-HMCS-MCS, ticket); an arrival becomes an
//   inmsg (a msg_node) that is matched at once or kept unexpected. A packet is returned
//   to its owner's region when the message is consumed. Arrivals for a context id that
//   has no communicator yet wait in a pending list that comm_create drains. An endpoint
//   of an endpoints communicator matches privately instead (match::private_comm, no lock
//   of its own: see comm_state): its messages all come through one of its process's
//   queues, in each sender's order, and only that queue's consumer lock guards it. That
//   lock's word, like a UCX worker's lock, names its holder (its ULT, or its thread when
//   it runs none: detail::self()): a completion inside a drain that posts on one of the
//   queue's handles finds the lock its own, whatever other ULTs of its thread drain
//   while it yields.
// - Back-pressure, per destination. A send never waits for a packet: with none free
//   (unexpected messages at receivers may hold them all until their receives are posted)
//   an eager send goes by rendezvous instead. A send that finds the peer's queues full
//   goes to that peer's outbound list, and progress() retries it; later sends to the same
//   peer queue behind it (a thread's sends keep their order), sends to other peers do
//   not. The sender's sequence number is drawn only once the message has claimed its
//   queue slot (push): a message that waits holds no number that later ones, held by the
//   receiver, would wait for. An operation completes only once all it owes a peer is in
//   that peer's queue: a queued send (inline ones too) stays in progress until pushed,
//   and a receive whose ACK or FIN waits in an outbound list completes when that control
//   message is pushed. So nothing this process owes another waits on a list that only
//   this process's later MPI calls would drain, and the lists hold no more than the
//   operations in progress. Nothing is dropped.
// - Threads. All calls are thread-safe. ULTs call in too: a lock held across a possible
//   ULT yield (an outbound list's) must yield its waiters, never block the worker. Each
//   thread is bound on first use to an endpoint: a ULT worker to its worker number, a
//   thread whose first send, receive or probe is on an endpoints handle to that handle's
//   queue, any other round robin (all modulo the endpoint count). It sends through that
//   endpoint's packets (to the peer endpoint of the same index, or to an endpoints
//   handle's own queue) and drains that queue first.
//   Each queue has one drainer at a time (the queue's try-lock); progress() may run in any
//   number of threads. An outbound list is guarded by a lock taken only when it is
//   non-empty (a relaxed count per peer, and one for the process, say so).
// - Serialized engines (params.serialized, inline progress: the caller promises that its
//   calls never overlap, as an MPI library below MPI_THREAD_MULTIPLE does) skip the
//   process-local locks and locked instructions of the data path: the matching table's
//   bucket and peer locks, the send sequence increment, the queue try-lock, waiter
//   counts. The words other processes write (queue tails and slots, doorbells, packet
//   lists) keep their atomics. Not with the UCX transport: its flusher thread polls the
//   UCX workers, and so delivers arrivals and completes sends, beside the caller.
// - Completions batched after a drain. A receive's completion writes lines that only its
//   waiter used last: the receive buffer, the caller's request (params.complete) and what
//   wakes the waiter. When thousands of ULTs take turns those lines have left the cache,
//   and completing each arrival as it is matched made each completion wait for its misses
//   one after another. So when the draining thread is a ULT worker that prefetches
//   (sched::worker::prefetching(): at least its prefetch_ults live ULTs), the receives
//   matched during one queue drain (up to k_drain_batch messages) are gathered in a
//   completion_batch on progress()'s stack instead, and completed once the drain ends: a
//   first pass asks for every buffer's lines and, through params.prefetch, every
//   request's; the second completes them in match order, by then mostly from the cache.
//   Matching itself is unchanged (in arrival order, under the same locks): only the
//   completion moves, out of the queue's consumer lock, as any other thread's could be.
//   The batch lives in the frame of that drain's progress() call and is passed down the
//   drain's calls (handle(), arrive()): no thread-local state, so a ULT that yields inside
//   a drain leaves nothing behind for the worker's other ULTs, a completion that calls
//   progress() again gathers in a batch of its own, and arrivals from elsewhere (UCX,
//   early arrivals) complete at once. A batch that is full completes further matches at
//   once (one arrival that releases held messages of its sender can match more than a
//   drain's messages), so those may complete before earlier ones of the batch, which MPI
//   allows. Completion callbacks must therefore not wait for other operations (they
//   never did: one may run inside a drain). Each batched completion counts in base::stats
//   (batched_completions).
// - Lifetime. Operations live in the caller's mpiv_p2p_op_t; inmsgs are heap objects
//   owned by the engine until delivered. A destroyed communicator's object is freed once
//   every queue drain that may have read its pointer has ended (reap(), by drain marks
//   taken when its pointer was cleared; nothing waits for it), so a progress thread never
//   touches freed matching state; one whose messages still wait in the table (an
//   erroneous program) is kept until the engine is destroyed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include <sys/uio.h>

#include <mpiv/mpiv_p2p.h>

#include "base/backoff.hpp"
#include "base/cacheline.hpp"
#include "base/lock/tas.hpp"
#include "base/stats.hpp"
#include "base/status.hpp"
#include "endpoints/shm/mpsc_queue.hpp"
#include "endpoints/shm/transport.hpp"
#include "endpoints/wire.hpp"
#if MPIV_HAVE_UCX
#include "endpoints/ucx/transport.hpp"
#endif
#include "endpoints/token_table.hpp"
#include "matching/comm.hpp"
#include "matching/private_comm.hpp"
#include "matching/table.hpp"
#include "sched/sync.hpp"

namespace mpiv::ep {

namespace detail {
struct completion_batch; // engine_detail.hpp
/// A callable passed down without a copy or an allocation (engine::send_ucx's finish).
class finish_ref {
  public:
    template <class F>
    finish_ref(F &&f) noexcept // NOLINT: implicit, as a function argument
        : obj_(const_cast<void *>(static_cast<const void *>(&f))),
          call_([](void *o) { (*static_cast<std::remove_reference_t<F> *>(o))(); })
    {
    }
    void operator()() const { call_(obj_); }

  private:
    void *obj_;
    void (*call_)(void *);
};
} // namespace detail

// Progress polls before a pthread hands its PU on (engine_wait.cpp): a lone waiter's (the
// most; latency), and the least of a waiter's in a crowd, whose budget adapts in between.
constexpr std::uint32_t k_spin_polls_alone = 4096;
constexpr std::uint32_t k_spin_polls_crowd = 64;

/// A wait for `remaining` completions by one thread or ULT (mpiv_p2p_waiter_t).
/// A ULT's wait is a sched::sync (the ULT blocks alone). A pthread's wait is its
/// thread-local waiter: completions decrement `remaining` and bump the futex `word`.
/// A pthread first polls (alone k_spin_polls_alone times, in a crowd for the budget its
/// waiter learned: base::adaptive_spin); in a crowd (or under a server thread) it then
/// polls and yields for up to idle_us; after that it is either the progress owner of its
/// process (drives progress, sleeps on the segment's doorbell after idle_us without
/// events) or parked on `word`; the owner hands ownership to a parked waiter when it
/// leaves (see engine::pthread_wait_slow).
struct waiter {
    sched::sync *ult_sync = nullptr;            // a ULT's wait
    std::atomic<std::int32_t> remaining{0};     // completions still missing
    std::int32_t begun = 0;                     // the count of the wait (its thread only)
    std::atomic<std::uint32_t> word{0};         // futex word, bumped per wake-up event
    std::atomic<bool> owner{false};             // drives progress right now
    std::atomic<bool> promoted{false};          // made owner by the leaving owner
    std::atomic<bool> asleep{false};            // in (or entering) a futex wait on word
    waiter *next = nullptr;                     // parked list (engine::park_mu_)
    bool parked = false;                        // engine::park_mu_
    // A pthread's polls before it yields in a crowd (its thread only).
    base::adaptive_spin crowd_spin{k_spin_polls_crowd, k_spin_polls_alone};
    bool prepolled = false; // poll_alone() spent crowd_spin's budget (its thread only)
};

/// Matching engines by TLP lock kind (mpiv_p2p_params_t::lock).
using comm_mcs = match::basic_comm<base::p_mcs_mcs_lock>;
using comm_hmcs = match::basic_comm<base::p_hmcs_mcs_lock>;
using comm_ticket = match::basic_comm<base::tlp_lock<base::ticket_lock, base::ticket_lock>>;

/// Per-communicator state: the matching engine (one of three lock kinds) and the
/// context id.
///
/// Endpoints communicators (mpiv_p2p_comm_create_endpoints): each rank of this process is
/// a handle, a comm_state whose matching is private (match::private_comm: no other
/// handle's traffic in it, so a wildcard on one handle sees only messages to that endpoint
/// rank) and the map rank -> endpoint index within its owner, which its sends put in the
/// wire (dst_ep). Each endpoint receives through one inbound queue of its process only
/// (the creator's rank -> queue map, which every process has; by default endpoint k uses
/// queue k; both mod the queue count): so one sender's messages to it arrive in sending
/// order, and its matching is called only under that queue's consumer lock (drains hold
/// it; posts, probes and cancels take it), without a lock of its own.
/// The group, also a comm_state (no matching engine of its own), is what comms_[cid]
/// holds: it owns the handles, indexed by endpoint index, routes each arrival to one, and
/// goes when its last handle is destroyed.
struct comm_state {
    std::unique_ptr<comm_mcs> mcs;
    std::unique_ptr<comm_hmcs> hmcs;
    std::unique_ptr<comm_ticket> ticket;
    std::unique_ptr<match::private_comm> priv; // an endpoints handle
    std::uint16_t cid;
    // Endpoints: a handle's queue, its maps, its group; a group's handles and maps.
    std::uint32_t queue = 0;
    shm::mpsc_queue<> *inbox = nullptr; // that queue (null: a serial engine, no lock)
    const std::uint16_t *rank_ep = nullptr;
    const std::uint16_t *rank_queue = nullptr; // rank -> its inbound queue in its process
    comm_state *group = nullptr;
    std::vector<std::unique_ptr<comm_state>> eps;
    std::vector<std::uint16_t> rank_eps;
    std::vector<std::uint16_t> rank_queues;
    std::uint32_t live_handles = 0; // a group's handles not destroyed yet (pending_mu_)
    bool destroyed = false;         // a handle destroyed (pending_mu_)
    // Its counters (base::stats::add_comm; a handle's own, the group's unused).
    const std::uint64_t stats_key = base::stats::comm_open();

    comm_state() = default;
    comm_state(const comm_state &) = delete;
    comm_state &operator=(const comm_state &) = delete;
    ~comm_state() { base::stats::comm_close(stats_key); }


    /// Call @p f with the matching engine, whichever lock kind it has.
    template <class F> decltype(auto) match(F &&f)
    {
        if (priv != nullptr) {
            return f(*priv);
        }
        if (mcs != nullptr) {
            return f(*mcs);
        }
        if (hmcs != nullptr) {
            return f(*hmcs);
        }
        return f(*ticket);
    }

    /// Whether messages of this communicator (or of any handle of a group) still wait.
    bool holds_messages()
    {
        if (!eps.empty()) {
            for (auto &h : eps) {
                if (h->holds_messages()) {
                    return true;
                }
            }
            return false;
        }
        return match([](auto &m) -> bool { return m.holds_messages(); });
    }
};

/// What waits for room in one peer's queues, in order: sends (in the caller's storage)
/// and control messages (ACK, FIN) with the receive they complete.
struct outbound {
    send_op *op;            // a send, or nullptr: the control message below
    bool stream;            // op is sending its bytes in FRAGs (after a CTS)
    wire control;           // ack or fin
    void *user;             // control: the receive completed once it is pushed (or null)
    mpiv_p2p_status_t st;   // that receive's status
};

/// A peer as the protocols see it (its transport's view is shm::transport::at()): what
/// this process has for it that waits for room in its queues.
struct peer_state {
    bool connected = false;
    bool ucx = false; // reached over the UCX transport (else shared memory)
    // Set once connected over UCX (release, after ucx and connected); the acquire load in
    // on_ucx_message() lets arrivals from it through on any thread.
    std::atomic<bool> ucx_ready{false};
    std::atomic<bool> faulted{false}; // its fault was reported
    // Non-zero while the list holds items (relaxed hint; the list itself is read under
    // out_mu). A send to this peer goes behind them.
    alignas(k_false_sharing) std::atomic<std::uint32_t> out_count{0};
    // A lock that yields a waiting ULT (a drainer may yield inside the pool while holding
    // it; a std::mutex would then block the worker under its owner), and queues nobody:
    // with a FIFO lock, ULTs that yielded in line kept the progress loop's try_lock out
    // and were handed the lock one per pass of their worker (see base/lock/tas.hpp).
    base::tas_lock out_mu;
    std::deque<outbound> out;
};

class engine {
  public:
    [[nodiscard]] static status create(const mpiv_p2p_params_t &params,
                                       std::unique_ptr<engine> &engine_p) noexcept;
    ~engine();

    engine(const engine &) = delete;
    engine &operator=(const engine &) = delete;

    /// This process's address for the modex: the shared-memory transport's, then the UCX
    /// transport's when it is used (see engine_ucx.cpp).
    void address(const void *&addr, std::size_t &len) const noexcept
    {
        addr = address_.data();
        len = address_.size();
    }
    /// Connect @p peer from its address: over shared memory when @p same_node and SHM is
    /// among the transports, else over UCX.
    [[nodiscard]] status connect(std::uint32_t peer, const void *addr, std::size_t len,
                                 bool same_node = true) noexcept;
    /// MPIV_P2P_TRANSPORT_SHM or _UCX: what carries @p peer's traffic.
    [[nodiscard]] status peer_transport(std::uint32_t peer, unsigned &transport_p) const noexcept;
    /// How rendezvous messages from @p peer arrive (mpiv_p2p_peer_single_copy).
    [[nodiscard]] status peer_single_copy(std::uint32_t peer, bool &single_p,
                                          int &error_p) const noexcept;

    [[nodiscard]] status comm_create(std::uint16_t cid, std::int32_t size, unsigned assertions,
                                     comm_state *&comm_p) noexcept;
    /// An endpoints communicator of @p size ranks: rank r belongs to peer @p rank_peer[r]
    /// as its endpoint @p rank_ep[r] (0, 1, ... in rank order per peer), which receives
    /// through that peer's inbound queue @p rank_queue[r] (null: rank_ep[r]; taken modulo
    /// the peer's queue count); this process's ranks become handles_p[0 .. its count) in
    /// endpoint order (mpiv_p2p_comm_create_endpoints).
    [[nodiscard]] status comm_create_endpoints(std::uint16_t cid, std::int32_t size,
                                               const std::uint32_t *rank_peer,
                                               const std::uint16_t *rank_ep,
                                               const std::uint16_t *rank_queue,
                                               comm_state **handles_p,
                                               std::uint32_t capacity) noexcept;
    [[nodiscard]] status comm_destroy(comm_state *comm) noexcept;
    /// The MPIV_P2P_ASSERT_* bits @p comm has now.
    static unsigned comm_assertions(comm_state &comm) noexcept;
    /// Change a communicator's MPIV_P2P_ASSERT_* bits (basic_comm::set_assertions).
    static status comm_set_assertions(comm_state &comm, unsigned assertions) noexcept;

    [[nodiscard]] status isend(comm_state &comm, std::uint32_t peer, std::int32_t self_rank,
                               std::int32_t dest, std::int32_t tag, const void *buf,
                               std::size_t bytes, unsigned flags, void *user, send_op &op,
                               mpiv_p2p_status_t &st) noexcept;
    /// A rendezvous send of the bytes @p iov lists (in order); the list and the bytes stay
    /// valid until completion.
    [[nodiscard]] status isend_gather(comm_state &comm, std::uint32_t peer,
                                      std::int32_t self_rank, std::int32_t dest, std::int32_t tag,
                                      const struct iovec *iov, std::size_t iovcnt, unsigned flags,
                                      void *user, send_op &op, mpiv_p2p_status_t &st) noexcept;
    /// A rendezvous send of bytes the caller is still writing into @p buf: *ready says how
    /// many are there (see mpiv_p2p_isend_streamed).
    [[nodiscard]] status isend_streamed(comm_state &comm, std::uint32_t peer,
                                        std::int32_t self_rank, std::int32_t dest,
                                        std::int32_t tag, const void *buf, std::size_t bytes,
                                        const std::size_t *ready, unsigned flags, void *user,
                                        send_op &op, mpiv_p2p_status_t &st) noexcept;
    [[nodiscard]] status irecv(comm_state &comm, std::int32_t source, std::int32_t tag,
                               const recv_target &to, void *user, recv_op &op,
                               mpiv_p2p_status_t &st) noexcept;
    /// A receive into a buffer.
    [[nodiscard]] status irecv(comm_state &comm, std::int32_t source, std::int32_t tag,
                               void *buf, std::size_t bytes, void *user, recv_op &op,
                               mpiv_p2p_status_t &st) noexcept
    {
        return irecv(comm, source, tag, recv_target{buf, bytes, nullptr, nullptr}, user, op, st);
    }
    [[nodiscard]] status cancel(recv_op &op) noexcept;
    [[nodiscard]] status iprobe(comm_state &comm, std::int32_t source, std::int32_t tag,
                                mpiv_p2p_status_t &st) noexcept;
    [[nodiscard]] status improbe(comm_state &comm, std::int32_t source, std::int32_t tag,
                                 inmsg *&msg_p, mpiv_p2p_status_t &st) noexcept;
    /// Receive a message taken by improbe(): status::ok (done, @p st written) or
    /// status::inprogress (its ACK or FIN waits for room: complete(@p user) follows).
    [[nodiscard]] status mrecv(inmsg &m, const recv_target &to, void *user,
                               mpiv_p2p_status_t &st) noexcept;
    [[nodiscard]] status mrecv(inmsg &m, void *buf, std::size_t bytes, void *user,
                               mpiv_p2p_status_t &st) noexcept
    {
        return mrecv(m, recv_target{buf, bytes, nullptr, nullptr}, user, st);
    }

    int progress() noexcept;

    /// The engine's levels (mpiv_p2p_levels).
    void levels(mpiv_p2p_levels_t &l) const noexcept
    {
        // Relaxed: statistics.
        const std::int64_t held = held_.load(std::memory_order_relaxed);
        l.held = held > 0 ? static_cast<std::uint64_t>(held) : 0;
        l.held_max = static_cast<std::uint64_t>(held_max_.load(std::memory_order_relaxed));
        l.posted_max = static_cast<std::uint64_t>(posted_max_.load(std::memory_order_relaxed));
        l.posted_tracked = track_posted_.load(std::memory_order_relaxed) ? 1 : 0;
    }

    /// Count the receives that wait in the posted lists in one process-wide level, for its
    /// exact high-water mark (mpiv_p2p_track_posted): on or off.
    /// Turning it on starts a new mark at the current level.
    void track_posted(bool on) noexcept
    {
        // Relaxed: a switch for statistics; a receive posted meanwhile is counted or not,
        // and its own flag (recv_op::leveled) keeps its add and its subtract paired.
        if (on && !track_posted_.exchange(true, std::memory_order_relaxed)) {
            // (The level may be -1 for an instant: a match's subtract before its post's add.)
            const std::int64_t level = posted_level_.load(std::memory_order_relaxed);
            posted_max_.store(level > 0 ? level : 0, std::memory_order_relaxed);
        } else if (!on) {
            track_posted_.store(false, std::memory_order_relaxed);
        }
    }

    /// Largest message sent inline (in the queue, done at once): MPIV_P2P_INLINE_MAX, or
    /// less when the queues have fewer slots than such a message takes.
    std::size_t inline_max() const noexcept { return inline_max_; }

    /// A pthread about to wait polls for its completions itself, for up to @p polls
    /// polls while no other pthread waits, for its crowd_spin budget otherwise
    /// (mpiv_p2p_poll_alone). True when @p done said so; false at once in a ULT, with a
    /// server thread or with UCX peers.
    bool poll_alone(int polls, int (*done)(void *), void *arg) noexcept;

    /// Begin a wait for @p count >= 1 completions by the calling thread or ULT.
    waiter *wait_begin(std::int32_t count) noexcept;
    /// One completion for @p w (any thread).
    void wake(waiter *w) noexcept;
    /// Block until @p w's completions arrived (driving progress as needed); ends the wait.
    void wait_end(waiter *w) noexcept;
    /// After wait_end(), block until @p total completions in all were reported to @p w
    /// since wait_begin() (a wait for any of several operations: those that completed
    /// while it ended still wake it, and must have before the thread's next wait begins).
    void wait_settle(waiter *w, std::int32_t total) noexcept;

  private:
    friend struct engine_test_access;

    explicit engine(const mpiv_p2p_params_t &params) noexcept;
    status init(int cma_self_error) noexcept;
    // UCX (engine_ucx.cpp): create the transport (when params_.transports asks for it),
    // build address_, push a message to a peer over it, poll a worker, and the callbacks
    // it makes.
    status init_ucx() noexcept;
    // Send @p len bytes (finished by @p finish once the send is sure to start) to lane
    // @p q of UCX peer @p peer, with @p bulk's payload when set; false: no room now
    // (nothing sent).
    bool send_ucx(std::uint32_t peer, std::size_t q, const void *bytes, std::size_t len,
                  const detail::finish_ref &finish, const void *bulk = nullptr) noexcept;
    int poll_ucx(std::size_t q) noexcept;
    // Inbound lanes of @p peer: its queues, or its UCX workers.
    std::size_t lanes(std::uint32_t peer) const noexcept;
    bool stream_out_ucx(std::uint32_t peer, send_op &op, int &events) noexcept;
#if MPIV_HAVE_UCX
    static void on_ucx_message(void *ctx, std::uint32_t worker, std::uint32_t peer,
                               std::uint32_t from_worker, const void *header,
                               std::size_t header_len, const void *payload,
                               std::size_t payload_len, ucx::bulk *b) noexcept;
    static void on_ucx_failure(void *ctx, std::uint32_t peer, const char *reason) noexcept;
    // Bulk messages over UCX: a contiguous rendezvous send carries its bytes as the UCX
    // bulk payload of its RTS (k_wire_bulk); UCX moves them (its rendezvous, zero copy
    // where it can) once the receive takes them, on the worker they came through: at
    // once when the match happens inside that worker's poll, otherwise from the next
    // poll_ucx() of that worker (the deferred list). The send completes at UCX's
    // completion (bulk_sent); the receive when UCX has written the bytes (ucx_took).
    struct bulk_sent;
    struct bulk_recv;
    bulk_sent *new_bulk_sent(const send_op &op) noexcept;
    static void delete_bulk_sent(bulk_sent *b) noexcept;
    struct alignas(k_false_sharing) deferred_list {
        std::mutex mu;
        bulk_recv *head = nullptr, *tail = nullptr; // mu
        // Relaxed hint read by poll_ucx() without the mutex; set and cleared under it.
        std::atomic<bool> any{false};
    };
    bool take_bulk(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept;
    // Start bulk receive @p r (w's lock held); true: done now (completed by the caller).
    bool start_bulk(bulk_recv &r) noexcept;
    void run_deferred(std::uint32_t w) noexcept;
    void free_deferred() noexcept; // teardown: receives never started
    static void ucx_took(ucx::completion *c, status s) noexcept;
    static void ucx_bulk_sent(ucx::completion *c, status s) noexcept;
    // Try to lock worker @p w for a call from the caller (see send_ucx); false: busy. Sets
    // @p held when the caller (its ULT or thread) holds it already (inside its poll):
    // then nothing to unlock.
    bool lock_worker(std::uint32_t w, bool &held) noexcept;
    // Sends UCX took but has not finished (the endpoint still wiring up, the socket
    // full; a bulk send until its receiver took the bytes, which UCX's rendezvous moves
    // only with the sender's progress): the flusher thread polls the workers while any is
    // left, so a process that returns from MPI (or waits elsewhere) does not hold back the
    // peers that wait for them. It sleeps otherwise, and is woken by the first such send.
    struct owed_completion : ucx::completion {
        engine *e;
    };
    static void ucx_sent_later(ucx::completion *c, status s) noexcept;
    void flusher_main() noexcept;
    void stop_flusher() noexcept;
#endif

    // The endpoint the calling thread sends through and drains first, bound on first use
    // (see Threads above): this_endpoint() inline (engine_detail.hpp; every send and
    // progress pass), my_endpoint() out of line (white-box tests).
    inline std::uint32_t this_endpoint() noexcept;
    std::uint32_t my_endpoint() noexcept;
    // this_endpoint()'s first use on a thread: returns the binding before the modulo.
    std::uint32_t bind_endpoint() noexcept;
    // False: not sent yet (retry). True: pushed; @p waits, set before the push, says
    // whether ACK/FIN completes it. Without a packet an eager send goes rendezvous.
    [[gnu::always_inline]] bool try_send(send_op &op, bool &waits) noexcept;
    // Count a message pushed to @p peer (base/stats.hpp): its protocol, transport, bytes.
    [[gnu::always_inline]] void count_sent(std::uint32_t peer, wire_kind kind,
                                           std::uint8_t flags, std::uint64_t bytes) noexcept;
    // Queue @p item behind what waits for @p peer.
    void post_outbound(std::uint32_t peer, const outbound &item) noexcept;
    // Push @p w (then @p more_bytes of @p more) into one of @p peer's queues (over UCX,
    // with @p bulk's payload when set: a bulk_sent). With @p seq_comm, w's sequence number
    // for @p dest is drawn once the slot is claimed. False: the queues are full (or no
    // memory for the sequence state): nothing sent.
    [[gnu::always_inline]] bool push(std::uint32_t peer, wire &w, comm_state *seq_comm,
                                     std::int32_t dest, const void *more = nullptr,
                                     std::size_t more_bytes = 0,
                                     const void *bulk = nullptr) noexcept;
    // An ACK or FIN; false when it waits in the outbound list, which then completes the
    // receive @p user with @p st once it is pushed.
    bool send_control(std::uint32_t peer, wire_kind kind, std::uint64_t token,
                      std::uint64_t bytes, void *user, const mpiv_p2p_status_t &st,
                      std::uint64_t spare = 0) noexcept;
    // Push @p w into @p peer's queue @p q only (FRAGs of one transfer keep their order).
    bool push_at(std::uint32_t peer, std::size_t q, const wire &w) noexcept;
    // Two copies, receiver: ask @p m's sender for its bytes (CTS); the receive completes
    // when the last FRAG is copied (or, for no bytes, as send_control says).
    bool start_pull(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept;
    void handle_cts(const wire &w) noexcept;
    // @p piece: the bytes, inside the message (UCX); null: in the sender's copy slot.
    void handle_frag(const wire &w, const unsigned char *piece = nullptr) noexcept;
    // Two copies, sender: push what fits of @p op's FRAGs to @p peer; true once all are
    // pushed and the send may complete.
    bool stream_out(std::uint32_t peer, send_op &op, int &events) noexcept;
    void copy_piece(send_op &op, unsigned char *to, std::size_t len) noexcept;
    /// One message drained from inbound queue @p queue: a wire header, then @p bytes -
    /// sizeof(wire) more; over UCX, @p bulk is the bulk handle of its bytes, if any.
    /// With @p batch, the receives it matches complete later, in the caller's batch (see
    /// "Completions batched after a drain").
    void handle(const unsigned char *msg, std::size_t bytes, std::uint32_t queue,
                void *bulk = nullptr, detail::completion_batch *batch = nullptr) noexcept;
    /// Match @p m in @p comm (or, an endpoints group, in the handle it names); @p queue is
    /// the inbound queue it came through, or k_no_queue (an early arrival, matched before
    /// the communicator is published). With @p batch (and room in it), a receive it matches
    /// goes there instead of completing now.
    [[gnu::always_inline]] void arrive(comm_state &comm, inmsg &m, std::uint32_t queue,
                                       detail::completion_batch *batch = nullptr) noexcept;
    static constexpr std::uint32_t k_no_queue = ~std::uint32_t{0};
    // The arrivals that waited for a communicator (comm_create), in their order.
    void arrive_early(comm_state &comm, inmsg *first) noexcept;
    // Hand @p m's bytes to @p to and write @p st. False: the message's ACK or FIN waits
    // for room, and its push completes the receive @p user (with @p st) later.
    bool deliver(inmsg &m, const recv_target &to, void *user, mpiv_p2p_status_t &st) noexcept;
    int read_remote(std::uint32_t from, const recv_target &to, const wire &w,
                    std::size_t n) noexcept;
    int read_streamed(std::uint32_t from, const recv_target &to, const wire &w,
                      std::size_t n) noexcept;
    [[gnu::always_inline]] bool valid_target(comm_state &comm, std::uint32_t peer,
                                             std::int32_t dest, unsigned flags) noexcept;
    [[gnu::always_inline]] void fill_wire(wire &w, const comm_state &comm, std::int32_t self_rank,
                                          std::int32_t dest, std::int32_t tag, std::size_t bytes,
                                          unsigned flags) noexcept;
    // The matching engine of a new communicator (or endpoints handle) over @p table.
    status make_match(comm_state &c, match::table &table, std::int32_t size,
                      unsigned flags) noexcept;
    // Take the early arrivals of @p cid off the pending list, in arrival order (pending_mu_).
    inmsg *take_pending(std::uint16_t cid) noexcept;
    /// The op of a send to a target valid_target() accepted; its wire ready but for kind
    /// and u (prepare_send() checks the target first).
    [[gnu::always_inline]] void init_send(comm_state &comm, std::uint32_t peer,
                                          std::int32_t self_rank, std::int32_t dest,
                                          std::int32_t tag, std::size_t bytes, unsigned flags,
                                          void *user, send_op &op) noexcept;
    [[gnu::always_inline]] bool prepare_send(comm_state &comm, std::uint32_t peer,
                                             std::int32_t self_rank, std::int32_t dest,
                                             std::int32_t tag, std::size_t bytes,
                                             unsigned flags, void *user, send_op &op) noexcept;
    [[gnu::always_inline]] bool send_inline_now(comm_state &comm, std::uint32_t peer,
                                                std::int32_t self_rank, std::int32_t dest,
                                                std::int32_t tag, const void *buf,
                                                std::size_t bytes) noexcept;
    [[gnu::always_inline]] status launch(send_op &op, mpiv_p2p_status_t &st) noexcept;
    [[gnu::always_inline]] void complete_recv(recv_op &op, inmsg &m) noexcept;
    // Complete the receives of @p b (gathered during a drain): prefetch, then complete.
    void complete_batch(detail::completion_batch &b) noexcept;
    // progress()'s drains of the shared-memory queues; Batch: each drain's receives go to
    // a completion_batch (only this instantiation has one in its frame). Inline in
    // progress() without a batch, as the loop was before batching; drain_batched() holds
    // the other (out of line: its frame is a batch larger).
    template <bool Batch> [[gnu::always_inline]] int drain_inbound() noexcept;
    [[gnu::noinline]] int drain_batched() noexcept;
    int drain_outbound() noexcept;
    int drain_peer(peer_state &p) noexcept;
    // Invalid data that claims to come from @p peer: report it once per peer (params_.fault,
    // or the log without one); a claim of this process, or of no connected peer, names
    // nobody (MPIV_P2P_PEER_UNKNOWN).
    void fault(std::uint32_t peer, const char *what) noexcept;
    // A message's checks before it is matched: false (reported) drops it. The common case
    // (a connected peer's inline or packet message of a plausible size) inline.
    [[gnu::always_inline]] bool valid_arrival(const wire &w, std::size_t more_bytes) noexcept;
    bool valid_arrival_slow(const wire &w, std::size_t more_bytes) noexcept;
    void handle_control(const wire &w) noexcept;
    void server_loop() noexcept;
    bool inbound_idle() noexcept;
    void pthread_wait(waiter &w) noexcept;
    // @p crowd: other threads of the process wait too. @return the polls after which the
    // wait ended within @p spins, or -1 when it outlasted them.
    int pthread_wait_slow(waiter &w, int spins, bool crowd) noexcept;
    void owner_loop(waiter &w) noexcept;
    // Sleep on this segment's doorbell (rung by senders and local posters; at most
    // k_doorbell_timeout_ns) unless something is to be done or still() turns false.
    template <class Still> void doze(Still still) noexcept;
    void sleep_on_word(waiter &w, std::uint32_t seen) noexcept;
    void leave_owner() noexcept;
    void promote_next_locked() noexcept; // park_mu_ held
    void unpark_locked(waiter &w) noexcept; // park_mu_ held

    const mpiv_p2p_params_t params_;
    // Calls never overlap (params_.serialized with inline progress, and no UCX transport,
    // whose flusher thread polls and delivers on its own: see flusher_main()): the
    // process-local locks and locked increments of the data path are skipped (matching
    // table, queue drains, waiter counts). Cross-process words (queue tails, doorbells)
    // stay atomic.
    const bool serial_ = params_.serialized != 0 && params_.progress == MPIV_P2P_PROGRESS_INLINE &&
                         (params_.transports & MPIV_P2P_TRANSPORT_UCX) == 0;
    shm::transport shm_;
#if MPIV_HAVE_UCX
    // (Declared before ucx_, so alive while the transport's teardown completes sends.)
    owed_completion owed_completion_{};
    alignas(k_false_sharing) std::atomic<std::int64_t> ucx_owed_{0}; // see flusher_main()
    std::unique_ptr<ucx::transport> ucx_;
    std::mutex flusher_mu_;
    std::condition_variable flusher_cv_;
    bool flusher_stop_ = false; // flusher_mu_
    std::thread flusher_;
    std::unique_ptr<deferred_list[]> deferred_; // [UCX worker]
#endif
    std::atomic<bool> ucx_up_{false}; // the UCX transport runs: waits poll it, never sleep
    std::atomic<bool> track_posted_{false}; // see track_posted() (read-mostly line)
    std::vector<unsigned char> address_; // see address()
    // Largest inline message: what fits in a queue's slots, at most k_inline_max (set by
    // init()).
    std::size_t inline_max_ = 0;
    std::unique_ptr<peer_state[]> peers_;
    token_table<send_op> tokens_; // sends waiting for ACK/FIN, named to peers by token
    token_table<pull_state> pulls_; // receives waiting for FRAGs, named to senders by token
    std::atomic<bool> unknown_faulted_{false};
    std::unique_ptr<match::table> table_;
    std::unique_ptr<std::atomic<comm_state *>[]> comms_; // indexed by context id

    // Arrivals for context ids without a communicator.
    std::mutex pending_mu_;
    inmsg *pending_ = nullptr;
    // Destroyed communicators not freed yet, each with a drain mark per inbound queue
    // (mpsc_queue::drain_mark()): reap() frees one once every drain that may have read its
    // pointer has ended; those whose messages still wait in the table are kept until the
    // engine goes (their table entries name them).
    struct grave {
        std::unique_ptr<comm_state> comm;
        std::vector<std::uint64_t> marks;
    };
    std::mutex graveyard_mu_;
    std::vector<grave> graveyard_;                  // graveyard_mu_
    std::vector<std::unique_ptr<comm_state>> kept_; // graveyard_mu_
    void reap() noexcept; // never waits
    std::mutex peers_mu_; // serializes connect()

    // Inline progress for waiting ULTs: one poller ULT per worker runs while ULTs of that
    // worker wait. A worker's state is read and written only on its thread, by its ULTs
    // and its poller, which run one at a time and switch only where they block or yield:
    // never between a waiter's count and its look at poller_on, nor between the poller's
    // last look at the count and its exit. So plain fields do, a line per worker (no
    // locked instruction per ULT wait, no line shared by all workers); zero-filled pages,
    // touched only by the workers that have ULTs waiting (mapped, not allocated: calloc
    // does not align to a line).
    struct alignas(k_false_sharing) ult_poll_state {
        std::int32_t waiters; // ULTs of the worker in wait_end()
        bool poller_on;       // its poller runs
    };
    static void *poller_main(void *arg) noexcept;
    void ensure_poller(ult_poll_state &ws, std::uint32_t worker) noexcept;
    struct poller_arg;
    struct unmap_poll_states {
        void operator()(ult_poll_state *p) const noexcept;
    };
    static std::size_t poll_states_bytes() noexcept; // one per possible worker id
    std::unique_ptr<ult_poll_state[], unmap_poll_states> ult_poll_; // per worker id
    std::atomic<std::int32_t> pollers_live_{0};
    std::once_flag runtime_ref_once_;                // the engine's reference on the runtime
    bool runtime_ref_ = false;

    // Progress ownership among waiting pthreads.
    alignas(k_false_sharing) std::atomic<std::int32_t> pthread_waiters_{0};
    std::mutex park_mu_;
    bool owner_taken_ = false; // park_mu_
    waiter *parked_ = nullptr; // park_mu_

    // Items in all peers' outbound lists (a relaxed hint for progress()).
    alignas(k_false_sharing) std::atomic<std::uint32_t> outbound_count_{0};

    // Messages that arrived and wait for their receives (unexpected, or held for their
    // sender's order). MPI makes the receiver buffer them: no bound keeps every legal
    // program progressing (a receive posted for the last of them must get it), so their
    // number is watched instead: a warning each time it passes the next threshold
    // (k_held_warn, then doubling). Counted only off the fast path (an arrival that
    // matches at once, the common case, changes nothing).
    static constexpr std::uint64_t k_held_warn = 65536;
    alignas(k_false_sharing) std::atomic<std::int64_t> held_{0};
    std::atomic<std::int64_t> held_max_{0};
    std::atomic<std::uint64_t> held_warn_at_{k_held_warn};
    void count_held(std::int64_t delta) noexcept;

    // Receives that wait in the posted lists, counted only while track_posted_ (a shared
    // write per posted receive and per match: off unless MPI_T or pml_mpiv_stats asks for
    // the high-water mark), and the most at once. The add comes after the post: a receive
    // matched in the instant of its posting can take its subtract first, so the mark may
    // miss it, never count one that was not there.
    alignas(k_false_sharing) std::atomic<std::int64_t> posted_level_{0};
    std::atomic<std::int64_t> posted_max_{0};
    void count_posted(std::int64_t delta) noexcept;

    alignas(k_false_sharing) std::atomic<std::uint32_t> next_endpoint_{0};
    alignas(k_false_sharing) std::atomic<bool> stop_{false};
    std::thread server_;
};

} // namespace mpiv::ep
