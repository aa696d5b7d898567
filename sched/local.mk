# sched/: workers, ULTs, bit-vector scheduler, context switch.
