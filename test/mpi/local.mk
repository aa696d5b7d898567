# test/mpi: MPI point-to-point semantics under `mpirun --mca pml $MPIV_TEST_PML` (default mpiv).
#   Each program NAME is a C11 MPI program (test/mpi/NAME.c, helpers in mpi_test.h).
#   TESTS holds generated wrappers NAME-npN.sh that run `run.sh NAME N` (N processes);
#   run.sh picks the PML, adds the component path for mpiv, and fails on a timeout.
#   MPIV_TEST_PML=ob1 make check validates the tests themselves.
EXTRA_DIST += %reldir%/run.sh %reldir%/fallback.sh %reldir%/variants.sh %reldir%/ompi_info.sh \
	%reldir%/rogue.sh %reldir%/single_copy.sh %reldir%/stats.sh %reldir%/ucx.sh \
	%reldir%/ucx_missing.sh %reldir%/self_run.sh
noinst_HEADERS += %reldir%/mpi_test.h

if HAVE_OMPI
%canon_reldir%_cppflags = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_cflags = $(AM_CFLAGS) -std=c11 -pthread
%canon_reldir%_ldflags = $(OMPI_LDFLAGS) -pthread

# One block per program (automake needs them spelled out).
check_PROGRAMS += %reldir%/p2p_sizes
%canon_reldir%_p2p_sizes_SOURCES = %reldir%/p2p_sizes.c
%canon_reldir%_p2p_sizes_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_p2p_sizes_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_p2p_sizes_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_p2p_sizes_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/datatypes
%canon_reldir%_datatypes_SOURCES = %reldir%/datatypes.c
%canon_reldir%_datatypes_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_datatypes_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_datatypes_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_datatypes_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/wildcards
%canon_reldir%_wildcards_SOURCES = %reldir%/wildcards.c
%canon_reldir%_wildcards_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_wildcards_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_wildcards_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_wildcards_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/probe
%canon_reldir%_probe_SOURCES = %reldir%/probe.c
%canon_reldir%_probe_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_probe_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_probe_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_probe_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/cancel
%canon_reldir%_cancel_SOURCES = %reldir%/cancel.c
%canon_reldir%_cancel_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_cancel_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_cancel_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_cancel_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/recv_wait
%canon_reldir%_recv_wait_SOURCES = %reldir%/recv_wait.c
%canon_reldir%_recv_wait_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_recv_wait_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_recv_wait_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_recv_wait_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/ssend
%canon_reldir%_ssend_SOURCES = %reldir%/ssend.c
%canon_reldir%_ssend_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_ssend_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_ssend_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_ssend_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/bsend
%canon_reldir%_bsend_SOURCES = %reldir%/bsend.c
%canon_reldir%_bsend_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_bsend_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_bsend_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_bsend_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/persistent
%canon_reldir%_persistent_SOURCES = %reldir%/persistent.c
%canon_reldir%_persistent_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_persistent_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_persistent_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_persistent_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/truncate
%canon_reldir%_truncate_SOURCES = %reldir%/truncate.c
%canon_reldir%_truncate_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_truncate_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_truncate_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_truncate_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/self
%canon_reldir%_self_SOURCES = %reldir%/self.c
%canon_reldir%_self_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_self_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_self_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_self_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/request_free
%canon_reldir%_request_free_SOURCES = %reldir%/request_free.c
%canon_reldir%_request_free_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_request_free_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_request_free_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_request_free_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/fig2
%canon_reldir%_fig2_SOURCES = %reldir%/fig2.c
%canon_reldir%_fig2_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_fig2_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_fig2_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_fig2_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/mt_stress
%canon_reldir%_mt_stress_SOURCES = %reldir%/mt_stress.c
%canon_reldir%_mt_stress_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_mt_stress_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_mt_stress_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_mt_stress_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/collectives
%canon_reldir%_collectives_SOURCES = %reldir%/collectives.c
%canon_reldir%_collectives_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_collectives_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_collectives_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_collectives_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/comm_info
%canon_reldir%_comm_info_SOURCES = %reldir%/comm_info.c
%canon_reldir%_comm_info_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_comm_info_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_comm_info_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_comm_info_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/abort
%canon_reldir%_abort_SOURCES = %reldir%/abort.c
%canon_reldir%_abort_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_abort_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_abort_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_abort_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/hol_block
%canon_reldir%_hol_block_SOURCES = %reldir%/hol_block.c
%canon_reldir%_hol_block_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_hol_block_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_hol_block_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_hol_block_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/mt_sizes
%canon_reldir%_mt_sizes_SOURCES = %reldir%/mt_sizes.c
%canon_reldir%_mt_sizes_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_mt_sizes_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_mt_sizes_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_mt_sizes_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/status_error
%canon_reldir%_status_error_SOURCES = %reldir%/status_error.c
%canon_reldir%_status_error_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_status_error_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_status_error_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_status_error_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/waitany_reuse
%canon_reldir%_waitany_reuse_SOURCES = %reldir%/waitany_reuse.c
%canon_reldir%_waitany_reuse_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_waitany_reuse_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_waitany_reuse_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_waitany_reuse_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/comm_churn
%canon_reldir%_comm_churn_SOURCES = %reldir%/comm_churn.c
%canon_reldir%_comm_churn_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_comm_churn_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_comm_churn_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_comm_churn_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/waitall_sets
%canon_reldir%_waitall_sets_SOURCES = %reldir%/waitall_sets.c
%canon_reldir%_waitall_sets_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_waitall_sets_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_waitall_sets_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_waitall_sets_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/thread_churn
%canon_reldir%_thread_churn_SOURCES = %reldir%/thread_churn.c
%canon_reldir%_thread_churn_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_thread_churn_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_thread_churn_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_thread_churn_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/bsend_threads
%canon_reldir%_bsend_threads_SOURCES = %reldir%/bsend_threads.c
%canon_reldir%_bsend_threads_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_bsend_threads_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_bsend_threads_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_bsend_threads_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/nbc_threads
%canon_reldir%_nbc_threads_SOURCES = %reldir%/nbc_threads.c
%canon_reldir%_nbc_threads_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_nbc_threads_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_nbc_threads_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_nbc_threads_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/rogue
%canon_reldir%_rogue_SOURCES = %reldir%/rogue.c
%canon_reldir%_rogue_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_rogue_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_rogue_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_rogue_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/unexpected
%canon_reldir%_unexpected_SOURCES = %reldir%/unexpected.c
%canon_reldir%_unexpected_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_unexpected_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_unexpected_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_unexpected_LDADD = $(OMPI_LIBS)

