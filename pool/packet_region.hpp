// packet_region: the shared half of a packet pool (the packets and the shared free stack,
// all in one caller-supplied memory region) and a per-process view of it.
//
// Layout, as offsets from the region base (base aligned to k_false_sharing; a shared-memory
// segment is page aligned). Everything is position-independent (indexes and offsets, no
// pointers), so several processes may map the region at different addresses:
//   0               region_header: magic and geometry (read-only once formatted), then,
//                   on its own line, the shared stack's tagged head (index_stack)
//   links_offset    one 32-bit stack link per packet
//   states_offset   one 32-bit state per packet: k_state_free (in a private deque or on
//                   the shared stack) or k_state_out (handed out by a get)
//   packets_offset  packet_count packets of packet_size bytes (header + payload), each
//                   k_cacheline aligned; the pool never writes inside a packet
// Every array starts on a k_false_sharing boundary.
//
// What must be shared for cross-process use: the whole region. What is per process: the
// packet_region object (pointers into this process's mapping) and, in packet_pool, the
// private deques. The owner formats the region; any other process attaches to it and may
// then return packets to the owner with put() (the receiver returns packets to their
// owner, DESIGN.md), or take free ones with get(): both only touch the shared stack and
// the per-packet states.
//
// Invariants: each packet is in exactly one place: handed out (state out), on the shared
// stack, or in one private deque of the owner (state free for both). A put accepts only a
// pointer to the start of a packet of this region whose state is out; the state exchange
// makes a second put of the same packet fail cleanly, unless the packet was handed out
// again in between (that misuse is not detectable without a token held by the caller).
//
// Ordering: the stack head carries the packet contents (release push, acquire pop; see
// index_stack). The states need no ordering of their own: the structures that move a
// packet (stack head, deque lock) already order a get's store after the previous put's
// exchange. format() publishes the region by storing the magic last (release); attach()
// loads it with acquire.
//
// Memory: 256 bytes of header, 8 bytes per packet of metadata (links + states, each array
// rounded up to 128 bytes), plus packet_count * packet_size.
//
// When not to use: alone as a pool for many threads of one process: every get and put
// writes the stack head (use packet_pool, which fronts it with per-worker deques). It does
// not survive a process dying while it holds a packet (the packet is lost to the pool).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include "base/cacheline.hpp"
#include "base/log.hpp"
#include "base/status.hpp"
#include "pool/index_stack.hpp"

