/*
 * pml_mpiv.h: the Open MPI 4.1 PML component "mpiv" (C glue over libmpiv's
 * point-to-point engine, <mpiv/mpiv_p2p.h>).
 *
 * The glue owns what is Open MPI's: MCA parameters, the module table, requests (which
 * embed ompi_request_t and the engine's operation storage), datatypes (contiguous
 * buffers go to the engine as they are; others are packed and unpacked with an
 * opal_convertor), buffered sends, matched-probe messages and the modex. The engine owns
 * matching, transport and protocols.
 */
#ifndef PML_MPIV_H
#define PML_MPIV_H

#include "ompi_config.h"

#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/request/request.h"

#include <mpiv/mpiv_p2p.h>
#include <sys/uio.h>

BEGIN_C_DECLS

/** Values of pml_mpiv_progress. */
enum { MCA_PML_MPIV_PROGRESS_AUTO = 0, MCA_PML_MPIV_PROGRESS_SERVER = 1, MCA_PML_MPIV_PROGRESS_INLINE = 2 };

/** MCA parameters and process-wide state of the component. */
typedef struct mca_pml_mpiv_globals {
    /* parameters */
    int priority;
    int verbose;
    int workers;          /* engine endpoints; 0: one per PU of the process binding */
    int progress;         /* MCA_PML_MPIV_PROGRESS_* */
    int eager_limit;
    int packet_count;
    int queue_slots;
    int idle_time;        /* us of idle polling before a waiting thread sleeps; -1 auto */
    int yield_when_idle;  /* waiting threads yield between polls: 1, 0, -1 auto */
    bool yielding;        /* what yield_when_idle resolved to */
    size_t inline_max;    /* largest send that travels in the queue (the engine's) */
    int lock;             /* mpiv_p2p_lock_t */
    int single_copy;      /* mpiv_p2p_single_copy_t */
    int stats;            /* summary at finalize: 0 none, 1 totals, 2 per thread */
    char *server_cpus;    /* PU list for the server thread, indexed by local rank */
    char *fallback;       /* PML added to the include list at open ("" = none) */
    char *transports;     /* pml_mpiv_transports: "shm,ucx", "shm" or "ucx" */
    int ucx_copy_max;     /* pml_mpiv_ucx_copy_max: largest copied UCX send (bytes) */
    unsigned engine_transports; /* MPIV_P2P_TRANSPORT_* the engine was created with */
    bool decline;         /* decline in init (testing the fallback) */
    /* state */
    int output;           /* opal_output stream */
    mpiv_p2p_t *engine;
    uint32_t queues;      /* the engine's endpoints (inbound queues) */
    bool serial;          /* below MPI_THREAD_MULTIPLE with inline progress: MPI calls and
                             completions never overlap, so request words need no atomics */
    bool *connected;      /* per world rank */
    opal_mutex_t connect_lock;
    opal_free_list_t requests;
    bool requests_built;
} mca_pml_mpiv_globals_t;

/* pml_mpiv_endpoints.c: MPIX_Comm_create_endpoints (entry for libmpiv-mpix), and the
 * release of an endpoints handle from del_comm (false: not one). */
int mca_pml_mpiv_create_endpoints(ompi_communicator_t *parent, int my_num_ep,
                                  opal_info_t *info, ompi_communicator_t **out);
bool mca_pml_mpiv_del_endpoint(ompi_communicator_t *comm);

/* pml_mpiv_stats.c: the MPI_T performance variables (registered with the parameters) and
 * the summary pml_mpiv_stats prints at finalize (level 1: totals, 2: per thread too). */
void mca_pml_mpiv_stats_register(void);
void mca_pml_mpiv_stats_start(void); /* once the engine exists */
void mca_pml_mpiv_stats_print(int level);

extern mca_pml_mpiv_globals_t mca_pml_mpiv;
extern mca_pml_base_module_t mca_pml_mpiv_module;
OMPI_DECLSPEC extern mca_pml_base_component_2_0_0_t mca_pml_mpiv_component;