check_PROGRAMS += %reldir%/mpit
%canon_reldir%_mpit_SOURCES = %reldir%/mpit.c
%canon_reldir%_mpit_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_mpit_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_mpit_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_mpit_LDADD = $(OMPI_LIBS)

# endpoints: MPIX_Comm_create_endpoints (links libmpiv-mpix).
check_PROGRAMS += %reldir%/endpoints
%canon_reldir%_endpoints_SOURCES = %reldir%/endpoints.c
%canon_reldir%_endpoints_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_endpoints_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_endpoints_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_endpoints_LDADD = ompi-component/libmpiv-mpix.la $(OMPI_LIBS)

check_PROGRAMS += %reldir%/endpoints_ult
%canon_reldir%_endpoints_ult_SOURCES = %reldir%/endpoints_ult.c
%canon_reldir%_endpoints_ult_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_endpoints_ult_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_endpoints_ult_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_endpoints_ult_LDADD = ompi-component/libmpiv-mpix.la libmpiv.la $(OMPI_LIBS)

check_PROGRAMS += %reldir%/endpoints_split
%canon_reldir%_endpoints_split_SOURCES = %reldir%/endpoints_split.c
%canon_reldir%_endpoints_split_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_endpoints_split_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_endpoints_split_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_endpoints_split_LDADD = ompi-component/libmpiv-mpix.la libmpiv.la $(OMPI_LIBS)

check_PROGRAMS += %reldir%/endpoints_p2p
%canon_reldir%_endpoints_p2p_SOURCES = %reldir%/endpoints_p2p.c
%canon_reldir%_endpoints_p2p_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_endpoints_p2p_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_endpoints_p2p_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_endpoints_p2p_LDADD = ompi-component/libmpiv-mpix.la $(OMPI_LIBS)

check_PROGRAMS += %reldir%/endpoints_idup
%canon_reldir%_endpoints_idup_SOURCES = %reldir%/endpoints_idup.c
%canon_reldir%_endpoints_idup_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_endpoints_idup_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_endpoints_idup_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_endpoints_idup_LDADD = ompi-component/libmpiv-mpix.la $(OMPI_LIBS)

# no_cma: runs a program with process_vm_readv denied (seccomp), for single_copy.sh.
check_PROGRAMS += %reldir%/no_cma
%canon_reldir%_no_cma_SOURCES = %reldir%/no_cma.c
%canon_reldir%_no_cma_CFLAGS = $(AM_CFLAGS) -std=c11

# ult: MPI from mpiv ULTs (links libmpiv for <mpiv/mpiv.h>).
check_PROGRAMS += %reldir%/ult
%canon_reldir%_ult_SOURCES = %reldir%/ult.c
%canon_reldir%_ult_CPPFLAGS = $(%canon_reldir%_cppflags)
%canon_reldir%_ult_CFLAGS = $(%canon_reldir%_cflags)
%canon_reldir%_ult_LDFLAGS = $(%canon_reldir%_ldflags)
%canon_reldir%_ult_LDADD = libmpiv.la $(OMPI_LIBS)

