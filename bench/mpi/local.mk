# bench/mpi: MPI benchmarks and the comparison driver bench/compare (see bench/README.md).
# Each benchmark is built against Open MPI (bench/mpi/NAME) and, when MPICH is installed,
# against MPICH (bench/mpi/NAME.mpich). `make install` puts the driver in
# $(pkglibexecdir)/bench and the benchmarks in $(pkglibexecdir)/bench/mpi, the same layout
# as in a build tree, so bench/compare finds them next to itself.
EXTRA_DIST += bench/README.md
if HAVE_OMPI
benchdir = $(pkglibexecdir)/bench
benchmpidir = $(pkglibexecdir)/bench/mpi
dist_bench_SCRIPTS = bench/compare
dist_noinst_SCRIPTS += %reldir%/smoke.sh %reldir%/compare_smoke.sh

BENCH_MPI_CFLAGS = -std=c11 $(AM_CFLAGS)

noinst_LTLIBRARIES += %reldir%/libbench_mpi.la
%canon_reldir%_libbench_mpi_la_SOURCES = %reldir%/bench_common.c %reldir%/bench_common.h \
	%reldir%/bench_kernels.c %reldir%/bench_kernels.h
%canon_reldir%_libbench_mpi_la_CPPFLAGS = $(OMPI_CPPFLAGS)
%canon_reldir%_libbench_mpi_la_CFLAGS = $(BENCH_MPI_CFLAGS)

benchmpi_PROGRAMS = %reldir%/mt_pingpong %reldir%/msgrate %reldir%/latbw %reldir%/overlap \
	%reldir%/oversub
BENCH_MPI_LDADD = %reldir%/libbench_mpi.la $(OMPI_LIBS)
%canon_reldir%_mt_pingpong_SOURCES = %reldir%/mt_pingpong.c
%canon_reldir%_mt_pingpong_CPPFLAGS = $(OMPI_CPPFLAGS)
%canon_reldir%_mt_pingpong_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_mt_pingpong_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_mt_pingpong_LDADD = $(BENCH_MPI_LDADD)
%canon_reldir%_msgrate_SOURCES = %reldir%/msgrate.c
%canon_reldir%_msgrate_CPPFLAGS = $(OMPI_CPPFLAGS)
%canon_reldir%_msgrate_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_msgrate_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_msgrate_LDADD = $(BENCH_MPI_LDADD)
%canon_reldir%_latbw_SOURCES = %reldir%/latbw.c
%canon_reldir%_latbw_CPPFLAGS = $(OMPI_CPPFLAGS)
%canon_reldir%_latbw_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_latbw_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_latbw_LDADD = $(BENCH_MPI_LDADD)
%canon_reldir%_oversub_SOURCES = %reldir%/oversub.c
%canon_reldir%_oversub_CPPFLAGS = $(OMPI_CPPFLAGS)
%canon_reldir%_oversub_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_oversub_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_oversub_LDADD = $(BENCH_MPI_LDADD)
# The programs below need pml mpiv: Open MPI only. ult_pingpong uses mpiv's ULTs (libmpiv);
# ep_pingpong and ep_msgrate use MPIX_Comm_create_endpoints (libmpiv-mpix) and ULTs.
# libbench_mpiv holds their shared code: ULT teams (bench_ult) and the ABBA runs (bench_ep).
noinst_LTLIBRARIES += %reldir%/libbench_mpiv.la
%canon_reldir%_libbench_mpiv_la_SOURCES = %reldir%/bench_ult.c %reldir%/bench_ult.h \
	%reldir%/bench_ep.c %reldir%/bench_ep.h
%canon_reldir%_libbench_mpiv_la_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_libbench_mpiv_la_CFLAGS = $(BENCH_MPI_CFLAGS)
benchmpi_PROGRAMS += %reldir%/ult_pingpong
%canon_reldir%_ult_pingpong_SOURCES = %reldir%/ult_pingpong.c
%canon_reldir%_ult_pingpong_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_ult_pingpong_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_ult_pingpong_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_ult_pingpong_LDADD = %reldir%/libbench_mpiv.la %reldir%/libbench_mpi.la \
	libmpiv.la $(OMPI_LIBS)
benchmpi_PROGRAMS += %reldir%/ep_pingpong %reldir%/ep_msgrate
BENCH_EP_LDADD = %reldir%/libbench_mpiv.la %reldir%/libbench_mpi.la \
	ompi-component/libmpiv-mpix.la libmpiv.la $(OMPI_LIBS)
