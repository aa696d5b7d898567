// hmcs_lock: hierarchical MCS lock (Chabbi, Fagan, Mellor-Crummey, PPoPP'15) with the
// uncontended fast path of Chabbi & Mellor-Crummey (PPoPP'16).
//
// Design: a tree of MCS queues mirroring the memory hierarchy (e.g. core → L3/package →
// machine). A thread queues at the leaf of the processing unit (PU) it runs on. The
// first thread of a leaf queue (the cohort head) acquires the parent level on behalf of
// its cohort, with the leaf's own queue node, and so on up to the root; owning the root
// means owning the lock. On release, the owner hands the lock to its successor at the
// lowest level that has one, keeping every upper level held ("cohort passing"), until the
// pass count of that level reaches the threshold; then it releases the upper levels first
// and lets its successor re-acquire them. Lock transfers thus stay inside a core or a
// socket for up to `threshold` hand-offs, which is what gives HMCS its throughput.
// Fast path: when both the caller's leaf and the root are free, the caller takes the
// root directly with its own node, skipping the intermediate levels.
//
// Hierarchy: from hwloc (see detail::hmcs_hierarchy::machine()): the levels between PU and
// machine whose objects group several PUs, deduplicated by object count, at most
// k_max_levels levels including the root. On a machine without such levels (2 PUs, one
// per core, as on the CI box) it has the root only and behaves as mcs_lock. The
// synthetic constructor builds a balanced tree of given fan-outs whose slots are threads
// (numbered in order of first use), to exercise several levels on any machine.
//
// Invariants: the owner holds the root queue, and the queue of every level on its path;
// a level's queue node is used by at most one thread at a time (the cohort head, then the
// threads the cohort passes the lock to); the status of a node waiting at a non-root level
// is k_wait (or k_parked, a parked ULT's), then either a pass count in [2, threshold] (the
// parent levels come with it; threshold < k_parked) or k_acquire_parent (the parent must
// be acquired).
// Ordering: as in mcs_lock at each level (see mcs.hpp); a cohort pass is a release store
// of the count read with acquire, so every level's node state travels with the lock.
// holder_ is written by the owner after acquiring and read by it in unlock(): ordered by
// the lock itself.
// Oversubscription: all waits use base::backoff (spin, then yield).
// Memory: 512 B per hierarchy node (one per object of every level, e.g. ~24 KiB for
// 2 sockets × 22 cores × 2 PUs), plus the per-thread queue nodes of mcs.hpp; the
// hierarchy description of the machine is built once per process and shared.
// When not to use it: when fairness matters (a cohort can keep the lock for `threshold`
// hand-offs while remote threads wait); on a single-level machine (prefer mcs_lock, which
// is smaller); as the low-priority class of tlp_lock in latency-bound regimes (seed 004
// §4.2: cohort passing starves the other progress threads' work).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <hwloc.h>
#include <sched.h>

#include "base/cacheline.hpp"
#include "base/lock/lock.hpp"
#include "base/lock/mcs.hpp"
#include "base/log.hpp"

namespace mpiv::base {
namespace detail {

/// Description of a lock hierarchy over "slots" (PUs, or threads for synthetic trees).
struct hmcs_hierarchy {
    /// How a caller is mapped to a slot.
    enum class slot_source {
        cpu,   ///< the PU it runs on (sched_getcpu()), via slot_of_cpu
        thread ///< a per-thread sequence number modulo the slot count
    };

    slot_source source = slot_source::cpu;
    std::uint32_t n_slots = 1;
    /// levels[l][slot] = index, within level l, of the node that slot belongs to. Level 0
    /// holds the leaves; the last level is the root (a single node, index 0).
    std::vector<std::vector<std::uint32_t>> levels{std::vector<std::uint32_t>(1, 0)};
    /// OS index of a CPU → slot (slot_source::cpu only).
    std::vector<std::uint32_t> slot_of_cpu;

    /// Slot of the calling thread.
    std::uint32_t caller_slot() const noexcept
    {
        if (source == slot_source::thread) {
            return thread_number() % n_slots;
        }
        const int cpu = sched_getcpu();
        if (cpu < 0 || static_cast<std::size_t>(cpu) >= slot_of_cpu.size()) {
            return 0;
        }
        return slot_of_cpu[static_cast<std::size_t>(cpu)];
    }

