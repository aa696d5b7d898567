# capi/: the extern "C" implementation of <mpiv/mpiv.h>, linked into libmpiv.so.
lib_LTLIBRARIES += libmpiv.la
libmpiv_la_CPPFLAGS = $(AM_CPPFLAGS) -DMPIV_BUILDING_LIBRARY $(HWLOC_CFLAGS)
libmpiv_la_CXXFLAGS = $(AM_CXXFLAGS) $(MPIV_VIS_FLAGS)
libmpiv_la_SOURCES = \
	%reldir%/capi_base.cpp \
	%reldir%/capi_sched.cpp \
	%reldir%/capi_p2p.cpp
libmpiv_la_LIBADD = libmpiv_core.la
libmpiv_la_LDFLAGS = -version-info 0:0:0 $(MPIV_EXPORT_LDFLAGS)
libmpiv_la_DEPENDENCIES = libmpiv_core.la %reldir%/libmpiv.map
EXTRA_DIST += %reldir%/libmpiv.map
