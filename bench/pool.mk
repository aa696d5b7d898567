# bench/mpiv-bench-pool: packet pool get/put (private hit, steal) against the shared
# lock-free stack alone and malloc/free, in the same binary.
noinst_PROGRAMS += bench/mpiv-bench-pool
bench_mpiv_bench_pool_SOURCES = bench/pool/bench_pool.cpp
bench_mpiv_bench_pool_CPPFLAGS = $(GBENCH_CPPFLAGS)
bench_mpiv_bench_pool_LDADD = $(GBENCH_CORE_LIBS)
