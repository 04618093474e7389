#include "tests/sim/toolchain.h"

#include "gtest/gtest.h"

namespace fleet::sim {
namespace {

TEST(Toolchain, ParsesTheNvccBanner) {
  const std::optional<Version2> v = ParseReleaseBanner(
      "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
      "Build cuda_13.0.r13.0/compiler.36424714_0\n");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, (Version2{13, 0}));
  EXPECT_FALSE(ParseReleaseBanner("nvcc fatal : something else").has_value());
}

TEST(Toolchain, ParsesCudartVersion) {
  EXPECT_EQ(ParseCudartVersion("#pragma once\n#define CUDART_VERSION 13020\n"), (Version2{13, 2}));
  EXPECT_EQ(ParseCudartVersion("#define CUDART_VERSION 12080"), (Version2{12, 8}));
  EXPECT_FALSE(ParseCudartVersion("#define CUDA_VERSION 13000").has_value());
}

TEST(Toolchain, PtxIsaPerRelease) {
  EXPECT_EQ(PtxIsaOfRelease({13, 0}), (Version2{9, 0}));
  EXPECT_EQ(PtxIsaOfRelease({13, 2}), (Version2{9, 2}));
  EXPECT_EQ(PtxIsaOfRelease({12, 8}), (Version2{8, 7}));
  EXPECT_EQ(PtxIsaOfRelease({12, 6}), (Version2{8, 5}));
  EXPECT_LT(PtxIsaOfRelease({13, 0}), kFlashinferPtxIsa);
  EXPECT_FALSE(PtxIsaOfRelease({13, 2}) < kFlashinferPtxIsa);
}

}  // namespace
}  // namespace fleet::sim
