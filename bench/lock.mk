# bench/mpiv-bench-lock
