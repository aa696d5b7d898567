// basic_comm: the MPI matching rules of one communicator, over the shared match::table.
//
// Design. Specific receives and messages meet in the table under (cid, source, tag); the
// rules MPI adds on top are kept here:
// - Sender order. Each message carries its sender's sequence number towards this rank
//   (next_send_seq() on the sending side). Arrivals from one peer are matched one at a
//   time, in sequence order, under that peer's spinlock; an arrival ahead of its number is
//   held in the peer's sorted list, and the arrival that fills the gap matches the held
//   ones right after itself. So order survives several arrival queues.
// - Receiver order. A key's FIFO keeps the posting order of specific receives. Wildcard
//   receives have no key. One from a given source with k_any_tag (an "any-tag" receive,
//   a server's common case) waits in its sender's peer list; the others (k_any_source)
//   wait in the wildcard list, each list in posting order. Every receive gets a posting
//   number from post_seq_: a specific one reads it (even values), a wildcard one advances
//   it by 2 (odd values). An arrival takes the earliest-posted of its key's head, its
//   sender's first any-tag receive and the first matching wildcard; numbers never tie.
//   k_any_tag never matches a negative (internal) tag.
// - Unexpected messages wait in their key's FIFO and, when wildcards are allowed, also in
//   the unexpected list, in matching order, which wildcard receives and probes scan.
// Any-tag receives. Their peer list is guarded by the peer spinlock, which every arrival
// from that sender holds while it matches, in wild mode unordered ones too. So such a
// receive queues without the TLP lock when no message of its sender that it accepts is
// unexpected: the peer's count of them (any_tag_unexpected) is changed only under the
// TLP lock, and raised only under the peer lock as well, so under the peer lock a zero
// stays zero. Otherwise it goes the way of the other wildcards (TLP lock, wildcard list).
// Locks. The wildcard and unexpected lists are guarded by the communicator's TLP lock:
// posting threads take it at high priority, arrivals (progress) at low priority, both only
// on a slow path:
// - an arrival whose key holds a receive while no wildcard is posted (wild_posted_ == 0)
//   matches under the bucket lock alone; otherwise (a wildcard is posted, or the message
//   becomes unexpected) it retries under TLP + bucket lock;
// - a specific receive queues under the bucket lock alone unless its key holds unexpected
//   messages; taking one needs the TLP lock (the message leaves the unexpected list too);
// - wildcard posts, probes and mprobes, and cancels of wildcards take the TLP lock.
// Why the fast arrival may ignore wildcards: a wildcard W increments wild_posted_ before
// it draws its number with a release RMW on post_seq_. A specific receive R posted after
// W reads a larger number with acquire, then queues under the bucket lock. An arrival that
// finds R under that lock therefore sees W's increment, and W's decrement comes only once
// W is matched or cancelled. So wild_posted_ == 0 under the bucket lock proves that no
// live wildcard was posted before the key's head. The same holds for an any-tag receive A
// in place of R: A draws its number with an acq_rel RMW, so it sees W's increment, and
// the arrival finds A under the peer lock that A's post released.
// Lock order: peer spinlock -> TLP lock -> bucket lock. A bucket lock is never held while
// waiting for another lock; no lock is held when a call returns.
// Over a serial table (table::serial(): calls never overlap) the peer spinlocks and the
// bucket locks are skipped and sequence numbers are drawn without a locked increment; the
// TLP lock, on slow paths only, stays.
// Assertions (MPI-4 info keys), given at creation and changed by set_assertions()
// (MPI_Comm_set_info). no_any_source + no_any_tag ("no-wild" mode) remove the wildcard
// list, the unexpected list and every use of the TLP lock: each operation is one step
// under a bucket lock. allow_overtaking removes sequence numbers and the per-peer step.
// All three together: the pure MPIv path.
// - Overtaking is decided per message by its sender (next_send_seq() says "unordered",
//   the envelope carries it): an unordered arrival skips the peer's sequence and takes no
//   number, so both sides may change the assertion at different times. Ordered messages
//   keep their order among themselves whatever came between them.
// - The wildcard mode (wild_allowed_) is read only under a bucket lock, and a path that
//   retries under TLP + bucket lock reads it again there; set_assertions() changes it
//   holding the TLP lock and every bucket lock (table::all_guard), so each step sees one
//   mode. Entering no-wild mode empties the unexpected list (refused while a wildcard is
//   posted); leaving it rebuilds the list from the table's FIFOs of this context id,
//   merging each sender's FIFOs by sequence number. The list is empty in no-wild mode.
// Invariants: a posted receive (state_ == posted) is in exactly one of its key's FIFO,
// its sender's any-tag list or the wildcard list; wild_posted_ equals the wildcard list's
// length, a peer's any_posted its any-tag list's; an unexpected message
// is in its key's FIFO and, with wildcards, in the unexpected list, with messages of one
// key in the same order in both; a held message is in no FIFO and no list but its peer's.
// - Mode changes: wild_allowed_ is published with release after the unexpected counts
//   are rebuilt, and an any-tag post reads it with acquire under the peer lock. A program
//   that posts an any-tag receive while another thread asserts mpi_assert_no_any_tag is
//   erroneous; the receive may then stay unmatched.
// Memory: 1.25 KiB per communicator with either TLP lock (mostly the lock's padding),
// 8 B per rank, and 256 B per peer that sends or receives an ordered message, posts an
// any-tag receive, or sends while wildcards are allowed (allocated on first contact).
// Nodes (recv_node, msg_node) are 80 B each, inside the caller's objects.
// When not to use it: traffic that one worker matches alone (an endpoint of an endpoints
// communicator: private_comm.hpp, two lists without locks, is cheaper); heavy use of
// k_any_source (every arrival then takes the TLP lock and scans the wildcard list, as in
// ob1; k_any_tag from one source does not).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/cacheline.hpp"
#include "base/lock/lock.hpp"
#include "base/lock/tlp.hpp"
#include "base/status.hpp"
#include "matching/node.hpp"
#include "matching/table.hpp"

