// engine: bad parameters, addresses and arguments, a segment that cannot be mapped, the
// CMA probe at connect and the report of held messages (fixture in engine_fixture.hpp).
#include "test/gtest/endpoints/engine_fixture.hpp"

#include <sched.h>
#include <sys/mount.h>

namespace {

// ------------------------------------------------------------------ bad input

// Store @p v into an enum field bytewise.
template <class E> void store_int(E &field, int v)
{
    static_assert(sizeof(E) == sizeof v, "C enums are int-sized here");
    std::memcpy(&field, &v, sizeof v);
}

TEST(engine_params, create_rejects_each_invalid_parameter)
{
    struct bad {
        const char *field;
        std::function<void(mpiv_p2p_params_t &)> set;
        status expect;
    };
    const bad cases[] = {
        {"complete", [](mpiv_p2p_params_t &p) { p.complete = nullptr; }, status::invalid_arg},
        {"num_peers", [](mpiv_p2p_params_t &p) { p.num_peers = 0; }, status::param},
        {"self", [](mpiv_p2p_params_t &p) { p.self = 2; }, status::param},
        {"endpoints", [](mpiv_p2p_params_t &p) { p.endpoints = 0; }, status::param},
        {"endpoints", [](mpiv_p2p_params_t &p) { p.endpoints = 257; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 0; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 1; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 3; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 1000; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 1u << 21; }, status::param},
        {"eager_limit", [](mpiv_p2p_params_t &p) { p.eager_limit = (1u << 20) + 1; }, status::param},
        {"packet_count", [](mpiv_p2p_params_t &p) { p.packet_count = 0; }, status::param},
        {"packet_count", [](mpiv_p2p_params_t &p) { p.packet_count = (1u << 20) + 1; }, status::param},
        // As a C caller would store them (a C++ cast to an out-of-range enum is undefined).
        {"progress", [](mpiv_p2p_params_t &p) { store_int(p.progress, 2); }, status::param},
        {"progress", [](mpiv_p2p_params_t &p) { store_int(p.progress, -1); }, status::param},
        {"lock", [](mpiv_p2p_params_t &p) { store_int(p.lock, 3); }, status::param},
        {"lock", [](mpiv_p2p_params_t &p) { store_int(p.lock, 1000); }, status::param},
        {"idle_us", [](mpiv_p2p_params_t &p) { p.idle_us = 1000001; }, status::param},
        {"ucx_copy_max", [](mpiv_p2p_params_t &p) { p.ucx_copy_max = 65537; }, status::param},
        {"single_copy", [](mpiv_p2p_params_t &p) { store_int(p.single_copy, 3); }, status::param},
        {"single_copy", [](mpiv_p2p_params_t &p) { store_int(p.single_copy, -1); }, status::param},
    };
    for (const bad &c : cases) {
        log_capture log;
        mpiv_p2p_params_t p = params_for(0);
        c.set(p);
        std::unique_ptr<ep::engine> e;
        EXPECT_EQ(e == nullptr, true);
        EXPECT_EQ(ep::engine::create(p, e), c.expect) << c.field;
        EXPECT_EQ(e, nullptr) << c.field;
        ASSERT_FALSE(log.errors().empty()) << c.field << ": nothing logged";
        EXPECT_NE(log.last().find(c.field), std::string::npos)
            << "the message names " << c.field << ": " << log.last();
    }
    // The limits themselves are valid.
    {
        mpiv_p2p_params_t p = params_for(0, 1);
        p.endpoints = 1;
        p.queue_slots = 2;
        p.eager_limit = 0;
        p.packet_count = 1;
        p.idle_us = 0;
        p.ucx_copy_max = 0;
        std::unique_ptr<ep::engine> e;
        ASSERT_EQ(ep::engine::create(p, e), status::ok);
        EXPECT_EQ(e->inline_max(), 2 * 56u - 32u) << "inline messages fit in two slots";
        p.eager_limit = 1u << 20;
        p.packet_count = 4;
        p.idle_us = 1000000;
        p.ucx_copy_max = 65536;
        p.queue_slots = 8;
        std::unique_ptr<ep::engine> e2;
        ASSERT_EQ(ep::engine::create(p, e2), status::ok);
        EXPECT_EQ(e2->inline_max(), std::size_t{MPIV_P2P_INLINE_MAX});
    }
}

// The address layout that connect() parses: the engine's header (engine_ucx.cpp), then
// the shared-memory transport's address (shm::transport::address_t); no UCX part.
struct address_mirror {
    std::uint32_t magic;
    std::uint32_t shm_len;
    std::uint32_t ucx_len;
    std::uint32_t reserved;
    std::uint32_t version;
    std::uint32_t pid;
    std::int32_t fd;
    std::uint32_t self;
    std::uint64_t bytes;
    std::uint64_t probe;
};

TEST_F(engine_test, connect_rejects_malformed_addresses)
{
    std::unique_ptr<ep::engine> a;
    std::unique_ptr<ep::engine> b;
    ASSERT_EQ(ep::engine::create(params_for(0), a), status::ok);
    ASSERT_EQ(ep::engine::create(params_for(1), b), status::ok);
    const void *addr = nullptr;
    std::size_t len = 0;
    b->address(addr, len);
    ASSERT_EQ(len, sizeof(address_mirror));
    address_mirror good;
    std::memcpy(&good, addr, sizeof good);
    EXPECT_EQ(good.self, 1u);
    EXPECT_EQ(good.pid, static_cast<std::uint32_t>(getpid()));

    log_capture log;
    EXPECT_EQ(a->connect(1, nullptr, len), status::invalid_arg);
    EXPECT_EQ(a->connect(1, addr, 0), status::invalid_arg);
    EXPECT_EQ(a->connect(1, addr, len - 1), status::invalid_arg);
    std::vector<unsigned char> longer(len + 1);
    std::memcpy(longer.data(), addr, len);
    EXPECT_EQ(a->connect(1, longer.data(), longer.size()), status::invalid_arg);
    EXPECT_EQ(a->connect(2, addr, len), status::invalid_arg) << "peer index out of range";
    EXPECT_EQ(a->connect(0, addr, len), status::invalid_arg) << "peer 1's address given for 0";

    const auto try_with = [&](const std::function<void(address_mirror &)> &edit) {
        address_mirror m = good;
        edit(m);
        return a->connect(1, &m, sizeof m);
    };
    EXPECT_EQ(try_with([](address_mirror &m) { m.magic ^= 1; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.shm_len += 8; }), status::invalid_arg)
        << "parts longer than the address";
    EXPECT_EQ(try_with([](address_mirror &m) { m.ucx_len = 1; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.version = 99; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.fd = -1; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.pid = 0; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.fd = 1 << 28; }), status::system)
        << "no such descriptor";
    EXPECT_EQ(try_with([](address_mirror &m) { m.bytes *= 4; }), status::invalid_arg)
        << "larger than the segment";
    // A real memfd that is no mpiv segment.
    mpiv::shm::segment other;
    ASSERT_EQ(mpiv::shm::segment::create(good.bytes, other), status::ok);
    EXPECT_EQ(try_with([&](address_mirror &m) { m.fd = other.fd(); }), status::invalid_arg);
    EXPECT_NE(log.last().find("not an mpiv segment"), std::string::npos) << log.last();
    EXPECT_GE(log.errors().size(), 10u) << "every rejection is logged";

    // Nothing stuck: the right address still connects (twice: idempotent) and works.
    EXPECT_EQ(a->connect(1, addr, len), status::ok);
    EXPECT_EQ(a->connect(1, addr, len), status::ok);
    a->address(addr, len);
    EXPECT_EQ(b->connect(0, addr, len), status::ok);
    ep::comm_state *ca = nullptr;
    ep::comm_state *cb = nullptr;
    ASSERT_EQ(a->comm_create(k_cid, 2, 0, ca), status::ok);
    ASSERT_EQ(b->comm_create(k_cid, 2, 0, cb), status::ok);
    sop s;
    const std::uint64_t v = 42;
    s.rc = a->isend(*ca, 1, 0, 1, 0, &v, sizeof v, 0, &s.rec, s.op, s.st);
    EXPECT_EQ(s.rc, status::ok);
    std::uint64_t got = 0;
    rop r;
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    r.rc = b->irecv(*cb, 0, 0, &got, sizeof got, &r.rec, r.op, r.st);
    while (r.rc == status::inprogress && calls_of(r.rec) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
        b->progress();
    }
    EXPECT_EQ(got, 42u);
}

// Where this process cannot map its own segment through /proc (here: an empty /proc in
// a mount namespace of a child), no peer could map it either: create fails at once, with
// a message, so that the PML declines the job instead of failing at the first contact.
TEST(engine_create, fails_when_its_segment_cannot_be_mapped_through_proc)
{
    const pid_t pid = mpiv::test::fork_child([] {
        // A mount namespace of its own (as root), else inside a user namespace of its own
        // (allowed without root where user namespaces are enabled).
        if ((unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) ||
            mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount("none", "/proc", "tmpfs", 0, nullptr) != 0) {
            return 4;
        }
        log_capture log;
        std::unique_ptr<ep::engine> e;
        if (ep::engine::create(params_for(0), e) != status::system || e != nullptr) {
            return 2;
        }
        return log.last().find("cannot map its own segment through /proc") == std::string::npos
                   ? 3
                   : 0;
    });
    ASSERT_GT(pid, 0);
    EXPECT_EQ(mpiv::test::wait_child(pid), 0)
        << "2: create did not fail; 3: no message; 4: no mount namespace with an empty /proc "
           "(needs root or user namespaces)";
}

// connect() tries process_vm_readv on the peer's own address record: where that fails
// (here: the record is not where the address says), auto mode copies the peer's large
// messages through shared memory, and CMA mode refuses the peer.
TEST_F(engine_test, connect_tries_cma_on_the_peer)
{
    mpiv_p2p_params_t p0 = params_for(0);
    mpiv_p2p_params_t p1 = params_for(1);
    ASSERT_EQ(ep::engine::create(p0, eng_[0]), status::ok);
    ASSERT_EQ(ep::engine::create(p1, eng_[1]), status::ok);
    address_mirror addr[2];
    for (int i = 0; i < 2; ++i) {
        const void *a = nullptr;
        std::size_t len = 0;
        eng_[i]->address(a, len);
        ASSERT_EQ(len, sizeof addr[i]);
        std::memcpy(&addr[i], a, len);
    }
    address_mirror moved = addr[1];
    moved.probe += 8; // a readable address that does not hold the record
    {
        std::unique_ptr<ep::engine> strict;
        p0.single_copy = MPIV_P2P_SINGLE_COPY_CMA;
        ASSERT_EQ(ep::engine::create(p0, strict), status::ok);
        log_capture log;
        EXPECT_EQ(strict->connect(1, &moved, sizeof moved), status::system);
        EXPECT_NE(log.last().find("single_copy is CMA"), std::string::npos) << log.last();
    }
    ASSERT_EQ(eng_[0]->connect(1, &moved, sizeof moved), status::ok);
    ASSERT_EQ(eng_[0]->connect(0, &addr[0], sizeof addr[0]), status::ok);
    ASSERT_EQ(eng_[1]->connect(0, &addr[0], sizeof addr[0]), status::ok);
    ASSERT_EQ(eng_[1]->connect(1, &addr[1], sizeof addr[1]), status::ok);
    bool single = true;
    int error = 0;
    ASSERT_EQ(eng_[0]->peer_single_copy(1, single, error), status::ok);
    EXPECT_FALSE(single) << "peer 1's record was not where it said";
    EXPECT_EQ(error, EFAULT);
    ASSERT_EQ(eng_[0]->peer_single_copy(0, single, error), status::ok);
    EXPECT_TRUE(single) << "this engine's own messages are copied in process";
    ASSERT_EQ(eng_[1]->peer_single_copy(0, single, error), status::ok);
    EXPECT_TRUE(single);
    EXPECT_EQ(error, 0);
    EXPECT_EQ(eng_[1]->peer_single_copy(5, single, error), status::invalid_arg);
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(eng_[i]->comm_create(k_cid, 2, 0, comm_[i]), status::ok);
    }
    // 1 -> 0 in two copies, 0 -> 1 read by CMA: the same bytes either way.
    for (const int from : {1, 0}) {
        SCOPED_TRACE(::testing::Message() << "from " << from);
        const std::vector<unsigned char> src = patterned(k_mib + 3, 77 + from);
        std::vector<unsigned char> dst(src.size());
        rop r;
        recv(1 - from, from, 1, dst.data(), dst.size(), r);
        sop s;
        send(from, 1 - from, 1, src.data(), src.size(), s);
        EXPECT_EQ(finish(r).bytes, src.size());
        EXPECT_EQ(finish(s).error, MPIV_OK);
        EXPECT_TRUE(intact(dst.data(), dst.size(), 77 + from));
    }
}

