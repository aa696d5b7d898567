# test/gtest/base
