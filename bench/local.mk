# Benchmarks: Google Benchmark microbenchmarks (bench/mpiv-bench-*), MPI benchmarks
# (bench/mpi/) and the comparison driver (bench/compare). Not part of `make check`
# except as smoke runs.
if HAVE_GBENCH
GBENCH_CPPFLAGS = $(AM_CPPFLAGS) $(GBENCH_CFLAGS) $(HWLOC_CFLAGS)
GBENCH_CORE_LIBS = libmpiv_core.la $(GBENCH_LIBS) $(HWLOC_LIBS)
include bench/sched.mk
include bench/lock.mk
include bench/match.mk
include bench/pool.mk
endif
include bench/mpi/local.mk
