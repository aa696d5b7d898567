# test/gtest/endpoints: shared-memory transport building blocks (queue, segment, CMA)
# and the point-to-point engine over them.
noinst_HEADERS += %reldir%/shm_test_util.hpp %reldir%/engine_test_util.hpp \
	%reldir%/engine_fixture.hpp

check_PROGRAMS += %reldir%/test_mpsc_queue
TESTS += %reldir%/test_mpsc_queue
%canon_reldir%_test_mpsc_queue_SOURCES = %reldir%/test_mpsc_queue.cc
%canon_reldir%_test_mpsc_queue_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_mpsc_queue_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_segment
TESTS += %reldir%/test_segment
%canon_reldir%_test_segment_SOURCES = %reldir%/test_segment.cc
%canon_reldir%_test_segment_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_segment_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_cma
TESTS += %reldir%/test_cma
%canon_reldir%_test_cma_SOURCES = %reldir%/test_cma.cc
%canon_reldir%_test_cma_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_cma_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_engine
TESTS += %reldir%/test_engine
%canon_reldir%_test_engine_SOURCES = %reldir%/test_engine.cc
%canon_reldir%_test_engine_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_engine_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_engine_levels
TESTS += %reldir%/test_engine_levels
%canon_reldir%_test_engine_levels_SOURCES = %reldir%/test_engine_levels.cc
%canon_reldir%_test_engine_levels_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_engine_levels_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_engine_progress
TESTS += %reldir%/test_engine_progress
%canon_reldir%_test_engine_progress_SOURCES = %reldir%/test_engine_progress.cc
%canon_reldir%_test_engine_progress_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_engine_progress_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_engine_batch
TESTS += %reldir%/test_engine_batch
%canon_reldir%_test_engine_batch_SOURCES = %reldir%/test_engine_batch.cc
%canon_reldir%_test_engine_batch_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_engine_batch_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_engine_input
TESTS += %reldir%/test_engine_input
%canon_reldir%_test_engine_input_SOURCES = %reldir%/test_engine_input.cc
%canon_reldir%_test_engine_input_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_engine_input_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_outbound
TESTS += %reldir%/test_outbound
%canon_reldir%_test_outbound_SOURCES = %reldir%/test_outbound.cc
%canon_reldir%_test_outbound_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_outbound_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_fuzz
TESTS += %reldir%/test_fuzz
%canon_reldir%_test_fuzz_SOURCES = %reldir%/test_fuzz.cc
%canon_reldir%_test_fuzz_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_fuzz_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_engine_drainers
TESTS += %reldir%/test_engine_drainers
%canon_reldir%_test_engine_drainers_SOURCES = %reldir%/test_engine_drainers.cc
%canon_reldir%_test_engine_drainers_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_engine_drainers_LDADD = $(GTEST_CORE_LIBS)

check_PROGRAMS += %reldir%/test_endpoints
TESTS += %reldir%/test_endpoints
%canon_reldir%_test_endpoints_SOURCES = %reldir%/test_endpoints.cc
%canon_reldir%_test_endpoints_CPPFLAGS = $(GTEST_CPPFLAGS)
%canon_reldir%_test_endpoints_LDADD = $(GTEST_CORE_LIBS)

noinst_HEADERS += %reldir%/ucx_fixture.hpp
if HAVE_UCX
check_PROGRAMS += %reldir%/test_ucx_transport %reldir%/test_ucx_transport_input \
	%reldir%/test_ucx_transport_bulk %reldir%/test_engine_ucx
TESTS += %reldir%/test_ucx_transport %reldir%/test_ucx_transport_input \
	%reldir%/test_ucx_transport_bulk %reldir%/test_engine_ucx
%canon_reldir%_test_engine_ucx_SOURCES = %reldir%/test_engine_ucx.cc
%canon_reldir%_test_engine_ucx_CPPFLAGS = $(GTEST_CPPFLAGS) $(UCX_CFLAGS)
%canon_reldir%_test_engine_ucx_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_ucx_transport_SOURCES = %reldir%/test_ucx_transport.cc
%canon_reldir%_test_ucx_transport_CPPFLAGS = $(GTEST_CPPFLAGS) $(UCX_CFLAGS)
%canon_reldir%_test_ucx_transport_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_ucx_transport_input_SOURCES = %reldir%/test_ucx_transport_input.cc
%canon_reldir%_test_ucx_transport_input_CPPFLAGS = $(GTEST_CPPFLAGS) $(UCX_CFLAGS)
%canon_reldir%_test_ucx_transport_input_LDADD = $(GTEST_CORE_LIBS)
%canon_reldir%_test_ucx_transport_bulk_SOURCES = %reldir%/test_ucx_transport_bulk.cc
%canon_reldir%_test_ucx_transport_bulk_CPPFLAGS = $(GTEST_CPPFLAGS) $(UCX_CFLAGS)
%canon_reldir%_test_ucx_transport_bulk_LDADD = $(GTEST_CORE_LIBS)
endif