    /// A balanced tree: level l groups fanout[0] × … × fanout[l] slots; the last level is
    /// the root. @pre every fan-out >= 1 and the list is not empty.
    static hmcs_hierarchy synthetic(const std::vector<std::uint32_t> &fanout)
    {
        hmcs_hierarchy h;
        h.source = slot_source::thread;
        h.n_slots = 1;
        for (std::uint32_t f : fanout) {
            h.n_slots *= f;
        }
        h.levels.clear();
        std::uint32_t group = 1;
        for (std::size_t l = 0; l < fanout.size(); ++l) {
            group *= fanout[l];
            std::vector<std::uint32_t> level(h.n_slots);
            for (std::uint32_t s = 0; s < h.n_slots; ++s) {
                level[s] = l + 1 == fanout.size() ? 0 : s / group;
            }
            h.levels.push_back(std::move(level));
        }
        return h;
    }

    /// The hierarchy of this machine, built from hwloc on first use (then shared).
    static const std::shared_ptr<const hmcs_hierarchy> &machine()
    {
        static const std::shared_ptr<const hmcs_hierarchy> h =
            std::make_shared<const hmcs_hierarchy>(from_hwloc());
        return h;
    }

    /// At most this many levels (root included) from the topology: every level is one more
    /// queue to cross on a contended acquisition.
    static constexpr std::size_t k_max_levels = 3;

  private:
    static std::uint32_t thread_number() noexcept
    {
        static std::atomic<std::uint32_t> next{0};
        static thread_local const std::uint32_t mine =
            next.fetch_add(1, std::memory_order_relaxed);
        return mine;
    }

    static hmcs_hierarchy from_hwloc()
    {
        hmcs_hierarchy h;
        hwloc_topology_t topo;
        if (hwloc_topology_init(&topo) != 0) {
            log(log_level::warn, "hmcs_lock: hwloc_topology_init failed; using one level");
            return h;
        }
        if (hwloc_topology_load(topo) != 0) {
            log(log_level::warn, "hmcs_lock: hwloc_topology_load failed; using one level");
            hwloc_topology_destroy(topo);
            return h;
        }
        const int n_pu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
        if (n_pu <= 0) {
            hwloc_topology_destroy(topo);
            return h;
        }
        h.n_slots = static_cast<std::uint32_t>(n_pu);
        std::uint32_t max_os = 0;
        for (int i = 0; i < n_pu; ++i) {
            const hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, i);
            max_os = pu->os_index > max_os ? pu->os_index : max_os;
        }
        h.slot_of_cpu.assign(max_os + 1, 0);
        for (int i = 0; i < n_pu; ++i) {
            h.slot_of_cpu[hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, i)->os_index] =
                static_cast<std::uint32_t>(i);
        }
        // Walk from just above the PUs towards the machine; keep levels that group several
        // PUs and whose object count differs from the last kept one (a cache level shared
        // exactly like the core above it adds a queue but no locality).
        h.levels.clear();
        const int pu_depth = hwloc_get_type_depth(topo, HWLOC_OBJ_PU);
        int last_kept = n_pu;
        for (int d = pu_depth - 1; d > 0 && h.levels.size() + 1 < k_max_levels; --d) {
            const int n_obj = hwloc_get_nbobjs_by_depth(topo, static_cast<unsigned>(d));
            if (n_obj <= 1 || n_obj >= last_kept) {
                continue;
            }
            std::vector<std::uint32_t> level(h.n_slots, 0);
            for (int o = 0; o < n_obj; ++o) {
                const hwloc_obj_t obj = hwloc_get_obj_by_depth(topo, static_cast<unsigned>(d),
                                                               static_cast<unsigned>(o));
                unsigned cpu;
                hwloc_bitmap_foreach_begin(cpu, obj->cpuset)
                {
                    if (cpu < h.slot_of_cpu.size()) {
                        level[h.slot_of_cpu[cpu]] = static_cast<std::uint32_t>(o);
                    }
                }
                hwloc_bitmap_foreach_end();
            }
            h.levels.push_back(std::move(level));
            last_kept = n_obj;
        }
        h.levels.emplace_back(h.n_slots, 0);
        hwloc_topology_destroy(topo);
        return h;
    }
};

/// Value of a queue node's status: the parent levels must be acquired by the receiver.
constexpr std::uint32_t k_hmcs_acquire_parent = mcs_qnode::k_wait - 1;
/// Pass count of the thread that acquired the parent levels itself.
constexpr std::uint32_t k_hmcs_cohort_start = 1;

