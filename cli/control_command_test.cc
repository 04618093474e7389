#include "cli/control_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::MakeRow;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ControlCommand, RestartPrintsTheServersRestarted) {
  FakeFleetEnv env;
  v1::ServersResponse response;
  *response.add_servers() = MakeRow("pve1/200/gpu3", "RESTARTING", env.clock().Now());
  *response.add_servers() = MakeRow("pve1/200/gpu4", "RESTARTING", env.clock().Now());
  env.service().SetServersResponse(response);
  const auto o = env.Run(RunRestart, {"pve1/200/gpu3", "pve1/200/gpu4", "--now"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "SERVER         STATE       ATTEMPT\n"
            "pve1/200/gpu3  RESTARTING  1\n"
            "pve1/200/gpu4  RESTARTING  1\n");
  const auto requests = env.service().restart_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_THAT(requests[0].servers(), ElementsAre("pve1/200/gpu3", "pve1/200/gpu4"));
  EXPECT_FALSE(requests[0].all());
  EXPECT_TRUE(requests[0].now());
}

TEST(ControlCommand, StopAllAsJson) {
  FakeFleetEnv env;
  v1::ServersResponse response;
  *response.add_servers() = MakeRow("local/200/gpu0", "STOPPED", env.clock().Now());
  env.service().SetServersResponse(response);
  const auto o = env.Run(RunStop, {"--all", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, StartsWith("{\"servers\":[{\"server\":\"local/200/gpu0\",\"state\":"
                                "\"STOPPED\",\"phase_detail\":\"\","));
  const auto requests = env.service().stop_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].all());
  EXPECT_TRUE(requests[0].servers().empty());
  EXPECT_TRUE(env.service().restart_requests().empty());
}

TEST(ControlCommand, NamesOrAllAndNamesAreChecked) {
  FakeFleetEnv env;
  EXPECT_THAT(env.Run(RunRestart, {}).err, HasSubstr("give SERVER names or --all"));
  EXPECT_EQ(env.Run(RunStop, {"--all", "a/1/gpu0"}).code, 1);
  EXPECT_EQ(env.Run(RunStop, {"--now", "a/1/gpu0"}).code, 1);  // --now is restart's
  const auto bad = env.Run(RunRestart, {"a/1/gpu0", "a/1/gpuX"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(
      bad.err,
      StartsWith(
          "fleetctl restart: server name 'a/1/gpuX': the GPU index must be a decimal number"));
  EXPECT_TRUE(env.service().restart_requests().empty());
  EXPECT_TRUE(env.service().stop_requests().empty());
}

TEST(ControlCommand, DaemonRefusalIsReported) {
  FakeFleetEnv env;
  env.service().SetError(absl::NotFoundError("unknown server a/1/gpu0"));
  const auto o = env.Run(RunStop, {"a/1/gpu0"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl stop: unknown server a/1/gpu0\n");
}

}  // namespace
}  // namespace fleet::cli
