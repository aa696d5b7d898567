# pool/: the locality-aware packet pool (header-only templates on the atomic type).
noinst_HEADERS += \
	%reldir%/index_stack.hpp \
	%reldir%/private_deque.hpp \
	%reldir%/packet_region.hpp \
	%reldir%/packet_pool.hpp \
	%reldir%/packet_pool_inl.hpp
