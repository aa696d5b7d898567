// What the transport's sources share: the UCX handles, the per-worker state (eps, sequence
// numbers, held arrivals, operation slots, bulk handles) and the wire formats. UCX's
// functions are called through api() (ucx_api.hpp: loaded at run time).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "base/cacheline.hpp"
#include "base/status.hpp"
#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/ucx_api.hpp"

namespace mpiv::ep::ucx::detail {

/// Active-message ids of transport messages, send() and send_bulk() (same on every worker).
constexpr unsigned k_am_id = 7;
constexpr unsigned k_am_bulk_id = 8;
/// Address blob: {u32 magic, u16 version, u16 W, W x {u32 len, bytes}}.
constexpr std::uint32_t k_addr_magic = 0x4155564d; // "MVUA"
constexpr std::uint16_t k_addr_version = 1;
constexpr std::size_t k_addr_head = 8;
/// Message header magic (with the version in its low byte).
constexpr std::uint32_t k_msg_magic = 0x4d564d01;
/// Caller headers up to this size live inside the operation slot; larger ones on the heap.
constexpr std::size_t k_slot_inline = 128;
/// Teardown: eps closed per batch, and how long one batch may take.
constexpr std::size_t k_close_batch = 16;
constexpr double k_close_timeout_s = 2.0;

/// The transport header in front of the caller's (host byte order: peers share the ISA).
struct msg_header {
    std::uint32_t magic;
    std::uint32_t from_peer;
    std::uint16_t from_worker;
    std::uint16_t to_worker;
    std::uint32_t seq;
};
static_assert(sizeof(msg_header) == k_transport_header, "transport header size");

/// Identity of an ep, for UCX's error handler.
struct ep_ctx {
    state *st;
    std::uint32_t w, peer, remote_worker;
};

/// Worker w's ep to one remote worker.
struct ep_entry {
    ucp_ep_h ep = nullptr;
    std::uint32_t next_seq = 0; // sequence number of the next message on this pair
    std::size_t inflight = 0;   // its operations not yet completed by UCX (max_inflight)
    bool failed = false;        // UCX reported an error; never used again
    bool fail_logged = false;
    std::unique_ptr<ep_ctx> ctx;
};

/// An early arrival, copied: caller header then payload (none for a bulk message, whose
/// handle holds it).
struct held_msg {
    std::unique_ptr<unsigned char[]> bytes;
    std::size_t header_len, payload_len;
    bulk *b = nullptr;
};

/// Receive side of one pair (remote worker -> this worker).
struct rx_pair {
    std::uint32_t expected = 0; // sequence number to deliver next
    bool dead = false;          // the sender broke the protocol: drop its arrivals
    std::map<std::uint32_t, held_msg> held;
};

/// An operation UCX has not completed yet (a send, or a bulk receive). Lives in its
/// worker's pool.
struct op_slot {
    state *st = nullptr;
    std::uint32_t w = 0;
    completion *done = nullptr;
    ep_entry *pair = nullptr;  // whose inflight count the operation holds
    // A bulk receive through the unpacker (a sink, or a buffer shorter than the payload):
    // where bytes go, the payload's size, the next offset a sink takes, and pieces that
    // came ahead of it. A send through the copier: buf and length are its payload.
    void *buf = nullptr;
    std::size_t capacity = 0, length = 0, next = 0;
    sink_fn sink = nullptr;
    void *sink_ctx = nullptr;
    std::map<std::size_t, std::vector<unsigned char>> early;
    std::unique_ptr<unsigned char[]> big; // a header longer than k_slot_inline
    std::size_t big_len = 0;
    op_slot *next_free = nullptr;
    bool busy = false;
    alignas(8) unsigned char inline_hdr[k_transport_header + k_slot_inline];
};

} // namespace mpiv::ep::ucx::detail

namespace mpiv::ep::ucx {

/// A bulk payload (transport.hpp) until it is taken.
struct bulk {
    void *desc = nullptr;       // UCX's descriptor (rendezvous, or lent eager data), or null
    const void *data = nullptr; // eager bytes: in desc, in copy, or valid during the callback
    std::unique_ptr<unsigned char[]> copy;
    std::size_t len = 0;
    std::uint32_t worker = 0;
    bool rndv = false;
    bool in_callback = true; // the AM handler has not returned: it frees the handle
    bool taken = false;      // receive() or release() had it (or it was dropped)
    bool lost = false;       // no memory to keep its bytes: receive() fails
    bulk *prev = nullptr, *next = nullptr; // the worker's live handles (freed at teardown)
};

} // namespace mpiv::ep::ucx

