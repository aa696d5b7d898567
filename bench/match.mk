# bench/mpiv-bench-match: the matching engine (post + match, K posted receives) against
# an ob1-style list and a mutex-guarded std::unordered_map, in the same binary.
noinst_PROGRAMS += bench/mpiv-bench-match
bench_mpiv_bench_match_SOURCES = bench/match/bench_match.cpp
bench_mpiv_bench_match_CPPFLAGS = $(GBENCH_CPPFLAGS)
bench_mpiv_bench_match_LDADD = $(GBENCH_CORE_LIBS)
