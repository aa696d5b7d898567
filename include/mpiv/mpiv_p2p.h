/*
 * mpiv_p2p.h: the point-to-point engine of libmpiv, the C ABI that the Open MPI
 * component (mca_pml_mpiv.so) drives. Applications do not call it.
 *
 * One engine per process (mpiv_p2p_create). It owns a shared-memory segment with one
 * inbound queue per worker endpoint and a packet pool, the matching state of every
 * communicator (full MPI rules: sender order, posting order, wildcards, probes, cancel),
 * and the protocols: eager (payload inline in the queue slot or in a pooled packet) up to
 * the eager limit, rendezvous above it (the receiver copies once with process_vm_readv,
 * then sends FIN; where a peer denies process_vm_readv, see mpiv_p2p_single_copy_t, the
 * sender copies the bytes through shared-memory slots and the receiver copies them out),
 * synchronous sends (an ACK after the match).
 *
 * Peers are named by an index the caller chooses (the MPI_COMM_WORLD rank); each peer's
 * address (from mpiv_p2p_address on that peer, exchanged through the PMIx modex) is given
 * to mpiv_p2p_connect before traffic to or from it.
 *
 * Operations live in caller memory (mpiv_p2p_op_t, embedded in the MPI request), so an
 * operation's lifetime is the request's. Each call that starts an operation returns
 * MPIV_OK when it completed at once (the status is written, no callback follows) or
 * MPIV_INPROGRESS: the engine later calls the completion function once, from whichever
 * thread makes progress. Data buffers are contiguous bytes; the caller packs and unpacks
 * other layouts.
 *
 * Threads: every function is thread-safe. Each calling thread is bound on first use to
 * one worker endpoint (a ULT worker to its worker number, a thread whose first send,
 * receive or probe is on an endpoints handle to that handle's queue, others round robin;
 * all modulo the endpoint count); its sends leave through that endpoint's packets.
 * Progress (mpiv_p2p_progress) may run in any number of threads at once; each queue is
 * drained by one of them at a time.
 */
#ifndef MPIV_P2P_H
#define MPIV_P2P_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <mpiv/mpiv_status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mpiv_p2p mpiv_p2p_t;            /**< the engine of this process */
typedef struct mpiv_p2p_comm mpiv_p2p_comm_t;  /**< matching state of one communicator */
typedef struct mpiv_p2p_msg mpiv_p2p_msg_t;    /**< a message taken by mpiv_p2p_improbe */

/** Storage of one operation, embedded in the caller's request; opaque. */
typedef union mpiv_p2p_op {
    unsigned char bytes[256];
    uint64_t align_;
    void *align_p_;
} mpiv_p2p_op_t;

/** What a completed operation reports. */
typedef struct mpiv_p2p_status {
    int32_t source; /**< sender's rank (receives), destination (sends) */
    int32_t tag;
    size_t bytes;   /**< bytes delivered into the buffer (receives), sent (sends) */
    size_t sent;    /**< the sender's message size (receives; > bytes when truncated) */
    int error;      /**< MPIV_OK or MPIV_ERR_TRUNCATE */
} mpiv_p2p_status_t;

/** Completion callback: @p user is the pointer given when the operation started. It may
 *  run inside the engine's progress (any thread that drives it) and must not wait for
 *  other operations to complete. */
typedef void (*mpiv_p2p_complete_fn)(void *user, const mpiv_p2p_status_t *status);

/** Prefetch callback: the engine will soon call the completion callback for @p user (a
 *  receive it matched in a batch, see mpiv_p2p_params_t::prefetch). It may ask the
 *  processor for the cache lines that completion will touch (prefetch instructions); it
 *  must not write to them, block or call into the engine. */
typedef void (*mpiv_p2p_prefetch_fn)(void *user);

/** Fault callback: what another process wrote into shared memory (a message, a packet
 *  list, a token) is invalid. @p peer is the peer index the message claims to come from
 *  (MPIV_P2P_PEER_UNKNOWN when it claims this process, or nothing usable), @p what says
 *  what was wrong. Called once per peer, from the thread that found the fault; the engine
 *  has dropped what it could not use, so operations that depended on it may never
 *  complete: the caller should end the job. */
typedef void (*mpiv_p2p_fault_fn)(uint32_t peer, const char *what);
#define MPIV_P2P_PEER_UNKNOWN UINT32_MAX