namespace mpiv::match {

/// mpi_assert_no_any_source: the communicator never posts k_any_source receives.
constexpr unsigned k_assert_no_any_source = 1U << 0;
/// mpi_assert_no_any_tag: the communicator never posts k_any_tag receives.
constexpr unsigned k_assert_no_any_tag = 1U << 1;
/// mpi_assert_allow_overtaking: messages need not match in the order they were sent.
constexpr unsigned k_assert_allow_overtaking = 1U << 2;

/// Parameters of basic_comm::create().
struct comm_params {
    std::uint16_t cid = 0;   ///< context id (the PML caps context ids at 65535)
    std::int32_t size = 0;   ///< ranks that can send to us (the remote group's size)
    unsigned assertions = 0; ///< k_assert_* flags
};

namespace detail {

/// Per-peer state of a communicator: sender order, and any-tag receives from the peer.
struct alignas(k_false_sharing) peer {
    std::atomic<std::uint16_t> lock{0}; // spinlock of the receive side
    std::uint32_t expected = 0;         // sequence number of the next message to match
    link *held = nullptr;               // early arrivals, sorted by seq - expected
    recv_node *any_head = nullptr;      // any-tag receives in posting order, under lock
    recv_node *any_tail = nullptr;
    // Written under lock; read by set_assertions() without it.
    std::atomic<std::uint32_t> any_posted{0};
    // Messages of this peer with a tag >= 0 in the unexpected list (wild mode). Written
    // under the TLP lock, raised under lock too; read by any-tag posts under lock.
    std::atomic<std::uint32_t> any_tag_unexpected{0};
    // Drawn by sending threads, apart from the receive side.
    alignas(k_false_sharing) std::atomic<std::uint32_t> next_send{0};
};

} // namespace detail

/// Matching state of one communicator. All calls are thread-safe and can be made
/// concurrently by any number of posting threads and progress threads.
/// @tparam Lock a two-level priority lock (base::tlp_lock): lock() for posting threads,
///              lock_low() for arrivals.
template <class Lock = base::p_mcs_mcs_lock>
class basic_comm {
  public:
    /// Create the matching state of a communicator.
    /// @param[in]  t       the table, shared by communicators; must outlive the result
    /// @param[in]  params  context id (unique among the table's live communicators), size,
    ///                     assertions
    /// @param[out] comm_p  the new communicator (written on success only)
    /// @return ok; invalid_arg (size < 1 or unknown assertion bits); nomem.
    /// @context thread-safe; allocates; not for the data path.
    [[nodiscard]] static status create(table &t, const comm_params &params,
                                       std::unique_ptr<basic_comm> &comm_p) noexcept;

    /// Destroy the state. Precondition: no receive posted and no message unexpected or
    /// held (the table would keep them under a context id that may be reused).
    ~basic_comm();

    basic_comm(const basic_comm &) = delete;
    basic_comm &operator=(const basic_comm &) = delete;

    /// Post a receive: match the earliest unexpected message it accepts, or queue it.
    /// @param[in] r      a receive node not held by the engine
    /// @param[in] source sender rank, or k_any_source
    /// @param[in] tag    tag (negative allowed), or k_any_tag (matches tags >= 0 only)
    /// @return ok: matched at once, r.matched_msg() and r.matched_envelope() are set and
    ///         the message belongs to the caller; inprogress: queued, a later arrive()
    ///         returns it matched; invalid_arg: source out of range, or a wildcard the
    ///         communicator's assertions exclude.
    /// @context thread-safe; posting threads; O(1) expected for specific receives; may
    ///          wait (and yield) for the TLP lock at high priority on slow paths.
    [[nodiscard]] status post(recv_node &r, std::int32_t source, std::int32_t tag) noexcept;

