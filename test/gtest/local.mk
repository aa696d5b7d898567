# GoogleTest suites, one program per unit; `make check` runs them all.
# Core tests link the static convenience library (they see internal C++ symbols);
# API tests link libmpiv.la (they see only the exported C ABI).
if HAVE_GTEST
GTEST_CPPFLAGS = $(AM_CPPFLAGS) $(GTEST_CFLAGS) $(HWLOC_CFLAGS)
GTEST_CORE_LIBS = libmpiv_core.la $(GTEST_LIBS) $(HWLOC_LIBS)
GTEST_API_LIBS = libmpiv.la $(GTEST_LIBS)
noinst_HEADERS += %reldir%/common/stress.hpp %reldir%/common/test_util.hpp \
	%reldir%/common/holder_race.hpp

include test/gtest/base/local.mk
include test/gtest/sched/local.mk
include test/gtest/matching/local.mk
include test/gtest/pool/local.mk
include test/gtest/endpoints/local.mk
include test/gtest/capi/local.mk
endif