namespace mpiv::pool {

template <template <class> class Atom> class packet_pool;

namespace detail {

/// Per-packet state values (0 marks memory that was never formatted).
constexpr std::uint32_t k_state_free = 1;
constexpr std::uint32_t k_state_out = 2;

/// "mpivpkt" plus a layout version byte: a region formatted by an incompatible build is
/// refused by attach().
constexpr std::uint64_t k_region_magic = 0x6d70697670b74b01ull;

/// The first 256 bytes of a region. Shared between processes.
template <template <class> class Atom> struct region_header {
    Atom<std::uint64_t> magic;   // k_region_magic once formatted; stored last
    std::uint32_t packet_size;   // bytes per packet
    std::uint32_t packet_count;  // packets in the region
    std::uint64_t links_offset;  // offsets from the region base
    std::uint64_t states_offset;
    std::uint64_t packets_offset;
    std::uint64_t region_bytes;  // bytes the layout needs (the mapping may be larger)
    // Written by every shared get and put, in every process: keep it off the read-only
    // geometry line.
    alignas(k_false_sharing) Atom<std::uint64_t> stack_head;
};

static_assert(std::is_standard_layout_v<region_header<std::atomic>>,
              "the shared header must be standard layout");
static_assert(offsetof(region_header<std::atomic>, stack_head) == k_false_sharing,
              "the stack head must start the second line pair of the header");
static_assert(sizeof(region_header<std::atomic>) == 2 * k_false_sharing,
              "the header takes exactly two 128-byte blocks");

} // namespace detail

template <template <class> class Atom = std::atomic> class packet_region {
    static_assert(sizeof(Atom<std::uint32_t>) == sizeof(std::uint32_t) &&
                      sizeof(Atom<std::uint64_t>) == sizeof(std::uint64_t),
                  "the shared layout stores atomics as plain-sized words");

  public:
    /// Largest packet_count (k_nil is reserved).
    static constexpr std::uint32_t k_max_packets = k_nil - 1;

    packet_region() = default;
    packet_region(const packet_region &) = delete;
    packet_region &operator=(const packet_region &) = delete;

    /// @brief Bytes a region needs for the given geometry.
    /// @return the size, or 0 when the geometry is invalid (packet_size not a non-zero
    ///         multiple of k_cacheline, packet_count 0 or > k_max_packets, or overflow)
    /// @context thread-safe, pure
    static std::size_t bytes_for(std::uint32_t packet_size, std::uint32_t packet_count) noexcept
    {
        layout l;
        return compute_layout(packet_size, packet_count, l) ? l.region_bytes : 0;
    }

    /// @brief Format a region (owner process): write the header, mark every packet free and
    /// put packets first_shared .. packet_count-1 on the shared stack (first_shared on top).
    /// Packets 0 .. first_shared-1 stay with the caller, free but on no stack: packet_pool
    /// places them in its private deques.
    /// @param[in] base the region, aligned to k_false_sharing
    /// @param[in] bytes size of the region, at least bytes_for(packet_size, packet_count)
    /// @param[in] packet_size bytes per packet, a multiple of k_cacheline
    /// @param[in] packet_count number of packets, 1 .. k_max_packets
    /// @param[in] first_shared index of the first packet placed on the shared stack
    /// @return status::ok or status::invalid_arg (logged)
    /// @context not thread-safe; no process may use the region during the call
    [[nodiscard]] status format(void *base, std::size_t bytes, std::uint32_t packet_size,
                                std::uint32_t packet_count, std::uint32_t first_shared) noexcept
    {
        layout l;
        if (!compute_layout(packet_size, packet_count, l) || first_shared > packet_count) {
            base::log(base::log_level::error,
                      "pool: invalid geometry (packet_size %u, packet_count %u, first shared %u)",
                      packet_size, packet_count, first_shared);
            return status::invalid_arg;
        }
        if (!region_fits(base, bytes, l.region_bytes)) {
            return status::invalid_arg;
        }
        auto *const bytes_base = static_cast<std::byte *>(base);
        auto *const header = new (bytes_base) detail::region_header<Atom>;
        // Clear any magic left by an earlier format: attach() must not accept this region
        // before the release store below.
        header->magic.store(0, std::memory_order_relaxed);
        header->packet_size = packet_size;
        header->packet_count = packet_count;
        header->links_offset = l.links_offset;
        header->states_offset = l.states_offset;
        header->packets_offset = l.packets_offset;
        header->region_bytes = l.region_bytes;
        for (std::uint32_t i = 0; i < packet_count; ++i) {
            const std::uint64_t at = std::uint64_t{i} * sizeof(Atom<std::uint32_t>);
            auto *const link = new (bytes_base + l.links_offset + at) Atom<std::uint32_t>;
            auto *const state = new (bytes_base + l.states_offset + at) Atom<std::uint32_t>;
            link->store(k_nil, std::memory_order_relaxed);
            state->store(detail::k_state_free, std::memory_order_relaxed);
        }
        bind(bytes_base, header);
        stack_.format();
        for (std::uint32_t i = packet_count; i > first_shared; --i) {
            stack_.push(i - 1);
        }
        // sync: release; pairs with the acquire load in attach(): a process that sees the
        // magic sees the formatted header, links, states and stack.
        header->magic.store(detail::k_region_magic, std::memory_order_release);
        return status::ok;
    }

    /// @brief Attach to a region formatted by another process (or another mapping).
    /// @param[in] base this process's mapping of the region, aligned to k_false_sharing
    /// @param[in] bytes size of the mapping
    /// @return status::ok, or status::invalid_arg (logged) when the mapping is too small,
    ///         misaligned, not formatted or formatted by an incompatible layout
    /// @context not thread-safe for this view; any number of views may attach
    [[nodiscard]] status attach(void *base, std::size_t bytes) noexcept
    {
        if (!region_fits(base, bytes, sizeof(detail::region_header<Atom>))) {
            return status::invalid_arg;
        }
        auto *const bytes_base = static_cast<std::byte *>(base);
        auto *const header = std::launder(reinterpret_cast<detail::region_header<Atom> *>(base));
        // sync: acquire; pairs with the release store at the end of format().
        if (header->magic.load(std::memory_order_acquire) != detail::k_region_magic) {
            base::log(base::log_level::error, "pool: region %p is not a formatted packet region",
                      base);
            return status::invalid_arg;
        }
        layout l;
        if (!compute_layout(header->packet_size, header->packet_count, l) ||
            l.links_offset != header->links_offset || l.states_offset != header->states_offset ||
            l.packets_offset != header->packets_offset || l.region_bytes != header->region_bytes) {
            base::log(base::log_level::error, "pool: region %p has an incompatible layout", base);
            return status::invalid_arg;
        }
        if (!region_fits(base, bytes, l.region_bytes)) {
            return status::invalid_arg;
        }
        bind(bytes_base, header);
        return status::ok;
    }

    /// @brief Take a free packet from the shared stack.
    /// @param[out] packet_p the packet (in this process's mapping), written only on success
    /// @return status::ok, status::retry_nopacket (the stack is empty), or
    ///         status::not_initialized (logged: the view was never formatted or attached)
    /// @context thread-safe, lock-free, any process; never yields
    [[nodiscard]] status get(void *&packet_p) noexcept
    {
        if (base_ == nullptr) {
            base::log(base::log_level::error, "pool: region used before format or attach");
            return status::not_initialized;
        }
        std::uint32_t index;
        if (stack_.pop(index) != status::ok) {
            return status::retry_nopacket;
        }
        mark_out(index);
        packet_p = packet(index);
        return status::ok;
    }

    /// @brief Return a packet to the shared stack: the return path any thread of any process
    /// attached to the region may take.
    /// @param[in] packet start of a packet of this region, in this process's mapping
    /// @return status::ok; status::invalid_handle (logged) when @p packet is not the start
    ///         of a packet of this region; status::invalid_arg (logged) when it is already
    ///         free (put twice)
    /// @context thread-safe, lock-free, any process; never yields
    [[nodiscard]] status put(void *packet) noexcept
    {
        std::uint32_t index;
        status s = index_of(packet, index);
        if (s == status::ok) {
            s = mark_free(index);
        }
        if (s == status::ok) {
            stack_.push(index);
        }
        return s;
    }

    /// @brief Offset of a packet from the region base: the same in every process, so it can
    /// travel in a message descriptor.
    /// @param[out] offset_p written only on success
    /// @return status::ok or status::invalid_handle (logged)
    /// @context thread-safe, pure
    [[nodiscard]] status offset_of(const void *packet, std::uint64_t &offset_p) const noexcept
    {
        std::uint32_t index;
        const status s = index_of(packet, index);
        if (s == status::ok) {
            offset_p = packets_offset_ + std::uint64_t{index} * packet_size_;
        }
        return s;
    }

    /// @brief The packet at @p offset (from offset_of(), possibly in another process).
    /// @param[out] packet_p written only on success
    /// @return status::ok or status::invalid_handle (logged) when @p offset is not the
    ///         offset of a packet
    /// @context thread-safe, pure
    [[nodiscard]] status packet_at(std::uint64_t offset, void *&packet_p) const noexcept
    {
        const std::uint64_t delta = offset - packets_offset_;
        if (offset < packets_offset_ || delta >= packets_bytes_ || delta % packet_size_ != 0) {
            base::log(base::log_level::error, "pool: offset %llu is not a packet of this region",
                      static_cast<unsigned long long>(offset));
            return status::invalid_handle;
        }
        packet_p = base_ + offset;
        return status::ok;
    }

    std::uint32_t packet_size() const noexcept { return packet_size_; }
    std::uint32_t packet_count() const noexcept { return packet_count_; }

  private:
    template <template <class> class> friend class packet_pool;
    friend struct packet_region_test_access;

    struct layout {
        std::uint64_t links_offset;
        std::uint64_t states_offset;
        std::uint64_t packets_offset;
        std::uint64_t region_bytes;
    };

    static constexpr std::uint64_t round_up(std::uint64_t n) noexcept
    {
        return (n + k_false_sharing - 1) / k_false_sharing * k_false_sharing;
    }

    static bool compute_layout(std::uint32_t packet_size, std::uint32_t packet_count,
                               layout &l) noexcept
    {
        if (packet_size == 0 || packet_size % k_cacheline != 0 || packet_count == 0 ||
            packet_count > k_max_packets) {
            return false;
        }
        const std::uint64_t meta = round_up(std::uint64_t{packet_count} * sizeof(std::uint32_t));
        l.links_offset = sizeof(detail::region_header<Atom>);
        l.states_offset = l.links_offset + meta;
        l.packets_offset = l.states_offset + meta;
        // Both factors are < 2^32, so the product fits; the sum may not fit size_t.
        const std::uint64_t packets = std::uint64_t{packet_count} * packet_size;
        if (packets > SIZE_MAX - l.packets_offset) {
            return false;
        }
        l.region_bytes = l.packets_offset + packets;
        return true;
    }

    static bool region_fits(const void *base, std::size_t bytes, std::uint64_t needed) noexcept
    {
        if (base == nullptr || reinterpret_cast<std::uintptr_t>(base) % k_false_sharing != 0) {
            base::log(base::log_level::error, "pool: region %p is not aligned to %zu bytes", base,
                      k_false_sharing);
            return false;
        }
        if (bytes < needed) {
            base::log(base::log_level::error, "pool: region of %zu bytes, %llu needed", bytes,
                      static_cast<unsigned long long>(needed));
            return false;
        }
        return true;
    }

    void bind(std::byte *base, detail::region_header<Atom> *header) noexcept
    {
        base_ = base;
        packet_size_ = header->packet_size;
        packet_count_ = header->packet_count;
        packets_offset_ = header->packets_offset;
        packets_bytes_ = std::uint64_t{packet_count_} * packet_size_;
        packets_ = base + header->packets_offset;
        states_ = std::launder(reinterpret_cast<Atom<std::uint32_t> *>(base + header->states_offset));
        stack_.bind(&header->stack_head,
                    std::launder(reinterpret_cast<Atom<std::uint32_t> *>(base + header->links_offset)),
                    packet_count_);
    }

    /// Index of the packet starting at @p packet; logs and fails for anything else.
    [[nodiscard]] status index_of(const void *packet, std::uint32_t &index_p) const noexcept
    {
        const auto addr = reinterpret_cast<std::uintptr_t>(packet);
        const auto first = reinterpret_cast<std::uintptr_t>(packets_);
        if (addr < first || addr - first >= packets_bytes_) {
            base::log(base::log_level::error, "pool: %p is not a packet of this pool", packet);
            return status::invalid_handle;
        }
        const std::uint64_t delta = addr - first;
        const std::uint64_t index = delta / packet_size_;
        if (index * packet_size_ != delta) {
            base::log(base::log_level::error, "pool: %p is not the start of a packet", packet);
            return status::invalid_handle;
        }
        index_p = static_cast<std::uint32_t>(index);
        return status::ok;
    }

    void *packet(std::uint32_t index) const noexcept
    {
        return packets_ + std::uint64_t{index} * packet_size_;
    }

    /// A get took @p index out of a structure: it now belongs to the caller.
    void mark_out(std::uint32_t index) noexcept
    {
        states_[index].store(detail::k_state_out, std::memory_order_relaxed);
    }

    /// A put gives @p index back; fails if it was not handed out (double put).
    [[nodiscard]] status mark_free(std::uint32_t index) noexcept
    {
        if (states_[index].exchange(detail::k_state_free, std::memory_order_relaxed) !=
            detail::k_state_out) {
            base::log(base::log_level::error, "pool: packet %u was put twice", index);
            return status::invalid_arg;
        }
        return status::ok;
    }

    std::byte *base_ = nullptr;           // this process's mapping of the region
    std::byte *packets_ = nullptr;        // base_ + packets_offset_
    Atom<std::uint32_t> *states_ = nullptr;
    std::uint64_t packets_offset_ = 0;
    std::uint64_t packets_bytes_ = 0;     // packet_count_ * packet_size_
    std::uint32_t packet_size_ = 0;
    std::uint32_t packet_count_ = 0;
    index_stack<Atom> stack_;             // view of the shared free stack
};

} // namespace mpiv::pool