/** Connect callback: a message came over the network (UCX) from @p peer, which this engine
 *  has not been given an address for yet (an embedder may connect peers on first use):
 *  the callback connects it (mpiv_p2p_connect_peer) and returns MPIV_OK, or returns an
 *  error and the message counts as a fault. Called from inside progress, possibly by
 *  several threads for one peer (a connect of a connected peer is no error to the
 *  engine); it must not wait for anything but the embedder's own short locks. */
typedef int (*mpiv_p2p_connect_fn)(uint32_t peer);

/** Progress mode of the engine. */
typedef enum mpiv_p2p_progress_mode {
    MPIV_P2P_PROGRESS_INLINE = 0, /**< waiting threads and opal_progress drive it */
    MPIV_P2P_PROGRESS_SERVER = 1  /**< also a communication-server thread */
} mpiv_p2p_progress_mode_t;

/** Kind of the two-level priority (TLP) lock that guards each communicator's shared
 *  matching slow paths (wildcards, unexpected lists): its high-priority sub-lock, over an
 *  MCS low-priority one unless stated (seed 004). */
typedef enum mpiv_p2p_lock {
    MPIV_P2P_LOCK_MCS = 0,   /**< P-MCS-MCS (the default) */
    MPIV_P2P_LOCK_HMCS = 1,  /**< P-HMCS-MCS: hierarchical MCS over the hwloc levels */
    MPIV_P2P_LOCK_TICKET = 2 /**< ticket locks for both classes */
} mpiv_p2p_lock_t;

/** How a rendezvous message's bytes reach the receiver. */
typedef enum mpiv_p2p_single_copy {
    MPIV_P2P_SINGLE_COPY_AUTO = 0, /**< the receiver reads the sender's buffer with
                                        process_vm_readv (CMA) where the sender allows it
                                        (tried at connect), else two copies: the sender
                                        writes the bytes into shared-memory slots, a few at
                                        a time, and the receiver copies them out */
    MPIV_P2P_SINGLE_COPY_CMA = 1,  /**< CMA or nothing: create fails when CMA does not
                                        work in this process, connect when a peer denies it */
    MPIV_P2P_SINGLE_COPY_NONE = 2  /**< always the two copies through shared memory */
} mpiv_p2p_single_copy_t;

/** Engine parameters (every field must be set; mpiv_p2p_params_default fills them). */
typedef struct mpiv_p2p_params {
    uint32_t self;            /**< this process's peer index */
    uint32_t num_peers;       /**< peer indexes are 0 .. num_peers - 1 */
    uint32_t endpoints;       /**< worker endpoints (inbound queues), 1 .. 256 */
    uint32_t queue_slots;     /**< slots per inbound queue, a power of two, 2 .. 2^20 */
    uint32_t eager_limit;     /**< largest eager message in bytes, 0 .. 1 MiB */
    uint32_t packet_count;    /**< packets in the pool, 1 .. 2^20 */
    mpiv_p2p_progress_mode_t progress;
    int server_cpu;           /**< PU (OS index) for the server thread, -1: not pinned */
    mpiv_p2p_lock_t lock;     /**< TLP lock kind of the matching slow paths */
    mpiv_p2p_complete_fn complete; /**< completion callback, not NULL */
    uint32_t idle_us;         /**< microseconds a waiting thread that drives progress polls
                                   with nothing arriving before it sleeps, 0 .. 10^6 */
    int serialized;           /**< nonzero: the caller's calls never overlap (an MPI library
                                   below MPI_THREAD_MULTIPLE); with inline progress the
                                   engine then skips its process-local locks */
    mpiv_p2p_fault_fn fault;  /**< invalid data from a peer (NULL: logged at error level) */
    int yield_when_idle;      /**< nonzero: a waiting pthread polls and yields its PU
                                   between polls, for as long as it waits, instead of
                                   spinning and then sleeping (for nodes with more processes
                                   than PUs, where a spinner holds the PU its peer needs
                                   and a sleeper costs a wake-up per message) */
    mpiv_p2p_single_copy_t single_copy; /**< see mpiv_p2p_single_copy_t */
    unsigned transports;      /**< MPIV_P2P_TRANSPORT_* bits: the transports the engine may
                                   use (SHM for peers on this node; UCX for the others, and
                                   for every peer without SHM) */
    mpiv_p2p_connect_fn connect; /**< connects a peer whose first message arrived before
                                      its address was given (NULL: such a message is a
                                      fault) */
    uint32_t ucx_copy_max;    /**< UCX: messages of at most this many bytes (mpiv's headers
                                   included) go to UCX as copied sends (UCX packs them into
                                   its own buffer: on TCP one send() call, where its short
                                   path makes a sendmsg() of an I/O vector); larger ones, and
                                   all with 0, take UCX's own choice. 0 .. 65536 */
    mpiv_p2p_prefetch_fn prefetch; /**< NULL, or called for each receive of a batch before
                                        any of them completes: when a thread that runs many
                                        ULTs (at least their scheduler's prefetch_ults)
                                        drains a queue, the receives its messages match
                                        complete together after the drain, their lines
                                        prefetched first (the receive buffers by the engine,
                                        the completion state through this callback) */
} mpiv_p2p_params_t;

