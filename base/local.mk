# base/: status codes, logging, cache-line constants and prefetch, back-off, futex, process-wide barriers, locks.
noinst_LTLIBRARIES += libmpiv_core.la
libmpiv_core_la_CPPFLAGS = $(AM_CPPFLAGS) -DMPIV_BUILDING_LIBRARY $(HWLOC_CFLAGS)
libmpiv_core_la_CXXFLAGS = $(AM_CXXFLAGS) $(MPIV_VIS_FLAGS)
libmpiv_core_la_CCASFLAGS = $(AM_CCASFLAGS)
libmpiv_core_la_LIBADD = $(HWLOC_LIBS) $(DL_LIBS)
libmpiv_core_la_SOURCES = \
	%reldir%/status.cpp \
	%reldir%/log.cpp \
	%reldir%/backoff.cpp \
	%reldir%/stats.cpp \
	%reldir%/cid.cpp \
	%reldir%/membarrier.cpp
noinst_HEADERS += \
	%reldir%/status.hpp \
	%reldir%/log.hpp \
	%reldir%/cacheline.hpp \
	%reldir%/copy.hpp \
	%reldir%/backoff.hpp \
	%reldir%/futex.hpp \
	%reldir%/membarrier.hpp \
	%reldir%/stats.hpp \
	%reldir%/cid.hpp
