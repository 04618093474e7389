// fleetd's remediation, turn by turn (Daemon::Step, jobs run inside the turn) with a fake agent
// whose probe and Apply answers the test scripts: the preflight before the first launch, one
// remediation per cause per container and the immediate restart of every server waiting on it,
// the canary, a fix that made things worse rolled back, a plan that waits for approval (policy
// `ask`), a fix that did not hold. The end-to-end versions against the real agent and the
// simulated world are in tests/e2e/fleet_e2e_test.cc.
#include <deque>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/planner_testing.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using fleet::v1::AgentEvent;
using ::testing::HasSubstr;
namespace pt = fleet::daemon::plannertest;

// The container's agent: launches and stream as in daemon_test, a probe that answers `toolchain`,
// and Apply that records the request and answers `after` (the toolchain it leaves).
class ScriptedAgent {
 public:
  fleet::v1::StatusResponse snapshot;
  uint64_t sequence = 0;
  std::vector<fleet::v1::LaunchRequest> launches;
  std::vector<fleet::v1::ApplyRequest> applies;
  fleet::v1::ToolchainSnapshot toolchain;
  // Answers of the next Apply calls (toolchain after each); when empty, `toolchain` unchanged.
  std::deque<fleet::v1::ToolchainSnapshot> after;
  std::vector<fleet::v1::Package> saved;  // the venv's package set Apply reports saved
  int probes = 0;
  absl::Status probe_error;        // when not ok, every probe fails with it
  int probe_failures = 0;          // the next this many probes fail (the agent away)
  std::function<void()> on_apply;  // called as Apply starts
  // Answers of the next Apply calls that break off (the agent killed while it applies): each
  // is returned once, after the install took effect when `applied_before_error` says so.
  std::deque<absl::Status> apply_errors;
  bool applied_before_error = false;
  // Adjusts what a probe with this spec sees (a PATH that now holds ninja, ...).
  std::function<void(const fleet::v1::ServerSpec&, fleet::v1::ToolchainSnapshot*)> on_probe;
  EventSink* sink = nullptr;

  void Say(AgentEvent e) {
    e.set_incarnation(snapshot.incarnation());
    e.set_sequence(++sequence);
    snapshot.set_sequence(sequence);
    sink->OnEvent("local/200", std::move(e));
  }
};

class Client : public AgentClient {
 public:
  explicit Client(ScriptedAgent* a) : a_(a) {}
  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override {
    a_->launches.push_back(r);
    fleet::v1::LaunchResponse out;
    out.mutable_status()->set_attempt_id(r.attempt_id());
    out.mutable_status()->set_state("STARTING");
    return out;
  }
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest&) override {
    return fleet::v1::StopResponse();
  }
  absl::StatusOr<fleet::v1::StatusResponse> Status() override { return a_->snapshot; }
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& spec) override {
    ++a_->probes;
    if (!a_->probe_error.ok()) return a_->probe_error;
    if (a_->probe_failures > 0) {
      --a_->probe_failures;
      return absl::UnavailableError("agent Probe: Socket closed");
    }
    fleet::v1::ToolchainSnapshot seen = a_->toolchain;
    if (a_->on_probe) a_->on_probe(spec, &seen);
    return seen;
  }
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override {
    a_->applies.push_back(r);
    if (a_->on_apply) a_->on_apply();
    if (!a_->apply_errors.empty()) {
      const absl::Status error = a_->apply_errors.front();
      a_->apply_errors.pop_front();
      if (a_->applied_before_error && !a_->after.empty()) {
        a_->toolchain = a_->after.front();
        a_->after.pop_front();
      }
      return error;
    }
    fleet::v1::ApplyResponse out;
    for (const fleet::v1::Action& action : r.actions()) {
      fleet::v1::ActionResult* result = out.add_results();
      *result->mutable_action() = action;
      result->set_ok(true);
      result->set_message("done");
    }
    if (r.save_package_set()) {
      for (const auto& p : a_->saved) *out.add_saved_package_set() = p;
    }
    if (!a_->after.empty()) {
      a_->toolchain = a_->after.front();
      a_->after.pop_front();
    }
    *out.mutable_after() = a_->toolchain;
    // The agent probes after applying, with the spec it was given.
    if (a_->on_probe) a_->on_probe(r.spec(), out.mutable_after());
    return out;
  }
  absl::Status Logs(const fleet::v1::LogsRequest&,
                    const std::function<bool(const fleet::v1::LogChunk&)>&, CallCancel*) override {
    return absl::OkStatus();
  }
  void Follow(const std::string&, uint64_t, EventSink* sink) override { a_->sink = sink; }
  void CancelFollow() override {}

 private:
  ScriptedAgent* a_;
};

// The fixed world's layout with CUDA 13.0 throughout: its ptxas accepts PTX 9.0 at most.
fleet::v1::ToolchainSnapshot Cuda130() {
  fleet::v1::ToolchainSnapshot old = pt::FixedSnapshot();
  pt::SetPackages(&old, pt::kSet130);
  old.mutable_nvcc()->set_version("13.0");
  old.mutable_ptxas()->set_version("13.0");
  old.set_ptx_isa_max("9.0");
  old.set_cudart_header_version("13.0");
  old.set_nvvm_version("13.0");
  return old;
}

class RemediationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_.snapshot.set_incarnation("inc-1");
    agent_.toolchain = pt::FixedSnapshot();
    Open(dir_.Join("fleet.db"));
  }

  // A daemon on the record `db` (a restart when there was one).
  void Open(const std::string& db) {
    daemon_.reset();
    auto store = FleetStore::Open(db);
    ASSERT_TRUE(store.ok()) << store.status();
    // A writer that holds the database makes the daemon's writes fail soon (SQLITE_BUSY).
    ASSERT_TRUE((*store)->db().Exec("PRAGMA busy_timeout = 20").ok());
    DaemonOptions options;
    options.fix_threads = 0;  // a turn runs the job; the next one takes its result
    options.planner.driver_libcuda = pt::kLibcuda;
    auto d = Daemon::Create(
        *std::move(store),
        [this](const std::string&, const fleet::v1::Host&, const fleet::v1::Container&) {
          return std::make_unique<Client>(&agent_);
        },
        &clock_, options);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  // `gpus` servers of the fixed world's spec, in container local/200.
  fleet::v1::FleetConfig Config(int gpus, const fleet::v1::Policy& policy) {
    fleet::v1::FleetConfig c;
    auto* host = c.add_hosts();
    host->set_name("local");
    host->mutable_reach()->set_kind(fleet::v1::Reach::LOCAL);
    auto* ct = host->add_containers();
    ct->set_ctid("200");
    for (int g = 0; g < gpus; ++g) ct->add_gpus(g);
    ct->set_template_("sglang");
    ct->set_policy(policy.name());
    ct->set_base_port(30000);
    ct->mutable_channel()->set_kind(fleet::v1::Channel::LOOPBACK);
    ct->mutable_channel()->set_address("unix:/nonexistent.sock");
    auto* t = c.add_templates();
    t->set_name("sglang");
    t->set_engine("sglang");
    const fleet::v1::ServerSpec spec = pt::FixedSpec();
    for (const std::string& arg : spec.argv()) t->add_argv(arg);
    for (const auto& [k, v] : spec.env()) (*t->mutable_env())[k] = v;
    t->set_log_path("/logs/gpu{gpu}.log");
    *c.add_policies() = policy;
    return c;
  }

  static fleet::v1::Policy Policy(bool canary = false) {
    fleet::v1::Policy p = pt::AutoPolicy();
    p.set_name("p");
    p.set_canary(canary);
    p.set_max_attempts(5);
    return p;
  }

  void Deploy(const fleet::v1::FleetConfig& config) {
    fleet::v1::DeployRequest r;
    *r.mutable_config() = config;
    auto d = daemon_->Deploy(r);
    ASSERT_TRUE(d.ok()) << d.status();
  }

  std::map<std::string, fleet::v1::ServerRow> Rows() {
    std::map<std::string, fleet::v1::ServerRow> out;
    const fleet::v1::FleetStatusResponse status = daemon_->Status({});
    for (const auto& r : status.servers()) out[r.server()] = r;
    return out;
  }

  std::vector<fleet::v1::Plan> Plans() {
    auto r = daemon_->ListRemediations({});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::vector<fleet::v1::Plan>(r->plans().begin(), r->plans().end())
                  : std::vector<fleet::v1::Plan>();
  }

  void Fail(const fleet::v1::LaunchRequest& launch, const fleet::v1::Diagnosis& d) {
    AgentEvent diag;
    *diag.mutable_server() = launch.spec().server();
    diag.set_attempt_id(launch.attempt_id());
    diag.mutable_diagnosis()->set_final(true);
    *diag.mutable_diagnosis()->mutable_diagnosis() = d;
    agent_.Say(diag);
    AgentEvent failed;
    *failed.mutable_server() = launch.spec().server();
    failed.set_attempt_id(launch.attempt_id());
    failed.mutable_phase()->set_state("FAILED");
    agent_.Say(failed);
  }

  void Ready(const fleet::v1::LaunchRequest& launch) {
    AgentEvent e;
    *e.mutable_server() = launch.spec().server();
    e.set_attempt_id(launch.attempt_id());
    e.mutable_phase()->set_state("READY");
    agent_.Say(e);
  }

  // A few turns: a job's turn, the turn that takes its result, the launches after it.
  // The canary fails on PTX (the container has CUDA 13.0), and the agent's answer to the fix
  // breaks off with `error`; with `took_effect`, the fix was done all the same.
  void FailTheCanaryAndBreakTheApply(absl::Status error, bool took_effect) {
    Deploy(Config(1, Policy()));
    Turns();
    ASSERT_EQ(agent_.launches.size(), 1u);
    agent_.toolchain = Cuda130();
    agent_.after.push_back(pt::FixedSnapshot());
    agent_.apply_errors.push_back(std::move(error));
    agent_.applied_before_error = took_effect;
  }

  void Turns(int n = 3) {
    for (int i = 0; i < n; ++i) daemon_->Step();
  }

  fleet::testing::TempDir dir_;
  fleet::testing::FakeClock clock_;
  ScriptedAgent agent_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(RemediationTest, ThePreflightFixesWhatTheProbeSeesBeforeAnyLaunch) {
  agent_.toolchain.clear_ninja();  // no ninja on the servers' PATH
  fleet::v1::ToolchainSnapshot fixed = pt::FixedSnapshot();
  agent_.after.push_back(fixed);
  Deploy(Config(2, Policy()));
  daemon_->Step();  // connects, queues and runs the preflight
  EXPECT_TRUE(agent_.launches.empty());
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "PENDING");
  EXPECT_THAT(Rows()["local/200/gpu0"].reason(), HasSubstr("preflight"));
  Turns(2);
  ASSERT_EQ(agent_.applies.size(), 1u);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].trigger(), "preflight");
  EXPECT_EQ(plans[0].status(), "applied");
  EXPECT_THAT(plans[0].causes(), ::testing::Contains("ninja_not_found"));
  // Then both launch, once each.
  ASSERT_EQ(agent_.launches.size(), 2u);
  EXPECT_EQ(agent_.probes, 1);
}

