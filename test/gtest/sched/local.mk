# test/gtest/sched
