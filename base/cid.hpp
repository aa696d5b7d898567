// cid_agreement: the process side of context-id agreement (<mpiv/mpiv_cid.h>; Gropp and
// Thakur's algorithm, Fig. 3 of "Thread-safety in an MPI implementation").
//
// Design. A process has one mask of free ids and one gate: an agreement that holds the
// gate offers the mask (the ids its table has free), any other offers an empty one. The
// participants AND their offers; the last word carries an "every participant offered"
// bit, so all of them see the same result and take the same decision:
// - all offered and some id is free everywhere: the lowest one is reserved in each table,
//   and a minimum over the reservations confirms it (an id the host took meanwhile makes
//   everyone give it back and retry);
// - all offered and no id is free: capacity exhausted;
// - someone did not offer: retry.
// The gate is held from the offer until the confirmation, so two agreements of one
// process never offer (and so never pick) the same id. Waiting agreements are ordered by
// key (the parent communicator's context id): the gate goes to the lowest waiting key, so
// among overlapping agreements the lowest-key one eventually holds every gate it needs at
// once and ends (Gropp and Thakur's livelock remedy, as in MPICH). The model
// contrib/model/ep_cid.pml checks agreement, uniqueness and fair liveness of this scheme,
// and that dropping the gate or the retry breaks it.
// Threads: agree() is called by any number of threads (one per agreement in progress);
// mu_ guards the gate and the waiting keys, never held across a callback.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>

#include <mpiv/mpiv_cid.h>

#include "base/status.hpp"

namespace mpiv::base {

class cid_agreement {
  public:
    /// Run one agreement (see mpiv_cid_agree()). @return ok; invalid_arg; capacity;
    /// system (a collective failed); nomem.
    [[nodiscard]] status agree(const mpiv_cid_ops_t &ops, std::uint32_t &id_p) noexcept;

    /// The process's instance (the C entry point's).
    static cid_agreement &process() noexcept;

  private:
    // Take the gate if it is free and @p key is the lowest waiting one.
    bool take_gate(std::uint64_t key) noexcept;
    // Give the gate back (if @p held) and, with @p done, leave the waiting keys.
    void put_gate(std::uint64_t key, bool held, bool done) noexcept;

    std::mutex mu_;
    bool busy_ = false;                     // mu_: an agreement holds the mask
    std::multiset<std::uint64_t> waiting_;  // mu_: keys of the agreements in progress
};

} // namespace mpiv::base
