# sched/: workers, ULTs, bit-vector scheduler, context switch (assembly per ISA).
libmpiv_core_la_SOURCES += \
	%reldir%/context.cpp \
	%reldir%/stack_pool.cpp \
	%reldir%/sync.cpp \
	%reldir%/worker.cpp \
	%reldir%/runtime.cpp
if MPIV_ISA_X86_64
libmpiv_core_la_SOURCES += %reldir%/arch/x86_64/mpiv_ctx_x86_64_sysv.S
endif
if MPIV_ISA_AARCH64
libmpiv_core_la_SOURCES += %reldir%/arch/aarch64/mpiv_ctx_aarch64_aapcs.S
endif
noinst_HEADERS += \
	%reldir%/context.hpp \
	%reldir%/runset.hpp \
	%reldir%/stack_pool.hpp \
	%reldir%/sync.hpp \
	%reldir%/worker.hpp \
	%reldir%/runtime.hpp
EXTRA_DIST += \
	%reldir%/arch/x86_64/mpiv_ctx_x86_64_sysv.S \
	%reldir%/arch/aarch64/mpiv_ctx_aarch64_aapcs.S
