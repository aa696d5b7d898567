#include "sched/runtime.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "base/log.hpp"

namespace mpiv::sched {
namespace {

std::mutex g_init_mutex;
unsigned g_refcount = 0; // under g_init_mutex

} // namespace

std::atomic<runtime *> runtime::instance_{nullptr};

status runtime::init(const mpiv_params_t *params)
{
    std::lock_guard<std::mutex> g(g_init_mutex);
    if (g_refcount > 0) {
        ++g_refcount;
        if (params != nullptr && params->field_mask != 0) {
            base::log(base::log_level::info,
                      "mpiv_init: runtime already running; the new parameters are ignored");
        }
        return status::ok;
    }
    std::unique_ptr<runtime> rt(new (std::nothrow) runtime());
    if (!rt) {
        return status::nomem;
    }
    if (status s = rt->setup(params); s != status::ok) {
        return s;
    }
    g_refcount = 1;
    // sync: release; pairs with the acquire load in get(): the workers are running.
    instance_.store(rt.release(), std::memory_order_release);
    return status::ok;
}

status runtime::finalize()
{
    std::lock_guard<std::mutex> g(g_init_mutex);
    runtime *rt = instance_.load(std::memory_order_relaxed);
    if (g_refcount == 0 || rt == nullptr) {
        return status::not_initialized;
    }
    if (g_refcount > 1) {
        --g_refcount;
        return status::ok;
    }
    if (worker::current() != nullptr) {
        base::log(base::log_level::error, "mpiv_finalize: called from a ULT or worker thread");
        return status::deadlock;
    }
    std::uint64_t live = 0;
    for (auto &w : rt->workers_) {
        live += w->live();
    }
    if (live > 0) {
        std::string ids;
        for (auto &w : rt->workers_) {
            for (std::uint32_t id : w->live_ids(8)) {
                ids += " " + std::to_string(w->id()) + ":" + std::to_string(id);
            }
        }
        base::log(base::log_level::error,
                  "mpiv_finalize: %llu ULTs are still alive (worker:id%s%s); join them first",
                  static_cast<unsigned long long>(live), ids.c_str(), live > 8 ? " ..." : "");
        return status::busy;
    }
    instance_.store(nullptr, std::memory_order_relaxed);
    g_refcount = 0;
    delete rt;
    return status::ok;
}

runtime::~runtime()
{
    for (auto &w : workers_) {
        w->stop();
    }
    workers_.clear();
    stacks_.reset();
    if (topo_ != nullptr) {
        hwloc_topology_destroy(topo_);
    }
}

namespace {

/// The cache above PU @p pu that @p better prefers among its ancestors, or null.
template <class Better> hwloc_obj_t cache_above(hwloc_topology_t topo, unsigned pu, Better better)
{
    hwloc_obj_t found = nullptr;
    for (hwloc_obj_t o = hwloc_get_pu_obj_by_os_index(topo, pu); o != nullptr; o = o->parent) {
        if (hwloc_obj_type_is_cache(o->type) && o->attr != nullptr && o->attr->cache.size != 0 &&
            (found == nullptr || better(o, found))) {
            found = o;
        }
    }
    return found;
}

/// A worker's share of @p cache: its size divided among the workers placed under it
/// (@p worker_pus: the PU of each worker), which fill it together.
std::uint64_t cache_share(hwloc_obj_t cache, const std::vector<unsigned> &worker_pus)
{
    std::uint64_t sharing = 0;
    for (const unsigned pu : worker_pus) {
        sharing += hwloc_bitmap_isset(cache->cpuset, pu) != 0 ? 1 : 0;
    }
    return cache->attr->cache.size / std::max<std::uint64_t>(sharing, 1);
}

/// The default of mpiv_params_t::scratch_ults for worker @p w: its share of its last-level
/// cache (the largest above its PU) / 8 KiB. Measured with ult_pingpong, one worker per
/// process, on a 32 MiB cache (bench/README.md, "The scratch stack"): the scratch stack
/// changed nothing up to 1,024 ULTs, lost 3 % at 2,048 and gained from 4,096 on, where
/// the ULTs' stacks outgrow the cache.
std::uint32_t default_scratch_ults(hwloc_topology_t topo, const std::vector<unsigned> &worker_pus,
                                   std::size_t w)
{
    constexpr std::uint32_t k_without_cache_info = 4096;
    const hwloc_obj_t llc = cache_above(topo, worker_pus[w], [](hwloc_obj_t a, hwloc_obj_t b) {
        return a->attr->cache.size > b->attr->cache.size;
    });
    if (llc == nullptr) {
        return k_without_cache_info;
    }
    return static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>(cache_share(llc, worker_pus) / (8u << 10), 64, UINT32_MAX));
}

/// The default of mpiv_params_t::prefetch_ults for worker @p w: its share of its level-2
/// cache (the closest above its PU of level 2 or more, when hwloc knows no level 2) /
/// 2 KiB, the span of a ULT blocked in a receive: from there on the resumed ULTs' frames
/// no longer stay in the cache close to the core. Measured with ult_pingpong, one worker
/// per process, 1 MiB level-2 caches (bench/README.md, "Prefetching the next ULTs'
/// stacks"): prefetching always cost 2 % at 16 and 64 ULTs and nothing at 256; from the
/// default, 512, it gained 10 % at 512 and 1,024 ULTs and more beyond.
std::uint32_t default_prefetch_ults(hwloc_topology_t topo, const std::vector<unsigned> &worker_pus,
                                    std::size_t w)
{
    constexpr std::uint32_t k_without_cache_info = 256;
    const hwloc_obj_t l2 = cache_above(topo, worker_pus[w], [](hwloc_obj_t a, hwloc_obj_t b) {
        // The lowest level from 2 up (a level-1 cache holds far less than a stack each).
        const unsigned da = a->attr->cache.depth, db = b->attr->cache.depth;
        return da >= 2 && (db < 2 || da < db);
    });
    if (l2 == nullptr || l2->attr->cache.depth < 2) {
        return k_without_cache_info;
    }
    return static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>(cache_share(l2, worker_pus) / (2u << 10), 64, UINT32_MAX));
}

