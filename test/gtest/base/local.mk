# test/gtest/base: the lock library (base/lock/, header-only) and its conformance suite.
noinst_HEADERS += \
	base/lock/lock.hpp \
	base/lock/mutex.hpp \
	base/lock/ticket.hpp \
	base/lock/mcs.hpp \
	base/lock/hmcs.hpp \
	base/lock/tlp.hpp

check_PROGRAMS += %reldir%/test_locks
TESTS += %reldir%/test_locks
%canon_reldir%_test_locks_SOURCES = %reldir%/test_locks.cc
%canon_reldir%_test_locks_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_locks_LDADD = $(GTEST_CORE_LIBS)