// Messages that arrive before their receives are kept (MPI makes the receiver buffer
// them); their number is watched: one warning when it passes 65,536, the next at twice
// that, and receives and improbe count them back down.
TEST_F(engine_test, messages_held_before_their_receives_are_reported)
{
    start();
    constexpr std::size_t k_n = 65536 + 10;
    const auto flood = [&](std::int32_t tag) {
        for (std::size_t i = 0; i < k_n; ++i) {
            ep::send_op op{};
            mpiv_p2p_status_t st{};
            status rc;
            while ((rc = eng(1).isend(comm(1), 0, 1, 0, tag, &i, sizeof i, 0, nullptr, op, st)) ==
                   status::retry_nomem) {
                eng(0).progress(); // the queues are full: drain them (all unexpected)
            }
            ASSERT_EQ(rc, status::ok);
        }
        while (eng(0).progress() > 0) {
        }
    };
    const auto take_all = [&](std::int32_t tag) {
        for (std::size_t i = 0; i < k_n; ++i) {
            std::size_t got = ~std::size_t{0};
            rop r;
            if (i % 2 == 0) {
                recv(0, 1, tag, &got, sizeof got, r);
                ASSERT_EQ(r.rc, status::ok) << i;
            } else {
                ep::inmsg *m = nullptr;
                mpiv_p2p_status_t ps{};
                ASSERT_EQ(eng(0).improbe(comm(0), 1, tag, m, ps), status::ok) << i;
                mpiv_p2p_status_t st{};
                ASSERT_EQ(eng(0).mrecv(*m, &got, sizeof got, nullptr, st), status::ok);
            }
            ASSERT_EQ(got, i) << "in the sender's order";
        }
    };
    log_capture log;
    flood(1);
    ASSERT_EQ(log.warnings().size(), 1u) << "one warning at 65,536";
    EXPECT_NE(log.warnings()[0].find("messages arrived before their receives"), std::string::npos)
        << log.warnings()[0];
    EXPECT_NE(log.warnings()[0].find("next report at 131072"), std::string::npos)
        << log.warnings()[0];
    take_all(1);
    flood(2); // as many again: below the next threshold once the first are received
    EXPECT_EQ(log.warnings().size(), 1u) << "received messages were counted back down";
    take_all(2);
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(eng(0).iprobe(comm(0), k_any, k_any, ps), status::not_found);
}

