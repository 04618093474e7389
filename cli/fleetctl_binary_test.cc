// The real fleetctl binary against the fake fleetd: what a script sees (exit statuses, the
// unreachable-daemon line, socket selection, raw log bytes).
#include <map>

#include "absl/strings/str_cat.h"
#include "cli/status_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"
#include "tests/testing/subprocess.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::AppliedPlan;
using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::kPve1Fingerprint;
using ::fleet::cli::testing::MakeHosts;
using ::fleet::cli::testing::MakePlan;
using ::fleet::cli::testing::MakeRow;
using ::fleet::cli::testing::MakeTrustHost;
using ::fleet::testing::BuildPath;
using ::fleet::testing::RunResult;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class FleetctlBinaryTest : public ::testing::Test {
 protected:
  // Runs fleetctl with `args`, its environment without FLEET_SOCKET and NO_COLOR plus `extra`.
  RunResult Fleetctl(std::vector<std::string> args,
                     const std::map<std::string, std::string>& extra = {}) {
    std::map<std::string, std::string> environment = fleet::testing::CurrentEnvironment();
    environment.erase("FLEET_SOCKET");
    environment.erase("NO_COLOR");
    for (const auto& [k, v] : extra) environment[k] = v;
    args.insert(args.begin(), BuildPath("cli/fleetctl"));
    const std::string output = env_.dir().Join("output." + std::to_string(runs_++));
    auto r = fleet::testing::Run(args, {.env = environment, .output_path = output});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->exited);
    return *r;
  }

  void ScriptWatch(const std::string& final_state) {
    const absl::Time now = absl::Now();
    v1::FleetStatusResponse first, last;
    *first.add_servers() = MakeRow("local/200/gpu0", "JIT_COMPILING", now);
    *first.add_servers() = MakeRow("local/200/gpu1", "READY", now);
    *last.add_servers() = MakeRow("local/200/gpu0", final_state, now);
    last.mutable_servers(0)->set_reason(final_state == "GAVE_UP" ? "attempt budget spent" : "");
    env_.service().SetWatchScript({first, last}, /*hold_open=*/true);
  }

  FakeFleetEnv env_;
  int runs_ = 0;
};

