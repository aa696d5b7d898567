// stats: the library's event counters (exported as MPI_T performance variables by the PML
// and summed at finalize with pml_mpiv_stats), counted per thread.
//
// Design:
// - Each thread that counts owns a block of k_counters words. Only the owner writes it, with
//   a relaxed load and store (no read-modify-write, no write to memory another thread
//   writes): counting costs the hot path an initial-exec TLS load, a test and an add.
// - A thread's block is linked into a process-wide registry on its first count (a mutex,
//   once per thread). At thread exit its counts are folded into the registry's totals of
//   exited threads and the block goes to a free list, for the next new thread.
// - read() sums the totals of exited threads and every live block under the registry's
//   mutex. It is not a snapshot: each counter is read as of some moment during the sum;
//   counters only grow, so successive reads never go backwards.
// - Memory: one block (k_counters * 8 bytes, cache-line aligned) per thread alive at once.
// - Per communicator (comm_counter): a communicator's counts are kept by key (comm_open()
//   hands out a key per communicator, never reused). Each block has k_comm_slots slots,
//   direct-mapped by key; the owner counts into its slot for the key with a relaxed load
//   and store as above. A slot that holds another key is taken over under the registry's
//   mutex (its counts are folded into the registry's per-key totals first, or dropped when
//   that communicator is closed). read_comm() sums the key's totals and every live block's
//   slot for it, under the mutex; thread exit folds the slots like the counters. So a
//   thread that counts for more communicators than slots at once pays a mutex per
//   switch, and 64 * 48 bytes more per thread.
// When not to use: for values that go down (levels, high-water marks): keep those where
// they change, beside the state they describe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/cacheline.hpp"

