// segment: memfd segments, attached through /proc by this and another process; errors.
#include "endpoints/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "test/gtest/endpoints/shm_test_util.hpp"

namespace {

using mpiv::status;
using mpiv::shm::segment;
using mpiv::test::log_capture;

std::string link_target(int pid, int fd)
{
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    char buf[256];
    const ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
    return n < 0 ? std::string() : std::string(buf, static_cast<std::size_t>(n));
}

bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

TEST(segment, create_maps_zeroed_shared_memory_without_a_name)
{
    segment seg;
    EXPECT_EQ(seg.base(), nullptr);
    EXPECT_EQ(seg.size(), 0u);
    EXPECT_EQ(seg.fd(), -1);
    const std::size_t bytes = 3 * 4096 + 100;
    ASSERT_EQ(segment::create(bytes, seg), status::ok);
    ASSERT_NE(seg.base(), nullptr);
    EXPECT_EQ(seg.size(), bytes);
    ASSERT_GE(seg.fd(), 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(seg.base()) % 4096, 0u);
    EXPECT_EQ(link_target(getpid(), seg.fd()).rfind("/memfd:mpiv-shm", 0), 0u)
        << "an anonymous memory file, not a file-system name: " << link_target(getpid(), seg.fd());
    EXPECT_NE(fcntl(seg.fd(), F_GETFD) & FD_CLOEXEC, 0) << "not inherited across exec";
    const auto *bytes_p = static_cast<const unsigned char *>(seg.base());
    for (std::size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(bytes_p[i], 0) << i;
    }
    std::memset(seg.base(), 0x5a, bytes);
}

TEST(segment, attach_sees_the_same_bytes_at_another_address)
{
    const std::size_t bytes = 64 * 1024;
    segment owner;
    ASSERT_EQ(segment::create(bytes, owner), status::ok);
    segment peer;
    ASSERT_EQ(segment::attach(getpid(), owner.fd(), bytes, peer), status::ok);
    EXPECT_NE(peer.base(), owner.base());
    EXPECT_EQ(peer.size(), bytes);
    EXPECT_EQ(peer.fd(), -1) << "the attached descriptor is closed after mmap";
    static_cast<unsigned char *>(owner.base())[bytes - 1] = 0x11;
    EXPECT_EQ(static_cast<unsigned char *>(peer.base())[bytes - 1], 0x11);
    static_cast<unsigned char *>(peer.base())[0] = 0x22;
    EXPECT_EQ(static_cast<unsigned char *>(owner.base())[0], 0x22);
    segment smaller;
    ASSERT_EQ(segment::attach(getpid(), owner.fd(), 4096, smaller), status::ok)
        << "a prefix of the segment is fine";
    EXPECT_EQ(static_cast<unsigned char *>(smaller.base())[0], 0x22);
}

TEST(segment, move_transfers_ownership_and_destruction_releases)
{
    segment a;
    ASSERT_EQ(segment::create(4096, a), status::ok);
    void *const base = a.base();
    const int fd = a.fd();
    segment b(std::move(a));
    EXPECT_EQ(a.base(), nullptr);
    EXPECT_EQ(a.fd(), -1);
    EXPECT_EQ(b.base(), base);
    EXPECT_EQ(b.fd(), fd);
    segment c;
    ASSERT_EQ(segment::create(8192, c), status::ok);
    const int c_fd = c.fd();
    c = std::move(b);
    EXPECT_FALSE(fd_is_open(c_fd)) << "the overwritten segment was released";
    EXPECT_EQ(c.fd(), fd);
    EXPECT_EQ(c.size(), 4096u);
    c = segment();
    EXPECT_FALSE(fd_is_open(fd));
    EXPECT_EQ(c.base(), nullptr);
    {
        log_capture log;
        segment gone;
        EXPECT_EQ(segment::attach(getpid(), fd, 4096, gone), status::system)
            << "nothing to attach to once the owner released it";
    }
}

TEST(segment, errors_are_reported_and_leave_the_output_alone)
{
    log_capture log;
    segment seg;
    EXPECT_EQ(segment::create(0, seg), status::invalid_arg);
    EXPECT_EQ(seg.base(), nullptr);
    segment owner;
    ASSERT_EQ(segment::create(4096, owner), status::ok);
    void *const base = owner.base();
    EXPECT_EQ(segment::create(0, owner), status::invalid_arg);
    EXPECT_EQ(owner.base(), base) << "written only on success";

    EXPECT_EQ(segment::attach(getpid(), owner.fd(), 0, seg), status::invalid_arg);
    EXPECT_EQ(segment::attach(-1, owner.fd(), 4096, seg), status::invalid_arg);
    EXPECT_EQ(segment::attach(getpid(), -1, 4096, seg), status::invalid_arg);
    EXPECT_EQ(segment::attach(getpid(), owner.fd(), 8192, seg), status::invalid_arg)
        << "larger than the segment";
    EXPECT_NE(log.last().find("8192"), std::string::npos) << log.last();
    EXPECT_EQ(segment::attach(getpid(), 999999, 4096, seg), status::system) << "no such fd";
    EXPECT_NE(log.last().find("open(/proc/"), std::string::npos) << log.last();
    EXPECT_NE(log.last().find("ENOENT"), std::string::npos) << log.last();
    EXPECT_EQ(seg.base(), nullptr);
    EXPECT_EQ(log.errors().size(), 7u);
}

// Nobody can change a segment's size once it exists (a shrink would make every mapping of
// it fault, SIGBUS, past the new end), and a memory file without that seal is refused.
TEST(segment, size_is_sealed_and_unsealed_files_are_refused)
{
    log_capture log;
    segment owner;
    ASSERT_EQ(segment::create(8192, owner), status::ok);
    errno = 0;
    EXPECT_NE(ftruncate(owner.fd(), 4096), 0) << "shrinking must be refused";
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(ftruncate(owner.fd(), 16384), 0) << "growing must be refused";
    static_cast<volatile char *>(owner.base())[8191] = 1; // still mapped in full

    const int plain = memfd_create("not-mpiv", MFD_CLOEXEC);
    ASSERT_GE(plain, 0);
    ASSERT_EQ(ftruncate(plain, 8192), 0);
    segment seg;
    EXPECT_EQ(segment::attach(getpid(), plain, 8192, seg), status::invalid_arg);
    EXPECT_NE(log.last().find("not sealed"), std::string::npos) << log.last();
    EXPECT_EQ(seg.base(), nullptr);
    close(plain);
}

// A dead owner: its pid is gone (reaped), so /proc/<pid> is too.
TEST(segment, attach_to_a_dead_process_fails_cleanly)
{
    log_capture log;
    segment owner;
    ASSERT_EQ(segment::create(4096, owner), status::ok);
    const pid_t pid = mpiv::test::fork_child([] { return 0; });
    ASSERT_GT(pid, 0);
    ASSERT_EQ(mpiv::test::wait_child(pid), 0);
    segment seg;
    EXPECT_EQ(segment::attach(pid, owner.fd(), 4096, seg), status::system);
    EXPECT_EQ(seg.base(), nullptr);
    ASSERT_EQ(log.errors().size(), 1u);
    EXPECT_NE(log.last().find("/proc/" + std::to_string(pid) + "/fd/"), std::string::npos)
        << log.last();
    EXPECT_NE(log.last().find("ENOENT"), std::string::npos) << log.last();
}

// Another process attaches to the parent's segment, checks what the parent wrote and
// writes its answer; the parent sees it.
TEST(segment, another_process_attaches_through_proc)
{
    const std::size_t bytes = 256 * 1024;
    segment seg;
    ASSERT_EQ(segment::create(bytes, seg), status::ok);
    auto *const mem = static_cast<unsigned char *>(seg.base());
    for (std::size_t i = 0; i < bytes / 2; ++i) {
        mem[i] = static_cast<unsigned char>(i * 13);
    }
    const int fd = seg.fd();
    const pid_t pid = mpiv::test::fork_child([&] {
        segment mine;
        if (segment::attach(getppid(), fd, bytes, mine) != status::ok) {
            return 2;
        }
        const auto *in = static_cast<const unsigned char *>(mine.base());
        for (std::size_t i = 0; i < bytes / 2; ++i) {
            if (in[i] != static_cast<unsigned char>(i * 13)) {
                return 3;
            }
        }
        auto *out = static_cast<unsigned char *>(mine.base());
        for (std::size_t i = bytes / 2; i < bytes; ++i) {
            out[i] = static_cast<unsigned char>(i * 7 + 1);
        }
        return 0;
    });
    ASSERT_GT(pid, 0);
    ASSERT_EQ(mpiv::test::wait_child(pid), 0);
    for (std::size_t i = bytes / 2; i < bytes; ++i) {
        ASSERT_EQ(mem[i], static_cast<unsigned char>(i * 7 + 1)) << i;
    }
}

} // namespace
