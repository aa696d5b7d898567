# test/gtest/sched: context switch, run set, scheduler core.
check_PROGRAMS += %reldir%/test_context %reldir%/test_runset %reldir%/test_sched
TESTS += %reldir%/test_context %reldir%/test_runset %reldir%/test_sched
%canon_reldir%_test_context_SOURCES = %reldir%/test_context.cc
%canon_reldir%_test_context_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_context_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_runset_SOURCES = %reldir%/test_runset.cc
%canon_reldir%_test_runset_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_runset_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_sched_SOURCES = %reldir%/test_sched.cc
%canon_reldir%_test_sched_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_sched_LDADD = $(GTEST_CORE_LIBS)
