#include "cli/deploy_command.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kConfig[] = R"(hosts:
  - name: local
    containers:
      - ctid: "200"
        channel: {kind: loopback, port: 50151}
        gpus: [0, 1]
        template: sglang
        base_port: 30000
templates:
  - name: sglang
    model: /models/m
    argv: [/venv/bin/python, -m, sglang.launch_server, --model-path, "{model}", --port, "{port}"]
)";

v1::DeployResponse TwoAdds() {
  v1::DeployResponse r;
  r.set_config_version(3);
  for (int gpu : {0, 1}) {
    v1::Change* c = r.add_changes();
    c->set_server("local/200/gpu" + std::to_string(gpu));
    c->set_kind("add");
    c->set_detail("gpu " + std::to_string(gpu) + ", port " + std::to_string(30000 + gpu));
  }
  return r;
}

TEST(DeployCommand, SendsTheCheckedConfigWithItsTextAndPrintsTheChanges) {
  FakeFleetEnv env;
  env.dir().WriteFile("fleet.yaml", kConfig);
  env.service().SetDeployResponse(TwoAdds());
  const auto o = env.Run(RunDeploy, {"-f", env.dir().Join("fleet.yaml")});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "SERVER          CHANGE  DETAIL\n"
            "local/200/gpu0  add     gpu 0, port 30000\n"
            "local/200/gpu1  add     gpu 1, port 30001\n"
            "2 server(s) changed; config version 3 stored\n");
  const auto requests = env.service().deploy_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].yaml(), kConfig);
  EXPECT_EQ(requests[0].source(), env.dir().Join("fleet.yaml"));
  EXPECT_FALSE(requests[0].dry_run());
  ASSERT_EQ(requests[0].config().hosts_size(), 1);
  EXPECT_EQ(requests[0].config().hosts(0).containers(0).ctid(), "200");
  // The effective config: defaults written in (the built-in "default" policy).
  EXPECT_GE(requests[0].config().policies_size(), 1);
}

TEST(DeployCommand, AConfigErrorNamesFileLineAndFieldAndNothingIsSent) {
  FakeFleetEnv env;
  std::string bad = kConfig;
  bad.replace(bad.find("gpus: [0, 1]"), 12, "gpu: [0, 1]");
  env.dir().WriteFile("fleet.yaml", bad);
  const auto o = env.Run(RunDeploy, {"-f", env.dir().Join("fleet.yaml")});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr(env.dir().Join("fleet.yaml") + ":6: hosts[0].containers[0]: "
                                                              "unknown field 'gpu'"));
  EXPECT_TRUE(env.service().deploy_requests().empty());
}

TEST(DeployCommand, AMissingFileIsAClearError) {
  FakeFleetEnv env;
  const auto o = env.Run(RunDeploy, {"-f", env.dir().Join("nope.yaml")});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl deploy: " + env.dir().Join("nope.yaml")));
  EXPECT_TRUE(env.service().deploy_requests().empty());
}

TEST(DeployCommand, DryRunAsJsonWithOnly) {
  FakeFleetEnv env;
  env.dir().WriteFile("fleet.yaml", kConfig);
  v1::DeployResponse r;
  v1::Change* c = r.add_changes();
  c->set_server("local/200/gpu1");
  c->set_kind("update");
  c->set_detail("spec or policy changed: the server restarts with it");
  env.service().SetDeployResponse(r);
  const auto o = env.Run(RunDeploy, {"-f", env.dir().Join("fleet.yaml"), "--dry-run", "--only",
                                     "local/200/gpu1", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "{\"dry_run\":true,\"config_version\":0,\"changes\":[{\"server\":\"local/200/gpu1\","
            "\"change\":\"update\",\"detail\":\"spec or policy changed: the server restarts with "
            "it\"}]}\n");
  const auto requests = env.service().deploy_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].dry_run());
  EXPECT_THAT(requests[0].only(), ElementsAre("local/200/gpu1"));
}

TEST(DeployCommand, WithoutAFileFleetdReappliesWhatItHolds) {
  FakeFleetEnv env;
  v1::DeployResponse r;
  v1::Change* c = r.add_changes();
  c->set_server("local/200/gpu0");
  c->set_kind("retry");
  env.service().SetDeployResponse(r);
  const auto o = env.Run(RunDeploy, {});
  EXPECT_EQ(o.code, 0) << o.err;
  const auto requests = env.service().deploy_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].has_config());
  EXPECT_TRUE(requests[0].yaml().empty());
  EXPECT_THAT(o.out, HasSubstr("local/200/gpu0  retry"));
}

TEST(DeployCommand, StandardInputAndBadArguments) {
  FakeFleetEnv env;
  env.service().SetDeployResponse(TwoAdds());
  std::istringstream in(kConfig);
  const auto o = env.Run([&](const std::vector<std::string>& args,
                             const CommandContext& ctx) { return RunDeployFrom(args, ctx, in); },
                         {"-f", "-"});
  EXPECT_EQ(o.code, 0) << o.err;
  ASSERT_EQ(env.service().deploy_requests().size(), 1u);
  EXPECT_EQ(env.service().deploy_requests()[0].source(), "<stdin>");
  EXPECT_EQ(env.Run(RunDeploy, {"--only", "gpu0"}).code, 1);
  EXPECT_EQ(env.Run(RunDeploy, {"fleet.yaml"}).code, 1);
  EXPECT_EQ(env.Run(RunDeploy, {"-o", "yaml"}).code, 1);
  EXPECT_EQ(env.service().deploy_requests().size(), 1u);
}

TEST(DeployCommand, FleetdsRefusalIsReported) {
  FakeFleetEnv env;
  env.service().SetError(absl::FailedPreconditionError("fleetd holds no config yet"));
  const auto o = env.Run(RunDeploy, {});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr("fleetd holds no config yet"));
}

}  // namespace
}  // namespace fleet::cli