# Wrappers NAME-npN.sh: the name says which program runs and on how many processes.
%canon_reldir%_tests = \
	%reldir%/p2p_sizes-np2.sh \
	%reldir%/datatypes-np2.sh \
	%reldir%/wildcards-np4.sh \
	%reldir%/probe-np2.sh \
	%reldir%/cancel-np2.sh \
	%reldir%/ssend-np2.sh \
	%reldir%/bsend-np2.sh \
	%reldir%/persistent-np2.sh \
	%reldir%/truncate-np2.sh \
	%reldir%/self-np2.sh \
	%reldir%/request_free-np2.sh \
	%reldir%/fig2-np2.sh \
	%reldir%/mt_stress-np2.sh \
	%reldir%/collectives-np4.sh \
	%reldir%/comm_info-np3.sh \
	%reldir%/hol_block-np3.sh \
	%reldir%/mt_sizes-np2.sh \
	%reldir%/recv_wait-np2.sh \
	%reldir%/status_error-np2.sh \
	%reldir%/waitany_reuse-np2.sh \
	%reldir%/comm_churn-np2.sh \
	%reldir%/bsend_threads-np2.sh \
	%reldir%/thread_churn-np2.sh \
	%reldir%/waitall_sets-np2.sh \
	%reldir%/nbc_threads-np4.sh \
	%reldir%/unexpected-np2.sh \
	%reldir%/endpoints-np3.sh \
	%reldir%/endpoints_ult-np2.sh \
	%reldir%/endpoints_split-np3.sh \
	%reldir%/endpoints_p2p-np2.sh \
	%reldir%/endpoints_idup-np2.sh \
	%reldir%/ult-np2.sh
# Wrappers of runs that must end the job: NAME-npN.sh runs `abort ARG`, ARG after the '_'.
%canon_reldir%_abort_tests = \
	%reldir%/abort_mpi-np2.sh \
	%reldir%/abort_kill-np2.sh

%canon_reldir%_script_tests = %reldir%/fallback-np2.sh %reldir%/variants-np2.sh %reldir%/ompi_info-np1.sh \
	%reldir%/rogue-np2.sh %reldir%/single_copy-np2.sh %reldir%/stats-np2.sh %reldir%/ucx-np2.sh \
	%reldir%/ucx_missing-np2.sh
TESTS += $(%canon_reldir%_tests) $(%canon_reldir%_abort_tests) $(%canon_reldir%_script_tests)
CLEANFILES += $(%canon_reldir%_tests) $(%canon_reldir%_abort_tests) $(%canon_reldir%_script_tests)

# Settings from configure, overridable from the environment of `make check`.
%canon_reldir%_wrapper_env = \
	echo '\#!/bin/sh'; \
	echo ': "$${MPIV_TEST_MPIRUN:=$(OMPI_MPIRUN)}"'; \
	echo ': "$${MPIV_TEST_TOP_BUILDDIR:=$(abs_top_builddir)}"'; \
	echo ': "$${MPIV_TEST_OMPI_PKGLIBDIR:=$(OMPI_PKGLIBDIR)}"'; \
	echo ': "$${MPIV_TEST_REQUIRE_PML:=1}"'; \
	echo 'export MPIV_TEST_MPIRUN MPIV_TEST_TOP_BUILDDIR MPIV_TEST_OMPI_PKGLIBDIR MPIV_TEST_REQUIRE_PML'

$(%canon_reldir%_tests): Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && base=`basename $@ .sh` && { \
	  $(%canon_reldir%_wrapper_env); \
	  echo "exec '$(abs_top_srcdir)/%reldir%/run.sh' $${base%-np*} $${base##*-np} \"\$$@\""; \
	} >$@ && chmod +x $@

# Wrappers of scripts: NAME-npN.sh runs NAME.sh (which picks its own process counts).
$(%canon_reldir%_script_tests): Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && base=`basename $@ .sh` && { \
	  $(%canon_reldir%_wrapper_env); \
	  echo "exec '$(abs_top_srcdir)/%reldir%/$${base%-np*}.sh'"; \
	} >$@ && chmod +x $@

$(%canon_reldir%_abort_tests): Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && base=`basename $@ .sh` && base=$${base#abort_} && { \
	  $(%canon_reldir%_wrapper_env); \
	  echo "exec '$(abs_top_srcdir)/%reldir%/run.sh' --expect-abort abort $${base##*-np} $${base%-np*}"; \
	} >$@ && chmod +x $@
endif
