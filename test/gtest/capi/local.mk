# test/gtest/capi