TEST_F(RemediationTest, AnEnvironmentFixIsJudgedByTheToolchainTheServersWillSee) {
  // ninja and a whole toolkit exist in the container, off the servers' PATH and CUDA_HOME: the
  // fix is environment only, which the agent's own after-probe (old env) cannot show.
  agent_.toolchain.clear_ninja();
  agent_.toolchain.set_ninja_elsewhere("/opt/bin/ninja");
  agent_.on_probe = [](const fleet::v1::ServerSpec& spec, fleet::v1::ToolchainSnapshot* s) {
    if (absl::StrContains(spec.env().at("PATH"), "/opt/bin")) {
      s->mutable_ninja()->set_path("/opt/bin/ninja");
      s->mutable_ninja()->set_version("1.11.1");
      s->clear_ninja_elsewhere();
    }
  };
  Deploy(Config(1, Policy()));
  Turns();
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applied") << plans[0].outcome_reason();
  EXPECT_EQ(plans[0].after().ninja().path(), "/opt/bin/ninja");
  ASSERT_EQ(agent_.launches.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(agent_.launches[0].spec().env().at("PATH"), "/opt/bin:"));
}

TEST_F(RemediationTest, AFixThatUncoversTheNextProblemIsKeptAndThePreflightGoesOn) {
  // CUDA_HOME names no toolkit (the H200 run's bad_cuda_home): nvcc is not found, so nothing
  // about the toolkit can be checked. The toolkit elsewhere, once pointed at, lacks the libcuda
  // stub its link needs: hidden before, not caused by the fix. The fix stays applied, and a second
  // preflight round (with it in the spec) adds the stub; the servers start with both.
  fleet::v1::ToolchainSnapshot& before = agent_.toolchain;
  before.Clear();
  before.set_cuda_home("/nowhere");
  before.set_cuda_root("/nowhere");
  before.set_cuda_root_source("CUDA_HOME");
  const fleet::v1::ToolchainSnapshot fixed = pt::FixedSnapshot();
  for (const fleet::v1::Package& p : fixed.pip_packages()) {
    if (p.name() == "torch") *before.add_pip_packages() = p;
  }
  before.set_driver_cuda_version(fixed.driver_cuda_version());
  *before.mutable_ninja() = fixed.ninja();
  before.set_libnvrtc_loadable(true);
  before.set_libcudart_loadable(true);
  fleet::v1::Tool* elsewhere = before.add_toolkits_elsewhere();
  elsewhere->set_path(pt::Cuda(""));
  elsewhere->set_version(fixed.nvcc().version());
  agent_.on_probe = [this](const fleet::v1::ServerSpec& spec, fleet::v1::ToolchainSnapshot* s) {
    auto home = spec.env().find("CUDA_HOME");
    if (home == spec.env().end() || home->second != pt::Cuda("")) return;
    *s = pt::FixedSnapshot();
    bool stub = false;
    for (const auto& apply : agent_.applies) {
      for (const auto& a : apply.actions()) stub = stub || a.has_symlink();
    }
    if (!stub) s->clear_libcuda_stub();
  };
  fleet::v1::FleetConfig config = Config(1, Policy());
  (*config.mutable_templates(0)->mutable_env())["CUDA_HOME"] = "/nowhere";
  Deploy(config);
  Turns(6);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_GE(plans.size(), 2u) << (plans.empty() ? "" : plans[0].DebugString());
  EXPECT_EQ(plans[0].status(), "applied") << plans[0].outcome_reason();
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("shows next"));
  EXPECT_EQ(plans[1].trigger(), "preflight");
  EXPECT_EQ(plans[1].status(), "applied") << plans[1].outcome_reason();
  ASSERT_EQ(agent_.launches.size(), 1u);
  EXPECT_EQ(agent_.launches[0].spec().env().at("CUDA_HOME"), pt::Cuda(""));
}

// A test-compile failure after a fix is the next layer only where the test-compile could not get
// that far before (no nvcc then). Here nvcc was there and the test-compile simply did not run (an
// agent older than it): a link failure after the fix is a fix made worse, as before issue 19.
TEST_F(RemediationTest, ATestCompileFailureAfterAFixIsWorseWhenNvccWasThereBefore) {
  agent_.toolchain.clear_ninja();
  ASSERT_FALSE(agent_.toolchain.nvcc().path().empty());
  ASSERT_FALSE(agent_.toolchain.test_compile().ran());
  fleet::v1::ToolchainSnapshot after = pt::FixedSnapshot();
  fleet::v1::TestCompile* compiled = after.mutable_test_compile();
  compiled->set_ran(true);
  compiled->set_failed_step("link");
  compiled->mutable_diagnosis()->set_diagnosis_class("link_error");
  agent_.after.push_back(after);
  Deploy(Config(1, Policy()));
  Turns(4);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_GE(plans.size(), 1u);
  EXPECT_NE(plans[0].status(), "applied") << plans[0].outcome_reason();
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("made things worse"));
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("link_error"));
}