    /// Deliver an arrived message: match it with the earliest-posted receive that
    /// accepts it, or keep it as unexpected; without allow_overtaking, a message ahead of
    /// its sender's sequence is held until its predecessors arrive.
    /// @param[in]     m       a message node not held by the engine
    /// @param[in]     env     its envelope: 0 <= source < size, tag != k_any_tag; seq as
    ///                        drawn by the sender with next_send_seq()
    /// @param[in,out] matched receives the matches made (m and/or earlier-held messages
    ///                        of the same sender), appended in matching order
    /// @return ok (m now belongs to the engine unless it appears in @p matched);
    ///         invalid_arg (m untouched); nomem (first message from this peer and no
    ///         memory for its state; m untouched).
    /// @context thread-safe; progress threads; O(1) expected when the receive was posted
    ///          first and no wildcard is posted; may wait for the TLP lock at low priority.
    [[nodiscard]] status arrive(msg_node &m, const envelope &env, match_list &matched) noexcept;

    /// Find the earliest unexpected message a receive (@p source, @p tag) would match,
    /// without taking it (MPI_Iprobe).
    /// @param[out] env_p its envelope (written on success only)
    /// @return ok; not_found; invalid_arg as for post().
    /// @context thread-safe; posting threads; wildcards take the TLP lock.
    [[nodiscard]] status probe(std::int32_t source, std::int32_t tag, envelope &env_p) noexcept;

    /// Take the earliest unexpected message a receive (@p source, @p tag) would match
    /// (MPI_Improbe): it is then matched to no receive and belongs to the caller.
    /// @param[out] msg_p the message (written on success only)
    /// @return ok; not_found; invalid_arg as for post().
    /// @context thread-safe; posting threads; may take the TLP lock.
    [[nodiscard]] status mprobe(std::int32_t source, std::int32_t tag, msg_node *&msg_p) noexcept;

    /// Cancel a receive posted on this communicator.
    /// @return ok: removed, the engine no longer holds it; not_found: it already matched
    ///         (or was never posted, or was cancelled).
    /// @context thread-safe, but not concurrently with post() of the same node;
    ///          O(posted receives of its key), or of the wildcard list for a wildcard.
    [[nodiscard]] status cancel(recv_node &r) noexcept;

    /// Draw the sequence number of the next message this rank sends to @p dest on this
    /// communicator, or none while it allows overtaking. Every number drawn must be sent,
    /// or the receiver holds the later messages forever.
    /// @param[out] seq_p     the number (0 when unordered; written on success only)
    /// @param[out] ordered_p false: send the message unordered (envelope::ordered)
    /// @return ok; invalid_arg (dest out of range); nomem (first contact, no memory).
    /// @context thread-safe; sending threads; one relaxed fetch_add.
    [[nodiscard]] status next_send_seq(std::int32_t dest, std::uint32_t &seq_p,
                                       bool &ordered_p) noexcept;

    /// Change the assertions (MPI_Comm_set_info). Takes effect for the calls that start
    /// after it returns; calls in progress finish in the old mode (see the design block).
    /// @param[in] assertions the new k_assert_* flags
    /// @return ok; invalid_arg (unknown bits); busy (no_any_source + no_any_tag asserted
    ///         while a wildcard receive is posted: nothing changed); nomem (nothing changed).
    /// @context thread-safe; rare: holds the TLP lock and every bucket lock of the table
    ///          (O(buckets)), so every matching call of every communicator waits meanwhile.
    [[nodiscard]] status set_assertions(unsigned assertions) noexcept;

    /// The context id.
    std::uint16_t cid() const noexcept { return cid_; }
    /// The number of ranks that can send to us.
    std::int32_t size() const noexcept { return size_; }
    /// Whether messages may still wait here (unexpected, or held for their turn): then its
    /// table entries outlive it, and it must not be destroyed. Conservative: in no-wild
    /// mode unexpected messages are in no list, so the answer is true.
    /// @context no other call on this communicator may run (it is being freed)
    bool holds_messages() noexcept;
    /// Hand every message that waits here (unexpected in the table's FIFOs of this context
    /// id, or held for its turn) to @p fn, which owns it from then on. The table keeps its
    /// entries for them: only for the teardown of the whole table, after which nothing
    /// reads it. @context no other call on the table may run; O(buckets)
    template <class Fn> void release_messages(Fn &&fn);
    /// The k_assert_* flags.
    unsigned assertions() const noexcept { return assertions_.load(std::memory_order_relaxed); }

