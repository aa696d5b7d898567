# test/gtest/capi: the exported C ABI, through libmpiv.so only.
check_PROGRAMS += %reldir%/test_api %reldir%/test_c_header
TESTS += %reldir%/test_api %reldir%/test_c_header %reldir%/exports.sh
EXTRA_DIST += %reldir%/exports.sh
%canon_reldir%_test_api_SOURCES = %reldir%/test_api.cc
%canon_reldir%_test_api_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_api_LDADD = $(GTEST_API_LIBS) $(DL_LIBS)
%canon_reldir%_test_c_header_SOURCES = %reldir%/test_c_header.c
%canon_reldir%_test_c_header_CFLAGS = $(AM_CFLAGS) -std=c11 -pedantic
%canon_reldir%_test_c_header_LDADD = libmpiv.la