TEST_F(RemediationTest, OneCauseOneRemediationThenEveryWaitingServerRestartsAtOnce) {
  Deploy(Config(2, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 2u);  // nothing to fix before: both start
  // CUDA 13.0's ptxas in the container; both fail on the PTX 9.2 flashinfer emits.
  const fleet::v1::ToolchainSnapshot old = Cuda130();
  agent_.toolchain = old;
  agent_.after.push_back(pt::FixedSnapshot());
  const auto first = agent_.launches;
  Fail(first[0], pt::PtxDiag());
  Fail(first[1], pt::PtxDiag());
  Turns();
  // One plan for the container, not one per server; both restarted, no backoff (the clock did
  // not move), with the remediation as the trigger.
  ASSERT_EQ(agent_.applies.size(), 1u);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applied");
  EXPECT_EQ(plans[0].cuda_release(), "13.2");
  ASSERT_EQ(agent_.launches.size(), 4u);
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  int by_fix = 0;
  for (const auto& a : attempts->attempts()) {
    if (a.trigger() == "remediation:" + plans[0].id()) ++by_fix;
  }
  EXPECT_EQ(by_fix, 2);
}

// A class inferred (a cut-off message, a traceback's frames) is reported, never applied on its
// own: its plan is proposed under policy auto, and `fleetctl apply` runs it (issue 15).
TEST_F(RemediationTest, ALowConfidenceDiagnosisIsProposedNotAppliedAndApplyRunsIt) {
  Deploy(Config(1, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  agent_.toolchain = Cuda130();
  agent_.after.push_back(pt::FixedSnapshot());
  fleet::v1::Diagnosis low = pt::PtxDiag();
  low.set_confidence("low");
  low.set_toolchain_fix(false);
  Fail(agent_.launches[0], low);
  Turns();
  EXPECT_TRUE(agent_.applies.empty());
  EXPECT_EQ(agent_.launches.size(), 1u);
  std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "proposed");
  EXPECT_THAT(plans[0].summary(), HasSubstr("low-confidence"));
  EXPECT_THAT(Rows()["local/200/gpu0"].reason(),
              HasSubstr("plan " + plans[0].id() + " waits for approval"));
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->attempts_size(), 1);
  EXPECT_EQ(attempts->attempts(0).diagnosis_confidence(), "low");

  fleet::v1::ApplyPlanRequest apply;
  apply.set_plan_id(plans[0].id());
  auto applied = daemon_->ApplyPlan(apply);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->plan().status(), "applied");
  EXPECT_EQ(agent_.applies.size(), 1u);
  Turns();
  EXPECT_EQ(agent_.launches.size(), 2u);
}

// The same failure with confidence high is applied at once (the test above is not vacuous).
TEST_F(RemediationTest, AHighConfidenceDiagnosisIsAppliedAtOnce) {
  Deploy(Config(1, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  agent_.toolchain = Cuda130();
  agent_.after.push_back(pt::FixedSnapshot());
  fleet::v1::Diagnosis high = pt::PtxDiag();
  high.set_confidence("high");
  Fail(agent_.launches[0], high);
  Turns();
  EXPECT_EQ(agent_.applies.size(), 1u);
  EXPECT_EQ(agent_.launches.size(), 2u);
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts(0).diagnosis_confidence(), "high");
}

TEST_F(RemediationTest, TheCanaryStartsAloneAndTheRestFollowWhenItIsReady) {
  Deploy(Config(3, Policy(/*canary=*/true)));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  EXPECT_EQ(agent_.launches[0].spec().server().gpu(), 0);
  EXPECT_THAT(Rows()["local/200/gpu2"].reason(), HasSubstr("canary local/200/gpu0"));
  Ready(agent_.launches[0]);
  Turns(1);
  EXPECT_EQ(agent_.launches.size(), 3u);
}

TEST_F(RemediationTest, StoppingServersThatWaitForTheCanaryStopsThemAtOnce) {
  Deploy(Config(3, Policy(/*canary=*/true)));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  fleet::v1::ServersRequest stop;
  stop.set_all(true);
  ASSERT_TRUE(daemon_->Stop(stop).ok());
  Turns(1);
  const auto rows = Rows();
  EXPECT_EQ(rows.at("local/200/gpu1").state(), "STOPPED");
  EXPECT_EQ(rows.at("local/200/gpu2").state(), "STOPPED");
  EXPECT_EQ(rows.at("local/200/gpu2").reason(), "");
  EXPECT_EQ(agent_.launches.size(), 1u);
}

TEST_F(RemediationTest, WhenTheCanaryGivesUpOnTheToolchainTheOthersGiveUpWithItsReason) {
  fleet::v1::Policy policy = Policy(/*canary=*/true);
  policy.set_remediation(fleet::v1::Policy::OFF);
  Deploy(Config(2, policy));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns();
  const auto rows = Rows();
  EXPECT_EQ(rows.at("local/200/gpu0").state(), "GAVE_UP");
  EXPECT_EQ(rows.at("local/200/gpu1").state(), "GAVE_UP");
  EXPECT_THAT(rows.at("local/200/gpu1").reason(),
              HasSubstr("the canary local/200/gpu0 gave up: ptx_version_unsupported"));
  EXPECT_EQ(agent_.launches.size(), 1u);  // the other never started
}

TEST_F(RemediationTest, AFixThatMakesThingsWorseIsRolledBackToTheSavedPackageSet) {
  // ninja missing; the policy allows no apt, so ninja comes from pip (a package set is saved).
  fleet::v1::Policy policy = Policy();
  for (const char* kind : {"set_env", "prepend_path", "pip_install", "symlink"}) {
    policy.add_allowed_actions(kind);
  }
  agent_.toolchain.clear_ninja();
  for (const auto& [name, version] : pt::Set132()) {
    fleet::v1::Package p;
    p.set_name(name);
    p.set_version(version);
    agent_.saved.push_back(p);
  }
  // After the install, the loader no longer finds libnvrtc: a problem it did not have.
  fleet::v1::ToolchainSnapshot worse = pt::FixedSnapshot();
  worse.set_libnvrtc_loadable(false);
  worse.clear_libnvrtc_path();
  agent_.after.push_back(worse);
  agent_.after.push_back(pt::FixedSnapshot());  // what the rollback leaves
  Deploy(Config(1, policy));
  Turns();
  ASSERT_EQ(agent_.applies.size(), 2u);
  EXPECT_TRUE(agent_.applies[0].save_package_set());
  // The rollback removes what the plan added (ninja was not in the saved set).
  ASSERT_EQ(agent_.applies[1].actions_size(), 1);
  ASSERT_TRUE(agent_.applies[1].actions(0).has_pip_uninstall());
  EXPECT_EQ(agent_.applies[1].actions(0).pip_uninstall().packages(0), "ninja");
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "rolled_back");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("missing_shared_library"));
  EXPECT_EQ(plans[0].results_size(), 2);  // the plan's action and the rollback's
  // The rolled-back plan's env changes are not in the spec the server launches with.
  ASSERT_EQ(agent_.launches.size(), 1u);
  EXPECT_EQ(agent_.launches[0].spec().env().at("PATH"), pt::FixedSpec().env().at("PATH"));
}

