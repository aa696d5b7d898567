# endpoints/ucx/: the UCX network transport (opaque headers and payloads between
# (process, worker) pairs; no MPI matching). Built when configure finds UCX (--with-ucx).
if HAVE_UCX
# UCX's headers only: its libraries are loaded at run time (ucx_api.hpp).
libmpiv_core_la_SOURCES += %reldir%/transport.cpp %reldir%/transport_recv.cpp \
	%reldir%/transport_bulk.cpp %reldir%/transport_datatypes.cpp %reldir%/transport_send.cpp \
	%reldir%/ucx_api.cpp
libmpiv_core_la_CPPFLAGS += $(UCX_CFLAGS)
noinst_HEADERS += %reldir%/transport.hpp %reldir%/transport_detail.hpp %reldir%/ucx_api.hpp
endif