%canon_reldir%_ep_pingpong_SOURCES = %reldir%/ep_pingpong.c
%canon_reldir%_ep_pingpong_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_ep_pingpong_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_ep_pingpong_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_ep_pingpong_LDADD = $(BENCH_EP_LDADD)
%canon_reldir%_ep_msgrate_SOURCES = %reldir%/ep_msgrate.c
%canon_reldir%_ep_msgrate_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_ep_msgrate_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_ep_msgrate_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_ep_msgrate_LDADD = $(BENCH_EP_LDADD)
# line_rtt: no MPI; the cache-line round trip between two PUs that bench/compare records.
benchmpi_PROGRAMS += %reldir%/line_rtt
%canon_reldir%_line_rtt_SOURCES = %reldir%/line_rtt.c %reldir%/probe.h
%canon_reldir%_line_rtt_CFLAGS = $(BENCH_MPI_CFLAGS) -pthread
%canon_reldir%_line_rtt_LDFLAGS = -pthread
# mem_lat: no MPI; memory latency and a ULT-like footprint beyond the last-level cache.
benchmpi_PROGRAMS += %reldir%/mem_lat
%canon_reldir%_mem_lat_SOURCES = %reldir%/mem_lat.c %reldir%/probe.h
%canon_reldir%_mem_lat_CFLAGS = $(BENCH_MPI_CFLAGS)
# overlap.c stands alone, without the common code of the other benchmarks.
%canon_reldir%_overlap_SOURCES = %reldir%/overlap.c
%canon_reldir%_overlap_CPPFLAGS = $(OMPI_CPPFLAGS)
%canon_reldir%_overlap_CFLAGS = $(BENCH_MPI_CFLAGS)
%canon_reldir%_overlap_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_overlap_LDADD = $(OMPI_LIBS)

# The same programs against MPICH, compiled with its wrapper. gcc 12 misreads MPICH's
# MPI_STATUSES_IGNORE (a cast constant) as a zero-length array: -Wno-stringop-overflow.
if HAVE_MPICH
BENCH_MPI_COMMON_SRC = $(srcdir)/%reldir%/bench_common.c $(srcdir)/%reldir%/bench_kernels.c
BENCH_MPI_COMMON_DEPS = $(BENCH_MPI_COMMON_SRC) $(srcdir)/%reldir%/bench_common.h \
	$(srcdir)/%reldir%/bench_kernels.h
BENCH_MPICH_BUILD = $(AM_V_CC)$(MKDIR_P) %reldir% && $(MPICH_MPICC) $(BENCH_MPI_CFLAGS) \
	-Wno-stringop-overflow $(CFLAGS) $(LDFLAGS) -o $@
benchmpi_SCRIPTS = %reldir%/mt_pingpong.mpich %reldir%/msgrate.mpich %reldir%/latbw.mpich \
	%reldir%/overlap.mpich %reldir%/oversub.mpich
CLEANFILES += $(benchmpi_SCRIPTS)
%reldir%/mt_pingpong.mpich: $(srcdir)/%reldir%/mt_pingpong.c $(BENCH_MPI_COMMON_DEPS)
	$(BENCH_MPICH_BUILD) $(srcdir)/%reldir%/mt_pingpong.c $(BENCH_MPI_COMMON_SRC) $(LIBS)
%reldir%/msgrate.mpich: $(srcdir)/%reldir%/msgrate.c $(BENCH_MPI_COMMON_DEPS)
	$(BENCH_MPICH_BUILD) $(srcdir)/%reldir%/msgrate.c $(BENCH_MPI_COMMON_SRC) $(LIBS)
%reldir%/latbw.mpich: $(srcdir)/%reldir%/latbw.c $(BENCH_MPI_COMMON_DEPS)
	$(BENCH_MPICH_BUILD) $(srcdir)/%reldir%/latbw.c $(BENCH_MPI_COMMON_SRC) $(LIBS)
%reldir%/oversub.mpich: $(srcdir)/%reldir%/oversub.c $(BENCH_MPI_COMMON_DEPS)
	$(BENCH_MPICH_BUILD) $(srcdir)/%reldir%/oversub.c $(BENCH_MPI_COMMON_SRC) $(LIBS)
%reldir%/overlap.mpich: $(srcdir)/%reldir%/overlap.c
	$(BENCH_MPICH_BUILD) $(srcdir)/%reldir%/overlap.c $(LIBS)
endif

# make check: one tiny run of every benchmark (Open MPI ob1, MPICH when present, and pml mpiv
# of this build tree for ult_pingpong), and a tiny run of the driver. The .test wrappers carry
# the launchers configure found and where the uninstalled mpiv component is.
TESTS += %reldir%/smoke.test %reldir%/compare_smoke.test
CLEANFILES += %reldir%/smoke.test %reldir%/compare_smoke.test
BENCH_SMOKE_ENV = MPIV_BUILDDIR="$(abs_top_builddir)"; OMPI_PKGLIBDIR="$(OMPI_PKGLIBDIR)"; \
	export MPIV_BUILDDIR OMPI_PKGLIBDIR
%reldir%/smoke.test: Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && \
	printf '#!/bin/sh\n%s\nexec %s "%s" "%s" "%s" "%s"\n' '$(BENCH_SMOKE_ENV)' '$(SHELL)' \
	  '$(abs_srcdir)/%reldir%/smoke.sh' '$(abs_builddir)/%reldir%' \
	  '$(OMPI_MPIRUN)' '$(MPICH_MPIEXEC)' > $@ && chmod +x $@
%reldir%/compare_smoke.test: Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && \
	printf '#!/bin/sh\n%s\nexec %s "%s" "%s" "%s" "%s" "%s"\n' '$(BENCH_SMOKE_ENV)' '$(SHELL)' \
	  '$(abs_srcdir)/%reldir%/compare_smoke.sh' '$(abs_srcdir)/bench/compare' \
	  '$(abs_builddir)/%reldir%' '$(OMPI_MPIRUN)' '$(MPICH_MPIEXEC)' > $@ && chmod +x $@
endif