/** Bits of mpiv_p2p_params_t::transports. */
#define MPIV_P2P_TRANSPORT_SHM 1u
#define MPIV_P2P_TRANSPORT_UCX 2u

/** Whether this build has the UCX transport (1) or not (0). */
MPIV_API int mpiv_p2p_have_ucx(void);

/** NULL when the UCX transport can start here: this build has it, and UCX's library
 *  (libucp, opened at run time on the first call) loads and has every function the
 *  transport uses. Otherwise a one-line reason, valid for the life of the process.
 *  @context any thread */
MPIV_API const char *mpiv_p2p_ucx_unavailable(void);

/** Fill @p params with the defaults (self 0, one peer, 4 endpoints, 1024 slots,
 *  4096-byte eager limit, 512 packets, inline progress, MCS lock, complete NULL,
 *  1000 us of idle polling before a sleep, not serialized, fault NULL, no yielding
 *  waits, single copy auto, prefetch NULL). */
MPIV_API mpiv_status_t mpiv_p2p_params_default(mpiv_p2p_params_t *params);

/** Create the engine: the segment, queues and pool; no peer connected yet. Unless
 *  single_copy is NONE, it also lets any process of this user read its memory
 *  (prctl PR_SET_PTRACER_ANY, where the Yama security module would forbid it).
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG / MPIV_ERR_PARAM (logged, naming the field);
 *  MPIV_ERR_SYSTEM when shared memory is unavailable, or CMA with single_copy CMA
 *  (logged). */
MPIV_API mpiv_status_t mpiv_p2p_create(const mpiv_p2p_params_t *params, mpiv_p2p_t **engine_p);

/** Destroy the engine (stops the server thread). Operations still pending are dropped;
 *  the caller completes or frees its requests first. NULL is accepted. */
MPIV_API mpiv_status_t mpiv_p2p_destroy(mpiv_p2p_t *engine);

/** This process's address for the modex (valid until destroy). */
MPIV_API mpiv_status_t mpiv_p2p_address(mpiv_p2p_t *engine, const void **addr_p, size_t *len_p);

/** Map peer @p peer's segment from its address (idempotent; self included) and, unless
 *  single_copy is NONE, try process_vm_readv on its memory.
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG for a malformed address or index;
 *  MPIV_ERR_SYSTEM when the segment cannot be mapped, or when single_copy is CMA and the
 *  peer denies it (logged). */
MPIV_API mpiv_status_t mpiv_p2p_connect(mpiv_p2p_t *engine, uint32_t peer, const void *addr, size_t len);

/** mpiv_p2p_connect() for a peer that may be on another node (@p same_node 0): it is
 *  reached over shared memory when it is on this node and SHM is among the transports,
 *  else over UCX.
 *  @return as mpiv_p2p_connect(); MPIV_ERR_SYSTEM when no transport of this engine reaches
 *  the peer (logged). */
MPIV_API mpiv_status_t mpiv_p2p_connect_peer(mpiv_p2p_t *engine, uint32_t peer, const void *addr,
                                             size_t len, int same_node);

/** The transport that carries @p peer's traffic (MPIV_P2P_TRANSPORT_SHM or _UCX), written
 *  to *transport_p. @return MPIV_OK; MPIV_ERR_INVALID_ARG for a peer not connected. */
MPIV_API mpiv_status_t mpiv_p2p_peer_transport(mpiv_p2p_t *engine, uint32_t peer,
                                               unsigned *transport_p);