/// One node of the lock tree: an MCS queue plus the queue node with which the current
/// cohort of this node waits in, or holds, the parent's queue.
struct hmcs_node {
    // Read-only after construction; null at the root.
    alignas(k_false_sharing) hmcs_node *parent_ = nullptr;
    // Last node of this level's queue; swapped by every thread arriving at this level.
    alignas(k_false_sharing) std::atomic<mcs_qnode *> tail_{nullptr};
    // This node's entry in the parent's queue (unused at the root).
    mcs_qnode up_;
};

} // namespace detail

class MPIV_TS_CAPABILITY("mutex") hmcs_lock {
  public:
    /// A cohort can overtake remote waiters up to threshold times in a row.
    static constexpr bool is_fair = false;
    /// Waiting spins, then yields (see base::backoff).
    static constexpr bool may_yield = true;
    /// Default number of consecutive hand-offs inside a cohort (Chabbi et al. use 2^6 to
    /// 2^8; larger favours throughput, smaller fairness).
    static constexpr std::uint32_t k_default_threshold = 256;

    /// A lock over the hierarchy of this machine (hwloc, read once per process) with the
    /// default threshold.
    hmcs_lock() : hmcs_lock(k_default_threshold) {}

    /// A lock over the hierarchy of this machine.
    /// @param threshold consecutive hand-offs inside a cohort, >= 1 (values out of range
    ///        are clamped)
    explicit hmcs_lock(std::uint32_t threshold)
        : hmcs_lock(detail::hmcs_hierarchy::machine(), threshold)
    {
    }

    /// A lock over a synthetic balanced hierarchy whose slots are threads.
    /// @param fanout children per node from the leaves up: {2, 2, 2} makes leaves of 2
    ///        threads, 2 leaves per mid node, 2 mid nodes under the root (8 slots, 3
    ///        levels); the i-th thread to use any synthetic hmcs_lock takes slot i mod 8.
    ///        Every entry >= 1, at least one entry.
    /// @param threshold consecutive hand-offs inside a cohort, >= 1
    hmcs_lock(const std::vector<std::uint32_t> &fanout, std::uint32_t threshold)
        : hmcs_lock(std::make_shared<const detail::hmcs_hierarchy>(
                        detail::hmcs_hierarchy::synthetic(fanout)),
                    threshold)
    {
    }

    hmcs_lock(const hmcs_lock &) = delete;
    hmcs_lock &operator=(const hmcs_lock &) = delete;

    /// Number of levels, root included.
    std::size_t levels() const noexcept { return hierarchy_->levels.size(); }

    /// Acquire the lock.
    /// @context thread-safe; may yield the calling ULT or thread.
    void lock() noexcept MPIV_TS_ACQUIRE()
    {
        detail::mcs_qnode *node = detail::qnode_cache::get();
        detail::hmcs_node *leaf = leaf_of_caller();
        if (leaf != root_ && leaf->tail_.load(std::memory_order_relaxed) == nullptr &&
            root_->tail_.load(std::memory_order_relaxed) == nullptr &&
            detail::mcs_try_enqueue(root_->tail_, node)) {
            holder_ = holder{node, root_};
            return;
        }
        acquire(leaf, node);
        holder_ = holder{node, leaf};
    }

