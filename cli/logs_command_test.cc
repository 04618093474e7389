#include "cli/logs_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(LogsCommand, PassesBytesThroughUnmodified) {
  FakeFleetEnv env;
  // Not UTF-8, a NUL, carriage returns, an ANSI sequence from the server, a partial last line.
  constexpr char kA[] = "[gpu3] loading \xff\xfe weights\r\n";
  constexpr char kB[] = "\x00\x1b[31mred\x1b[0m\n";
  const std::string a(kA, sizeof(kA) - 1);
  const std::string b(kB, sizeof(kB) - 1);
  const std::string c = "ninja: [12/40] building";
  env.service().SetLogs({a, b, c});
  const auto o = env.Run(RunLogs, {"pve1/200/gpu3"}, {.tty = true});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, a + b + c);
  EXPECT_EQ(o.out.size(), a.size() + b.size() + c.size());
  EXPECT_EQ(o.err, "");
}

TEST(LogsCommand, SendsFollowAttemptAndTail) {
  FakeFleetEnv env;
  env.service().SetLogs({"x\n"});
  EXPECT_EQ(env.Run(RunLogs, {"-f", "--attempt", "3", "--tail", "100", "pve1/200/gpu3"}).code, 0);
  EXPECT_EQ(env.Run(RunLogs, {"local/200/gpu0"}).code, 0);
  const auto requests = env.service().logs_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].server(), "pve1/200/gpu3");
  EXPECT_TRUE(requests[0].follow());
  EXPECT_EQ(requests[0].attempt_number(), 3);
  EXPECT_EQ(requests[0].tail_lines(), 100);
  EXPECT_FALSE(requests[1].follow());
  EXPECT_EQ(requests[1].attempt_number(), 0);
  EXPECT_EQ(requests[1].tail_lines(), 0);
}

TEST(LogsCommand, ErrorsAndUsage) {
  FakeFleetEnv env;
  env.service().SetError(absl::NotFoundError("pve1/200/gpu3 has no attempt 9"));
  const auto o = env.Run(RunLogs, {"--attempt", "9", "pve1/200/gpu3"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl logs: pve1/200/gpu3 has no attempt 9\n");
  EXPECT_EQ(env.Run(RunLogs, {}).code, 1);
  EXPECT_EQ(env.Run(RunLogs, {"a/1/gpu0", "a/1/gpu1"}).code, 1);
  EXPECT_EQ(env.Run(RunLogs, {"--tail", "-1", "a/1/gpu0"}).code, 1);
  const auto bad = env.Run(RunLogs, {"pve1/200"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, StartsWith("fleetctl logs: server name 'pve1/200': not three parts"));
  EXPECT_EQ(env.service().logs_requests().size(), 1u);
}

TEST(LogsCommand, FollowOfAQuietLogIsNotCutByTheTimeout) {
  FakeFleetEnv env;
  env.service().SetLogs({});
  // The fake ends the stream with nothing sent; with -f that is fine, not a deadline.
  const auto o = env.Run(RunLogs, {"-f", "a/1/gpu0"}, {.timeout = absl::Milliseconds(100)});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "");
}

}  // namespace
}  // namespace fleet::cli
