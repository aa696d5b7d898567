// ucx::transport: the two UCX generic datatypes, whose "buffer" is an op_slot (one state
// per operation, owned by the worker that started it, so neither needs a lock):
// - the unpacker, for bulk receives that are not one buffer (see "Bulk messages" in the
//   design block of transport.hpp);
// - the copier, for small send()s (see "Messages" there).
#include <algorithm>
#include <cstring>
#include <vector>

#include "endpoints/ucx/transport.hpp"
#include "endpoints/ucx/transport_detail.hpp"

namespace mpiv::ep::ucx::detail {

void feed(op_slot &s, std::size_t offset, const void *src, std::size_t length) noexcept
{
    if (offset >= s.capacity) {
        return;
    }
    length = std::min(length, s.capacity - offset);
    if (s.sink == nullptr) {
        std::memcpy(static_cast<unsigned char *>(s.buf) + offset, src, length);
    } else {
        s.sink(s.sink_ctx, offset, src, length);
    }
}

namespace {

// The unpacker: bytes go into the slot's buffer up to its capacity, or to its sink in
// offset order (pieces ahead of the next offset wait in the slot); bytes past the capacity
// are dropped.
void *unpack_start(void *, void *buffer, std::size_t) noexcept
{
    return buffer;
}

void *pack_never(void *, const void *, std::size_t) noexcept
{
    return nullptr; // bulk sends are contiguous: never used
}

std::size_t slot_length(void *state) noexcept
{
    // (null: the state of a direction the datatype never serves, see pack_never below)
    return state != nullptr ? static_cast<op_slot *>(state)->length : 0;
}

std::size_t pack_none(void *, std::size_t, void *, std::size_t) noexcept
{
    return 0;
}

ucs_status_t unpack(void *state, std::size_t offset, const void *src, std::size_t length) noexcept
{
    op_slot &s = *static_cast<op_slot *>(state);
    if (s.sink == nullptr || offset == s.next) {
        feed(s, offset, src, length);
        s.next = std::max(s.next, offset + length);
        // Pieces that were waiting for this one.
        for (auto it = s.early.begin(); it != s.early.end() && it->first == s.next;
             it = s.early.erase(it)) {
            feed(s, it->first, it->second.data(), it->second.size());
            s.next += it->second.size();
        }
        return UCS_OK;
    }
    if (offset < s.next || offset >= s.capacity) {
        return UCS_OK; // a piece seen already, or past the capacity: dropped
    }
    try {
        const auto *b = static_cast<const unsigned char *>(src);
        s.early.emplace(offset, std::vector<unsigned char>(b, b + length));
    } catch (...) {
        return UCS_ERR_NO_MEMORY;
    }
    return UCS_OK;
}

void finish_none(void *) noexcept {}

// The copier: the slot's buf and length are the send's payload, which UCX packs (with the
// headers, which it copies itself) into its own send buffer.
void *pack_start(void *, const void *buffer, std::size_t) noexcept
{
    return const_cast<void *>(buffer);
}

std::size_t pack_payload(void *state, std::size_t offset, void *dest, std::size_t max) noexcept
{
    const op_slot &s = *static_cast<const op_slot *>(state);
    const std::size_t n = offset < s.length ? std::min(max, s.length - offset) : 0;
    if (n != 0) {
        std::memcpy(dest, static_cast<const unsigned char *>(s.buf) + offset, n);
    }
    return n;
}

void *unpack_never(void *, void *, std::size_t) noexcept
{
    return nullptr; // a copied send arrives as an ordinary active message: never used
}

ucs_status_t unpack_none(void *, std::size_t, const void *, std::size_t) noexcept
{
    return UCS_ERR_UNSUPPORTED;
}

ucp_generic_dt_ops_t unpacker_ops = {pack_never, unpack_start, slot_length,
                                     pack_none,  unpack,       finish_none};
ucp_generic_dt_ops_t copier_ops = {pack_start,   unpack_never, slot_length,
                                   pack_payload, unpack_none,  finish_none};

} // namespace

status make_datatypes(state &st) noexcept
{
    ucs_status_t s = api().ucp_dt_create_generic(&unpacker_ops, nullptr, &st.unpacker);
    if (s != UCS_OK) {
        st.unpacker = 0;
        return ucs_error("create", "ucp_dt_create_generic", s);
    }
    s = api().ucp_dt_create_generic(&copier_ops, nullptr, &st.copier);
    if (s != UCS_OK) {
        st.copier = 0;
        return ucs_error("create", "ucp_dt_create_generic", s);
    }
    return status::ok;
}

void destroy_datatypes(state &st) noexcept
{
    for (ucp_datatype_t *dt : {&st.unpacker, &st.copier}) {
        if (*dt != 0) {
            api().ucp_dt_destroy(*dt);
            *dt = 0;
        }
    }
}

} // namespace mpiv::ep::ucx::detail
