// stack_pool: memory for ULT stacks, carved from large mappings and reused.
//
// Design: stacks are carved from chunks of about 16 MiB mapped with MAP_NORESERVE, so
// a million stacks need about a thousand mappings, not a million (vm.max_map_count is
// 65,530 by default). A guard page below a stack costs two more mappings (mprotect
// splits the chunk's mapping), so guards are placed only within a mapping budget: with
// guard policy AUTO, while mpiv's mappings stay under a quarter of vm.max_map_count,
// then stacks come without guards; with ALWAYS, get() fails with nomem instead.
// Freed stacks go to a LIFO free list and are handed out again first (their pages are
// already resident and cached). Memory is returned to the system only by the destructor.
// Thread-safe: one mutex; callers keep per-worker caches in front of it (see worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include <mpiv/mpiv.h>

#include "base/status.hpp"

namespace mpiv::sched {

struct stack_region {
    void *lo = nullptr;    ///< lowest usable address
    std::size_t size = 0;  ///< usable bytes
};

class stack_pool {
  public:
    /// @param stack_size usable bytes per stack (rounded up to pages)
    stack_pool(std::size_t stack_size, mpiv_guard_pages_t guards);
    ~stack_pool();
    stack_pool(const stack_pool &) = delete;
    stack_pool &operator=(const stack_pool &) = delete;

    [[nodiscard]] status get(stack_region &out);
    void put(const stack_region &s);

    std::size_t stack_size() const noexcept { return stack_size_; }
    /// Stacks handed out so far with a guard page (for tests and diagnostics).
    std::size_t guarded() const;

  private:
    [[nodiscard]] status grow();

    const std::size_t page_;
    const std::size_t stack_size_;
    const mpiv_guard_pages_t guard_policy_;
    const std::size_t map_budget_;
    mutable std::mutex mutex_;
    std::vector<stack_region> free_;                       ///< LIFO
    std::vector<std::pair<void *, std::size_t>> chunks_;   ///< mappings to unmap
    char *carve_ = nullptr;      ///< next unused byte of the newest chunk
    char *carve_end_ = nullptr;
    std::size_t mappings_ = 0;   ///< chunks + 2 per guard page
    std::size_t guarded_ = 0;
};

} // namespace mpiv::sched
