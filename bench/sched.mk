# bench/mpiv-bench-sched
