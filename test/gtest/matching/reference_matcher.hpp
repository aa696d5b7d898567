// A sequential reference for MPI matching, written to be obviously correct rather than
// fast: one list of posted receives in posting order, one list of unexpected messages in
// matching order, both scanned from the front; per-sender sequence numbers with a held
// set. Receives and messages are named by integer ids chosen by the test.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "matching/node.hpp"

namespace mpiv::test {

class reference_matcher {
  public:
    /// @param ordered false when the communicator allows overtaking (no sequence numbers)
    explicit reference_matcher(bool ordered) : ordered_(ordered) {}

    /// MPI's matching predicate, including "ANY_TAG never matches a negative tag".
    static bool accepts(std::int32_t source, std::int32_t tag, const match::envelope &env)
    {
        const bool source_ok = source == match::k_any_source || source == env.source;
        const bool tag_ok = tag == match::k_any_tag ? env.tag >= 0 : tag == env.tag;
        return source_ok && tag_ok;
    }

    /// Post receive @p id. @return the id of the message it matched at once, if any.
    std::optional<int> post(int id, std::int32_t source, std::int32_t tag)
    {
        for (std::size_t i = 0; i < unexpected_.size(); ++i) {
            if (accepts(source, tag, unexpected_[i].env)) {
                const int msg = unexpected_[i].id;
                unexpected_.erase(unexpected_.begin() + static_cast<std::ptrdiff_t>(i));
                return msg;
            }
        }
        posted_.push_back({id, source, tag});
        return std::nullopt;
    }

    /// Message @p id arrives. @return the (message id, receive id) matches it causes, in
    /// order: itself and the held messages it puts back in sequence.
    std::vector<std::pair<int, int>> arrive(int id, const match::envelope &env)
    {
        std::vector<std::pair<int, int>> matches;
        if (!ordered_) {
            deliver({id, env}, matches);
            return matches;
        }
        sender &s = senders_[env.source];
        s.held.emplace(env.seq, message{id, env});
        // Deliver every message that is now in sequence.
        for (auto it = s.held.find(s.expected); it != s.held.end(); it = s.held.find(s.expected)) {
            const message m = it->second;
            s.held.erase(it);
            ++s.expected;
            deliver(m, matches);
        }
        return matches;
    }

    /// @return the envelope of the first unexpected message (source, tag) accepts.
    std::optional<match::envelope> probe(std::int32_t source, std::int32_t tag) const
    {
        for (const message &m : unexpected_) {
            if (accepts(source, tag, m.env)) {
                return m.env;
            }
        }
        return std::nullopt;
    }

    /// Remove and return the id of the first unexpected message (source, tag) accepts.
    std::optional<int> mprobe(std::int32_t source, std::int32_t tag)
    {
        for (std::size_t i = 0; i < unexpected_.size(); ++i) {
            if (accepts(source, tag, unexpected_[i].env)) {
                const int msg = unexpected_[i].id;
                unexpected_.erase(unexpected_.begin() + static_cast<std::ptrdiff_t>(i));
                return msg;
            }
        }
        return std::nullopt;
    }

    /// Cancel receive @p id. @return true if it was still posted.
    bool cancel(int id)
    {
        for (std::size_t i = 0; i < posted_.size(); ++i) {
            if (posted_[i].id == id) {
                posted_.erase(posted_.begin() + static_cast<std::ptrdiff_t>(i));
                return true;
            }
        }
        return false;
    }

    /// Ids of the receives still posted, in posting order.
    std::vector<int> posted_ids() const
    {
        std::vector<int> ids;
        for (const receive &r : posted_) {
            ids.push_back(r.id);
        }
        return ids;
    }

    /// Number of messages unexpected (not counting held ones).
    std::size_t unexpected_count() const { return unexpected_.size(); }

  private:
    struct receive {
        int id;
        std::int32_t source;
        std::int32_t tag;
    };
    struct message {
        int id;
        match::envelope env;
    };
    struct sender {
        std::uint32_t expected = 0;
        std::map<std::uint32_t, message> held;
    };

    void deliver(const message &m, std::vector<std::pair<int, int>> &matches)
    {
        for (std::size_t i = 0; i < posted_.size(); ++i) {
            if (accepts(posted_[i].source, posted_[i].tag, m.env)) {
                matches.emplace_back(m.id, posted_[i].id);
                posted_.erase(posted_.begin() + static_cast<std::ptrdiff_t>(i));
                return;
            }
        }
        unexpected_.push_back(m);
    }

    bool ordered_;
    std::vector<receive> posted_;
    std::vector<message> unexpected_;
    std::map<std::int32_t, sender> senders_;
};

} // namespace mpiv::test