/** How rendezvous messages from connected peer @p peer arrive: *single_copy_p = 1 when
 *  this process reads them with process_vm_readv (or the peer is this process), 0 when
 *  they come in two copies through shared memory; *error_p = the errno of the failed
 *  try at connect (0 when none was made, e.g. with single_copy NONE).
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG for a peer not connected. */
MPIV_API mpiv_status_t mpiv_p2p_peer_single_copy(mpiv_p2p_t *engine, uint32_t peer,
                                                 int *single_copy_p, int *error_p);

/** Bits of mpiv_p2p_comm_create's assertions (MPI-4 info assertions). */
#define MPIV_P2P_ASSERT_NO_ANY_SOURCE 1u
#define MPIV_P2P_ASSERT_NO_ANY_TAG 2u
#define MPIV_P2P_ASSERT_ALLOW_OVERTAKING 4u

/** Create the matching state of a communicator with context id @p cid whose remote
 *  group has @p size ranks; messages that arrived for @p cid before are matched now.
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG (cid in use, size < 1, unknown bits); NOMEM. */
MPIV_API mpiv_status_t mpiv_p2p_comm_create(mpiv_p2p_t *engine, uint16_t cid, int32_t size,
                                            unsigned assertions, mpiv_p2p_comm_t **comm_p);

/** Create the matching state of an endpoints communicator (MPIX_Comm_create_endpoints)
 *  with context id @p cid and @p size ranks: rank r is endpoint @p rank_ep[r] of peer
 *  @p rank_peer[r], each peer's endpoints numbered 0, 1, ... in rank order; it receives
 *  through inbound queue @p rank_queue[r] of its process (modulo its queue count; NULL:
 *  queue rank_ep[r]), and every process must be given the same map. Each rank of
 *  this process becomes a handle of its own, handles_p[k] for endpoint k (at most
 *  @p capacity), used like any communicator state with that rank as self_rank: it
 *  matches only the messages sent to its rank, in a table of its own (a wildcard receive
 *  on one handle never takes another's message). Messages that arrived for @p cid before
 *  are routed now. Each handle is destroyed with mpiv_p2p_comm_destroy (the shared state
 *  goes with the last).
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG (a rank map that does not number each peer's
 *  endpoints 0, 1, ..., no rank or more than @p capacity ranks here, cid in use; logged);
 *  NOMEM. */
MPIV_API mpiv_status_t mpiv_p2p_comm_create_endpoints(mpiv_p2p_t *engine, uint16_t cid,
                                                      int32_t size, const uint32_t *rank_peer,
                                                      const uint16_t *rank_ep,
                                                      const uint16_t *rank_queue,
                                                      uint32_t capacity,
                                                      mpiv_p2p_comm_t **handles_p);

/** The inbound queue (worker endpoint, 0 .. endpoints - 1) an endpoints handle of this
 *  process receives through: its messages are matched by drains of that queue. A thread
 *  whose first send, receive or probe is on a handle sends through and drains this queue
 *  first; a ULT worker uses endpoint (its worker number) mod endpoints.
 *  @param[in]  comm    an endpoints handle of this process
 *  @param[out] queue_p the queue (written on success only)
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG when @p comm is not an endpoints handle (NULL
 *          included)
 *  @context any thread */
MPIV_API mpiv_status_t mpiv_p2p_comm_queue(const mpiv_p2p_comm_t *comm, uint32_t *queue_p);

/** The MPIV_P2P_ASSERT_* bits @p comm has now; 0 for NULL. */
MPIV_API unsigned mpiv_p2p_comm_assertions(mpiv_p2p_comm_t *comm);

/** Change @p comm's assertions (MPI_Comm_set_info); calls that start after the return see
 *  them. ALLOW_OVERTAKING is decided per message by its sender, so the two sides may change
 *  it at different times. Any thread; rare: every matching call of the engine waits while
 *  it runs (it locks the whole matching table).
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG (unknown bits); MPIV_ERR_BUSY (NO_ANY_SOURCE and
 *  NO_ANY_TAG together while a wildcard receive is posted: nothing changed); NOMEM. */
MPIV_API mpiv_status_t mpiv_p2p_comm_set_assertions(mpiv_p2p_comm_t *comm, unsigned assertions);

