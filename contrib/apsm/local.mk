# contrib/apsm: asynchronous progress through PMPI (seed 002).
#   libmpiv-apsm.so        for Open MPI (libtool, OMPI_* flags from configure)
#   libmpiv-apsm-mpich.so  for MPICH: automake compiles with one CC, so an explicit rule builds
#                          it with $(MPICH_MPICC); installed next to the Open MPI one.
#   test-apsm[-mpich]      test program, run by run_apsm_test.sh under mpirun/mpiexec with and
#                          without the library; the MPICH one is linked by $(MPICH_MPICC)
#                          through the per-program _LINK variable.
%canon_reldir%_sources = \
	%reldir%/apsm_init.c \
	%reldir%/apsm_progress.c \
	%reldir%/apsm_p2p.c \
	%reldir%/apsm_wait.c \
	%reldir%/apsm_io.c \
	%reldir%/apsm_pin.c
%canon_reldir%_headers = %reldir%/apsm.h %reldir%/mpiv_apsm.h
%canon_reldir%_cflags = -DMPIV_BUILDING_LIBRARY $(MPIV_VIS_FLAGS) -pthread

mpivinclude_HEADERS += %reldir%/mpiv_apsm.h
noinst_HEADERS += %reldir%/apsm.h
EXTRA_DIST += %reldir%/README.md %reldir%/run_apsm_test.sh
CLEANFILES += %reldir%/test-apsm-ompi.sh

if HAVE_OMPI
lib_LTLIBRARIES += %reldir%/libmpiv-apsm.la
%canon_reldir%_libmpiv_apsm_la_SOURCES = $(%canon_reldir%_sources)
%canon_reldir%_libmpiv_apsm_la_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS) $(HWLOC_CFLAGS)
%canon_reldir%_libmpiv_apsm_la_CFLAGS = $(AM_CFLAGS) $(%canon_reldir%_cflags)
%canon_reldir%_libmpiv_apsm_la_LDFLAGS = -avoid-version $(OMPI_LDFLAGS)
%canon_reldir%_libmpiv_apsm_la_LIBADD = $(OMPI_LIBS) $(HWLOC_LIBS)

check_PROGRAMS += %reldir%/test-apsm
%canon_reldir%_test_apsm_SOURCES = %reldir%/test_apsm.c
%canon_reldir%_test_apsm_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS) -I$(srcdir)/%reldir%
%canon_reldir%_test_apsm_CFLAGS = $(AM_CFLAGS) -pthread
%canon_reldir%_test_apsm_LDFLAGS = $(OMPI_LDFLAGS)
%canon_reldir%_test_apsm_LDADD = $(OMPI_LIBS)

TESTS += %reldir%/test-apsm-ompi.sh
%reldir%/test-apsm-ompi.sh: Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && { \
	  echo '#!/bin/sh'; \
	  printf 'exec "%s" ompi "%s" "%s" "%s"\n' "$(abs_top_srcdir)/%reldir%/run_apsm_test.sh" \
	    "$(OMPI_MPIRUN)" "$(abs_top_builddir)/%reldir%/test-apsm" \
	    "$(abs_top_builddir)/%reldir%/.libs/libmpiv-apsm.so"; \
	} >$@ && chmod +x $@
endif

if HAVE_MPICH
%canon_reldir%_mpichlibdir = $(libdir)
%canon_reldir%_mpichlib_DATA = %reldir%/libmpiv-apsm-mpich.so
CLEANFILES += %reldir%/libmpiv-apsm-mpich.so %reldir%/test-apsm-mpich.sh
%reldir%/libmpiv-apsm-mpich.so: $(%canon_reldir%_sources) $(%canon_reldir%_headers)
	$(AM_V_CCLD)$(MKDIR_P) %reldir% && $(MPICH_MPICC) -shared -fPIC $(%canon_reldir%_cflags) \
	  -I$(top_srcdir)/include $(HWLOC_CFLAGS) $(AM_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ \
	  $(%canon_reldir%_sources:%=$(srcdir)/%) $(HWLOC_LIBS)

check_PROGRAMS += %reldir%/test-apsm-mpich
%canon_reldir%_test_apsm_mpich_SOURCES =
%canon_reldir%_test_apsm_mpich_DEPENDENCIES = %reldir%/test_apsm.c %reldir%/mpiv_apsm.h
%canon_reldir%_test_apsm_mpich_LINK = $(MPICH_MPICC) -pthread -I$(top_srcdir)/include \
	-I$(srcdir)/%reldir% $(AM_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(srcdir)/%reldir%/test_apsm.c

TESTS += %reldir%/test-apsm-mpich.sh
%reldir%/test-apsm-mpich.sh: Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && { \
	  echo '#!/bin/sh'; \
	  printf 'exec "%s" mpich "%s" "%s" "%s"\n' "$(abs_top_srcdir)/%reldir%/run_apsm_test.sh" \
	    "$(MPICH_MPIEXEC)" "$(abs_top_builddir)/%reldir%/test-apsm-mpich" \
	    "$(abs_top_builddir)/%reldir%/libmpiv-apsm-mpich.so"; \
	} >$@ && chmod +x $@
endif
