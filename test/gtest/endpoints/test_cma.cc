// CMA: reads from this process and from a child, iovec splitting and the IOV_MAX limit,
// partial transfers, and the errors a rendezvous must report (bad address, dead peer).
#include "endpoints/shm/cma.hpp"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "test/gtest/endpoints/shm_test_util.hpp"

namespace {

using mpiv::status;
using mpiv::shm::cma_available;
using mpiv::shm::cma_read;
using mpiv::shm::cma_readv;
using mpiv::test::log_capture;

unsigned char pattern(std::size_t i) { return static_cast<unsigned char>(i * 151 + 7); }

std::vector<unsigned char> patterned(std::size_t n)
{
    std::vector<unsigned char> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = pattern(i);
    }
    return v;
}

std::uintptr_t addr(const void *p) { return reinterpret_cast<std::uintptr_t>(p); }

class cma : public ::testing::Test {
  protected:
    void SetUp() override
    {
        // mpiv needs CMA (it declines jobs without it): a machine without it fails here.
        ASSERT_TRUE(cma_available()) << "process_vm_readv is not permitted here (kernel or seccomp)";
    }
};

TEST_F(cma, available_is_cached)
{
    EXPECT_TRUE(cma_available());
    EXPECT_TRUE(cma_available());
}

TEST_F(cma, read_from_self)
{
    const std::vector<unsigned char> src = patterned(3 * 4096 + 17);
    std::vector<unsigned char> dst(src.size(), 0);
    ASSERT_EQ(cma_read(getpid(), dst.data(), addr(src.data()), src.size()), status::ok);
    EXPECT_EQ(dst, src);
    EXPECT_EQ(cma_read(getpid(), nullptr, addr(src.data()), 0), status::ok) << "no-op";
}

TEST_F(cma, invalid_arguments)
{
    log_capture log;
    const std::vector<unsigned char> src = patterned(64);
    EXPECT_EQ(cma_read(getpid(), nullptr, addr(src.data()), 8), status::invalid_arg);
    unsigned char a[8];
    const struct iovec local{a, sizeof(a)};
    const struct iovec remote{const_cast<unsigned char *>(src.data()), 9};
    EXPECT_EQ(cma_readv(getpid(), &local, 1, &remote, 1), status::invalid_arg) << "8 != 9";
    EXPECT_EQ(cma_readv(getpid(), nullptr, 1, &remote, 1), status::invalid_arg);
    EXPECT_EQ(log.errors().size(), 3u);
    EXPECT_EQ(cma_readv(getpid(), nullptr, 0, nullptr, 0), status::ok) << "nothing to read";
}

// The two sides cut the bytes differently, with empty entries in between.
TEST_F(cma, readv_with_different_splits)
{
    const std::vector<unsigned char> src = patterned(1000);
    std::vector<unsigned char> dst(1000, 0);
    const std::size_t remote_cuts[] = {0, 1, 0, 333, 200, 0, 466};
    const std::size_t local_cuts[] = {7, 0, 500, 1, 0, 0, 492};
    std::vector<struct iovec> remote;
    std::size_t at = 0;
    for (std::size_t n : remote_cuts) {
        remote.push_back({const_cast<unsigned char *>(src.data()) + at, n});
        at += n;
    }
    ASSERT_EQ(at, src.size());
    std::vector<struct iovec> local;
    at = 0;
    for (std::size_t n : local_cuts) {
        local.push_back({dst.data() + at, n});
        at += n;
    }
    ASSERT_EQ(at, dst.size());
    ASSERT_EQ(cma_readv(getpid(), local.data(), local.size(), remote.data(), remote.size()),
              status::ok);
    EXPECT_EQ(dst, src);
}

// More entries than one system call takes: a strided gather of 3 x IOV_MAX + 5 pieces into
// 2 x IOV_MAX + 3 pieces.
TEST_F(cma, readv_beyond_iov_max)
{
    const std::size_t k_max = IOV_MAX;
    const std::size_t pieces = 3 * k_max + 5;
    const std::size_t piece = 3;
    const std::size_t stride = 5;
    const std::vector<unsigned char> src = patterned(pieces * stride);
    std::vector<struct iovec> remote;
    for (std::size_t i = 0; i < pieces; ++i) {
        remote.push_back({const_cast<unsigned char *>(src.data()) + i * stride, piece});
    }
    const std::size_t total = pieces * piece;
    std::vector<unsigned char> dst(total, 0);
    std::vector<struct iovec> local;
    const std::size_t local_pieces = 2 * k_max + 3;
    const std::size_t each = total / local_pieces;
    for (std::size_t i = 0, at = 0; i < local_pieces; ++i) {
        const std::size_t n = i + 1 == local_pieces ? total - at : each;
        local.push_back({dst.data() + at, n});
        at += n;
    }
    ASSERT_EQ(cma_readv(getpid(), local.data(), local.size(), remote.data(), remote.size()),
              status::ok);
    for (std::size_t i = 0; i < total; ++i) {
        ASSERT_EQ(dst[i], pattern(i / piece * stride + i % piece)) << i;
    }
}