TEST_F(FleetctlBinaryTest, UnreachableDaemonIsOneLineAndExitOne) {
  const std::string missing = env_.dir().Join("missing.sock");
  RunResult r = Fleetctl({"--socket", missing, "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "fleetctl: cannot reach fleetd at unix:" + missing +
                          ": no such socket (is fleetd running? --socket, --state-dir or "
                          "FLEET_SOCKET name another)\n");
  // Without flags: the default state dir's socket is named.
  RunResult d = Fleetctl({"attempts"});
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_THAT(d.output,
              StartsWith("fleetctl: cannot reach fleetd at unix:/var/lib/gpu-fleet/fleetd.sock: "));
}

TEST_F(FleetctlBinaryTest, FindsTheSocketByFlagStateDirOrEnvironment) {
  v1::FleetStatusResponse response;
  *response.add_servers() = MakeRow("local/200/gpu0", "READY", absl::Now());
  env_.service().SetStatus(response);
  RunResult by_env = Fleetctl({"status", "-o", "name"}, {{"FLEET_SOCKET", env_.socket_path()}});
  EXPECT_EQ(by_env.exit_code, 0) << by_env.output;
  EXPECT_EQ(by_env.output, "local/200/gpu0\n");
  RunResult by_dir = Fleetctl({"--state-dir", env_.dir().path(), "status", "-o", "name"});
  EXPECT_EQ(by_dir.exit_code, 0) << by_dir.output;
  RunResult flag_wins = Fleetctl({"--socket", env_.socket_path(), "status", "-o", "name"},
                                 {{"FLEET_SOCKET", env_.dir().Join("wrong.sock")}});
  EXPECT_EQ(flag_wins.exit_code, 0) << flag_wins.output;
}

TEST_F(FleetctlBinaryTest, UntilReadyExitsZeroWhenAllReady) {
  ScriptWatch("READY");
  RunResult r = Fleetctl({"--socket", env_.socket_path(), "status", "--watch", "--until-ready"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(" local/200/gpu0 READY attempt=1\n"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("\x1b[")));
}

TEST_F(FleetctlBinaryTest, UntilReadyExitsTwoWhenOneGaveUp) {
  ScriptWatch("GAVE_UP");
  RunResult r = Fleetctl({"--socket", env_.socket_path(), "status", "--until-ready"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fleetctl status: local/200/gpu0 gave up: attempt budget spent"));
}

TEST_F(FleetctlBinaryTest, LogsAreTheDaemonsBytes) {
  constexpr char kBytes[] =
      "a\xff\x00"
      "b\r\n\x1b[1mbold\x1b[0m tail";
  const std::string bytes(kBytes, sizeof(kBytes) - 1);
  env_.service().SetLogs({bytes.substr(0, 5), bytes.substr(5)});
  RunResult r = Fleetctl({"--socket", env_.socket_path(), "logs", "local/200/gpu0"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, bytes);
}

TEST_F(FleetctlBinaryTest, HostsVerbsReachFleetd) {
  env_.service().SetHosts(MakeHosts());
  RunResult listed = Fleetctl({"--socket", env_.socket_path(), "hosts"});
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("\npve2   ssh    pve2.lan:2222  admin  1  "));
  EXPECT_THAT(listed.output,
              HasSubstr("no key recorded for pve2: run fleetctl hosts trust pve2\n"));

  // Step one: shown, nothing recorded, exit 1.
  env_.service().SetTrustHost(MakeTrustHost("new", /*recorded=*/false));
  RunResult shown = Fleetctl({"--socket", env_.socket_path(), "hosts", "trust", "pve1"});
  EXPECT_EQ(shown.exit_code, 1) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr(absl::StrCat("then run: fleetctl hosts trust pve1 "
                                                   "--fingerprint ",
                                                   kPve1Fingerprint, "\n")));
  // Step two: recorded, exit 0.
  env_.service().SetTrustHost(MakeTrustHost("new", /*recorded=*/true));
  RunResult recorded = Fleetctl({"--socket", env_.socket_path(), "hosts", "trust", "pve1",
                                 "--fingerprint", kPve1Fingerprint});
  EXPECT_EQ(recorded.exit_code, 0) << recorded.output;
  EXPECT_THAT(recorded.output, StartsWith("recorded ssh-ed25519 key "));
  const auto requests = env_.service().trust_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].fingerprint(), kPve1Fingerprint);

  RunResult unknown = Fleetctl({"--socket", env_.socket_path(), "hosts", "forget", "pve1"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.output, StartsWith("fleetctl hosts: unknown sub-verb 'forget'"));
}

// What `certs init` makes is tested with openssl in tests/e2e/tls_test.cc; its usage errors here.
TEST_F(FleetctlBinaryTest, CertsInitUsageErrors) {
  RunResult no_sub = Fleetctl({"certs"});
  EXPECT_EQ(no_sub.exit_code, 1);
  EXPECT_THAT(no_sub.output, StartsWith("fleetctl certs init: usage: fleetctl certs init"));
  RunResult bad_name = Fleetctl({"certs", "init", "--dir", "/nonexistent/x", "--agents", "a b"});
  EXPECT_EQ(bad_name.exit_code, 1);
  EXPECT_THAT(bad_name.output, HasSubstr("agent name 'a b' is not made of letters"));
  RunResult help = Fleetctl({"certs", "init", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--agents NAME,..."));
}

TEST_F(FleetctlBinaryTest, RemediationVerbsReachFleetd) {
  const absl::Time now = absl::Now();
  v1::PlanResponse plan;
  *plan.mutable_plan() = MakePlan(now);
  env_.service().SetPlan(plan);
  RunResult shown = Fleetctl({"--socket", env_.socket_path(), "plan", "pve1/200/gpu3"});
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("run: fleetctl apply 7\n"));

  v1::ApplyPlanResponse applied;
  *applied.mutable_plan() = AppliedPlan(MakePlan(now), now);
  env_.service().SetApplyPlan(applied);
  RunResult ok = Fleetctl({"--socket", env_.socket_path(), "apply", "7"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("plan 7 applied\n"));
  applied.mutable_plan()->set_status("failed");
  applied.mutable_plan()->set_outcome_reason("the agent ran only part of it");
  env_.service().SetApplyPlan(applied);
  RunResult failed = Fleetctl({"--socket", env_.socket_path(), "apply", "7"});
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_THAT(failed.output,
              HasSubstr("fleetctl apply: plan 7 failed: the agent ran only part of it\n"));

  v1::ListRemediationsResponse list;
  *list.add_plans() = applied.plan();
  env_.service().SetRemediations(list);
  RunResult listed =
      Fleetctl({"--socket", env_.socket_path(), "remediations", "pve1/200", "-o", "json"});
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, StartsWith("{\"remediations\":[{\"id\":\"7\","));
  ASSERT_EQ(env_.service().remediations_requests().size(), 1u);
  EXPECT_EQ(env_.service().remediations_requests()[0].container(), "pve1/200");
}

TEST_F(FleetctlBinaryTest, GlobalFlagErrorsAndHelp) {
  RunResult bad = Fleetctl({"--timeout", "later", "status"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output,
              HasSubstr("fleetctl: flag --timeout: 'later' is not a positive duration"));
  RunResult help = Fleetctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--socket PATH"));
  EXPECT_THAT(help.output, HasSubstr("completion bash"));
  EXPECT_THAT(help.output, HasSubstr("remediations [SERVER|CONTAINER]"));
  EXPECT_THAT(help.output, HasSubstr("hosts trust HOST [--fingerprint FP]"));
}

TEST_F(FleetctlBinaryTest, BashCompletionIsValidBash) {
  RunResult r = Fleetctl({"completion", "bash"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("complete -o default -F _fleetctl fleetctl"));
  env_.dir().WriteFile("fleetctl.bash", r.output);
  auto check = fleet::testing::Run({"bash", "-n", env_.dir().Join("fleetctl.bash")},
                                   {.output_path = env_.dir().Join("bash-n")});
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->exit_code, 0) << check->output;
  EXPECT_EQ(Fleetctl({"completion", "zsh"}).exit_code, 1);
}

}  // namespace
}  // namespace fleet::cli
