// EnsureAgent's commands, against a scripted host (a CommandRunner that answers as a Proxmox host
// with a systemd container would, and records what it was asked). The real thing, over a real
// sshd and pct-sim into a container without systemd, is tests/e2e/remote_fleet_test.cc; this
// covers the systemd path, which the simulated containers (no init) cannot run.
#include "daemon/remote/agent_bootstrap.h"

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

constexpr char kStage[] = "/root/.gpu-fleet-bootstrap/201";

// A host whose container 201 runs systemd and an older agent. It keeps the files written on the
// host (dd, removed by rm -rf) and in the container (dd, install, pct push, mv), and can lose its
// connection after a number of commands: every command from then on fails, as over a cut SSH
// connection (the bootstrap's own clean-up included).
class ScriptedHost : public CommandRunner {
 public:
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                                    std::string_view stdin_data, absl::Duration) override {
    if (cut_after >= 0 && static_cast<int>(commands.size()) >= cut_after) {
      return absl::UnavailableError("ssh: connection lost");
    }
    commands.push_back(absl::StrJoin(argv, " "));
    CommandResult r;
    r.exit_status = 0;
    const std::string line = commands.back();
    // pct exec CTID --keep-env 0 -- COMMAND...
    const bool in_container = argv.size() > 6 && argv[0] == "pct" && argv[1] == "exec";
    const std::vector<std::string> command =
        in_container ? std::vector<std::string>(argv.begin() + 6, argv.end()) : argv;
    if (line == "pct status 201") {
      r.out = "status: running\n";
    } else if (absl::StrContains(line, "fleet-agent --version")) {
      r.out = version;
    } else if (line == "pwd") {
      r.out = "/root\n";
    } else if (command[0] == "dd") {
      (in_container ? container : staged)[command[1].substr(3)] = std::string(stdin_data);
    } else if (in_container && command[0] == "install") {
      container[command.back()] = "";
      modes[command.back()] = command[2];
    } else if (in_container && command[0] == "mv") {
      container[command[3]] = container[command[2]];
      container.erase(command[2]);
      modes[command[3]] = modes[command[2]];
    } else if (argv[0] == "pct" && argv[1] == "push") {
      container[argv[4]] = staged[argv[3]];
      modes[argv[4]] = argv[6];
    } else if (!in_container && command[0] == "rm") {
      const std::string& path = command.back();
      for (auto it = staged.begin(); it != staged.end();) {
        it = it->first == path || absl::StartsWith(it->first, path + "/") ? staged.erase(it)
                                                                          : std::next(it);
      }
    } else if (absl::StrContains(line, "systemctl restart")) {
      restarted = true;
    }
    return r;
  }
  // The host's files that hold `bytes`.
  std::vector<std::string> HostFilesHolding(const std::string& bytes) const {
    std::vector<std::string> found;
    for (const auto& [path, data] : staged) {
      if (absl::StrContains(data, bytes)) found.push_back(path);
    }
    return found;
  }
  std::vector<std::string> commands;
  std::map<std::string, std::string> staged;          // path on the host -> bytes
  std::map<std::string, std::string> container;       // path in the container -> bytes
  std::map<std::string, std::string> modes;           // path in the container -> mode
  std::string version = "fleet-agent 0.0.9 (old)\n";  // what the container's agent says
  bool restarted = false;
  int cut_after = -1;  // commands that work before the connection is lost; -1: never
};

struct Fixture {
  Fixture() {
    dir.WriteFile("fleet-agent", "agent bytes");
    dir.WriteFile("fleet-http-probe", "probe bytes");
    dir.WriteFile("ca.crt", "CA");
    dir.WriteFile("agent.crt", "CERT");
    dir.WriteFile("agent.key", "PRIVATE KEY");
    package = {dir.Join("fleet-agent"), dir.Join("fleet-http-probe"), "fleet-agent 0.1.0 (new)"};
    spec.host = "pve1";
    spec.ctid = "201";
    spec.listen = "10.0.0.21:50151";
    spec.ca_file = dir.Join("ca.crt");
    spec.agent_cert_file = dir.Join("agent.crt");
    spec.agent_key_file = dir.Join("agent.key");
    spec.health_timeout = absl::ZeroDuration();
  }
  testing::TempDir dir;
  AgentPackage package;
  BootstrapSpec spec;
};

