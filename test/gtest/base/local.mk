# test/gtest/base: the lock library (base/lock/, header-only) and its conformance suite;
# copy_small (base/copy.hpp); the heavy barrier (base/membarrier.hpp).
noinst_HEADERS += \
	base/lock/lock.hpp \
	base/lock/mutex.hpp \
	base/lock/tas.hpp \
	base/lock/ticket.hpp \
	base/lock/mcs.hpp \
	base/lock/hmcs.hpp \
	base/lock/tlp.hpp

check_PROGRAMS += %reldir%/test_locks
TESTS += %reldir%/test_locks
%canon_reldir%_test_locks_SOURCES = %reldir%/test_locks.cc
%canon_reldir%_test_locks_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_locks_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_copy
TESTS += %reldir%/test_copy
%canon_reldir%_test_copy_SOURCES = %reldir%/test_copy.cc
%canon_reldir%_test_copy_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_copy_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_membarrier
TESTS += %reldir%/test_membarrier
%canon_reldir%_test_membarrier_SOURCES = %reldir%/test_membarrier.cc
%canon_reldir%_test_membarrier_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_membarrier_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_stats
TESTS += %reldir%/test_stats
%canon_reldir%_test_stats_SOURCES = %reldir%/test_stats.cc
%canon_reldir%_test_stats_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_stats_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_cid
TESTS += %reldir%/test_cid
%canon_reldir%_test_cid_SOURCES = %reldir%/test_cid.cc
%canon_reldir%_test_cid_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_cid_LDADD = $(GTEST_CORE_LIBS)