// A remote entry that runs into an inaccessible page: the kernel copies the accessible part
// (a partial transfer that stops inside the entry), the resumed call faults, and the error
// names EFAULT. The bytes before the fault were delivered.
TEST_F(cma, partial_transfer_then_fault)
{
    log_capture log;
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void *const mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    auto *const src = static_cast<unsigned char *>(mem);
    for (std::size_t i = 0; i < page; ++i) {
        src[i] = pattern(i);
    }
    ASSERT_EQ(mprotect(src + page, page, PROT_NONE), 0);
    std::vector<unsigned char> dst(2 * page, 0);
    EXPECT_EQ(cma_read(getpid(), dst.data(), addr(src), 2 * page), status::system);
    for (std::size_t i = 0; i < page; ++i) {
        ASSERT_EQ(dst[i], pattern(i)) << i;
    }
    ASSERT_EQ(log.errors().size(), 1u);
    EXPECT_NE(log.last().find("EFAULT"), std::string::npos) << log.last();
    EXPECT_NE(log.last().find(std::to_string(page) + " of " + std::to_string(2 * page)),
              std::string::npos)
        << "reports where it stopped: " << log.last();
    munmap(mem, 2 * page);
}

/// A child that exposes a patterned buffer: it writes the buffer's address into a pipe,
/// then waits for the parent to close the other pipe before it exits.
class child_buffer {
  public:
    explicit child_buffer(std::size_t bytes) : bytes_(bytes)
    {
        if (pipe(to_parent_) != 0 || pipe(to_child_) != 0) {
            return;
        }
        pid_ = mpiv::test::fork_child([this] {
            close(to_parent_[0]);
            close(to_child_[1]);
            const std::vector<unsigned char> buffer = patterned(bytes_);
            const std::uintptr_t a = addr(buffer.data());
            if (write(to_parent_[1], &a, sizeof(a)) != static_cast<ssize_t>(sizeof(a))) {
                return 2;
            }
            char c;
            while (read(to_child_[0], &c, 1) > 0) {
            }
            return 0;
        });
        close(to_parent_[1]);
        close(to_child_[0]);
        if (pid_ > 0 && read(to_parent_[0], &remote_, sizeof(remote_)) != sizeof(remote_)) {
            remote_ = 0;
        }
        close(to_parent_[0]);
    }
    ~child_buffer() { finish(); }
    child_buffer(const child_buffer &) = delete;
    child_buffer &operator=(const child_buffer &) = delete;

    bool ok() const { return pid_ > 0 && remote_ != 0; }
    pid_t pid() const { return pid_; }
    std::uintptr_t remote() const { return remote_; }

    /// Let the child exit and reap it. @return its exit code (see wait_child)
    int finish()
    {
        if (to_child_[1] >= 0) {
            close(to_child_[1]);
            to_child_[1] = -1;
        }
        if (pid_ > 0) {
            const int rc = mpiv::test::wait_child(pid_);
            pid_ = -1;
            return rc;
        }
        return -1;
    }

  private:
    std::size_t bytes_;
    int to_parent_[2] = {-1, -1};
    int to_child_[2] = {-1, -1};
    pid_t pid_ = -1;
    std::uintptr_t remote_ = 0;
};

TEST_F(cma, parent_reads_a_child_buffer)
{
    const std::size_t bytes = (1u << 20) + 13;
    child_buffer child(bytes);
    ASSERT_TRUE(child.ok());
    std::vector<unsigned char> dst(bytes, 0);
    ASSERT_EQ(cma_read(child.pid(), dst.data(), child.remote(), bytes), status::ok);
    EXPECT_EQ(dst, patterned(bytes));

    // The same bytes gathered in two remote pieces into three local ones.
    std::vector<unsigned char> again(bytes, 0);
    const struct iovec remote[] = {{reinterpret_cast<void *>(child.remote()), 4096},
                                   {reinterpret_cast<void *>(child.remote() + 4096),
                                    bytes - 4096}};
    const struct iovec local[] = {{again.data(), 100},
                                  {again.data() + 100, 500000},
                                  {again.data() + 500100, bytes - 500100}};
    ASSERT_EQ(cma_readv(child.pid(), local, 3, remote, 2), status::ok);
    EXPECT_EQ(again, dst);

    // A bad address in the child: EFAULT, not a crash.
    log_capture log;
    unsigned char byte = 0;
    EXPECT_EQ(cma_read(child.pid(), &byte, 16, 1), status::system);
    EXPECT_NE(log.last().find("EFAULT"), std::string::npos) << log.last();
    EXPECT_NE(log.last().find("pid " + std::to_string(child.pid())), std::string::npos)
        << log.last();
    EXPECT_EQ(child.finish(), 0);
}

TEST_F(cma, dead_peer_is_esrch)
{
    log_capture log;
    child_buffer child(4096);
    ASSERT_TRUE(child.ok());
    const pid_t pid = child.pid();
    const std::uintptr_t remote = child.remote();
    ASSERT_EQ(child.finish(), 0);
    unsigned char buf[64];
    EXPECT_EQ(cma_read(pid, buf, remote, sizeof(buf)), status::system);
    ASSERT_EQ(log.errors().size(), 1u);
    EXPECT_NE(log.last().find("ESRCH"), std::string::npos) << log.last();
}

} // namespace
