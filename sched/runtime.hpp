// runtime: the process-wide scheduler instance behind mpiv_init()/mpiv_finalize().
//
// One instance per process, reference counted so the application and the Open MPI
// component can both initialize it. init/finalize serialize on a mutex; the instance
// pointer is published with release and read with acquire by every other entry point.
// Calls racing with the final mpiv_finalize() are the caller's error.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <hwloc.h>
#include <mpiv/mpiv.h>

#include "base/status.hpp"
#include "sched/stack_pool.hpp"
#include "sched/worker.hpp"

namespace mpiv::sched {

class runtime {
  public:
    static constexpr std::size_t k_min_stack = std::size_t{16} << 10;
    static constexpr std::uint32_t k_max_ults = 1u << 20;
    static constexpr std::uint32_t k_min_ults = 64;
    static constexpr unsigned k_max_workers = 4096;

    [[nodiscard]] static status init(const mpiv_params_t *params);
    [[nodiscard]] static status finalize();
    /// The running instance, or nullptr.
    static runtime *get() noexcept { return instance_.load(std::memory_order_acquire); }

    unsigned num_workers() const noexcept { return static_cast<unsigned>(workers_.size()); }
    worker &at(unsigned i) noexcept { return *workers_[i]; }
    /// Worker @p w of the running instance, or nullptr (no runtime, or no such worker):
    /// for tokens and handles that may outlive the runtime that issued them.
    static worker *find_worker(unsigned w) noexcept
    {
        runtime *rt = get();
        return rt != nullptr && w < rt->num_workers() ? &rt->at(w) : nullptr;
    }
    stack_pool &stacks() noexcept { return *stacks_; }

    [[nodiscard]] status spawn(mpiv_ult_func_t func, void *arg, int worker_hint, bool detached,
                               std::uint64_t &handle);
    [[nodiscard]] status join(std::uint64_t handle, void **ret);

    ~runtime();

  private:
    runtime() = default;
    [[nodiscard]] status setup(const mpiv_params_t *params);

    static std::atomic<runtime *> instance_;

    hwloc_topology_t topo_ = nullptr;
    std::unique_ptr<stack_pool> stacks_;
    std::vector<std::unique_ptr<worker>> workers_;
    alignas(k_false_sharing) std::atomic<std::uint32_t> next_worker_{0};
};

} // namespace mpiv::sched
