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
  for (const char* name : {"pve1/200/gpu3", "local/sim/gpu0", "a.b-c_d/X.1/gpu65535",
                           "pve1/200/gpu10", "my_host/_b-1/gpu0"}) {
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

TEST(ServerName, ErrorsNameThePartThatIsWrong) {
  EXPECT_EQ(ParseServerName("pve 1/200/gpu3").status().message(),
            "server name 'pve 1/200/gpu3': invalid host name 'pve 1': use letters, digits, '.', "
            "'_', '-' (expected HOST/CTID/gpuN, e.g. pve1/200/gpu3)");
  EXPECT_THAT(ParseServerName("pve1/2;0/gpu3").status().message(),
              HasSubstr("invalid container id '2;0'"));
  EXPECT_THAT(ParseServerName("pve1/200/3").status().message(),
              HasSubstr("the last part must be gpuN"));
  // Control bytes are escaped, never written to a terminal as they are.
  EXPECT_THAT(ParseServerName("pve1/\x1b[2J/gpu0").status().message(),
              HasSubstr("invalid container id '\\x1b[2J'"));
}

TEST(ContainerName, ParsesHostCtidByTheSameRule) {
  for (const char* name : {"pve1/200", "my_host/_b-1", "a.b/X.1"}) {
    absl::StatusOr<ContainerRef> ref = ParseContainerName(name);
    ASSERT_TRUE(ref.ok()) << name << ": " << ref.status();
    EXPECT_EQ(ref->host + "/" + ref->ctid, name);
  }
  absl::StatusOr<ContainerRef> ref = ParseContainerName("my_host/200");
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->host, "my_host");
  EXPECT_EQ(ref->ctid, "200");
  for (const char* name : {"", "pve1", "pve1/", "/200", "pve1/200/gpu3", "pve 1/200", "pve1/2;0",
                           "../200", "pve1/."}) {
    absl::StatusOr<ContainerRef> bad = ParseContainerName(name);
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << "'" << name << "'";
    EXPECT_THAT(bad.status().message(), HasSubstr("(expected HOST/CTID, e.g. pve1/200)")) << name;
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
