# bench/mpiv-bench-pool
