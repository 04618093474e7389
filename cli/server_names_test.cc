// fleetctl and the config share one server-name rule (common/config/server_name.h): every name a
// config expands to is taken by every verb that takes SERVER or CONTAINER, and a name the config
// could never produce is refused before anything is sent.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "cli/attempts_command.h"
#include "cli/control_command.h"
#include "cli/deploy_command.h"
#include "cli/explain_command.h"
#include "cli/logs_command.h"
#include "cli/remediation_command.h"
#include "cli/status_command.h"
#include "common/config/desired_server.h"
#include "common/config/fleet_config.h"
#include "common/config/server_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::FakeFleetService;
using ::testing::HasSubstr;
using ::testing::Not;

// Host and container names with '_', a leading '-' or '.', which the config allows. (The sockets
// are config values only: nothing listens on them.)
constexpr char kNamesConfig[] = R"(hosts:
  - name: my_host
    containers:
      - ctid: "200"
        channel: {kind: loopback, address: "unix:/run/fleet-test/agent-1.sock"}
        gpus: [0]
        template: sglang
        base_port: 30000
      - ctid: _box-1
        channel: {kind: loopback, address: "unix:/run/fleet-test/agent-2.sock"}
        gpus: [7]
        template: sglang
        base_port: 30000
  - name: .hidden
    containers:
      - ctid: "-x"
        channel: {kind: loopback, address: "unix:/run/fleet-test/agent-3.sock"}
        gpus: [12]
        template: sglang
        base_port: 30000
templates:
  - name: sglang
    model: /models/m
    argv: [/venv/bin/python, -m, sglang.launch_server, --model-path, "{model}", --port, "{port}"]
)";

struct VerbCase {
  const char* what;
  std::function<std::vector<std::string>(const std::string& name, const std::string& config)> args;
  FakeFleetEnv::Verb verb;
  std::function<size_t(const FakeFleetService&)> requests;
};

std::vector<VerbCase> ServerVerbs() {
  return {
      {"status",
       [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunStatus, [](const FakeFleetService& s) { return s.status_requests().size(); }},
      {"attempts",
       [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunAttempts, [](const FakeFleetService& s) { return s.attempts_requests().size(); }},
      {"logs", [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunLogs, [](const FakeFleetService& s) { return s.logs_requests().size(); }},
      {"explain",
       [](const std::string& n, const std::string&) {
         return std::vector<std::string>{"--server", n};
       },
       [](const std::vector<std::string>& args, const CommandContext& ctx) {
         return RunExplain(args, ctx);
       },
       [](const FakeFleetService& s) { return s.explain_requests().size(); }},
      {"plan", [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunPlan, [](const FakeFleetService& s) { return s.plan_requests().size(); }},
      {"restart",
       [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunRestart, [](const FakeFleetService& s) { return s.restart_requests().size(); }},
      {"stop", [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunStop, [](const FakeFleetService& s) { return s.stop_requests().size(); }},
      {"remediations",
       [](const std::string& n, const std::string&) { return std::vector<std::string>{n}; },
       RunRemediations, [](const FakeFleetService& s) { return s.remediations_requests().size(); }},
      {"deploy --only",
       [](const std::string& n, const std::string& config) {
         return std::vector<std::string>{"-f", config, "--only", n};
       },
       RunDeploy, [](const FakeFleetService& s) { return s.deploy_requests().size(); }},
  };
}

TEST(FleetctlServerNames, EveryVerbTakesEveryServerTheConfigExpandsTo) {
  absl::StatusOr<v1::FleetConfig> config = config::ParseFleetConfig(kNamesConfig, "fleet.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::vector<config::DesiredServer>> servers = config::ExpandServers(*config);
  ASSERT_TRUE(servers.ok()) << servers.status();
  std::vector<std::string> names;
  for (const config::DesiredServer& s : *servers) names.push_back(s.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("my_host/200/gpu0", "my_host/_box-1/gpu7",
                                                     ".hidden/-x/gpu12"));

  for (const std::string& name : names) {
    for (const VerbCase& c : ServerVerbs()) {
      FakeFleetEnv env;
      env.dir().WriteFile("fleet.yaml", kNamesConfig);
      const auto o = env.Run(c.verb, c.args(name, env.dir().Join("fleet.yaml")));
      EXPECT_THAT(o.err, Not(HasSubstr("name '"))) << c.what << " " << name;
      EXPECT_EQ(c.requests(env.service()), 1u) << c.what << " " << name << ": " << o.err;
    }
    // Its container, as `remediations CONTAINER` takes it.
    const std::vector<std::string> parts = absl::StrSplit(name, '/');
    FakeFleetEnv env;
    const auto o = env.Run(RunRemediations, {parts[0] + "/" + parts[1]});
    EXPECT_EQ(env.service().remediations_requests().size(), 1u) << name << ": " << o.err;
  }
}

TEST(FleetctlServerNames, ANameTheConfigCouldNotProduceIsRefusedBeforeAnyCall) {
  // A leading zero, an index past the rule's range, a '.' host, a bad character.
  for (const std::string name :
       {"pve1/200/gpu03", "pve1/200/gpu65536", "./200/gpu0", "pve1/2;0/gpu3", "pve1/200/gpu3/x"}) {
    ASSERT_FALSE(config::ParseServerName(name).ok()) << name;
    for (const VerbCase& c : ServerVerbs()) {
      FakeFleetEnv env;
      env.dir().WriteFile("fleet.yaml", kNamesConfig);
      const auto o = env.Run(c.verb, c.args(name, env.dir().Join("fleet.yaml")));
      EXPECT_EQ(o.code, 1) << c.what << " " << name;
      EXPECT_THAT(o.err, HasSubstr("name '")) << c.what << " " << name;
      EXPECT_EQ(c.requests(env.service()), 0u) << c.what << " " << name;
    }
  }
}

}  // namespace
}  // namespace fleet::cli