TEST_F(RemediationTest, AFallbackTheSpeedPaysForIsShownDegraded) {
  fleet::v1::Policy policy = Policy();
  policy.set_allow_fallbacks(true);
  Deploy(Config(1, policy));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  EXPECT_FALSE(Rows()["local/200/gpu0"].degraded());
  Fail(agent_.launches[0], pt::Diag("cuda_graph_capture_failed"));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const auto& argv = agent_.launches[1].spec().argv();
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--disable-cuda-graph"), argv.end());
  EXPECT_TRUE(Rows()["local/200/gpu0"].degraded());
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_TRUE(plans[0].degraded());
}

TEST_F(RemediationTest, PolicyAskProposesAndWaitsForApplyPlan) {
  fleet::v1::Policy policy = Policy();
  policy.set_remediation(fleet::v1::Policy::ASK);
  agent_.toolchain.clear_ninja();
  agent_.after.push_back(pt::FixedSnapshot());
  Deploy(Config(1, policy));
  Turns();
  EXPECT_TRUE(agent_.applies.empty());
  EXPECT_TRUE(agent_.launches.empty());
  std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "proposed");
  EXPECT_THAT(Rows()["local/200/gpu0"].reason(),
              HasSubstr("plan " + plans[0].id() + " waits for approval"));
  auto shown = daemon_->Plan([] {
    fleet::v1::PlanRequest r;
    r.set_server("local/200/gpu0");
    return r;
  }());
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->plan().id(), plans[0].id());

  fleet::v1::ApplyPlanRequest apply;
  apply.set_plan_id(plans[0].id());
  auto applied = daemon_->ApplyPlan(apply);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->plan().status(), "applied");
  EXPECT_EQ(agent_.applies.size(), 1u);
  Turns();
  EXPECT_EQ(agent_.launches.size(), 1u);
  // Applied once: a second apply is refused.
  EXPECT_FALSE(daemon_->ApplyPlan(apply).ok());
}

TEST_F(RemediationTest, TheSameCauseAfterItsFixIsAFailedFixAndTheCapEndsIt) {
  const fleet::v1::ToolchainSnapshot old = Cuda130();
  agent_.toolchain = old;
  Deploy(Config(1, Policy()));
  Turns();
  // Whatever is installed, the probe keeps showing 13.0, and the server keeps failing.
  for (int round = 0; round < 4 && !agent_.launches.empty(); ++round) {
    const size_t before = agent_.launches.size();
    Fail(agent_.launches.back(), pt::PtxDiag());
    Turns();
    if (agent_.launches.size() == before) break;
  }
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_FALSE(plans.empty());
  EXPECT_LE(plans.size(), 3u);
  std::set<std::string> fingerprints;
  for (const fleet::v1::Plan& p : plans) {
    EXPECT_TRUE(fingerprints.insert(p.fingerprint()).second) << "applied twice: " << p.summary();
  }
  EXPECT_EQ(plans[0].status(), "failed");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("came back after it"));
  const auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "GAVE_UP");
  EXPECT_THAT(row.reason(), HasSubstr("ptx_version_unsupported"));
}

// --- A failing preflight probe (issue 12, defect 13) -----------------------------------------

TEST_F(RemediationTest, AFailingProbeIsShownBacksOffAndTheContainerThenLaunchesWithoutPreflight) {
  agent_.probe_error = absl::UnavailableError("container local/200: Probe: nvidia-smi: not found");
  fleet::v1::Policy policy = Policy();
  policy.mutable_backoff_initial()->set_seconds(10);
  policy.mutable_backoff_max()->set_seconds(30);
  policy.set_preflight_attempts(4);
  Deploy(Config(2, policy));
  Turns(2);  // the probe fails; the next turn takes its result
  EXPECT_EQ(agent_.probes, 1);
  EXPECT_TRUE(agent_.launches.empty());
  auto row = Rows()["local/200/gpu1"];
  EXPECT_EQ(row.state(), "PENDING");
  EXPECT_THAT(row.reason(), HasSubstr("nvidia-smi: not found"));
  EXPECT_THAT(row.reason(), HasSubstr("1 of 4"));
  EXPECT_THAT(row.reason(), HasSubstr("tried again in 10s"));
  // Backoff: 10 s, then 20 s, then 30 s (the policy's max); no probe in between.
  const std::vector<int> waits = {10, 20, 30};
  for (size_t i = 0; i < waits.size(); ++i) {
    clock_.Advance(absl::Seconds(waits[i] - 1));
    Turns(3);
    EXPECT_EQ(agent_.probes, static_cast<int>(i) + 1) << "probed before the backoff ended";
    clock_.Advance(absl::Seconds(1));
    Turns(2);
    EXPECT_EQ(agent_.probes, static_cast<int>(i) + 2);
    if (i + 2 < 4) {
      EXPECT_THAT(Rows()["local/200/gpu0"].reason(), HasSubstr(absl::StrCat(i + 2, " of 4")));
    }
  }
  // The fourth failure: both launch without the preflight (the policy's default), once each.
  Turns(2);
  EXPECT_EQ(agent_.probes, 4);
  ASSERT_EQ(agent_.launches.size(), 2u);
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "STARTING");
  EXPECT_EQ(Rows()["local/200/gpu0"].reason(), "");
  EXPECT_TRUE(Plans().empty());
}

