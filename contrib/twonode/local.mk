# contrib/twonode/: two "nodes" on one machine (network and UTS namespaces joined by a veth
# pair), an rsh agent that lets mpirun start orted on them, and the MPI tests across them
# (check.sh: ob1 over tcp between the nodes; mpiv,ob1 with mpiv's multi-node behaviour).
dist_noinst_SCRIPTS += %reldir%/twonode.sh %reldir%/rsh-agent.sh %reldir%/check.sh

if HAVE_OMPI
# procname: where each rank runs (MPI_Get_processor_name, ranks per node) and a ring.
check_PROGRAMS += %reldir%/procname
%canon_reldir%_procname_SOURCES = %reldir%/procname.c
%canon_reldir%_procname_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_procname_CFLAGS = $(AM_CFLAGS) -std=c11
%canon_reldir%_procname_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_procname_LDADD = $(OMPI_LIBS)

# The test: a wrapper with test/mpi's settings from configure (test/mpi/local.mk) that runs
# check.sh (which skips, exit 77, where namespaces are not allowed).
%canon_reldir%_tests = %reldir%/twonode-check.sh
TESTS += $(%canon_reldir%_tests)
CLEANFILES += $(%canon_reldir%_tests)
$(%canon_reldir%_tests): Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && { \
	  $(test_mpi_wrapper_env); \
	  echo "exec '$(abs_top_srcdir)/%reldir%/check.sh'"; \
	} >$@ && chmod +x $@
endif
