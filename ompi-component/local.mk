# ompi-component/: mca_pml_mpiv.so, the Open MPI 4.1 PML component (C: Open MPI's headers
# are C-only). It links libmpiv.so so that the application and the plugin share one mpiv
# runtime per process, and exports only mca_pml_mpiv_component.
# Installed into $(ompicomponentdir): configure --with-ompi-component-dir (the quick start
# uses $HOME/.openmpi/components, where Open MPI looks without root).
if HAVE_OMPI
ompicomponent_LTLIBRARIES = %reldir%/mca_pml_mpiv.la
%canon_reldir%_mca_pml_mpiv_la_SOURCES = \
	%reldir%/pml_mpiv_component.c \
	%reldir%/pml_mpiv.c \
	%reldir%/pml_mpiv_peers.c \
	%reldir%/pml_mpiv_stats.c \
	%reldir%/pml_mpiv_endpoints.c \
	%reldir%/pml_mpiv_endpoints_ops.c \
	%reldir%/pml_mpiv_endpoints_meet.c \
	%reldir%/pml_mpiv_request.c \
	%reldir%/pml_mpiv_wait.c
%canon_reldir%_mca_pml_mpiv_la_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_mca_pml_mpiv_la_CFLAGS = $(AM_CFLAGS) $(MPIV_VIS_FLAGS) $(OMPI_COMPONENT_CFLAGS) -std=gnu11 \
	-Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers
%canon_reldir%_mca_pml_mpiv_la_LDFLAGS = -module -avoid-version -no-undefined $(OMPI_LDFLAGS)
%canon_reldir%_mca_pml_mpiv_la_LIBADD = libmpiv.la $(OMPI_LIBS) -lopen-pal -lopen-rte

# libmpiv-mpix: MPIX_Comm_create_endpoints for applications (<mpiv/mpix_endpoints.h>).
lib_LTLIBRARIES += %reldir%/libmpiv-mpix.la
%canon_reldir%_libmpiv_mpix_la_SOURCES = %reldir%/mpix_endpoints.c
%canon_reldir%_libmpiv_mpix_la_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_CPPFLAGS)
%canon_reldir%_libmpiv_mpix_la_CFLAGS = $(AM_CFLAGS) -std=gnu11 -Wno-unused-parameter
%canon_reldir%_libmpiv_mpix_la_LDFLAGS = -avoid-version $(OMPI_LDFLAGS)
%canon_reldir%_libmpiv_mpix_la_LIBADD = $(OMPI_LIBS) -lopen-pal -ldl
endif
noinst_HEADERS += %reldir%/pml_mpiv.h %reldir%/pml_mpiv_endpoints.h %reldir%/pml_mpiv_endpoints_ops.h \
	%reldir%/pml_mpiv_mpix.h