/** Kinds of requests. */
typedef enum { MPIV_REQ_SEND, MPIV_REQ_RECV, MPIV_REQ_BSEND_COPY } mca_pml_mpiv_req_kind_t;

/** Bits of mca_pml_mpiv_request_t::pml_state: who is done with the request. The engine
 *  sets DONE after completing it; MPI sets FREED in req_free. Whoever sets the second
 *  bit returns the request to the free list. */
#define MPIV_REQ_DONE 1
#define MPIV_REQ_FREED 2

/** mca_pml_mpiv_request_t::waiter once the request completed. */
#define MPIV_WAITER_DONE ((void *) 1)

typedef struct mca_pml_mpiv_request {
    ompi_request_t ompi;
    /* What the completion and a woken blocking receive read share the cache line that
     * holds the tail of `ompi` (req_complete_cb, read by every completion), the engine's
     * operation starts on the next: with many blocked ULTs a request is cold when its
     * ULT resumes, and each line is a miss (README, "Using the ULT runtime"). The free
     * list's requests are line-aligned; a blocking receive's own one on the stack is not
     * (aligning it measured slower). */
    mca_pml_mpiv_req_kind_t kind;
    volatile int32_t pml_state;     /* MPIV_REQ_* */
    void *volatile waiter;          /* mpiv_p2p_waiter_t of an mpiv wait, or MPIV_WAITER_DONE */
    struct opal_convertor_t *unpacker; /* a non-contiguous receive's (see below) */
    /* A blocking call's own request whose waiter was stored before the operation started
     * (mpiv_recv in a ULT): no Open MPI wait can hold it and nothing frees it, so its
     * completion needs no atomic read-modify-write (req_done). */
    bool preset_waiter;
    bool pack_bsend;                /* pack_buf came from the bsend buffer */
    mpiv_p2p_op_t op;               /* the engine's operation */
    /* arguments, kept for persistent requests */
    void *buf;
    size_t count;
    ompi_datatype_t *datatype;
    ompi_communicator_t *comm;
    int peer;                       /* destination or source rank */
    int tag;
    mca_pml_base_send_mode_t mode;
    /* non-contiguous data: sends are packed into pack_buf at start (large ones part by
     * part while the receiver reads, `packed` counting the bytes there), receives unpacked
     * piece by piece as they arrive (unpacker, the sink's context) */
    void *pack_buf;
    size_t pack_size;
    size_t packed; /* read by the receiving process (process_vm_readv) */
    struct iovec *gather;           /* a large send's raw ranges, read by the receiver */
} mca_pml_mpiv_request_t;
OBJ_CLASS_DECLARATION(mca_pml_mpiv_request_t);
_Static_assert(offsetof(mca_pml_mpiv_request_t, kind) / 64 ==
                       offsetof(mca_pml_mpiv_request_t, ompi.req_complete_cb) / 64 &&
                   offsetof(mca_pml_mpiv_request_t, pack_bsend) / 64 ==
                       offsetof(mca_pml_mpiv_request_t, ompi.req_complete_cb) / 64 &&
                   offsetof(mca_pml_mpiv_request_t, op) % 64 == 0,
               "the completion's fields share the line of ompi.req_complete_cb; op starts a line");

/* module entry points (pml_mpiv.c) */
int mca_pml_mpiv_enable(bool enable);
int mca_pml_mpiv_add_procs(struct ompi_proc_t **procs, size_t nprocs);
int mca_pml_mpiv_del_procs(struct ompi_proc_t **procs, size_t nprocs);
int mca_pml_mpiv_progress(void);
int mca_pml_mpiv_add_comm(struct ompi_communicator_t *comm);
int mca_pml_mpiv_del_comm(struct ompi_communicator_t *comm);
/* Apply the MPI-4 assertion hints of @p comm to its matching state, now and on every
 * MPI_Comm_set_info (pml_mpiv_peers.c; add_comm does it, and so does an endpoints handle). */
void mca_pml_mpiv_subscribe_assertions(struct ompi_communicator_t *comm);

