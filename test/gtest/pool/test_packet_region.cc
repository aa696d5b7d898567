// packet_region: the shared half of the pool, used through several mappings of the same
// memory (at different addresses) and from another process.
#include "pool/packet_region.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pool/packet_pool.hpp"
#include "test/gtest/pool/pool_test_util.hpp"

namespace {

using mpiv::status;
using mpiv::pool::packet_pool;
using mpiv::pool::packet_region;
using mpiv::pool::packet_region_test_access;
using mpiv::pool::pool_params;

constexpr std::uint32_t k_packet_size = 128;
constexpr std::uint32_t k_packets = 16;

// One memfd mapped twice: the same bytes at two addresses, as two processes would see a
// shared segment.
class double_mapping {
  public:
    explicit double_mapping(std::size_t bytes) : bytes_(bytes)
    {
        fd_ = memfd_create("mpiv-pool-test", 0);
        if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
            return;
        }
        a_ = map();
        b_ = map();
    }
    ~double_mapping()
    {
        if (a_ != nullptr) {
            munmap(a_, bytes_);
        }
        if (b_ != nullptr) {
            munmap(b_, bytes_);
        }
        if (fd_ >= 0) {
            close(fd_);
        }
    }
    double_mapping(const double_mapping &) = delete;
    double_mapping &operator=(const double_mapping &) = delete;

    bool ok() const { return a_ != nullptr && b_ != nullptr; }
    /// A fresh mapping of the same bytes (for a child process).
    unsigned char *map() const
    {
        void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        return p == MAP_FAILED ? nullptr : static_cast<unsigned char *>(p);
    }
    unsigned char *a() const { return a_; }
    unsigned char *b() const { return b_; }
    std::size_t size() const { return bytes_; }

  private:
    std::size_t bytes_;
    int fd_ = -1;
    unsigned char *a_ = nullptr;
    unsigned char *b_ = nullptr;
};

pool_params owner_params()
{
    pool_params p;
    p.packet_size = k_packet_size;
    p.packet_count = k_packets;
    p.workers = 2;
    p.private_capacity = 4;
    p.private_initial = 4;
    return p;
}

TEST(packet_region, alone_is_a_bounded_pool)
{
    mpiv::test::log_capture log;
    const std::size_t bytes = packet_region<>::bytes_for(k_packet_size, 4);
    ASSERT_GT(bytes, 0u);
    mpiv::test::region_buffer buffer(bytes);
    packet_region<> region;
    void *p = nullptr;
    EXPECT_EQ(region.get(p), status::not_initialized);
    ASSERT_EQ(region.format(buffer.data(), bytes, k_packet_size, 4, 0), status::ok);
    EXPECT_EQ(region.packet_size(), k_packet_size);
    EXPECT_EQ(region.packet_count(), 4u);
    std::vector<void *> held;
    while (region.get(p) == status::ok) {
        held.push_back(p);
    }
    ASSERT_EQ(held.size(), 4u);
    EXPECT_EQ(region.get(p), status::retry_nopacket);
    for (void *q : held) {
        ASSERT_EQ(region.put(q), status::ok);
    }
    ASSERT_EQ(region.get(p), status::ok);
    EXPECT_EQ(p, held.back()) << "LIFO";
    ASSERT_EQ(region.put(p), status::ok);
    EXPECT_EQ(log.errors().size(), 1u) << "only the get before format is an error";
}

