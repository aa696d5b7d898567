# bench/mpiv-bench-lock: every lock of base/lock (ticket, MCS, HMCS, TLP) against the
# pthread mutex, in the same binary: acquisition throughput and hand-off latency at 1-16
# threads, and seed 004's latency- and throughput-oriented regimes.
noinst_PROGRAMS += bench/mpiv-bench-lock
bench_mpiv_bench_lock_SOURCES = bench/lock/bench_lock.cpp
bench_mpiv_bench_lock_CPPFLAGS = $(GBENCH_CPPFLAGS)
bench_mpiv_bench_lock_LDADD = $(GBENCH_CORE_LIBS)
