# test/gtest/matching: the matching engine (hash table, MPI rules, model-based stress).
noinst_HEADERS += %reldir%/reference_matcher.hpp %reldir%/comm_fixture.hpp

check_PROGRAMS += %reldir%/test_table
TESTS += %reldir%/test_table
%canon_reldir%_test_table_SOURCES = %reldir%/test_table.cc
%canon_reldir%_test_table_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_table_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_comm
TESTS += %reldir%/test_comm
%canon_reldir%_test_comm_SOURCES = %reldir%/test_comm.cc %reldir%/test_any_tag.cc
%canon_reldir%_test_comm_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_comm_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_match_model
TESTS += %reldir%/test_match_model
%canon_reldir%_test_match_model_SOURCES = %reldir%/test_match_model.cc
%canon_reldir%_test_match_model_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_match_model_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_private_comm
TESTS += %reldir%/test_private_comm
%canon_reldir%_test_private_comm_SOURCES = %reldir%/test_private_comm.cc
%canon_reldir%_test_private_comm_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_private_comm_LDADD = $(GTEST_CORE_LIBS)