TEST_F(RemediationTest, AFailingProbeGivesUpWithItsErrorWhenThePolicySaysSo) {
  agent_.probe_error = absl::UnavailableError("container local/200: Probe: exec format error");
  fleet::v1::Policy policy = Policy();
  policy.mutable_backoff_initial()->set_seconds(10);
  policy.mutable_backoff_max()->set_seconds(10);
  policy.set_preflight_attempts(2);
  policy.set_preflight_failure(fleet::v1::Policy::GIVE_UP);
  Deploy(Config(2, policy));
  Turns(2);
  clock_.Advance(absl::Seconds(10));
  Turns(3);
  EXPECT_EQ(agent_.probes, 2);
  EXPECT_TRUE(agent_.launches.empty());
  for (const auto& [name, row] : Rows()) {
    EXPECT_EQ(row.state(), "GAVE_UP") << name;
    EXPECT_THAT(row.reason(), HasSubstr("probe failed 2 times: "));
    EXPECT_THAT(row.reason(), HasSubstr("exec format error"));
  }
  // No more probes once given up.
  clock_.Advance(absl::Minutes(10));
  Turns(3);
  EXPECT_EQ(agent_.probes, 2);
}

TEST_F(RemediationTest, WhenTheProbeStillFailsAfterALaunchTheFailedServerRestartsAfterBackoff) {
  // Launched without the preflight (one failed probe allowed); its failure is one a fix would
  // address, but the probe the plan needs fails too: restarted without a fix after backoff, within
  // the attempt budget, never asked again every few seconds.
  agent_.probe_error = absl::UnavailableError("container local/200: Probe: nvidia-smi: not found");
  fleet::v1::Policy policy = Policy();
  policy.mutable_backoff_initial()->set_seconds(10);
  policy.mutable_backoff_max()->set_seconds(10);
  policy.set_preflight_attempts(1);
  policy.set_max_attempts(2);
  Deploy(Config(1, policy));
  Turns(2);
  ASSERT_EQ(agent_.launches.size(), 1u);
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(3);
  EXPECT_EQ(agent_.probes, 2);
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "RESTARTING");
  EXPECT_THAT(row.reason(), HasSubstr("nvidia-smi: not found"));
  Turns(3);
  EXPECT_EQ(agent_.probes, 2);        // not asked again before the restart
  clock_.Advance(absl::Seconds(13));  // the backoff, jitter included
  Turns(2);
  ASSERT_EQ(agent_.launches.size(), 2u);
  Fail(agent_.launches[1], pt::PtxDiag());
  Turns(3);
  // The budget spent: it gives up with the failure's class (no more probes asked for it).
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "GAVE_UP");
  EXPECT_THAT(Rows()["local/200/gpu0"].reason(), HasSubstr("ptx_version_unsupported"));
  EXPECT_EQ(agent_.probes, 2);
}

// The fault matrix's outside-writer row: the plan's outcome could not be written while another
// process held the database, and the record said "applying" for good (a restart would then have
// resolved a fix that worked as interrupted). It is kept and written once the record is back.
TEST_F(RemediationTest, APlanOutcomeTheRecordRefusedIsWrittenOnceTheRecordIsBack) {
  Deploy(Config(1, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  agent_.toolchain = Cuda130();
  agent_.after.push_back(pt::FixedSnapshot());
  std::unique_ptr<FleetStore> outside;
  agent_.on_apply = [this, &outside] {
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    outside = *std::move(store);
    ASSERT_TRUE(outside->db().Exec("BEGIN IMMEDIATE").ok());
  };
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns();
  ASSERT_EQ(agent_.applies.size(), 1u);
  ASSERT_NE(outside, nullptr);
  std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applying");  // the outcome is not in the record yet
  agent_.on_apply = nullptr;
  ASSERT_TRUE(outside->db().Exec("ROLLBACK").ok());
  Turns();
  plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applied");
  EXPECT_EQ(agent_.applies.size(), 1u);  // written, not run again
  outside.reset();
}

// --- A remediation cut short by fleetd's stop (issue 12, defect 9) ---------------------------

class InterruptedRemediationTest : public RemediationTest {
 protected:
  // A server fails on PTX 9.2 with CUDA 13.0 in the container; while the agent applies the plan
  // (13.2), fleetd "dies": what it had committed then is copied (what kill -9 leaves), and a new
  // daemon starts on that copy.
  fleet::v1::Plan FailAndStopDuringTheFix() {
    Deploy(Config(1, Policy()));
    Turns();
    EXPECT_EQ(agent_.launches.size(), 1u);
    agent_.toolchain = Cuda130();
    agent_.after.push_back(pt::FixedSnapshot());
    const std::string copy = dir_.Join("at-the-stop.db");
    agent_.on_apply = [this, copy] {
      auto store = FleetStore::Open(dir_.Join("fleet.db"));
      ASSERT_TRUE(store.ok()) << store.status();
      ASSERT_TRUE((*store)->db().Exec(absl::StrCat("VACUUM INTO '", copy, "'")).ok());
    };
    Fail(agent_.launches[0], pt::PtxDiag());
    Turns();
    EXPECT_EQ(agent_.applies.size(), 1u);
    agent_.on_apply = nullptr;
    Open(copy);
    const std::vector<fleet::v1::Plan> plans = Plans();
    EXPECT_EQ(plans.size(), 1u);
    EXPECT_EQ(plans.empty() ? "" : plans[0].status(), "applying");
    return plans.empty() ? fleet::v1::Plan() : plans[0];
  }
};

TEST_F(InterruptedRemediationTest, APlanTheProbeShowsInEffectIsAppliedAndItsServerRestarts) {
  const fleet::v1::Plan plan = FailAndStopDuringTheFix();
  agent_.toolchain = pt::FixedSnapshot();  // the agent finished the install
  const size_t launched = agent_.launches.size();
  Turns();
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applied");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("showed it in effect"));
  EXPECT_EQ(agent_.applies.size(), 1u);  // not run again
  ASSERT_EQ(agent_.launches.size(), launched + 1);
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts(attempts->attempts_size() - 1).trigger(),
            "remediation:" + plan.id());
}

TEST_F(InterruptedRemediationTest, APlanNotInEffectIsInterruptedAndPlannedAgainNotExcluded) {
  const fleet::v1::Plan plan = FailAndStopDuringTheFix();
  agent_.toolchain = Cuda130();  // the install never happened
  agent_.after.push_back(pt::FixedSnapshot());
  const size_t launched = agent_.launches.size();
  Turns(5);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].status(), "interrupted");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("not installed"));
  // The same fix, not excluded: planned again, run, and the server restarted with it.
  EXPECT_EQ(plans[1].fingerprint(), plan.fingerprint());
  EXPECT_EQ(plans[1].status(), "applied");
  EXPECT_EQ(agent_.applies.size(), 2u);
  ASSERT_EQ(agent_.launches.size(), launched + 1);
  EXPECT_NE(Rows()["local/200/gpu0"].state(), "REMEDIATING");
}

