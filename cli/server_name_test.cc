#include "cli/server_name.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::cli {
namespace {

using ::testing::HasSubstr;

TEST(ServerName, AcceptsHostCtidGpu) {
  for (const char* name : {"pve1/200/gpu3", "local/200/gpu0", "local/sim-box_1/gpu7",
                           "gpu-host.example.org/100/gpu12"}) {
    EXPECT_TRUE(ValidateServerName(name).ok()) << name;
  }
}

TEST(ServerName, NamesThePartThatIsWrong) {
  struct Case {
    const char* name;
    const char* why;
  };
  for (const Case& c : {
           Case{"", "it is empty"},
           Case{"pve1/200", "it has 2 parts, not 3"},
           Case{"pve1/200/gpu3/x", "it has 4 parts, not 3"},
           Case{"pve1/200/3", "the GPU must be gpuN"},
           Case{"pve1/200/gpu", "the GPU must be gpuN"},
           Case{"pve1/200/gpux", "the GPU must be gpuN"},
           Case{"pve1/200/GPU3", "the GPU must be gpuN"},
           Case{"/200/gpu3", "the host must be"},
           Case{"pve 1/200/gpu3", "the host must be"},
           Case{"pve1//gpu3", "the container must be"},
           Case{"pve1/2;0/gpu3", "the container must be"},
       }) {
    absl::Status s = ValidateServerName(c.name);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.why)) << c.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr("want host/ctid/gpuN, e.g. pve1/200/gpu3"))
        << c.name;
  }
}

TEST(ContainerName, AcceptsHostCtidAndNamesWhatIsWrong) {
  for (const char* name : {"pve1/200", "local/sim-box_1"}) {
    EXPECT_TRUE(ValidateContainerName(name).ok()) << name;
    EXPECT_TRUE(ValidateServerOrContainerName(name).ok()) << name;
  }
  EXPECT_TRUE(ValidateServerOrContainerName("pve1/200/gpu3").ok());
  struct Case {
    const char* name;
    const char* why;
  };
  for (const Case& c : {
           Case{"", "it is empty"},
           Case{"pve1", "it has 1 part, not 2"},
           Case{"pve1/200/gpu3", "it has 3 parts, not 2"},
           Case{"pve 1/200", "the host must be"},
           Case{"pve1/", "the container must be"},
       }) {
    absl::Status s = ValidateContainerName(c.name);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.why)) << c.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr("want host/ctid, e.g. pve1/200")) << c.name;
  }
  // Either form: the number of parts picks the rules, and neither count names both.
  EXPECT_THAT(std::string(ValidateServerOrContainerName("pve1/2;0").message()),
              HasSubstr("is not a container name"));
  EXPECT_THAT(std::string(ValidateServerOrContainerName("pve1/200/gpuX").message()),
              HasSubstr("is not a server name"));
  for (const char* name : {"", "pve1", "a/b/c/d"}) {
    absl::Status s = ValidateServerOrContainerName(name);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << name;
    EXPECT_THAT(std::string(s.message()), HasSubstr("is not a server or container name: it has "))
        << name;
    EXPECT_THAT(std::string(s.message()), HasSubstr("want host/ctid/gpuN or host/ctid")) << name;
  }
}

}  // namespace
}  // namespace fleet::cli
