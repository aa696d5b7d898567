# bench/mpiv-bench-sched: ULT switch, signal+wait and spawn+join against their references.
noinst_PROGRAMS += bench/mpiv-bench-sched
bench_mpiv_bench_sched_SOURCES = bench/sched/bench_sched.cpp
bench_mpiv_bench_sched_CPPFLAGS = $(GBENCH_CPPFLAGS)
bench_mpiv_bench_sched_LDADD = $(GBENCH_CORE_LIBS)
if HAVE_BOOST_CONTEXT
bench_mpiv_bench_sched_LDADD += -lboost_context
endif