TEST_F(engine_test, isend_to_an_unconnected_peer_and_bad_arguments)
{
    std::unique_ptr<ep::engine> e;
    ASSERT_EQ(ep::engine::create(params_for(0, 3), e), status::ok);
    const void *addr = nullptr;
    std::size_t len = 0;
    e->address(addr, len);
    ASSERT_EQ(e->connect(0, addr, len), status::ok);
    ep::comm_state *c = nullptr;
    ASSERT_EQ(e->comm_create(k_cid, 3, 0, c), status::ok);
    sop s;
    const char buf[8] = "abcdefg";
    EXPECT_EQ(e->isend(*c, 1, 0, 1, 0, buf, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "peer 1 is not connected";
    EXPECT_EQ(e->isend(*c, 3, 0, 2, 0, buf, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "peer index out of range";
    EXPECT_EQ(e->isend(*c, 0, 0, 0, 0, buf, 8, 2, &s.rec, s.op, s.st), status::invalid_arg)
        << "unknown flag";
    EXPECT_EQ(e->isend(*c, 0, 0, 0, 0, nullptr, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "NULL buffer";
    EXPECT_EQ(e->isend(*c, 0, 0, 7, 0, buf, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "destination rank out of range";
    ep::recv_op rop_;
    record rec;
    mpiv_p2p_status_t st{};
    EXPECT_EQ(e->irecv(*c, 0, 0, nullptr, 8, &rec, rop_, st), status::invalid_arg) << "NULL buffer";
    EXPECT_EQ(e->irecv(*c, 5, 0, nullptr, 0, &rec, rop_, st), status::invalid_arg) << "bad source";
    EXPECT_EQ(calls_of(s.rec), 0);
    EXPECT_EQ(calls_of(rec), 0);

    // The connected self still works after the rejections (and a NULL 0-byte buffer is fine).
    EXPECT_EQ(e->isend(*c, 0, 0, 0, 4, nullptr, 0, 0, &s.rec, s.op, s.st), status::ok);
    rop r;
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    r.rc = e->irecv(*c, 0, 4, nullptr, 0, &r.rec, r.op, r.st);
    while (r.rc == status::inprogress && calls_of(r.rec) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
        e->progress();
    }
    EXPECT_TRUE(r.rc == status::ok || calls_of(r.rec) == 1);
}

} // namespace
