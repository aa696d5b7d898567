# test/gtest/sched: context switch, run set, scheduler core, stack prefetch, sync modes,
# ULTs parked in queue locks.
noinst_HEADERS += %reldir%/sched_fixture.hpp %reldir%/cache_defaults.hpp
check_PROGRAMS += %reldir%/test_context %reldir%/test_runset %reldir%/test_sched \
	%reldir%/test_prefetch %reldir%/test_sync %reldir%/test_lock_park
TESTS += %reldir%/test_context %reldir%/test_runset %reldir%/test_sched \
	%reldir%/test_prefetch %reldir%/test_sync %reldir%/test_lock_park
%canon_reldir%_test_context_SOURCES = %reldir%/test_context.cc
%canon_reldir%_test_context_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_context_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_runset_SOURCES = %reldir%/test_runset.cc
%canon_reldir%_test_runset_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_runset_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_sched_SOURCES = %reldir%/test_sched.cc
%canon_reldir%_test_sched_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_sched_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_prefetch_SOURCES = %reldir%/test_prefetch.cc
%canon_reldir%_test_prefetch_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_prefetch_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_sync_SOURCES = %reldir%/test_sync.cc
%canon_reldir%_test_sync_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_sync_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_lock_park_SOURCES = %reldir%/test_lock_park.cc
%canon_reldir%_test_lock_park_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_lock_park_LDADD = $(GTEST_CORE_LIBS)