/// The verbose line's words on a worker's scratch-stack and prefetch thresholds.
std::string threshold_text(std::uint32_t scratch_ults, std::uint32_t prefetch_ults)
{
    std::string text = scratch_ults == UINT32_MAX
                           ? " (no scratch stack"
                           : " (scratch stack from " + std::to_string(scratch_ults) + " live ULTs";
    return text + (prefetch_ults == UINT32_MAX
                       ? ", no stack prefetch)"
                       : ", stack prefetch from " + std::to_string(prefetch_ults) + " live ULTs)");
}

} // namespace

status runtime::setup(const mpiv_params_t *p)
{
    const std::uint64_t mask = p != nullptr ? p->field_mask : 0;
    std::size_t stack_size = std::size_t{64} << 10;
    std::uint32_t max_ults = k_max_ults;
    mpiv_guard_pages_t guards = MPIV_GUARD_PAGES_AUTO;
    unsigned num_workers = 0;
    if (mask & MPIV_PARAM_FIELD_STACK_SIZE) {
        if (p->stack_size < k_min_stack || p->stack_size > (std::size_t{1} << 30)) {
            base::log(base::log_level::error, "mpiv_init: stack_size %zu is outside [16 KiB, 1 GiB]",
                      p->stack_size);
            return status::param;
        }
        stack_size = p->stack_size;
    }
    if (mask & MPIV_PARAM_FIELD_MAX_ULTS) {
        if (p->max_ults_per_worker < k_min_ults || p->max_ults_per_worker > k_max_ults) {
            base::log(base::log_level::error, "mpiv_init: max_ults_per_worker %u is outside [%u, %u]",
                      p->max_ults_per_worker, k_min_ults, k_max_ults);
            return status::param;
        }
        max_ults = p->max_ults_per_worker;
    }
    if (mask & MPIV_PARAM_FIELD_GUARD_PAGES) {
        // A C caller may store any int in the enum: read it as an int (in C++ an
        // out-of-range enumerator value cannot be loaded).
        int raw = 0;
        static_assert(sizeof(raw) == sizeof(p->guard_pages), "C enums are int-sized");
        std::memcpy(&raw, &p->guard_pages, sizeof(raw));
        if (raw != MPIV_GUARD_PAGES_AUTO && raw != MPIV_GUARD_PAGES_ALWAYS && raw != MPIV_GUARD_PAGES_NEVER) {
            base::log(base::log_level::error, "mpiv_init: guard_pages %d is not a mpiv_guard_pages_t", raw);
            return status::param;
        }
        guards = static_cast<mpiv_guard_pages_t>(raw);
    }
    const bool scratch_set = (mask & MPIV_PARAM_FIELD_SCRATCH_ULTS) != 0;
    const std::uint32_t scratch_ults = scratch_set ? p->scratch_ults : 0;
    const bool prefetch_set = (mask & MPIV_PARAM_FIELD_PREFETCH_ULTS) != 0;
    const std::uint32_t prefetch_ults = prefetch_set ? p->prefetch_ults : 0;
    if (mask & MPIV_PARAM_FIELD_NUM_WORKERS) {
        if (p->num_workers < 1 || p->num_workers > k_max_workers) {
            base::log(base::log_level::error, "mpiv_init: num_workers %u is outside [1, %u]",
                      p->num_workers, k_max_workers);
            return status::param;
        }
        num_workers = p->num_workers;
    }

    if (hwloc_topology_init(&topo_) != 0 || hwloc_topology_load(topo_) != 0) {
        base::log(base::log_level::error, "mpiv_init: hwloc cannot load the topology");
        return status::topology;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == nullptr) {
        return status::nomem;
    }
    status st = status::ok;
    if (mask & MPIV_PARAM_FIELD_CPUSET) {
        if (p->cpuset == nullptr || hwloc_bitmap_list_sscanf(set, p->cpuset) != 0) {
            base::log(base::log_level::error, "mpiv_init: cpuset '%s' is not a PU list such as \"0-3,8\"",
                      p->cpuset != nullptr ? p->cpuset : "(null)");
            st = status::param;
        } else {
            hwloc_bitmap_and(set, set, hwloc_topology_get_allowed_cpuset(topo_));
        }
    } else if (hwloc_get_cpubind(topo_, set, HWLOC_CPUBIND_PROCESS) != 0) {
        hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(topo_));
    }
    if (st == status::ok && hwloc_bitmap_iszero(set)) {
        base::log(base::log_level::error, "mpiv_init: the cpuset holds no usable PU");
        st = status::topology;
    }
    std::vector<unsigned> pus;
    if (st == status::ok) {
        unsigned pu;
        hwloc_bitmap_foreach_begin(pu, set) { pus.push_back(pu); }
        hwloc_bitmap_foreach_end();
    }
    hwloc_bitmap_free(set);
    if (st != status::ok) {
        return st;
    }
    if (num_workers == 0) {
        num_workers = static_cast<unsigned>(std::min<std::size_t>(pus.size(), k_max_workers));
    }

    stacks_.reset(new (std::nothrow) stack_pool(stack_size, guards));
    if (!stacks_) {
        return status::nomem;
    }
    std::vector<unsigned> worker_pus(num_workers);
    for (unsigned i = 0; i < num_workers; ++i) {
        worker_pus[i] = pus[i % pus.size()];
    }
    hwloc_bitmap_t one = hwloc_bitmap_alloc();
    for (unsigned i = 0; i < num_workers; ++i) {
        hwloc_bitmap_only(one, worker_pus[i]);
        workers_.emplace_back(new (std::nothrow) worker(
            i, max_ults, *stacks_, topo_, one,
            scratch_set ? scratch_ults : default_scratch_ults(topo_, worker_pus, i),
            prefetch_set ? prefetch_ults : default_prefetch_ults(topo_, worker_pus, i)));
        if (!workers_.back()) {
            st = status::nomem;
            break;
        }
    }
    hwloc_bitmap_free(one);
    for (std::size_t i = 0; st == status::ok && i < workers_.size(); ++i) {
        st = workers_[i]->start();
    }
    if (st == status::ok) {
        // The placement, for the verbose output of the library above (Open MPI's level 2).
        std::string where;
        unsigned listed = 0;
        for (; listed < num_workers && where.size() < 400; ++listed) {
            where += (listed != 0 ? ", " : "") + std::string("worker ") +
                     std::to_string(listed) + " on PU " + std::to_string(pus[listed % pus.size()]) +
                     threshold_text(workers_[listed]->scratch_ults(),
                                    workers_[listed]->prefetch_ults());
        }
        base::log(base::log_level::info, "mpiv_init: %u ULT workers: %s%s", num_workers,
                  where.c_str(), listed < num_workers ? ", ..." : "");
    }
    return st;
}

status runtime::spawn(mpiv_ult_func_t func, void *arg, int worker_hint, bool detached,
                      std::uint64_t &handle)
{
    unsigned w;
    if (worker_hint == MPIV_WORKER_ANY) {
        worker *self = worker::current();
        w = self != nullptr ? self->id()
                            : next_worker_.fetch_add(1, std::memory_order_relaxed) % num_workers();
    } else if (worker_hint < 0 || static_cast<unsigned>(worker_hint) >= num_workers()) {
        base::log(base::log_level::warn, "spawn: worker %d is outside [0, %u) and not MPIV_WORKER_ANY",
                  worker_hint, num_workers());
        return status::invalid_arg;
    } else {
        w = static_cast<unsigned>(worker_hint);
    }
    return workers_[w]->spawn(func, arg, detached, handle);
}

status runtime::join(std::uint64_t handle, void **ret)
{
    const unsigned w = worker::handle_worker(handle);
    if (handle == MPIV_ULT_NULL || w >= num_workers()) {
        base::log(base::log_level::warn, "join: handle %#llx was never issued",
                  static_cast<unsigned long long>(handle));
        return status::invalid_handle;
    }
    return workers_[w]->join(handle, ret);
}

} // namespace mpiv::sched
