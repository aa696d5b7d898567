// What the runtime's cache-derived defaults should be, read independently from hwloc: the
// tests of scratch_ults and prefetch_ults compare each worker's value with these.
#pragma once

#include <hwloc.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mpiv::test {

/// Which cache above a worker's PU a default comes from.
enum class cache_pick {
    last_level, ///< the largest
    level2,     ///< the lowest level from 2 up
};

/// The default for worker @p w of @p n: the picked cache's size, divided among the workers
/// placed under it, / @p per_ult bytes, at least 64; @p without_info when hwloc knows no
/// such cache. Worker i runs on PU i mod (PUs of the process binding), in the binding's
/// order. 0 when hwloc cannot load the topology.
inline std::uint32_t expected_cache_default(unsigned n, unsigned w, cache_pick pick,
                                            std::uint64_t per_ult, std::uint32_t without_info)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
        return 0;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0) {
        hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(topo));
    }
    std::vector<unsigned> pus;
    for (int pu = hwloc_bitmap_first(set); pu >= 0; pu = hwloc_bitmap_next(set, pu)) {
        pus.push_back(static_cast<unsigned>(pu));
    }
    hwloc_bitmap_free(set);
    std::uint64_t size = 0;
    unsigned depth = 0;
    hwloc_const_bitmap_t under = nullptr;
    for (hwloc_obj_t o = hwloc_get_pu_obj_by_os_index(topo, pus[w % pus.size()]); o != nullptr;
         o = o->parent) {
        if (!hwloc_obj_type_is_cache(o->type) || o->attr->cache.size == 0) {
            continue;
        }
        const bool better = pick == cache_pick::last_level
                                ? o->attr->cache.size > size
                                : o->attr->cache.depth >= 2 && (depth < 2 || o->attr->cache.depth < depth);
        if (under == nullptr || better) {
            size = o->attr->cache.size;
            depth = o->attr->cache.depth;
            under = o->cpuset;
        }
    }
    unsigned sharing = 0;
    for (unsigned i = 0; i < n && under != nullptr; ++i) {
        sharing += hwloc_bitmap_isset(under, pus[i % pus.size()]) != 0 ? 1 : 0;
    }
    hwloc_topology_destroy(topo);
    if (under == nullptr || (pick == cache_pick::level2 && depth < 2)) {
        return without_info;
    }
    return static_cast<std::uint32_t>(std::max<std::uint64_t>(size / sharing / per_ult, 64));
}

} // namespace mpiv::test
