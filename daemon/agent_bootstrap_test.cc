// EnsureAgent's commands, against a scripted host (a CommandRunner that answers as a Proxmox host
// with a systemd container would, and records what it was asked). The real thing, over a real
// sshd and pct-sim into a container without systemd, is tests/e2e/remote_fleet_test.cc; this
// covers the systemd path, which the simulated containers (no init) cannot run.
#include "daemon/agent_bootstrap.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A host whose container 201 runs systemd and an older agent.
class ScriptedHost : public CommandRunner {
 public:
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                                    std::string_view stdin_data, absl::Duration) override {
    commands.push_back(absl::StrJoin(argv, " "));
    CommandResult r;
    r.exit_status = 0;
    const std::string line = commands.back();
    if (line == "pct status 201") {
      r.out = "status: running\n";
    } else if (absl::StrContains(line, "fleet-agent --version")) {
      r.out = "fleet-agent 0.0.9 (old)\n";
    } else if (absl::StartsWith(line, "mktemp")) {
      r.out = "/tmp/gpu-fleet.abc123\n";
    } else if (absl::StartsWith(line, "dd of=")) {
      staged[line.substr(6, line.find(' ', 6) - 6)] = std::string(stdin_data);
    } else if (absl::StrContains(line, "systemctl restart")) {
      restarted = true;
    }
    return r;
  }
  std::vector<std::string> commands;
  std::map<std::string, std::string> staged;  // path on the host -> bytes
  bool restarted = false;
};

TEST(EnsureAgent, AContainerWithSystemdGetsTheUnitEnabledAndRestarted) {
  testing::TempDir dir;
  dir.WriteFile("fleet-agent", "agent bytes");
  dir.WriteFile("fleet-http-probe", "probe bytes");
  dir.WriteFile("ca.crt", "CA");
  dir.WriteFile("agent.crt", "CERT");
  dir.WriteFile("agent.key", "KEY");
  AgentPackage package{dir.Join("fleet-agent"), dir.Join("fleet-http-probe"),
                       "fleet-agent 0.1.0 (new)"};
  BootstrapSpec spec;
  spec.host = "pve1";
  spec.ctid = "201";
  spec.listen = "10.0.0.21:50151";
  spec.ca_file = dir.Join("ca.crt");
  spec.agent_cert_file = dir.Join("agent.crt");
  spec.agent_key_file = dir.Join("agent.key");
  ScriptedHost host;
  int health_checks = 0;
  auto r = EnsureAgent(host, package, spec, [&]() -> absl::Status {
    ++health_checks;
    return host.restarted ? absl::OkStatus() : absl::UnavailableError("not started");
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->systemd);
  EXPECT_TRUE(r->pushed);
  EXPECT_EQ(r->previous_version, "fleet-agent 0.0.9 (old)");
  EXPECT_THAT(r->steps,
              ElementsAre("status", "version", "init", "stage", "push", "start", "health"));
  // The staged files, pushed with their modes; the binaries renamed into place.
  EXPECT_EQ(host.staged["/tmp/gpu-fleet.abc123/fleet-agent"], "agent bytes");
  EXPECT_EQ(host.staged["/tmp/gpu-fleet.abc123/agent.key"], "KEY");
  EXPECT_THAT(host.commands, ::testing::Contains("pct push 201 /tmp/gpu-fleet.abc123/agent.key "
                                                 "/etc/gpu-fleet/agent.key --perms 0600"));
  EXPECT_THAT(
      host.commands,
      ::testing::Contains("pct exec 201 --keep-env 0 -- mv -f "
                          "/opt/gpu-fleet/bin/fleet-agent.new /opt/gpu-fleet/bin/fleet-agent"));
  // The unit: the agent's argv quoted for systemd, the servers outliving a restart.
  const std::string unit = host.staged["/tmp/gpu-fleet.abc123/unit"];
  EXPECT_THAT(unit, HasSubstr("ExecStart=\"/opt/gpu-fleet/bin/fleet-agent\" \"--listen\" "
                              "\"10.0.0.21:50151\""));
  EXPECT_THAT(unit, HasSubstr("\"--tls-key\" \"/etc/gpu-fleet/agent.key\""));
  EXPECT_THAT(unit, HasSubstr("KillMode=process"));
  EXPECT_THAT(host.commands,
              ::testing::Contains("pct push 201 /tmp/gpu-fleet.abc123/unit "
                                  "/etc/systemd/system/gpu-fleet-agent.service --perms 0644"));
  // Started by systemd (not detached), then the health check; the staging directory removed.
  const std::vector<std::string>& c = host.commands;
  auto at = [&](const std::string& s) { return std::find(c.begin(), c.end(), s) - c.begin(); };
  const auto reload = at("pct exec 201 --keep-env 0 -- systemctl daemon-reload");
  const auto enable = at("pct exec 201 --keep-env 0 -- systemctl enable gpu-fleet-agent.service");
  const auto restart = at("pct exec 201 --keep-env 0 -- systemctl restart gpu-fleet-agent.service");
  ASSERT_LT(restart, static_cast<long>(c.size()));
  EXPECT_LT(reload, enable);
  EXPECT_LT(enable, restart);
  for (const std::string& command : c) EXPECT_THAT(command, ::testing::Not(HasSubstr("--detach")));
  EXPECT_EQ(health_checks, 1);  // not before (another version runs there), once after
  EXPECT_EQ(c.back(), "rm -rf -- /tmp/gpu-fleet.abc123");
}

}  // namespace
}  // namespace fleet::daemon