    /// Acquire the lock if it is free (through the fast path only: never queues).
    /// @return true iff the caller now owns the lock.
    /// @context thread-safe; never waits.
    [[nodiscard]] bool try_lock() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        // Owning the lock means owning the root: a free root is a free lock.
        if (root_->tail_.load(std::memory_order_relaxed) != nullptr) {
            return false;
        }
        detail::mcs_qnode *node = detail::qnode_cache::get();
        if (!detail::mcs_try_enqueue(root_->tail_, node)) {
            detail::qnode_cache::put(node);
            return false;
        }
        holder_ = holder{node, root_};
        return true;
    }

    /// Release the lock (to the next waiter of the lowest level that has one, within the
    /// threshold). @context owner only; may yield while a successor finishes queueing.
    void unlock() noexcept MPIV_TS_RELEASE()
    {
        const holder h = holder_;
        release(h.level, h.node);
        detail::qnode_cache::put(h.node);
    }

    /// True iff no other thread waits at any level on the owner's path to the root.
    /// Exact for those queues at the time of the call. A thread that is still climbing
    /// from another leaf towards the root is not seen (it has not reached the owner's
    /// path yet), nor is a later arrival. @context owner only.
    [[nodiscard]] bool no_waiters() const noexcept
    {
        if (!detail::mcs_alone(holder_.level->tail_, holder_.node)) {
            return false;
        }
        for (const detail::hmcs_node *n = holder_.level; n->parent_ != nullptr;
             n = n->parent_) {
            if (!detail::mcs_alone(n->parent_->tail_, &n->up_)) {
                return false;
            }
        }
        return true;
    }

  private:
    friend struct hmcs_lock_test_access;

    struct holder {
        detail::mcs_qnode *node; // the owner's node
        detail::hmcs_node *level; // where it queued: its leaf, or the root (fast path)
    };

    hmcs_lock(std::shared_ptr<const detail::hmcs_hierarchy> hierarchy, std::uint32_t threshold)
        : hierarchy_(std::move(hierarchy)),
          threshold_(threshold < 1 ? 1 : threshold >= detail::mcs_qnode::k_parked
                                             ? detail::mcs_qnode::k_parked - 1
                                             : threshold)
    {
        const detail::hmcs_hierarchy &h = *hierarchy_;
        std::size_t total = 0;
        std::vector<std::size_t> first(h.levels.size());
        for (std::size_t l = 0; l < h.levels.size(); ++l) {
            first[l] = total;
            std::uint32_t count = 0;
            for (std::uint32_t idx : h.levels[l]) {
                count = idx + 1 > count ? idx + 1 : count;
            }
            total += count;
        }
        nodes_.reset(new detail::hmcs_node[total]);
        for (std::size_t l = 0; l + 1 < h.levels.size(); ++l) {
            for (std::uint32_t s = 0; s < h.n_slots; ++s) {
                detail::hmcs_node &child = nodes_[first[l] + h.levels[l][s]];
                child.parent_ = &nodes_[first[l + 1] + h.levels[l + 1][s]];
            }
        }
        root_ = &nodes_[total - 1];
        leaf_of_slot_.resize(h.n_slots);
        for (std::uint32_t s = 0; s < h.n_slots; ++s) {
            leaf_of_slot_[s] = &nodes_[h.levels[0][s]];
        }
    }

    detail::hmcs_node *leaf_of_caller() const noexcept
    {
        // One level: every slot's leaf is the root; skip locating the caller.
        return root_ == leaf_of_slot_[0] ? root_ : leaf_of_slot_[hierarchy_->caller_slot()];
    }

    // Queue at level n with node, then climb while this level's cohort lacks the parent.
    void acquire(detail::hmcs_node *n, detail::mcs_qnode *node) noexcept
    {
        while (n->parent_ != nullptr) {
            const std::uint32_t got =
                detail::mcs_enqueue(n->tail_, node, detail::k_hmcs_acquire_parent);
            if (got != detail::k_hmcs_acquire_parent) {
                return; // a pass count: the parent levels came with it
            }
            // Only the owner of `node` reads its count from now on.
            node->status_.store(detail::k_hmcs_cohort_start, std::memory_order_relaxed);
            node = &n->up_;
            n = n->parent_;
        }
        detail::mcs_enqueue(n->tail_, node);
    }

    void release(detail::hmcs_node *n, detail::mcs_qnode *node) noexcept
    {
        if (n->parent_ == nullptr) {
            detail::mcs_release(n->tail_, node, detail::mcs_qnode::k_granted);
            return;
        }
        const std::uint32_t count = node->status_.load(std::memory_order_relaxed);
        if (count < threshold_) {
            // sync: acquire; pairs with release in mcs_enqueue() (link store)
            detail::mcs_qnode *succ = node->next_.load(std::memory_order_acquire);
            if (succ != nullptr) {
                detail::mcs_pass(succ, count + 1);
                return;
            }
        }
        // Upper levels first: the successor re-acquires them with n->up_, which must have
        // left the parent's queue by then.
        release(n->parent_, &n->up_);
        detail::mcs_release(n->tail_, node, detail::k_hmcs_acquire_parent);
    }

    std::shared_ptr<const detail::hmcs_hierarchy> hierarchy_;
    std::uint32_t threshold_;
    std::unique_ptr<detail::hmcs_node[]> nodes_;
    detail::hmcs_node *root_ = nullptr;
    std::vector<detail::hmcs_node *> leaf_of_slot_;
    // The owner's node and level: written after acquiring, read by unlock(); ordered by the
    // lock itself.
    alignas(k_false_sharing) holder holder_{nullptr, nullptr};
};

} // namespace mpiv::base
