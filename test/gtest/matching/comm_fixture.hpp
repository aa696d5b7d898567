// comm_fixture: a table and helpers to make basic_comm communicators and deliver
// messages to them, for the matching tests (test_comm, test_any_tag).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "matching/comm.hpp"

namespace mpiv::test {

template <class Lock>
class comm_fixture : public ::testing::Test {
  protected:
    using comm_type = match::basic_comm<Lock>;

    comm_fixture() { EXPECT_EQ(match::table::create(64, table_), status::ok); }

    std::unique_ptr<comm_type> make(std::int32_t size = 8, unsigned assertions = 0,
                                    std::uint16_t cid = 3)
    {
        std::unique_ptr<comm_type> c;
        EXPECT_EQ(comm_type::create(*table_, {cid, size, assertions}, c), status::ok);
        return c;
    }

    // Deliver m, ordered unless c allows overtaking (as a sender on c would send it);
    // @return the messages matched by this call, in order.
    static std::vector<match::msg_node *> arrive(comm_type &c, match::msg_node &m,
                                                 std::int32_t source, std::int32_t tag,
                                                 std::uint32_t seq, std::size_t size = 0)
    {
        const bool ordered = (c.assertions() & match::k_assert_allow_overtaking) == 0;
        return arrive_as(c, m, match::envelope{source, tag, seq, size, ordered});
    }
    static std::vector<match::msg_node *> arrive_as(comm_type &c, match::msg_node &m,
                                                    const match::envelope &env)
    {
        match::match_list matched;
        EXPECT_EQ(c.arrive(m, env, matched), status::ok);
        std::vector<match::msg_node *> out;
        while (match::msg_node *x = matched.pop()) {
            out.push_back(x);
        }
        return out;
    }

    std::unique_ptr<match::table> table_;
};

} // namespace mpiv::test
