# test/gtest/matching