// Finding 5 of docs/reliability.md: the agent killed while it applied a fix. The broken call is
// not a failed fix: the plan was "failed" and excluded, and the canary gave up on a toolchain
// the same fix would have mended.
TEST_F(RemediationTest, AnApplyTheAgentDidNotFinishIsInterruptedAndPlannedAgainNotExcluded) {
  FailTheCanaryAndBreakTheApply(absl::UnavailableError("agent Apply: Socket closed"), false);
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(5);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].status(), "interrupted");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("Socket closed"));
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("did not show it in effect"));
  EXPECT_EQ(plans[1].fingerprint(), plans[0].fingerprint()) << "the same fix, not excluded";
  EXPECT_EQ(plans[1].status(), "applied");
  EXPECT_EQ(agent_.applies.size(), 2u);
  ASSERT_EQ(agent_.launches.size(), 2u) << "the server restarts with the fix";
  EXPECT_NE(Rows()["local/200/gpu0"].state(), "GAVE_UP");
}

TEST_F(RemediationTest, AnApplyThatBrokeOffAfterTakingEffectIsAppliedAndNotRunAgain) {
  FailTheCanaryAndBreakTheApply(absl::DeadlineExceededError("agent Apply: Deadline Exceeded"),
                                true);
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(3);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applied");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("then the probe showed it in effect"));
  EXPECT_EQ(agent_.applies.size(), 1u);
  ASSERT_EQ(agent_.launches.size(), 2u);
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts(attempts->attempts_size() - 1).trigger(),
            "remediation:" + plans[0].id());
}

// The fault matrix's kill9-both row: the agent was killed while it applied the PTX fix, but the
// pip it ran finished; the probe that judged the plan failed (the agent was still away), so the
// plan was interrupted. The next diagnosis' probe shows the fix in effect: the plan is applied
// and the canary restarts with it, instead of giving up on "nothing the planner would change".
TEST_F(RemediationTest, AnInterruptedFixALaterProbeShowsInEffectIsAppliedAndTheServerRestarts) {
  FailTheCanaryAndBreakTheApply(absl::UnavailableError("agent Apply: Socket closed"), true);
  agent_.on_apply = [this] { agent_.probe_failures = 1; };
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(6);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "applied");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("a later probe showed it in effect"));
  EXPECT_EQ(agent_.applies.size(), 1u);
  ASSERT_EQ(agent_.launches.size(), 2u) << Rows()["local/200/gpu0"].reason();
  EXPECT_NE(Rows()["local/200/gpu0"].state(), "GAVE_UP");
}

// Finding 19 of docs/reliability.md (the fault matrix's fleetd-busy row on PostgreSQL): fleetd
// stopped after the canary's fix was applied and recorded `applied`, before the turn that
// restarts the canary with it was committed. The next fleetd planned for the canary's failure
// again and took it for the fix's cause coming back: the fix was failed, and the canary gave up
// on "nothing the planner would change" with the fix in place.
TEST_F(RemediationTest, AFixAppliedForAFailureIsStillItsOutcomeWhenFleetdStoppedBeforeTheRestart) {
  Deploy(Config(1, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  agent_.toolchain = Cuda130();
  agent_.after.push_back(pt::FixedSnapshot());
  Fail(agent_.launches[0], pt::PtxDiag());
  // The turns until the fix is applied and recorded; its result (the restart) is the next turn's.
  for (int i = 0; i < 5 && (Plans().empty() || Plans()[0].status() != "applied"); ++i) {
    daemon_->Step();
  }
  ASSERT_EQ(Plans().size(), 1u);
  ASSERT_EQ(Plans()[0].status(), "applied");
  ASSERT_EQ(agent_.launches.size(), 1u) << "stopped before the canary restarts";
  Open(dir_.Join("fleet.db"));  // fleetd stops and starts again on its record
  Turns(6);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 1u) << Rows()["local/200/gpu0"].reason();
  EXPECT_EQ(plans[0].status(), "applied") << plans[0].outcome_reason();
  EXPECT_EQ(agent_.applies.size(), 1u) << "the fix is not run again";
  ASSERT_EQ(agent_.launches.size(), 2u) << Rows()["local/200/gpu0"].reason();
  EXPECT_NE(Rows()["local/200/gpu0"].state(), "GAVE_UP");
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts(attempts->attempts_size() - 1).trigger(),
            "remediation:" + plans[0].id());
}

