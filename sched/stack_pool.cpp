#include "sched/stack_pool.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include "base/log.hpp"

namespace mpiv::sched {
namespace {

constexpr std::size_t k_chunk_bytes = std::size_t{16} << 20;

std::size_t max_map_count()
{
    std::size_t n = 65530;
    if (FILE *f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
        unsigned long v = 0;
        if (std::fscanf(f, "%lu", &v) == 1 && v > 0) {
            n = v;
        }
        std::fclose(f);
    }
    return n;
}

} // namespace

stack_pool::stack_pool(std::size_t stack_size, mpiv_guard_pages_t guards)
    : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))),
      stack_size_((stack_size + page_ - 1) / page_ * page_),
      guard_policy_(guards),
      map_budget_(guards == MPIV_GUARD_PAGES_ALWAYS ? max_map_count() * 3 / 4 : max_map_count() / 4)
{
}

stack_pool::~stack_pool()
{
    for (auto &c : chunks_) {
        munmap(c.first, c.second);
    }
}

std::size_t stack_pool::guarded() const
{
    std::lock_guard<std::mutex> g(mutex_);
    return guarded_;
}

status stack_pool::grow()
{
    const std::size_t slot = stack_size_ + page_;
    const std::size_t bytes = std::max(k_chunk_bytes / slot, std::size_t{1}) * slot;
    if (mappings_ + 1 > map_budget_ && guard_policy_ == MPIV_GUARD_PAGES_ALWAYS) {
        base::log(base::log_level::error, "ULT stacks: memory-mapping budget (%zu) used up", map_budget_);
        return status::nomem;
    }
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
        base::log(base::log_level::error, "ULT stacks: mmap of %zu bytes failed: %s", bytes,
                  std::strerror(errno));
        return status::nomem;
    }
    chunks_.emplace_back(p, bytes);
    ++mappings_;
    carve_ = static_cast<char *>(p);
    carve_end_ = carve_ + bytes;
    return status::ok;
}

status stack_pool::get(stack_region &out)
{
    std::lock_guard<std::mutex> g(mutex_);
    if (!free_.empty()) {
        out = free_.back();
        free_.pop_back();
        return status::ok;
    }
    if (carve_ == carve_end_) {
        if (status s = grow(); s != status::ok) {
            return s;
        }
    }
    // Each slot is [guard page][stack]; the guard page is either PROT_NONE or, without a
    // guard, simply unused address space (never touched, so never resident).
    const bool want_guard = guard_policy_ != MPIV_GUARD_PAGES_NEVER;
    const bool budget_left = mappings_ + 2 <= map_budget_;
    if (guard_policy_ == MPIV_GUARD_PAGES_ALWAYS && !budget_left) {
        base::log(base::log_level::error,
                  "ULT stacks: guard pages requested for every stack, but the mapping budget "
                  "(%zu, from vm.max_map_count) is used up", map_budget_);
        return status::nomem;
    }
    char *slot = carve_;
    carve_ += page_ + stack_size_;
    if (want_guard && budget_left) {
        if (mprotect(slot, page_, PROT_NONE) == 0) {
            mappings_ += 2;
            ++guarded_;
        } else if (guard_policy_ == MPIV_GUARD_PAGES_ALWAYS) {
            base::log(base::log_level::error, "ULT stacks: guard page: mprotect failed: %s",
                      std::strerror(errno));
            return status::nomem;
        }
    }
    out = stack_region{slot + page_, stack_size_};
    return status::ok;
}

void stack_pool::put(const stack_region &s)
{
    std::lock_guard<std::mutex> g(mutex_);
    free_.push_back(s);
}

} // namespace mpiv::sched
