# test/gtest/pool: the packet pool (index stack, private deque, region, pool).
noinst_HEADERS += %reldir%/pool_test_util.hpp

check_PROGRAMS += %reldir%/test_index_stack
TESTS += %reldir%/test_index_stack
%canon_reldir%_test_index_stack_SOURCES = %reldir%/test_index_stack.cc
%canon_reldir%_test_index_stack_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_index_stack_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_private_deque
TESTS += %reldir%/test_private_deque
%canon_reldir%_test_private_deque_SOURCES = %reldir%/test_private_deque.cc
%canon_reldir%_test_private_deque_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_private_deque_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_packet_region
TESTS += %reldir%/test_packet_region
%canon_reldir%_test_packet_region_SOURCES = %reldir%/test_packet_region.cc
%canon_reldir%_test_packet_region_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_packet_region_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_packet_pool
TESTS += %reldir%/test_packet_pool
%canon_reldir%_test_packet_pool_SOURCES = %reldir%/test_packet_pool.cc
%canon_reldir%_test_packet_pool_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_packet_pool_LDADD = $(GTEST_CORE_LIBS)
