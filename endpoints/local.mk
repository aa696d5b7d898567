# endpoints/: the point-to-point engine (<mpiv/mpiv_p2p.h>) and its transports.
libmpiv_core_la_SOURCES += %reldir%/engine.cpp %reldir%/engine_send.cpp %reldir%/engine_ucx.cpp \
	%reldir%/engine_recv.cpp %reldir%/engine_cma.cpp %reldir%/engine_wait.cpp \
	%reldir%/engine_copy.cpp
noinst_HEADERS += %reldir%/engine.hpp %reldir%/engine_detail.hpp %reldir%/token_table.hpp \
	%reldir%/transport.hpp %reldir%/wire.hpp

# endpoints/shm/: shared-memory building blocks (MPSC queue, memfd segments, CMA).
libmpiv_core_la_SOURCES += \
	%reldir%/shm/segment.cpp \
	%reldir%/shm/transport.cpp \
	%reldir%/shm/cma.cpp
noinst_HEADERS += \
	%reldir%/shm/mpsc_queue.hpp \
	%reldir%/shm/segment.hpp \
	%reldir%/shm/transport.hpp \
	%reldir%/shm/cma.hpp \
	%reldir%/shm/sys_error.hpp