TEST(packet_region, offsets_round_trip_and_reject_non_packets)
{
    mpiv::test::log_capture log;
    const std::size_t bytes = packet_region<>::bytes_for(k_packet_size, k_packets);
    mpiv::test::region_buffer buffer(bytes);
    packet_region<> region;
    ASSERT_EQ(region.format(buffer.data(), bytes, k_packet_size, k_packets, 0), status::ok);
    std::uint64_t first = 0;
    ASSERT_EQ(region.offset_of(packet_region_test_access::packet(region, 0), first), status::ok);
    EXPECT_EQ(first % mpiv::k_false_sharing, 0u);
    for (std::uint32_t i = 0; i < k_packets; ++i) {
        void *p = packet_region_test_access::packet(region, i);
        std::uint64_t offset = 0;
        ASSERT_EQ(region.offset_of(p, offset), status::ok);
        EXPECT_EQ(offset, first + std::uint64_t{i} * k_packet_size);
        void *back = nullptr;
        ASSERT_EQ(region.packet_at(offset, back), status::ok);
        EXPECT_EQ(back, p);
    }
    void *p = nullptr;
    const std::uint64_t end = first + std::uint64_t{k_packets} * k_packet_size;
    for (std::uint64_t bad : {std::uint64_t{0}, first - k_packet_size, first + 64, end,
                              ~std::uint64_t{0}}) {
        EXPECT_EQ(region.packet_at(bad, p), status::invalid_handle) << bad;
    }
    EXPECT_EQ(p, nullptr);
    std::uint64_t offset = 7;
    EXPECT_EQ(region.offset_of(buffer.data(), offset), status::invalid_handle);
    EXPECT_EQ(offset, 7u);
    EXPECT_EQ(log.errors().size(), 6u);
}

TEST(packet_region, attach_rejects_unusable_regions)
{
    mpiv::test::log_capture log;
    const std::size_t bytes = packet_region<>::bytes_for(k_packet_size, k_packets);
    mpiv::test::region_buffer buffer(bytes + mpiv::k_false_sharing);
    packet_region<> view;
    EXPECT_EQ(view.attach(buffer.data(), bytes), status::invalid_arg) << "never formatted";
    EXPECT_EQ(view.attach(nullptr, bytes), status::invalid_arg);
    packet_region<> owner;
    ASSERT_EQ(owner.format(buffer.data(), bytes, k_packet_size, k_packets, 0), status::ok);
    EXPECT_EQ(view.attach(buffer.data(), bytes - 1), status::invalid_arg) << "mapping too small";
    EXPECT_EQ(view.attach(buffer.data() + 64, bytes), status::invalid_arg) << "misaligned";
    EXPECT_EQ(view.attach(buffer.data(), 64), status::invalid_arg) << "smaller than the header";
    // Corrupt the geometry: the packets offset no longer matches the layout.
    std::uint64_t saved;
    const std::size_t packets_offset_at = 32;
    std::memcpy(&saved, buffer.data() + packets_offset_at, sizeof(saved));
    const std::uint64_t wrong = saved + 128;
    std::memcpy(buffer.data() + packets_offset_at, &wrong, sizeof(wrong));
    EXPECT_EQ(view.attach(buffer.data(), bytes), status::invalid_arg) << "corrupt layout";
    std::memcpy(buffer.data() + packets_offset_at, &saved, sizeof(saved));
    ASSERT_EQ(view.attach(buffer.data(), bytes), status::ok);
    EXPECT_EQ(view.packet_count(), k_packets);
    EXPECT_EQ(view.packet_size(), k_packet_size);
    EXPECT_EQ(log.errors().size(), 6u);
}

static_assert(offsetof(mpiv::pool::detail::region_header<std::atomic>, packets_offset) == 32,
              "the corrupt-layout test pokes this field");