// The PTX fix's pip install cut short: CUDA 13.2 in (nvcc, ptxas), cupti still 13.0.
fleet::v1::ToolchainSnapshot HalfwayPtxFix() {
  fleet::v1::ToolchainSnapshot halfway = pt::FixedSnapshot();
  std::map<std::string, std::string> packages = pt::Set132();
  packages["nvidia-cuda-cupti"] = pt::kSet130.at("nvidia-cuda-cupti");
  pt::SetPackages(&halfway, packages);
  return halfway;
}

// The fault matrix's kill9-agent row: the agent was killed in the middle of the PTX fix's pip
// install (nvcc and ptxas 13.2 in, the rest of the set not), and the probe that judged the plan
// failed: interrupted. The next diagnosis' probe no longer shows the PTX cause, so the planner
// has nothing to change; the fix is run again (a new plan of the same fix), and the canary
// restarts with the whole set instead of giving up.
TEST_F(RemediationTest, AFixCutShortHalfwayIsRunAgainWhenThePlannerNoLongerSeesItsCause) {
  Deploy(Config(1, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  agent_.toolchain = Cuda130();
  const fleet::v1::ToolchainSnapshot halfway = HalfwayPtxFix();
  agent_.after.push_back(halfway);
  agent_.after.push_back(pt::FixedSnapshot());
  agent_.apply_errors.push_back(absl::UnavailableError("agent Apply: Socket closed"));
  agent_.applied_before_error = true;
  agent_.on_apply = [this] {
    if (agent_.applies.size() == 1) agent_.probe_failures = 1;
  };
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(8);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 2u) << Rows()["local/200/gpu0"].reason();
  EXPECT_EQ(plans[0].status(), "interrupted");
  EXPECT_EQ(plans[1].fingerprint(), plans[0].fingerprint()) << "the same fix";
  EXPECT_EQ(plans[1].status(), "applied") << plans[1].outcome_reason();
  EXPECT_THAT(plans[1].outcome_reason(), HasSubstr("run again: plan " + plans[0].id()));
  EXPECT_THAT(plans[1].outcome_reason(), HasSubstr("nvidia-cuda-cupti"));
  EXPECT_EQ(agent_.applies.size(), 2u);
  ASSERT_EQ(agent_.launches.size(), 2u) << Rows()["local/200/gpu0"].reason();
  EXPECT_NE(Rows()["local/200/gpu0"].state(), "GAVE_UP");
}

// The same halfway fix cut short each time it is run again: the third interruption counts as a
// failure, and the server ends with a reason instead of being asked for ever.
TEST_F(RemediationTest, AFixRunAgainAndCutShortThreeTimesCountsAsFailed) {
  Deploy(Config(1, Policy()));
  Turns();
  ASSERT_EQ(agent_.launches.size(), 1u);
  agent_.toolchain = Cuda130();
  const fleet::v1::ToolchainSnapshot halfway = HalfwayPtxFix();
  for (int i = 0; i < 5; ++i) {
    agent_.after.push_back(halfway);
    agent_.apply_errors.push_back(absl::UnavailableError("agent Apply: Socket closed"));
  }
  agent_.applied_before_error = true;
  agent_.on_apply = [this] { agent_.probe_failures = 1; };
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(16);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 3u);
  for (const fleet::v1::Plan& p : plans) EXPECT_EQ(p.status(), "interrupted");
  EXPECT_EQ(agent_.applies.size(), 3u);
  const std::string state = Rows()["local/200/gpu0"].state();
  EXPECT_NE(state, "REMEDIATING");
  EXPECT_NE(state, "READY");
}

// An agent that dies each time it runs a fix is not asked for ever: the third interruption
// counts as a failure, and the server ends with a reason instead of REMEDIATING.
TEST_F(RemediationTest, AFixInterruptedThreeTimesCountsAsFailed) {
  Deploy(Config(1, Policy()));
  Turns();
  agent_.toolchain = Cuda130();
  for (int i = 0; i < 5; ++i) {
    agent_.apply_errors.push_back(absl::UnavailableError("agent Apply: Socket closed"));
  }
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(12);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_EQ(plans.size(), 3u);
  for (const fleet::v1::Plan& p : plans) EXPECT_EQ(p.status(), "interrupted");
  EXPECT_EQ(agent_.applies.size(), 3u);
  const std::string state = Rows()["local/200/gpu0"].state();
  EXPECT_NE(state, "REMEDIATING");
  EXPECT_NE(state, "READY");
}

// An answer from the agent that refuses the plan is still a failed fix.
TEST_F(RemediationTest, AnApplyTheAgentRefusedIsFailed) {
  Deploy(Config(1, Policy()));
  Turns();
  agent_.toolchain = Cuda130();
  agent_.apply_errors.push_back(absl::InvalidArgumentError("agent Apply: not an allowed path"));
  Fail(agent_.launches[0], pt::PtxDiag());
  Turns(3);
  const std::vector<fleet::v1::Plan> plans = Plans();
  ASSERT_GE(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "failed");
  EXPECT_THAT(plans[0].outcome_reason(), HasSubstr("the agent did not apply it"));
}

}  // namespace
}  // namespace fleet::daemon
