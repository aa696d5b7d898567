# bench/mpiv-bench-match