// The owner pool and an attached view at another address share one region: packets the
// owner hands out can be returned through the view (the receiver's return path), and the
// owner gets them back with the contents the view's side left.
TEST(packet_region, return_through_another_mapping)
{
    mpiv::test::log_capture log;
    const pool_params params = owner_params();
    double_mapping mem(packet_pool<>::region_bytes(params));
    ASSERT_TRUE(mem.ok());
    ASSERT_NE(mem.a(), mem.b());
    packet_pool<> pool;
    ASSERT_EQ(pool.init(params, mem.a(), mem.size()), status::ok);
    packet_region<> peer;
    ASSERT_EQ(peer.attach(mem.b(), mem.size()), status::ok);

    std::vector<std::uint64_t> offsets;
    void *p = nullptr;
    for (std::uint32_t i = 0; i < 6; ++i) {
        ASSERT_EQ(pool.get(0, p), status::ok);
        std::uint64_t offset;
        ASSERT_EQ(pool.region().offset_of(p, offset), status::ok);
        std::memcpy(p, &offset, sizeof(offset)); // the "message"
        offsets.push_back(offset);
    }
    for (std::uint64_t offset : offsets) {
        void *q = nullptr;
        ASSERT_EQ(peer.packet_at(offset, q), status::ok);
        std::uint64_t seen;
        std::memcpy(&seen, q, sizeof(seen));
        EXPECT_EQ(seen, offset);
        std::memset(q, 0x5a, k_packet_size);
        EXPECT_EQ(peer.put(static_cast<unsigned char *>(q) - mem.b() + mem.a()),
                  status::invalid_handle)
            << "the owner's address is not a packet in the peer's mapping";
        ASSERT_EQ(peer.put(q), status::ok);
        EXPECT_EQ(peer.put(q), status::invalid_arg) << "double put through the peer";
        ASSERT_EQ(pool.region().put(static_cast<unsigned char *>(q) - mem.b() + mem.a()),
                  status::invalid_arg)
            << "the owner sees the packet free too";
    }
    // The returned packets are on the shared stack: the server path finds them first.
    std::vector<std::uint64_t> back;
    for (std::size_t i = 0; i < offsets.size(); ++i) {
        ASSERT_EQ(pool.server_get(p), status::ok);
        EXPECT_EQ(static_cast<unsigned char *>(p)[k_packet_size - 1], 0x5a);
        std::uint64_t offset;
        ASSERT_EQ(pool.region().offset_of(p, offset), status::ok);
        back.push_back(offset);
    }
    std::reverse(back.begin(), back.end());
    EXPECT_EQ(back, offsets) << "LIFO return order";
    EXPECT_EQ(log.errors().size(), 3 * offsets.size());
}

// A forked child maps the segment at a new address, attaches, checks the packets the
// parent filled and returns them; the parent then gets them back from the shared stack.
TEST(packet_region, return_from_another_process)
{
    const pool_params params = owner_params();
    double_mapping mem(packet_pool<>::region_bytes(params));
    ASSERT_TRUE(mem.ok());
    packet_pool<> pool;
    ASSERT_EQ(pool.init(params, mem.a(), mem.size()), status::ok);
    std::vector<std::uint64_t> offsets;
    void *p = nullptr;
    while (pool.get(1, p) == status::ok) {
        std::uint64_t offset;
        ASSERT_EQ(pool.region().offset_of(p, offset), status::ok);
        std::memcpy(p, &offset, sizeof(offset));
        offsets.push_back(offset);
    }
    ASSERT_EQ(offsets.size(), k_packets);

    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        unsigned char *mine = mem.map();
        packet_region<> peer;
        if (mine == nullptr || mine == mem.a() || peer.attach(mine, mem.size()) != status::ok) {
            _exit(2);
        }
        for (std::uint64_t offset : offsets) {
            void *q = nullptr;
            std::uint64_t seen = 0;
            if (peer.packet_at(offset, q) != status::ok) {
                _exit(3);
            }
            std::memcpy(&seen, q, sizeof(seen));
            if (seen != offset) {
                _exit(4);
            }
            seen = ~offset;
            std::memcpy(q, &seen, sizeof(seen));
            if (peer.put(q) != status::ok) {
                _exit(5);
            }
        }
        _exit(0);
    }
    int wstatus = 0;
    ASSERT_EQ(waitpid(child, &wstatus, 0), child);
    ASSERT_TRUE(WIFEXITED(wstatus));
    ASSERT_EQ(WEXITSTATUS(wstatus), 0);

    std::vector<std::uint64_t> back;
    while (pool.get(0, p) == status::ok) {
        std::uint64_t offset;
        std::uint64_t seen;
        ASSERT_EQ(pool.region().offset_of(p, offset), status::ok);
        std::memcpy(&seen, p, sizeof(seen));
        EXPECT_EQ(seen, ~offset) << "the child's write is visible";
        back.push_back(offset);
    }
    std::sort(back.begin(), back.end());
    std::sort(offsets.begin(), offsets.end());
    EXPECT_EQ(back, offsets);
}

} // namespace
