// token_table: names for this process's sends that wait for an ACK or FIN, safe to hand
// to other processes.
//
// A send that waits for its receiver's ACK (synchronous) or FIN (rendezvous) travels with
// a token, which the receiver echoes back; the token must let a faulty or malicious peer
// do nothing worse than be detected. So it is not an address: it is (generation, index)
// into this table, whose entry holds the send. redeem() accepts a token only while its
// entry is live with that generation, exactly once; anything else (a forged, stale or
// repeated token) is refused.
//
// Design:
// - Entries live in chunks of k_chunk, allocated on demand and kept until the table is
//   destroyed (an index stays valid memory for ever: lookups need no lock). Chunk pointers
//   are published with release stores and read with acquire loads.
// - Each entry has a 64-bit state word: generation << 1 | live. issue() takes a free index
//   (free list under a mutex, or the next never-used one), stores the send, then publishes
//   state = (generation + 1) << 1 | 1 with release. redeem() CASes state from
//   token_generation << 1 | 1 to token_generation << 1 (acquire: it then reads the send),
//   and returns the index to the free list. peek() reads a live entry without taking it.
// - Tokens are never 0: generations start at 1.
// - Memory: 16 bytes per entry ever live at once, in 4096-entry chunks (64 KiB each); at
//   most k_max_chunks chunks (4 Mi sends waiting at once; issue() fails beyond that).
// When not to use: for names that need no protection from other processes (a pointer is
// cheaper: one issue and one redeem cost a mutex each).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace mpiv::ep {

template <class T> class token_table {
  public:
    static constexpr std::uint32_t k_chunk = 4096;
    static constexpr std::uint32_t k_max_chunks = 1024;

    token_table() = default;
    ~token_table()
    {
        for (auto &c : chunks_) {
            delete[] c.load(std::memory_order_relaxed);
        }
    }
    token_table(const token_table &) = delete;
    token_table &operator=(const token_table &) = delete;

    /// A token for @p value; 0 when out of memory or entries (nothing issued).
    /// @context thread-safe
    std::uint64_t issue(T *value) noexcept
    {
        std::uint32_t index;
        {
            std::lock_guard<std::mutex> guard(mu_);
            if (!free_.empty()) {
                index = free_.back();
                free_.pop_back();
            } else {
                index = next_;
                const std::uint32_t c = index / k_chunk;
                if (c >= k_max_chunks) {
                    return 0;
                }
                if (chunks_[c].load(std::memory_order_relaxed) == nullptr) {
                    entry *fresh = new (std::nothrow) entry[k_chunk];
                    if (fresh == nullptr) {
                        return 0;
                    }
                    try {
                        free_.reserve(std::size_t{c + 1} * k_chunk); // redeem never allocates
                    } catch (const std::bad_alloc &) {
                        delete[] fresh;
                        return 0;
                    }
                    // sync: release; pairs with the acquire load in at(): a reader of the
                    // pointer sees the constructed entries.
                    chunks_[c].store(fresh, std::memory_order_release);
                }
                ++next_;
            }
        }
        entry &e = *at(index);
        const std::uint64_t generation = (e.state.load(std::memory_order_relaxed) >> 1) + 1;
        e.value = value;
        // sync: release; pairs with the acquire CAS in redeem() and load in peek(): a
        // holder of the token sees the value.
        e.state.store(generation << 1 | 1, std::memory_order_release);
        return generation << 32 | index;
    }

    /// The value of a live @p token, which stays live; nullptr for any other token.
    /// @context thread-safe; the caller must know that nobody redeems the token meanwhile
    T *peek(std::uint64_t token) const noexcept
    {
        const entry *e = lookup(token);
        // sync: acquire; pairs with the release store in issue().
        if (e == nullptr || e->state.load(std::memory_order_acquire) != live_state(token)) {
            return nullptr;
        }
        return e->value;
    }

    /// Take back a live @p token: its value, or nullptr when the token is not live (never
    /// issued, already redeemed, or of an older generation).
    /// @context thread-safe; lock-free until it returns the entry to the free list
    T *redeem(std::uint64_t token) noexcept
    {
        entry *e = lookup(token);
        if (e == nullptr) {
            return nullptr;
        }
        std::uint64_t expected = live_state(token);
        // sync: acquire; pairs with the release store in issue(): the value is visible.
        if (!e->state.compare_exchange_strong(expected, expected & ~std::uint64_t{1},
                                              std::memory_order_acquire,
                                              std::memory_order_relaxed)) {
            return nullptr;
        }
        T *value = e->value;
        std::lock_guard<std::mutex> guard(mu_);
        free_.push_back(static_cast<std::uint32_t>(token)); // capacity reserved in issue()
        return value;
    }

  private:
    struct entry {
        std::atomic<std::uint64_t> state{0}; // generation << 1 | live
        T *value = nullptr;
    };

    static std::uint64_t live_state(std::uint64_t token) noexcept
    {
        return (token >> 32) << 1 | 1;
    }

    entry *at(std::uint32_t index) const noexcept
    {
        // sync: acquire; pairs with the release store in issue().
        return chunks_[index / k_chunk].load(std::memory_order_acquire) + index % k_chunk;
    }

    entry *lookup(std::uint64_t token) const noexcept
    {
        const std::uint32_t index = static_cast<std::uint32_t>(token);
        if ((token >> 32) == 0 || index / k_chunk >= k_max_chunks) {
            return nullptr;
        }
        // sync: acquire; pairs with the release store in issue().
        entry *chunk = chunks_[index / k_chunk].load(std::memory_order_acquire);
        return chunk == nullptr ? nullptr : chunk + index % k_chunk;
    }

    std::mutex mu_;
    std::vector<std::uint32_t> free_; // mu_
    std::uint32_t next_ = 0;          // mu_: the lowest index never issued
    std::atomic<entry *> chunks_[k_max_chunks] = {};
};

} // namespace mpiv::ep