  private:
    using peer_slot = std::atomic<detail::peer *>;

    basic_comm(table &t, const comm_params &params, std::unique_ptr<peer_slot[]> peers) noexcept;
    static bool wild_for(unsigned assertions) noexcept
    {
        return (assertions & (k_assert_no_any_source | k_assert_no_any_tag)) !=
               (k_assert_no_any_source | k_assert_no_any_tag);
    }
    bool wild() const noexcept { return wild_allowed_.load(std::memory_order_relaxed); }
    void rebuild_unexpected() MPIV_TS_REQUIRES(tlp_);
    template <class Fn> void for_each_peer(Fn &&fn) noexcept; // the peers made so far

    static detail::link &as_link(recv_node &r) noexcept { return r; }
    static detail::link &as_link(msg_node &m) noexcept { return m; }
    static recv_node &as_recv(detail::link &l) noexcept { return static_cast<recv_node &>(l); }
    static msg_node &as_msg(detail::link &l) noexcept { return static_cast<msg_node &>(l); }
    static key key_of(const detail::link &l) noexcept { return key{l.cid_, l.source_, l.tag_}; }
    static void bind(recv_node &r, msg_node &m) noexcept;

    bool valid_pattern(std::int32_t source, std::int32_t tag) const noexcept;
    // Fast paths (bucket lock only) and their slow paths (TLP lock), kept apart so that
    // the fast ones stay small enough to inline.
    status post_specific(recv_node &r) noexcept;
    status post_specific_slow(recv_node &r) noexcept;
    status post_wild(recv_node &r) noexcept;
    status post_any_tag(recv_node &r) noexcept;
    // Both return false, having matched nothing, when an arrival that holds no peer lock
    // (p == nullptr: unordered, and wildcards were not allowed when it began) finds them
    // allowed: it must take its peer's lock and try again.
    bool match_arrival(msg_node &m, match_list &matched, detail::peer *p) noexcept;
    bool match_arrival_slow(msg_node &m, match_list &matched, detail::peer *p) noexcept;
    void lock_peer(detail::peer &p) noexcept;
    void unlock_peer(detail::peer &p) noexcept;
    static void any_tag_unlink(detail::peer &p, recv_node &r, recv_node *prev) noexcept;
    detail::peer &existing_peer(std::int32_t source) noexcept; // made before the call
    status peer_of(std::int32_t rank, detail::peer *&peer_p) noexcept;
    [[gnu::noinline]] status new_peer(std::int32_t rank, detail::peer *&peer_p) noexcept;
    static void hold(detail::peer &p, msg_node &m) noexcept;
    static msg_node *take_held(detail::peer &p) noexcept;
    msg_node *take_unexpected(std::int32_t source, std::int32_t tag) noexcept
        MPIV_TS_REQUIRES(tlp_);
    void unexp_append(msg_node &m, detail::peer &p) noexcept MPIV_TS_REQUIRES(tlp_);
    void unexp_unlink(msg_node &m) noexcept MPIV_TS_REQUIRES(tlp_);
    void wild_unlink(recv_node &r, recv_node *prev) noexcept MPIV_TS_REQUIRES(tlp_);

    // Read-only after create().
    table &table_;
    const std::uint16_t cid_;
    const std::int32_t size_;
    const std::unique_ptr<peer_slot[]> peers_;

    // Written by set_assertions() only. Relaxed: assertions_ is a hint for validation and
    // for senders (each message carries its own ordering); wild_allowed_ is ordered by the
    // bucket locks under which it is read and written (see the design block).
    std::atomic<unsigned> assertions_;
    std::atomic<bool> wild_allowed_; // some wildcard is allowed

    // Written by wildcard posts (and wild_posted_ by arrivals and cancels, under tlp_);
    // read by every specific post and fast arrival.
    alignas(k_false_sharing) std::atomic<std::uint64_t> post_seq_{0};
    std::atomic<std::uint32_t> wild_posted_{0}; // live wildcard receives

    alignas(k_false_sharing) Lock tlp_;
    alignas(k_false_sharing) recv_node *wild_head_ MPIV_TS_GUARDED_BY(tlp_) = nullptr;
    recv_node *wild_tail_ MPIV_TS_GUARDED_BY(tlp_) = nullptr;
    msg_node *unexp_head_ MPIV_TS_GUARDED_BY(tlp_) = nullptr;
    msg_node *unexp_tail_ MPIV_TS_GUARDED_BY(tlp_) = nullptr;
};

/// The engine with the default lock (TLP over MCS/MCS).
using comm = basic_comm<>;

} // namespace mpiv::match

#include "matching/comm_inl.hpp"