/** Destroy a communicator's state: @p comm is invalid after the call (its memory is
 *  freed once no progress call can still read it). Unexpected messages still queued are
 *  dropped when the engine is destroyed (MPI says a freed communicator's pending messages
 *  are erroneous); until then that state is kept.
 *  @return MPIV_OK; MPIV_ERR_INVALID_HANDLE when @p comm is not the live state of its
 *  context id (a stale handle of an id in use again is not detected). */
MPIV_API mpiv_status_t mpiv_p2p_comm_destroy(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm);

/** Send modes. */
#define MPIV_P2P_SEND_SYNC 1u /**< complete only once the receiver matched */

/** Largest inline message: a send without MPIV_P2P_SEND_SYNC of at most
 *  mpiv_p2p_inline_max(engine) bytes (this, or less with queues of fewer than 8 slots)
 *  travels inside the queue, in up to 8 slots: it completes at once (MPIV_OK) and does not
 *  use its mpiv_p2p_op_t after the call returns when the peer's queue has room and no
 *  earlier send to that peer waits for room. Otherwise, with @p user NULL it returns
 *  MPIV_ERR_RETRY_NOMEM and sends nothing (start it again with a request); with a @p user
 *  it waits in the engine like any send (MPIV_INPROGRESS) until it is in the queue. */
#define MPIV_P2P_INLINE_MAX 416

/** This engine's largest inline message (see MPIV_P2P_INLINE_MAX); 0 for NULL. */
MPIV_API size_t mpiv_p2p_inline_max(const mpiv_p2p_t *engine);

/** Start a send of @p bytes at @p buf to rank @p dest (peer index @p peer) of @p comm,
 *  from rank @p self_rank. The buffer must stay valid until completion. A send waiting for
 *  room in a peer's queues delays later sends to that peer only, and completes only once
 *  it is in the queue (no send completes while only this process's later calls would
 *  deliver it).
 *  @return MPIV_OK (done: buffer reusable, @p status_p written); MPIV_INPROGRESS (the
 *  completion function is called later with @p user); MPIV_ERR_RETRY_NOMEM (an inline send
 *  with @p user NULL that cannot complete at once: nothing sent); MPIV_ERR_INVALID_ARG. */
MPIV_API mpiv_status_t mpiv_p2p_isend(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm, uint32_t peer,
                                      int32_t self_rank, int32_t dest, int32_t tag,
                                      const void *buf, size_t bytes, unsigned flags, void *user,
                                      mpiv_p2p_op_t *op, mpiv_p2p_status_t *status_p);

/** As mpiv_p2p_isend, for the bytes the @p iovcnt entries of @p iov list, in order: the
 *  receiver reads them straight from those ranges (process_vm_readv), with no packing on
 *  this side (without CMA, this side copies them from the ranges into shared memory). Always a rendezvous (MPIV_INPROGRESS): for large non-contiguous buffers.
 *  @p iov and the bytes must stay valid until completion. */
MPIV_API mpiv_status_t mpiv_p2p_isend_gather(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                             uint32_t peer, int32_t self_rank, int32_t dest,
                                             int32_t tag, const struct iovec *iov, size_t iovcnt,
                                             unsigned flags, void *user, mpiv_p2p_op_t *op,
                                             mpiv_p2p_status_t *status_p);

/** As mpiv_p2p_isend, for @p bytes that the caller is still writing into @p buf, in order:
 *  after each part it stores the number written so far in @p *ready (an atomic store with
 *  release order, e.g. __atomic_store_n(ready, n, __ATOMIC_RELEASE)), and it must reach
 *  @p bytes. The receiver reads each part as soon as *ready covers it (a rendezvous that
 *  overlaps the writing, e.g. the packing of a non-contiguous send, with the transfer) and
 *  reports completion only after *ready reached @p bytes, even when it takes fewer bytes.
 *  Always MPIV_INPROGRESS on success. @p buf and @p ready stay valid until completion. */
MPIV_API mpiv_status_t mpiv_p2p_isend_streamed(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                               uint32_t peer, int32_t self_rank, int32_t dest,
                                               int32_t tag, const void *buf, size_t bytes,
                                               const size_t *ready, unsigned flags, void *user,
                                               mpiv_p2p_op_t *op, mpiv_p2p_status_t *status_p);

/** Post a receive into @p buf (capacity @p bytes) from @p source (or -1: any) with @p tag
 *  (or -1: any tag >= 0). Returns as mpiv_p2p_isend; a truncated message completes with
 *  error MPIV_ERR_TRUNCATE. A receive whose sender waits for an ACK or FIN completes only
 *  once that message is in the sender's queue (MPIV_INPROGRESS while it waits for room). */
