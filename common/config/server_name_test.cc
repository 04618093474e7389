#include "common/config/server_name.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::config {
namespace {

using ::testing::HasSubstr;

TEST(ServerName, FormatsHostCtidGpu) {
  EXPECT_EQ(ServerName("pve1", "200", 3), "pve1/200/gpu3");
  fleet::v1::ServerRef ref;
  ref.set_host("local");
  ref.set_container("sim");
  ref.set_gpu(0);
  EXPECT_EQ(ServerName(ref), "local/sim/gpu0");
}

TEST(ServerName, ParsesValidNamesAndRoundTrips) {
  for (const char* name :
       {"pve1/200/gpu3", "local/sim/gpu0", "a.b-c_d/X.1/gpu65535", "pve1/200/gpu10"}) {
    absl::StatusOr<fleet::v1::ServerRef> ref = ParseServerName(name);
    ASSERT_TRUE(ref.ok()) << name << ": " << ref.status();
    EXPECT_EQ(ServerName(*ref), name);
  }
  absl::StatusOr<fleet::v1::ServerRef> ref = ParseServerName("pve1/200/gpu3");
  EXPECT_EQ(ref->host(), "pve1");
  EXPECT_EQ(ref->container(), "200");
  EXPECT_EQ(ref->gpu(), 3);
}

TEST(ServerName, RejectsMalformedNames) {
  for (const char* name : {"",
                           "pve1",
                           "pve1/200",
                           "pve1/200/gpu3/x",
                           "/200/gpu3",
                           "pve1//gpu3",
                           "pve1/200/",
                           "pve1/200/3",
                           "pve1/200/gpu",
                           "pve1/200/gpu-1",
                           "pve1/200/gpu+1",
                           "pve1/200/gpu03",
                           "pve1/200/gpu65536",
                           "pve1/200/gpu99999999999",
                           "pve1/200/GPU3",
                           "pve 1/200/gpu3",
                           "pve1/2;00/gpu3",
                           "../200/gpu3",
                           "pve1/./gpu3",
                           "pve1/200/gpu3 ",
                           "pve1/200/gpu0x1"}) {
    absl::StatusOr<fleet::v1::ServerRef> ref = ParseServerName(name);
    EXPECT_FALSE(ref.ok()) << "'" << name << "'";
    EXPECT_EQ(ref.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(ref.status().message(), HasSubstr("expected HOST/CTID/gpuN")) << name;
  }
}

TEST(ServerName, ValidConfigNames) {
  EXPECT_TRUE(IsValidConfigName("pve1"));
  EXPECT_TRUE(IsValidConfigName("200"));
  EXPECT_TRUE(IsValidConfigName("a.b_c-d"));
  EXPECT_FALSE(IsValidConfigName(""));
  EXPECT_FALSE(IsValidConfigName("."));
  EXPECT_FALSE(IsValidConfigName(".."));
  EXPECT_FALSE(IsValidConfigName("a/b"));
  EXPECT_FALSE(IsValidConfigName("a b"));
}

}  // namespace
}  // namespace fleet::config