/* the engine's completion callback */
void mca_pml_mpiv_complete(void *user, const mpiv_p2p_status_t *status);
/* The engine's prefetch callback: the lines of request @p user that its completion
 * (mca_pml_mpiv_complete) reads and writes. */
void mca_pml_mpiv_prefetch(void *user);
/* The engine's fault callback: a peer wrote invalid data into shared memory; ends the job. */
void mca_pml_mpiv_fault(uint32_t peer, const char *what);
/* The engine's connect callback: a peer's first message came over UCX before this process
 * connected it (peers are connected on first use); connects it. */
int mca_pml_mpiv_connect_arrival(uint32_t peer);

/* requests (pml_mpiv_request.c) */
/* A request from the free list, holding references on comm and dt (NULL: none left). */
mca_pml_mpiv_request_t *mca_pml_mpiv_req_alloc(mca_pml_mpiv_req_kind_t kind, bool persistent,
                                               void *buf, size_t count, ompi_datatype_t *dt,
                                               int peer, int tag, mca_pml_base_send_mode_t mode,
                                               ompi_communicator_t *comm);
/* Set up a request for one operation (references to comm and dt are the caller's). */
void mca_pml_mpiv_req_init(mca_pml_mpiv_request_t *req, mca_pml_mpiv_req_kind_t kind,
                           bool persistent, void *buf, size_t count, ompi_datatype_t *dt,
                           int peer, int tag, mca_pml_base_send_mode_t mode,
                           ompi_communicator_t *comm);
/* Drop the references and return the request to the free list. */
void mca_pml_mpiv_req_release(mca_pml_mpiv_request_t *req);
/* The per-thread request caches (pml_mpiv_request.c): made before the first request,
 * given back and freed before the free list goes. */
int mca_pml_mpiv_req_cache_init(void);
void mca_pml_mpiv_req_cache_fini(void);
/* The free function (it also marks mpiv's requests). */
int mca_pml_mpiv_req_free(ompi_request_t **request);
/* Release a non-contiguous receive's convertor. */
void mca_pml_mpiv_unpacker_release(mca_pml_mpiv_request_t *req);
/* An engine status as an OMPI error code. */
int mca_pml_mpiv_map_status(int s);
/* MPI_Start of persistent requests (pml_mpiv.c). */
int mca_pml_mpiv_start(size_t count, ompi_request_t **requests);

/* peers and communicators (pml_mpiv_peers.c) */
/* The engine's peer index of rank @p rank of @p comm (its segment mapped on first use). */
int mca_pml_mpiv_peer_index(ompi_communicator_t *comm, int rank, uint32_t *peer);
/* The engine's matching state of @p comm. */
static inline mpiv_p2p_comm_t *mca_pml_mpiv_engine_comm(ompi_communicator_t *comm)
{
    return (mpiv_p2p_comm_t *) comm->c_pml_comm;
}
/* Ranks that can send to us: the remote group (the local group of an intracommunicator;
 * ompi_comm_remote_size is 0 for those). */
static inline int mca_pml_mpiv_remote_size(ompi_communicator_t *comm)
{
    return comm->c_remote_group->grp_proc_count;
}

/* waiting (pml_mpiv_wait.c) */
/* Whether the caller is an mpiv ULT. */
bool mca_pml_mpiv_in_ult(void);
/* Wait until all of reqs[0..n) that are mpiv requests are complete; false (nothing done)
 * when a request of another kind is still incomplete. */
bool mca_pml_mpiv_wait_own(size_t n, ompi_request_t **reqs);
/* MPI_Wait and friends for mpiv's requests: installed at enable, restored at finalize. */
void mca_pml_mpiv_install_wait_functions(void);
void mca_pml_mpiv_restore_wait_functions(void);

/* lifetime of the module's state (pml_mpiv.c), used by the component */
int mca_pml_mpiv_module_init(void);
void mca_pml_mpiv_module_fini(void);

END_C_DECLS

#endif /* PML_MPIV_H */
