#include "cli/global_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GlobalFlags, DefaultSocketIsInTheDefaultStateDir) {
  std::vector<std::string> args = {"status"};
  auto flags = ParseGlobalFlags(&args, nullptr);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->socket_path, "/var/lib/gpu-fleet/fleetd.sock");
  EXPECT_EQ(flags->timeout, absl::Seconds(10));
  EXPECT_THAT(args, ElementsAre("status"));
}

TEST(GlobalFlags, SocketBeatsStateDirBeatsEnvironment) {
  {
    std::vector<std::string> args = {"--state-dir", "/s", "--socket=/x.sock",
                                     "status",      "-o", "json"};
    auto flags = ParseGlobalFlags(&args, "/env.sock");
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->socket_path, "/x.sock");
    EXPECT_THAT(args, ElementsAre("status", "-o", "json"));
  }
  {
    std::vector<std::string> args = {"--state-dir=/s", "status"};
    auto flags = ParseGlobalFlags(&args, "/env.sock");
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->socket_path, "/s/fleetd.sock");
  }
  {
    std::vector<std::string> args = {"status"};
    auto flags = ParseGlobalFlags(&args, "/env.sock");
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->socket_path, "/env.sock");
  }
}

TEST(GlobalFlags, StopsAtTheVerbAndLeavesVerbFlagsAlone) {
  std::vector<std::string> args = {"--timeout", "500ms", "logs", "--socket", "x"};
  auto flags = ParseGlobalFlags(&args, nullptr);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->timeout, absl::Milliseconds(500));
  EXPECT_THAT(args, ElementsAre("logs", "--socket", "x"));
}

TEST(GlobalFlags, RejectsMissingValuesAndBadDurations) {
  std::vector<std::string> a = {"--socket"};
  EXPECT_THAT(std::string(ParseGlobalFlags(&a, nullptr).status().message()),
              HasSubstr("needs a value"));
  std::vector<std::string> b = {"--timeout", "soon", "status"};
  EXPECT_THAT(std::string(ParseGlobalFlags(&b, nullptr).status().message()),
              HasSubstr("'soon' is not a positive duration"));
  std::vector<std::string> c = {"--state-dir=", "status"};
  EXPECT_THAT(std::string(ParseGlobalFlags(&c, nullptr).status().message()),
              HasSubstr("empty value"));
}

}  // namespace
}  // namespace fleet::cli