namespace mpiv::ep::ucx::detail {

/// One mpiv worker's UCX worker and everything only its owner touches.
struct alignas(k_false_sharing) worker {
    // sync: the worker lock; acquire in try_lock()/lock() pairs with release in unlock().
    std::atomic<std::uintptr_t> holder{0}; // 0: free; else who holds it (try_lock())
    alignas(k_false_sharing) ucp_worker_h handle = nullptr;
    state *st = nullptr;
    std::uint32_t index = 0;
    int efd = -1;
    std::size_t inflight = 0;
    std::size_t held_bytes = 0;
    std::vector<std::vector<ep_entry>> tx; // [peer][remote worker], sized lazily
    std::vector<std::vector<rx_pair>> rx;  // [peer][remote worker], sized lazily
    std::vector<std::unique_ptr<op_slot>> slots;
    bulk *live = nullptr; // bulk handles not yet taken
    op_slot *free_slots = nullptr;
    std::vector<ucp_ep_h> to_close;  // failed eps, closed with FORCE by poll()
    std::vector<void *> closing;     // their close requests
    // peers whose failure this worker saw: reported from poll(), outside UCX's handler
    std::vector<std::pair<std::uint32_t, const char *>> failed_peers;
    counters stats;
};

/// A connected peer's addresses; published by connect() (state: 0 none, 1 being filled,
/// 2 ready).
struct peer {
    // sync: release store of 2 in connect() pairs with acquire loads in peer_ready().
    std::atomic<std::uint32_t> state{0};
    // sync: exchange (acq_rel) so that the failure is reported once per peer.
    std::atomic<bool> reported{false};
    // a hint read by other workers to fail fast; each worker's eps learn it from UCX.
    std::atomic<bool> failed{false};
    std::uint32_t workers = 0;
    std::vector<std::vector<unsigned char>> addrs;
};

struct state {
    transport *self = nullptr;
    params p;
    ucp_context_h ctx = nullptr;
    std::unique_ptr<worker[]> workers;
    std::unique_ptr<peer[]> peers;
    std::vector<unsigned char> blob;
    std::size_t max_header = 0;
    bool destroying = false;
    ucp_datatype_t unpacker = 0; // generic datatype of bulk receives that are not one buffer
    ucp_datatype_t copier = 0;   // generic datatype of small sends (transport_datatypes.cpp)

    static void send_done(void *request, ucs_status_t s, void *user_data) noexcept;
    static void err_handler(void *arg, ucp_ep_h ep, ucs_status_t s) noexcept;
    static void recv_done(void *request, ucs_status_t s, std::size_t length,
                          void *user_data) noexcept;
    static ucs_status_t am_recv(void *arg, const void *header, std::size_t header_len,
                                void *data, std::size_t len,
                                const ucp_am_recv_param_t *param) noexcept;
    static ucs_status_t am_recv_bulk(void *arg, const void *header, std::size_t header_len,
                                     void *data, std::size_t len,
                                     const ucp_am_recv_param_t *param) noexcept;
    ucs_status_t arrival(worker &wk, const void *header, std::size_t header_len, void *data,
                         std::size_t len, const ucp_am_recv_param_t *param, bool is_bulk) noexcept;

    status get_ep(worker &wk, std::uint32_t peer, std::uint32_t remote_worker, ep_entry *&out,
                  const char *call) noexcept;
    op_slot *take_slot(worker &wk) noexcept;
    // One active message @p id on pair @p e (worker wk -> to_worker): the transport header
    // with e's next sequence number, then the caller's, copied into a slot that lives until
    // completion. @p always_request: UCX never completes it inside the call. @p counted:
    // it holds one of the pair's max_inflight. @return ok, inprogress or an error.
    status post_am(worker &wk, ep_entry &e, std::uint32_t to_worker, unsigned id,
                   const void *header, std::size_t header_len, const void *payload,
                   std::size_t payload_len, std::uint32_t flags, bool always_request,
                   bool counted, completion *done, const char *call) noexcept;
    void put_slot(worker &wk, op_slot *slot) noexcept;
    void fail_peer(worker &wk, std::uint32_t peer, const char *reason) noexcept;
    void deliver_arrival(worker &wk, const msg_header &h, const unsigned char *hdr,
                         std::size_t hlen, const void *data, std::size_t len, bulk *b) noexcept;
    bulk *new_bulk(worker &wk) noexcept;
    void release_bulk(worker &wk, bulk *b) noexcept;
    void free_bulk(worker &wk, bulk *b) noexcept;
    void close_all_eps() noexcept;
};

/// Create st.unpacker and st.copier; destroy those made (transport_datatypes.cpp).
status make_datatypes(state &st) noexcept;
void destroy_datatypes(state &st) noexcept;
/// Bytes [offset, offset + length) of a bulk payload into the receive of slot @p s: its
/// buffer up to its capacity, or its sink (bytes past the capacity are dropped).
void feed(op_slot &s, std::size_t offset, const void *src, std::size_t length) noexcept;
/// UCX status -> mpiv status.
status from_ucs(ucs_status_t s) noexcept;
/// Log "ucx: <call>: <what>: <UCX string>" at error level and map the status.
status ucs_error(const char *call, const char *what, ucs_status_t s) noexcept;
/// 32-bit FNV-1a over @p n bytes, continuing from @p h.
std::uint32_t fnv1a(const void *data, std::size_t n, std::uint32_t h = 2166136261u) noexcept;

} // namespace mpiv::ep::ucx::detail
