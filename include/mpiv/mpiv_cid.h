/**
 * @file mpiv_cid.h
 * @brief Context-id agreement for communicators whose participants may be created
 * concurrently by many threads (Gropp and Thakur, "Thread-safety in an MPI
 * implementation", Fig. 3): each process offers the mask of the ids it has free, the
 * processes AND their masks, and all take the lowest id free everywhere.
 *
 * One participant per process takes part in each agreement (the threads or endpoints of a
 * process that create one communicator meet first and elect it). The host MPI library
 * supplies its table of ids and its collectives through mpiv_cid_ops_t.
 *
 * Rules that keep the agreement safe and live:
 * - Only one agreement of a process at a time holds the process's mask (a local gate);
 *   the others offer an empty mask, so the AND is empty and every participant retries.
 *   Two agreements of one process therefore never pick the same id.
 * - Among a process's waiting agreements the one with the lowest key (the parent
 *   communicator's context id, the same on every process) takes the mask first: so the
 *   lowest-key agreement of a set of overlapping ones eventually holds the mask on all its
 *   processes at once and succeeds (no livelock).
 * - The chosen id is reserved in the host's table, and a second collective (the minimum
 *   of the reservations) confirms it everywhere: an id the host's own agreement took
 *   meanwhile (a communicator created without mpiv) makes every participant retry.
 */
#ifndef MPIV_CID_H
#define MPIV_CID_H

#include <stddef.h>
#include <stdint.h>

#include <mpiv/mpiv_status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What mpiv_cid_agree() needs from the host MPI library. Every callback receives @p ctx. */
typedef struct mpiv_cid_ops {
    void *ctx;
    uint32_t first;  /**< lowest id to hand out */
    uint32_t limit;  /**< ids are below this (at most 65536) */
    uint64_t key;    /**< priority among this process's agreements: lower goes first; the
                          same on every process (e.g. the parent's context id) */
    /** Whether @p id is free in this process's table. */
    int (*is_free)(void *ctx, uint32_t id);
    /** Take @p id in this process's table; 0 when it was taken meanwhile. */
    int (*reserve)(void *ctx, uint32_t id);
    /** Give back an id reserve() took. */
    void (*release)(void *ctx, uint32_t id);
    /** Bitwise AND of @p count words over the participants, in place; 0 on success. */
    int (*allreduce_band)(void *ctx, uint64_t *words, size_t count);
    /** Minimum of @p value over the participants, in place; 0 on success. */
    int (*allreduce_min)(void *ctx, int *value);
    /** Called between attempts (drive progress, yield); may be NULL. */
    void (*idle)(void *ctx);
} mpiv_cid_ops_t;

/** Agree on a context id with the other participants (collective over them: each calls
 *  this once, with the same first, limit and key). On success the id is reserved in every
 *  participant's table.
 *  @return MPIV_OK (*id_p set); MPIV_ERR_INVALID_ARG (NULL argument or callback, an empty
 *  or too wide range); MPIV_ERR_CAPACITY (no id in range is free on every participant);
 *  MPIV_ERR_SYSTEM (a collective failed; logged); MPIV_ERR_NOMEM. */
MPIV_API mpiv_status_t mpiv_cid_agree(const mpiv_cid_ops_t *ops, uint32_t *id_p);

#ifdef __cplusplus
}
#endif

#endif /* MPIV_CID_H */