namespace mpiv::base::stats {

// X(name, unit, description): every counter, in the order of the public indexes
// (mpiv_stats_info). Names are the MPI_T variable names without the pml_mpiv_ prefix.
#define MPIV_STATS_COUNTERS(X)                                                                    \
    X(sent_inline, "messages", "Messages sent inline in the receiver's queue (up to 416 bytes)")  \
    X(sent_eager, "messages", "Messages sent eagerly through a shared-memory packet")            \
    X(sent_rendezvous, "messages", "Messages sent by rendezvous (the receiver fetches the bytes)") \
    X(sent_gather, "messages",                                                                  \
      "Rendezvous messages of a non-contiguous buffer read in place from its ranges")           \
    X(sent_streamed, "messages",                                                                \
      "Rendezvous messages packed by the sender while the receiver reads them")                 \
    X(bytes_inline, "bytes", "Bytes of messages sent inline")                                   \
    X(bytes_eager, "bytes", "Bytes of messages sent eagerly through packets")                   \
    X(bytes_rendezvous, "bytes", "Bytes of messages sent by rendezvous (gather and streamed "    \
                                 "included)")                                                   \
    X(received, "messages", "Messages delivered to receives (any protocol)")                    \
    X(received_inline, "messages", "Messages delivered to receives that came inline")          \
    X(received_eager, "messages", "Messages delivered to receives that came eagerly through a " \
                                  "shared-memory packet")                                       \
    X(received_rendezvous, "messages", "Messages delivered to receives that came by "           \
                                       "rendezvous (gather and streamed included)")             \
    X(received_gather, "messages", "Rendezvous messages delivered to receives that the sender " \
                                   "sent from a non-contiguous buffer read in place")           \
    X(received_streamed, "messages", "Rendezvous messages delivered to receives that the "      \
                                     "sender packed while they were read")                      \
    X(bytes_received, "bytes", "Bytes delivered to receives (any protocol)")                    \
    X(shm_sent, "messages", "Messages sent over shared memory (to this node's processes and "   \
                            "to this process itself), any protocol")                            \
    X(shm_bytes_sent, "bytes", "Bytes of messages sent over shared memory")                     \
    X(shm_received, "messages", "Messages delivered to receives that came over shared memory "  \
                                "(or from this process itself)")                                \
    X(shm_bytes_received, "bytes", "Bytes delivered to receives from messages that came over "  \
                                   "shared memory")                                             \
    X(ucx_sent, "messages", "Messages sent over the UCX network transport, any protocol")      \
    X(ucx_bytes_sent, "bytes", "Bytes of messages sent over UCX")                               \
    X(ucx_received, "messages", "Messages delivered to receives that came over UCX")           \
    X(ucx_bytes_received, "bytes", "Bytes delivered to receives from messages that came over "  \
                                   "UCX")                                                       \
    X(unexpected, "messages",                                                                   \
      "Messages that arrived before a matching receive was posted (or before their turn)")      \
    X(recv_posted, "receives", "Receives posted before their message arrived (they waited in "  \
                               "the posted lists)")                                             \
    X(recv_posted_matched, "receives", "Posted receives matched by an arriving message")        \
    X(recv_cancelled, "receives", "Posted receives cancelled")                                  \
    X(wildcard_matches, "matches",                                                              \
      "Matches made on a communicator's wildcard slow path (a wildcard receive, or a message "  \
      "checked against posted wildcard receives)")                                              \
    X(tlp_high, "acquisitions", "Acquisitions of a two-level priority (TLP) lock by the high-"   \
                                "priority class (threads issuing operations)")                  \
    X(tlp_low, "acquisitions",                                                                  \
      "Acquisitions of a TLP lock by the low-priority class (threads polling for progress)")    \
    X(tlp_high_wait_ns, "nanoseconds", "Time high-priority TLP acquisitions waited (contended "  \
                                       "ones only)")                                            \
    X(tlp_low_wait_ns, "nanoseconds",                                                           \
      "Time low-priority TLP acquisitions waited (contended ones only)")                        \
    X(backpressure, "messages", "Sends and control messages that found the receiver's queues "  \
                                "full (or others waiting before them) and waited in a list")    \
    X(cma_reads, "reads", "Rendezvous reads of another process's memory (process_vm_readv)")   \
    X(two_copy_pieces, "pieces", "Pieces of rendezvous messages copied through shared memory "  \
                                 "(where process_vm_readv is denied), sent")                    \
    X(ucx_rndv, "messages", "Messages received over UCX whose bytes came by UCX's rendezvous "  \
                            "(straight into the receive buffer where it is one buffer)")       \
    X(waits_slept, "waits", "Waits of threads that went to sleep (futex) before completing")    \
    X(ult_switches, "switches", "Context switches between ULTs and their worker's scheduler")  \
    X(ult_wakeups, "wake-ups", "ULTs made runnable again after blocking")                       \
    X(ult_parks, "waits", "Waits of ULTs in a lock's queue (MCS, HMCS, a communicator's "       \
                          "two-level priority lock) that parked until the hand-off woke them")  \
    X(pool_steals, "packets", "Packets taken from another worker's private deque")              \
    X(pool_empty, "gets", "Packet requests that found no free packet (the send went by "        \
                          "rendezvous instead)")                                                \
    X(server_polls, "polls", "Polls of the communication-server thread")                        \
    X(server_polls_with_work, "polls", "Polls of the communication-server thread that found "   \
                                       "something to do")                                       \
    X(table_growths, "growths", "Growths of the matching hash table's bucket array (each "     \
                                "multiplies the bucket count by 4)")                            \
    X(scratch_calls, "calls", "Engine calls ULTs made on their worker's scratch stack (from "    \
                              "mpiv_params_t::scratch_ults live ULTs per worker on)")          \
    X(stack_prefetches, "turns", "ULT turns whose stack the scheduler prefetched during the "   \
                                 "turn before (from mpiv_params_t::prefetch_ults live ULTs per " \
                                 "worker on)")                                                  \
    X(batched_completions, "receives", "Receives completed together after the queue drain "     \
                                       "that matched them, their lines prefetched first (on "   \
                                       "workers with at least prefetch_ults live ULTs)")

// X(name, unit, description): the counters kept per communicator (see the design above).
#define MPIV_STATS_COMM_COUNTERS(X)                                                               \
    X(comm_sent, "messages", "Messages sent on the communicator (send operations started, any " \
                             "protocol)")                                                       \
    X(comm_bytes_sent, "bytes", "Bytes of messages sent on the communicator")                   \
    X(comm_received, "messages", "Messages of the communicator matched by receives or matched " \
                                 "probes")                                                      \
    X(comm_unexpected, "messages", "Messages of the communicator that arrived before a "        \
                                   "matching receive was posted (or before their turn)")       \
    X(comm_recv_posted, "receives", "Receives on the communicator posted before their message " \
                                    "arrived")

enum class counter : unsigned {
#define MPIV_STATS_ENUM(name, unit, text) name,
    MPIV_STATS_COUNTERS(MPIV_STATS_ENUM)
#undef MPIV_STATS_ENUM
        count_
};
constexpr std::size_t k_counters = static_cast<std::size_t>(counter::count_);

enum class comm_counter : unsigned {
#define MPIV_STATS_ENUM(name, unit, text) name,
    MPIV_STATS_COMM_COUNTERS(MPIV_STATS_ENUM)
#undef MPIV_STATS_ENUM
        count_
};
constexpr std::size_t k_comm_counters = static_cast<std::size_t>(comm_counter::count_);
constexpr std::size_t k_comm_slots = 64; // per thread, direct-mapped by key

/// One thread's counts for one communicator (key 0: free).
struct comm_slot {
    std::atomic<std::uint64_t> key;
    std::atomic<std::uint64_t> v[k_comm_counters];
};

/// One thread's counters (see the design above).
struct alignas(k_false_sharing) block {
    std::atomic<std::uint64_t> v[k_counters];
    comm_slot slots[k_comm_slots];
    block *next; // registry lists (live or free), under the registry's mutex
};

namespace detail {
// The calling thread's block. initial-exec, as in sched/worker.hpp: no __tls_get_addr call
// on the hot path of a library Open MPI loads with dlopen; defined inline (constant
// initialization, seen by every user: no TLS wrapper call).
inline thread_local block *tl_block __attribute__((tls_model("initial-exec"))) = nullptr;
block *register_thread() noexcept; // the calling thread's block, registered
// Slot @p s of the calling thread's block @p b taken over for @p key; false: not counted
// (@p key is closed).
bool claim_slot(block &b, comm_slot &s, std::uint64_t key) noexcept;
} // namespace detail

/// Count @p n events of @p c in the calling thread's block.
/// @context any thread; hot path: no read-modify-write, no shared write
inline void add(counter c, std::uint64_t n = 1) noexcept
{
    block *b = detail::tl_block;
    if (__builtin_expect(b == nullptr, 0)) {
        b = detail::register_thread();
        if (b == nullptr) {
            return; // no memory for a block: this thread's events go uncounted
        }
    }
    std::atomic<std::uint64_t> &w = b->v[static_cast<unsigned>(c)];
    // Relaxed: only this thread writes the word; readers only need the word's atomicity.
    w.store(w.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

/// Count @p n events of @p c for the communicator @p key (from comm_open(); 0: none).
/// @context any thread; hot path: as add(), plus a compare (a mutex when the thread's slot
/// holds another communicator)
inline void add_comm(std::uint64_t key, comm_counter c, std::uint64_t n = 1) noexcept
{
    if (__builtin_expect(key == 0, 0)) {
        return; // no key (no memory for its totals): not counted
    }
    block *b = detail::tl_block;
    if (__builtin_expect(b == nullptr, 0)) {
        b = detail::register_thread();
        if (b == nullptr) {
            return;
        }
    }
    comm_slot &s = b->slots[key & (k_comm_slots - 1)];
    // Relaxed: only this thread writes the slot outside the registry's mutex.
    if (__builtin_expect(s.key.load(std::memory_order_relaxed) != key, 0) &&
        !detail::claim_slot(*b, s, key)) {
        return;
    }
    std::atomic<std::uint64_t> &w = s.v[static_cast<unsigned>(c)];
    // Relaxed: only this thread writes the word; readers only need the word's atomicity.
    w.store(w.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

/// A new communicator's key (never 0, never reused); 0 when there is no memory for its
/// totals (its events then go uncounted). @context thread-safe; takes the registry's mutex
std::uint64_t comm_open() noexcept;

/// Forget communicator @p key (0: nothing): its totals go, and its slots are taken over
/// as they are met. @context thread-safe; takes the registry's mutex
void comm_close(std::uint64_t key) noexcept;

/// The sum of @p c for communicator @p key over every thread (0 for a closed key).
/// @context thread-safe; takes the registry's mutex
std::uint64_t read_comm(std::uint64_t key, comm_counter c) noexcept;

/// The sum of @p c over every thread, live or exited.
/// @context thread-safe; takes the registry's mutex
std::uint64_t read(counter c) noexcept;

/// Per thread: @p values[0] the total of exited threads, then one value per live thread
/// (up to @p capacity values in all). @return 1 + the number of live threads.
/// @context thread-safe; takes the registry's mutex
std::size_t read_threads(counter c, std::uint64_t *values, std::size_t capacity) noexcept;

/// Name (without prefix), unit and description of counter @p index < k_counters.
struct info {
    const char *name;
    const char *unit;
    const char *description;
};
const info &describe(std::size_t index) noexcept;
/// Name, unit and description of per-communicator counter @p index < k_comm_counters.
const info &describe_comm(std::size_t index) noexcept;

} // namespace mpiv::base::stats