MPIV_API mpiv_status_t mpiv_p2p_irecv(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm, int32_t source,
                                      int32_t tag, void *buf, size_t bytes, void *user,
                                      mpiv_p2p_op_t *op, mpiv_p2p_status_t *status_p);

/** Consumer of a received message's bytes: called in order with consecutive pieces
 *  (@p offset is the piece's place in the message), from the thread that delivers the
 *  message, before the completion callback. It must not call back into the engine. */
typedef void (*mpiv_p2p_sink_fn)(void *ctx, size_t offset, const void *data, size_t len);

/** Largest piece a sink receives from a rendezvous message of another process. */
#define MPIV_P2P_SINK_PIECE 65536

/** As mpiv_p2p_irecv, but the message's first @p bytes go to @p sink (with @p ctx) in
 *  order instead of into a buffer: a receive into a non-contiguous layout unpacks each
 *  piece as it comes, with no buffer the size of the message (a rendezvous message from
 *  another process is read up to MPIV_P2P_SINK_PIECE bytes at a time). */
MPIV_API mpiv_status_t mpiv_p2p_irecv_sink(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm,
                                           int32_t source, int32_t tag, mpiv_p2p_sink_fn sink,
                                           void *ctx, size_t bytes, void *user,
                                           mpiv_p2p_op_t *op, mpiv_p2p_status_t *status_p);

/** Cancel a receive started with mpiv_p2p_irecv or mpiv_p2p_irecv_sink.
 *  @return MPIV_OK: cancelled, no callback follows; MPIV_ERR_NOT_FOUND: it matched
 *  (the callback comes or came). */
MPIV_API mpiv_status_t mpiv_p2p_cancel(mpiv_p2p_t *engine, mpiv_p2p_op_t *op);

/** Look for a message a receive (@p source, @p tag) would match, without taking it.
 *  @return MPIV_OK (status_p->source, tag, sent written); MPIV_ERR_NOT_FOUND. */
MPIV_API mpiv_status_t mpiv_p2p_iprobe(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm, int32_t source,
                                       int32_t tag, mpiv_p2p_status_t *status_p);

/** Take the message a receive (@p source, @p tag) would match (MPI_Improbe): it is then
 *  received only through mpiv_p2p_mrecv. @return MPIV_OK; MPIV_ERR_NOT_FOUND. */
MPIV_API mpiv_status_t mpiv_p2p_improbe(mpiv_p2p_t *engine, mpiv_p2p_comm_t *comm, int32_t source,
                                        int32_t tag, mpiv_p2p_msg_t **msg_p,
                                        mpiv_p2p_status_t *status_p);

/** Receive a message taken by mpiv_p2p_improbe into @p buf (capacity @p bytes).
 *  @return MPIV_OK (done; MPIV_ERR_TRUNCATE in status_p->error when truncated), or
 *  MPIV_INPROGRESS: the bytes are delivered, but the ACK or FIN its sender waits for waits
 *  for room in the sender's queue; or (a rendezvous message in two copies, see
 *  mpiv_p2p_single_copy_t) the bytes are still to come. The completion function follows
 *  with @p user (none when @p user is NULL: pass one to learn when the bytes are in). */
MPIV_API mpiv_status_t mpiv_p2p_mrecv(mpiv_p2p_t *engine, mpiv_p2p_msg_t *msg, void *buf,
                                      size_t bytes, void *user, mpiv_p2p_status_t *status_p);

/** As mpiv_p2p_mrecv, into @p sink (see mpiv_p2p_irecv_sink). */
MPIV_API mpiv_status_t mpiv_p2p_mrecv_sink(mpiv_p2p_t *engine, mpiv_p2p_msg_t *msg,
                                           mpiv_p2p_sink_fn sink, void *ctx, size_t bytes,
                                           void *user, mpiv_p2p_status_t *status_p);

/** Levels of the engine (they go down as well as up; mpiv_stats_* has the counters). */
typedef struct mpiv_p2p_levels {
    uint64_t held;       /**< messages that arrived and wait for their receives now */
    uint64_t held_max;   /**< the most there were at once */
    uint64_t posted_max; /**< the most receives that waited in the posted lists at once,
                              counted while mpiv_p2p_track_posted was on */
    int posted_tracked;  /**< 1: mpiv_p2p_track_posted is on now */
} mpiv_p2p_levels_t;

