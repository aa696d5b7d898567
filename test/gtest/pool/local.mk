# test/gtest/pool