TEST(EnsureAgent, AContainerWithSystemdGetsTheUnitEnabledAndRestarted) {
  Fixture f;
  f.dir.WriteFile("agent.key", "KEY");
  const AgentPackage& package = f.package;
  BootstrapSpec spec = f.spec;
  spec.health_timeout = absl::Seconds(30);
  ScriptedHost host;
  int health_checks = 0;
  std::vector<absl::Duration> waits;
  auto r = EnsureAgent(host, package, spec, [&](absl::Duration wait) -> absl::Status {
    ++health_checks;
    waits.push_back(wait);
    return host.restarted ? absl::OkStatus() : absl::UnavailableError("not started");
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->systemd);
  EXPECT_TRUE(r->pushed);
  EXPECT_EQ(r->previous_version, "fleet-agent 0.0.9 (old)");
  EXPECT_THAT(r->steps,
              ElementsAre("status", "version", "init", "stage", "push", "start", "health"));
  // The staged files, pushed with their modes; the binaries renamed into place; the key written
  // into the container only, 0600.
  EXPECT_EQ(host.container["/opt/gpu-fleet/bin/fleet-agent"], "agent bytes");
  EXPECT_EQ(host.container["/etc/gpu-fleet/agent.key"], "KEY");
  EXPECT_EQ(host.modes["/etc/gpu-fleet/agent.key"], "0600");
  EXPECT_THAT(host.HostFilesHolding("KEY"), ::testing::IsEmpty());
  EXPECT_THAT(host.commands,
              ::testing::Contains(absl::StrCat("pct push 201 ", kStage,
                                               "/ca.crt /etc/gpu-fleet/ca.crt --perms 0644")));
  EXPECT_THAT(
      host.commands,
      ::testing::Contains("pct exec 201 --keep-env 0 -- mv -f "
                          "/opt/gpu-fleet/bin/fleet-agent.new /opt/gpu-fleet/bin/fleet-agent"));
  // The unit: the agent's argv quoted for systemd, the servers outliving a restart.
  const std::string unit = host.container["/etc/systemd/system/gpu-fleet-agent.service"];
  EXPECT_THAT(unit, HasSubstr("ExecStart=\"/opt/gpu-fleet/bin/fleet-agent\" \"--listen\" "
                              "\"10.0.0.21:50151\""));
  EXPECT_THAT(unit, HasSubstr("\"--tls-key\" \"/etc/gpu-fleet/agent.key\""));
  EXPECT_THAT(unit, HasSubstr("KillMode=process"));
  EXPECT_THAT(host.commands,
              ::testing::Contains(
                  absl::StrCat("pct push 201 ", kStage,
                               "/unit /etc/systemd/system/gpu-fleet-agent.service --perms 0644")));
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
  // The check after the start waits for the connection (one that fails fast left an agent
  // started by systemd unreached: GrpcAgentClient::Answers).
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_GT(waits[0], absl::ZeroDuration());
  EXPECT_LE(waits[0], spec.health_timeout);
  EXPECT_EQ(c.back(), absl::StrCat("rm -rf -- ", kStage));
  EXPECT_THAT(host.staged, ::testing::IsEmpty());
}

TEST(EnsureAgent, ABootstrapCutOffMidWayLeavesNoKeyOnTheHost) {
  // Cut after every number of commands in turn: wherever the connection is lost, no file on the
  // host holds the agent's private key.
  Fixture f;
  ScriptedHost whole;
  ASSERT_TRUE(EnsureAgent(whole, f.package, f.spec, [&](absl::Duration) {
                return whole.restarted ? absl::OkStatus() : absl::UnavailableError("no");
              }).ok());
  const int commands = static_cast<int>(whole.commands.size());
  for (int cut = 1; cut < commands; ++cut) {
    ScriptedHost host;
    host.cut_after = cut;
    auto r = EnsureAgent(host, f.package, f.spec,
                         [](absl::Duration) { return absl::UnavailableError("no"); });
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_THAT(host.HostFilesHolding("PRIVATE KEY"), ::testing::IsEmpty())
        << "cut after " << cut << " commands: " << host.commands.back();
  }
}

TEST(EnsureAgent, TheNextBootstrapRemovesWhatACutOffOneLeft) {
  Fixture f;
  ScriptedHost host;
  // Lost while pushing: the staging directory (the binaries) stays behind.
  host.cut_after = 12;
  ASSERT_FALSE(EnsureAgent(host, f.package, f.spec, [](absl::Duration) {
                 return absl::UnavailableError("no");
               }).ok());
  ASSERT_EQ(host.staged.count(absl::StrCat(kStage, "/fleet-agent")), 1u)
      << absl::StrJoin(host.commands, "\n");
  // Back: the next bootstrap empties the staging directory first, then removes it.
  host.cut_after = -1;
  host.commands.clear();
  auto r = EnsureAgent(host, f.package, f.spec, [&](absl::Duration) {
    return host.restarted ? absl::OkStatus() : absl::UnavailableError("no");
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stage_dir, kStage);
  const auto first_rm =
      std::find(host.commands.begin(), host.commands.end(), absl::StrCat("rm -rf -- ", kStage));
  const auto first_dd =
      std::find_if(host.commands.begin(), host.commands.end(),
                   [](const std::string& c) { return absl::StartsWith(c, "dd"); });
  EXPECT_LT(first_rm, first_dd);
  EXPECT_THAT(host.commands, ::testing::Contains(absl::StrCat("mkdir -m 0700 -- ", kStage)));
  EXPECT_THAT(host.staged, ::testing::IsEmpty());
}

TEST(EnsureAgent, AStagingDirectoryLeftBehindIsRemovedEvenWhenTheAgentIsUpToDate) {
  // The connection is lost once the agent was restarted: it runs, up to date, but the staging
  // directory's removal failed (the fault matrix's ssh-bootstrap-cut met this).
  Fixture f;
  ScriptedHost whole;
  ASSERT_TRUE(EnsureAgent(whole, f.package, f.spec, [&](absl::Duration) {
                return whole.restarted ? absl::OkStatus() : absl::UnavailableError("no");
              }).ok());
  ScriptedHost host;
  host.cut_after = static_cast<int>(whole.commands.size()) - 1;  // all but the clean-up
  auto first = EnsureAgent(host, f.package, f.spec, [&](absl::Duration) {
    return host.restarted ? absl::OkStatus() : absl::UnavailableError("no");
  });
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->stage_left);
  ASSERT_EQ(host.staged.count(absl::StrCat(kStage, "/fleet-agent")), 1u);
  // Back, with the agent that bootstrap installed: nothing to install, and what was left goes.
  host.cut_after = -1;
  host.commands.clear();
  host.version = f.package.version + "\n";
  BootstrapSpec spec = f.spec;
  spec.remove_stale_stage = first->stage_left;
  auto r = EnsureAgent(host, f.package, spec, [](absl::Duration) { return absl::OkStatus(); });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->started);
  EXPECT_FALSE(r->stage_left);
  EXPECT_THAT(host.staged, ::testing::IsEmpty()) << absl::StrJoin(host.commands, "\n");
}

TEST(EnsureAgent, AnUpToDateAgentCostsNoMoreCommandsWhenNothingWasLeft) {
  Fixture f;
  ScriptedHost host;
  host.version = f.package.version + "\n";
  absl::Duration waited = absl::ZeroDuration();
  auto r = EnsureAgent(host, f.package, f.spec, [&](absl::Duration wait) {
    waited = wait;
    return absl::OkStatus();
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(host.commands.size(), 2u) << absl::StrJoin(host.commands, "\n");  // status, version
  // The check of the agent found waits for its channel (reused after a lost stream, it may be in
  // TRANSIENT_FAILURE while the agent is back): a check failing fast would restart it again.
  EXPECT_GT(waited, absl::ZeroDuration());
}

}  // namespace
}  // namespace fleet::daemon