/** Read the engine's levels. @return MPIV_OK; MPIV_ERR_INVALID_ARG for NULL arguments. */
MPIV_API mpiv_status_t mpiv_p2p_levels(mpiv_p2p_t *engine, mpiv_p2p_levels_t *levels_p);

/** Count the receives that wait in the posted lists (@p on nonzero) for the high-water mark
 *  posted_max of mpiv_p2p_levels, or stop counting them (0; the mark stays). Off by default:
 *  while on, each receive that waits costs one shared atomic add when posted and one when
 *  matched or cancelled. Turning it on starts a new mark at the level of the receives still
 *  waiting that were posted while it was on before (each is subtracted when it leaves).
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG for NULL. */
MPIV_API mpiv_status_t mpiv_p2p_track_posted(mpiv_p2p_t *engine, int on);

/** Per-communicator counter @p index (< mpiv_stats_comm_count(), see <mpiv/mpiv.h>) of
 *  @p comm (an endpoints handle: that handle's own), summed over every thread.
 *  @return MPIV_OK; MPIV_ERR_INVALID_ARG for NULL arguments or an index out of range. */
MPIV_API mpiv_status_t mpiv_p2p_comm_stats_read(mpiv_p2p_comm_t *comm, size_t index,
                                                uint64_t *value_p);

/** Drain inbound queues and retry pending sends. @return the number of events handled. */
MPIV_API int mpiv_p2p_progress(mpiv_p2p_t *engine);

typedef struct mpiv_p2p_waiter mpiv_p2p_waiter_t; /**< a wait in progress */

/** Let a pthread about to wait poll for its completions itself: rounds of @p done(@p arg)
 *  then mpiv_p2p_progress, up to @p polls of them while it is the only pthread of this
 *  process waiting in the engine, or up to the budget the thread learned from its own
 *  waits while others wait too (64 to 4096 polls, as a wait in a crowd spins; a wait that
 *  follows a poll that outlasted that budget does not spin again). It counts as a waiter
 *  meanwhile. Polling spares a wait's registration on each operation and its wake-ups when
 *  the completions come soon. Declines at once (returns 0) in a ULT, with a server thread,
 *  or when a peer is reached over the network (there a poll is a system call).
 *  @return nonzero when @p done returned nonzero; 0 otherwise (and for NULL). */
MPIV_API int mpiv_p2p_poll_alone(mpiv_p2p_t *engine, int polls, int (*done)(void *arg),
                                 void *arg);

/** Begin a wait of the calling thread or ULT for @p count >= 1 completions. Each
 *  completion is reported with mpiv_p2p_wake; then mpiv_p2p_wait_end blocks until all
 *  arrived. In a ULT only the ULT blocks; a pthread drives progress meanwhile (or, with
 *  a server thread, sleeps on a futex). A thread runs one wait at a time.
 *  @return the waiter; never NULL (out of memory aborts with a message). */
MPIV_API mpiv_p2p_waiter_t *mpiv_p2p_wait_begin(mpiv_p2p_t *engine, int32_t count);

/** Report one completion to @p waiter (any thread; never blocks). */
MPIV_API void mpiv_p2p_wake(mpiv_p2p_t *engine, mpiv_p2p_waiter_t *waiter);

/** Wait until every completion of @p waiter arrived; ends the wait. */
MPIV_API void mpiv_p2p_wait_end(mpiv_p2p_t *engine, mpiv_p2p_waiter_t *waiter);

/** After mpiv_p2p_wait_end, wait until @p total completions in all have been reported to
 *  @p waiter since mpiv_p2p_wait_begin. For a pthread's wait on any of several operations
 *  (begun with count 1, the waiter registered on each): every operation whose completion
 *  took the waiter wakes it, maybe after the wait ended; the thread must see those wakes
 *  arrive before its next wait begins, or they would count for that one. A ULT's waiter
 *  is gone after mpiv_p2p_wait_end: call this for pthreads only. Completions already
 *  under way are all it waits for (no progress is needed). */
MPIV_API void mpiv_p2p_wait_settle(mpiv_p2p_t *engine, mpiv_p2p_waiter_t *waiter, int32_t total);

#ifdef __cplusplus
}
#endif

#endif /* MPIV_P2P_H */
