// The reconciler, driven turn by turn (Daemon::Step) with a FakeClock and a fake agent whose
// event stream the test writes: attempts written before Launch, states from events, retry with
// backoff or give up, stall handling, stop and restart, resume and resync of the stream, and
// recovery of a daemon that died between writing an attempt and launching it.
#include "daemon/daemon.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using fleet::v1::AgentEvent;
using ::testing::HasSubstr;

class FakeAgent : public AgentClient {
 public:
  explicit FakeAgent(std::string container) : container_(std::move(container)) {}

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override {
    launches.push_back(r);
    if (!reachable) return absl::UnavailableError("agent away");
    if (on_launch) on_launch(r);
    fleet::v1::LaunchResponse out;
    out.mutable_status()->set_attempt_id(r.attempt_id());
    out.mutable_status()->set_state("STARTING");
    return out;
  }
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override {
    stops.push_back(r);
    if (!reachable) return absl::UnavailableError("agent away");
    fleet::v1::StopResponse out;
    out.mutable_status()->set_state("STOPPING");
    return out;
  }
  absl::StatusOr<fleet::v1::StatusResponse> Status() override {
    ++status_calls;
    if (!reachable) return absl::UnavailableError("agent away");
    return snapshot;
  }
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec&) override {
    return fleet::v1::ToolchainSnapshot();
  }
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest&) override {
    return fleet::v1::ApplyResponse();
  }
  absl::Status Logs(const fleet::v1::LogsRequest&,
                    const std::function<bool(const fleet::v1::LogChunk&)>&) override {
    return absl::OkStatus();
  }
  void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) override {
    follows.emplace_back(incarnation, after);
    sink_ = sink;
  }
  void CancelFollow() override {}

  // The agent says something on its stream.
  void Say(AgentEvent e) {
    e.set_incarnation(snapshot.incarnation());
    e.set_sequence(++sequence);
    snapshot.set_sequence(sequence);
    sink_->OnEvent(container_, std::move(e));
  }
  void EndStream() { sink_->OnStreamEnded(container_, absl::UnavailableError("gone")); }

  std::string container_;
  bool reachable = true;
  fleet::v1::StatusResponse snapshot;
  uint64_t sequence = 0;
  std::vector<fleet::v1::LaunchRequest> launches;
  std::vector<fleet::v1::StopRequest> stops;
  std::vector<std::pair<std::string, uint64_t>> follows;
  std::function<void(const fleet::v1::LaunchRequest&)> on_launch;
  int status_calls = 0;
  EventSink* sink_ = nullptr;
};

fleet::v1::FleetConfig TwoGpuConfig(int max_attempts = 3) {
  fleet::v1::FleetConfig c;
  auto* host = c.add_hosts();
  host->set_name("local");
  host->mutable_reach()->set_kind(fleet::v1::Reach::LOCAL);
  auto* ct = host->add_containers();
  ct->set_ctid("200");
  ct->add_gpus(0);
  ct->add_gpus(1);
  ct->set_template_("sglang");
  ct->set_policy("p");
  ct->set_base_port(30000);
  ct->mutable_channel()->set_kind(fleet::v1::Channel::LOOPBACK);
  ct->mutable_channel()->set_address("unix:/nonexistent.sock");
  auto* t = c.add_templates();
  t->set_name("sglang");
  t->set_engine("sglang");
  t->add_argv("/venv/bin/python");
  t->add_argv("-m");
  t->add_argv("sglang.launch_server");
  t->add_argv("--port");
  t->add_argv("{port}");
  t->set_log_path("/logs/gpu{gpu}.log");
  auto* p = c.add_policies();
  p->set_name("p");
  p->set_max_attempts(max_attempts);
  p->mutable_backoff_initial()->set_seconds(10);
  // The reconciler alone: remediation (preflight, plans) has tests of its own below.
  p->set_remediation(fleet::v1::Policy::OFF);
  return c;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    daemon_.reset();
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    auto d = Daemon::Create(
        *std::move(store),
        [this](const std::string& container, const fleet::v1::Host&,
               const fleet::v1::Container&) -> std::unique_ptr<AgentClient> {
          // The test keeps the fake; the daemon gets a forwarding handle.
          return std::make_unique<Forward>(&agent_);
        },
        &clock_, Options());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  // Remediation jobs run inside Step: a turn does the job, the next one takes its result.
  static DaemonOptions Options() {
    DaemonOptions o;
    o.fix_threads = 0;
    return o;
  }

  void Deploy(const fleet::v1::FleetConfig& config) {
    fleet::v1::DeployRequest r;
    *r.mutable_config() = config;
    r.set_source("test.yaml");
    auto d = daemon_->Deploy(r);
    ASSERT_TRUE(d.ok()) << d.status();
  }

  std::map<std::string, fleet::v1::ServerRow> Rows() {
    std::map<std::string, fleet::v1::ServerRow> out;
    const fleet::v1::FleetStatusResponse status = daemon_->Status({});
    for (const auto& r : status.servers()) out[r.server()] = r;
    return out;
  }

  AgentEvent Phase(const fleet::v1::LaunchRequest& launch, const std::string& state) {
    AgentEvent e;
    *e.mutable_server() = launch.spec().server();
    e.set_attempt_id(launch.attempt_id());
    e.mutable_phase()->set_state(state);
    return e;
  }

  AgentEvent Diagnosis(const fleet::v1::LaunchRequest& launch, const std::string& cls) {
    AgentEvent e;
    *e.mutable_server() = launch.spec().server();
    e.set_attempt_id(launch.attempt_id());
    e.mutable_diagnosis()->set_final(true);
    e.mutable_diagnosis()->mutable_diagnosis()->set_diagnosis_class(cls);
    e.mutable_diagnosis()->mutable_diagnosis()->set_summary(absl::StrCat(cls, " happened"));
    return e;
  }

  // A forwarding client, so the fake survives the daemon being re-created.
  class Forward : public AgentClient {
   public:
    explicit Forward(FakeAgent* a) : a_(a) {}
    absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override {
      return a_->Launch(r);
    }
    absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override {
      return a_->Stop(r);
    }
    absl::StatusOr<fleet::v1::StatusResponse> Status() override { return a_->Status(); }
    absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) override {
      return a_->Probe(s);
    }
    absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override {
      return a_->Apply(r);
    }
    absl::Status Logs(const fleet::v1::LogsRequest& r,
                      const std::function<bool(const fleet::v1::LogChunk&)>& f) override {
      return a_->Logs(r, f);
    }
    void Follow(const std::string& i, uint64_t after, EventSink* sink) override {
      a_->Follow(i, after, sink);
    }
    void CancelFollow() override {}

   private:
    FakeAgent* a_;
  };

  fleet::testing::TempDir dir_;
  fleet::testing::FakeClock clock_;
  FakeAgent agent_{"local/200"};
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, AnAttemptRowIsWrittenBeforeTheAgentIsAskedToLaunchIt) {
  agent_.snapshot.set_incarnation("inc-1");
  std::vector<std::string> rows_at_launch;
  agent_.on_launch = [&](const fleet::v1::LaunchRequest& r) {
    // The row is already in the file the moment the agent hears of the attempt.
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(store.ok());
    auto a = (*store)->Attempts("");
    ASSERT_TRUE(a.ok());
    for (auto& x : *a) rows_at_launch.push_back(x.id);
  };
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  EXPECT_THAT(rows_at_launch, ::testing::Contains(agent_.launches[0].attempt_id()));
  EXPECT_EQ(agent_.launches[0].attempt_number(), 1);
  EXPECT_EQ(agent_.launches[0].spec().server().host(), "local");
  EXPECT_EQ(agent_.launches[0].spec().server().container(), "200");
  EXPECT_EQ(agent_.launches[0].spec().port(), 30000);
  EXPECT_EQ(agent_.launches[1].spec().port(), 30001);
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "STARTING");
}

TEST_F(DaemonTest, EventsDriveTheStatesAndTheAttemptRecord) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  agent_.Say(Phase(launch, "LOADING"));
  AgentEvent progress = Phase(launch, "JIT_COMPILING");
  progress.mutable_phase()->set_detail("batch_decode");
  agent_.Say(progress);
  AgentEvent step;
  *step.mutable_server() = launch.spec().server();
  step.set_attempt_id(launch.attempt_id());
  step.mutable_progress()->set_step(3);
  step.mutable_progress()->set_total(12);
  agent_.Say(step);
  daemon_->Step();
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "JIT_COMPILING");
  EXPECT_EQ(row.phase_detail(), "batch_decode");
  EXPECT_EQ(row.progress_step(), 3);
  EXPECT_EQ(row.progress_total(), 12);
  AgentEvent ready;
  *ready.mutable_server() = launch.spec().server();
  ready.set_attempt_id(launch.attempt_id());
  ready.mutable_ready()->mutable_time_to_ready()->set_seconds(42);
  agent_.Say(ready);
  agent_.Say(Phase(launch, "READY"));
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "READY");
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts(0).outcome(), "ready");
  EXPECT_EQ(attempts->attempts(0).time_to_ready().seconds(), 42);
}

TEST_F(DaemonTest, AFailureARestartCannotFixGivesUpWithTheReason) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  agent_.Say(Diagnosis(launch, "ptx_version_unsupported"));
  agent_.Say(Phase(launch, "FAILED"));
  daemon_->Step();
  daemon_->Step();
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "GAVE_UP");
  EXPECT_THAT(row.reason(), HasSubstr("ptx_version_unsupported"));
  EXPECT_EQ(row.last_diagnosis_class(), "ptx_version_unsupported");
  EXPECT_EQ(agent_.launches.size(), 2u);  // no relaunch of gpu0
  auto explained = daemon_->Explain([] {
    fleet::v1::ExplainRequest r;
    r.set_server("local/200/gpu0");
    return r;
  }());
  ASSERT_TRUE(explained.ok());
  EXPECT_EQ(explained->diagnosis().diagnosis_class(), "ptx_version_unsupported");
  EXPECT_EQ(explained->attempt().outcome(), "failed");
}

TEST_F(DaemonTest, ATransientFailureRestartsAfterBackoffUntilTheBudgetIsSpent) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig(/*max_attempts=*/2));
  daemon_->Step();
  auto fail = [&](const fleet::v1::LaunchRequest& l) {
    agent_.Say(Diagnosis(l, "runtime_watchdog"));
    agent_.Say(Phase(l, "FAILED"));
    daemon_->Step();
  };
  auto gpu0 = [&]() {
    std::vector<fleet::v1::LaunchRequest> out;
    for (auto& l : agent_.launches) {
      if (l.spec().server().gpu() == 0) out.push_back(l);
    }
    return out;
  };
  fail(gpu0()[0]);
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "RESTARTING");
  daemon_->Step();
  EXPECT_EQ(gpu0().size(), 1u);  // backoff: 10 s (+-25%) not passed
  clock_.Advance(absl::Seconds(7));
  daemon_->Step();
  EXPECT_EQ(gpu0().size(), 1u);  // 7 s: below the shortest the jitter allows (7.5 s)
  clock_.Advance(absl::Seconds(6));
  daemon_->Step();
  ASSERT_EQ(gpu0().size(), 2u);
  EXPECT_EQ(gpu0()[1].attempt_number(), 2);
  EXPECT_NE(gpu0()[1].attempt_id(), gpu0()[0].attempt_id());
  fail(gpu0()[1]);
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "GAVE_UP");
  EXPECT_THAT(row.reason(), HasSubstr("attempt budget spent (2)"));

  // A new deploy gives it the whole budget again (max_attempts is per deploy), a daemon restart
  // does not.
  Deploy(TwoGpuConfig(/*max_attempts=*/2));
  daemon_->Step();
  ASSERT_EQ(gpu0().size(), 3u);
  EXPECT_EQ(gpu0()[2].attempt_number(), 3);
  Open();
  agent_.snapshot.set_sequence(agent_.sequence);
  daemon_->Step();
  fail(gpu0()[2]);
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "RESTARTING");  // 1 of 2 since the deploy
  clock_.Advance(absl::Seconds(13));
  daemon_->Step();
  ASSERT_EQ(gpu0().size(), 4u);
  fail(gpu0()[3]);
  EXPECT_THAT(Rows()["local/200/gpu0"].reason(), HasSubstr("attempt budget spent (2)"));
}

TEST_F(DaemonTest, TheBackoffStartsAgainAfterTenMinutesReady) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig(/*max_attempts=*/8));
  daemon_->Step();
  auto gpu0 = [&]() {
    std::vector<fleet::v1::LaunchRequest> out;
    for (auto& l : agent_.launches) {
      if (l.spec().server().gpu() == 0) out.push_back(l);
    }
    return out;
  };
  auto fail = [&](const fleet::v1::LaunchRequest& l) {
    agent_.Say(Diagnosis(l, "runtime_watchdog"));
    agent_.Say(Phase(l, "FAILED"));
    daemon_->Step();
  };
  // Two failures in a row: the second wait is twice the first (20 s +-25%: at least 15 s).
  fail(gpu0()[0]);
  clock_.Advance(absl::Seconds(13));
  daemon_->Step();
  ASSERT_EQ(gpu0().size(), 2u);
  fail(gpu0()[1]);
  clock_.Advance(absl::Seconds(13));
  daemon_->Step();
  EXPECT_EQ(gpu0().size(), 2u);
  clock_.Advance(absl::Seconds(13));
  daemon_->Step();
  ASSERT_EQ(gpu0().size(), 3u);
  // READY for ten minutes: the next failure waits the first interval again.
  agent_.Say(Phase(gpu0()[2], "READY"));
  daemon_->Step();
  clock_.Advance(absl::Minutes(11));
  daemon_->Step();
  fail(gpu0()[2]);
  clock_.Advance(absl::Seconds(13));
  daemon_->Step();
  EXPECT_EQ(gpu0().size(), 4u);
}

TEST_F(DaemonTest, AStalledServerIsStoppedAndCountsAsAFailure) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  AgentEvent stalled;
  *stalled.mutable_server() = launch.spec().server();
  stalled.set_attempt_id(launch.attempt_id());
  stalled.mutable_stalled()->set_diagnosis_class("startup_stalled");
  stalled.mutable_stalled()->mutable_diagnosis()->set_diagnosis_class("startup_stalled");
  stalled.mutable_stalled()->mutable_diagnosis()->set_summary("no progress for 10m");
  agent_.Say(stalled);
  daemon_->Step();
  ASSERT_EQ(agent_.stops.size(), 1u);
  EXPECT_EQ(agent_.stops[0].server().gpu(), 0);
  agent_.Say(Phase(launch, "STOPPED"));
  daemon_->Step();
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "RESTARTING");  // a stall is worth another try
  auto attempts = daemon_->ListAttempts({});
  EXPECT_EQ(attempts->attempts(0).outcome(), "failed");
  EXPECT_EQ(attempts->attempts(0).diagnosis_class(), "startup_stalled");
}

TEST_F(DaemonTest, StopAndRestartOnRequest) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  agent_.Say(Phase(launch, "READY"));
  daemon_->Step();
  fleet::v1::ServersRequest stop;
  stop.add_servers("local/200/gpu0");
  ASSERT_TRUE(daemon_->Stop(stop).ok());
  daemon_->Step();
  ASSERT_EQ(agent_.stops.size(), 1u);
  agent_.Say(Phase(launch, "STOPPED"));
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "STOPPED");
  fleet::v1::ServersRequest restart;
  restart.add_servers("local/200/gpu0");
  restart.set_now(true);
  ASSERT_TRUE(daemon_->Restart(restart).ok());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 3u);
  EXPECT_EQ(agent_.launches[2].attempt_number(), 2);
  fleet::v1::ServersRequest unknown;
  unknown.add_servers("local/200/gpu9");
  EXPECT_EQ(daemon_->Stop(unknown).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DaemonTest, AfterAStreamEndsItResumesFromTheStoredCursorAndAppliesNothingTwice) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  agent_.Say(Phase(launch, "LOADING"));
  daemon_->Step();
  agent_.EndStream();
  daemon_->Step();
  clock_.Advance(absl::Seconds(1));
  daemon_->Step();
  ASSERT_GE(agent_.follows.size(), 2u);
  EXPECT_EQ(agent_.follows.back(), std::make_pair(std::string("inc-1"), agent_.sequence));
  // A duplicate delivery (the same sequence again) changes nothing.
  AgentEvent again = Phase(launch, "CAPTURING_GRAPHS");
  again.set_incarnation("inc-1");
  again.set_sequence(agent_.sequence);
  agent_.sink_->OnEvent("local/200", again);
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "LOADING");
}

TEST_F(DaemonTest, ANewIncarnationIsResynchronisedFromItsSnapshotAndTheGapRecorded) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  agent_.Say(Phase(launch, "READY"));
  daemon_->Step();
  // The agent comes back with its state lost: a new incarnation that does not know gpu0's attempt.
  agent_.EndStream();
  agent_.snapshot.set_incarnation("inc-2");
  agent_.snapshot.clear_servers();
  agent_.snapshot.set_sequence(0);
  agent_.sequence = 0;
  daemon_->Step();
  clock_.Advance(absl::Seconds(1));
  daemon_->Step();
  daemon_->Step();
  EXPECT_EQ(agent_.follows.back(), std::make_pair(std::string("inc-2"), uint64_t{0}));
  // The lost attempt is recorded as such, and a new one launched.
  auto attempts = daemon_->ListAttempts([] {
    fleet::v1::ListAttemptsRequest r;
    r.set_server("local/200/gpu0");
    return r;
  }());
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->attempts_size(), 2);
  EXPECT_EQ(attempts->attempts(0).outcome(), "lost");
  auto store = FleetStore::Open(dir_.Join("fleet.db"));
  auto gap = (*store)->db().Prepare("SELECT count(*) FROM events WHERE kind = 'gap'");
  ASSERT_TRUE(gap.ok() && *gap->Step());
  EXPECT_EQ(gap->ColumnInt(0), 1);
}

TEST_F(DaemonTest, ADaemonThatDiedBetweenAttemptRowAndLaunchLaunchesTheSameAttempt) {
  agent_.snapshot.set_incarnation("inc-1");
  agent_.reachable = false;  // the launch does not get through
  Deploy(TwoGpuConfig());
  daemon_->Step();  // cannot connect: nothing launched, nothing written yet
  agent_.reachable = true;
  clock_.Advance(absl::Seconds(1));  // past the reconnect backoff
  // The daemon "dies" after writing the attempt rows but before any Launch reached the agent.
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const std::string first_id = agent_.launches[0].attempt_id();
  agent_.launches.clear();
  agent_.snapshot.clear_servers();  // the agent never heard of it
  Open();                           // a new daemon on the same record (kill -9 and restart)
  // Mark the attempt as still pending in the record: what a crash before Launch leaves.
  auto store = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(
      (*store)->db().Exec("UPDATE attempts SET outcome = 'pending', launched_at = NULL").ok());
  ASSERT_TRUE((*store)->db().Exec("UPDATE servers SET state = 'PENDING'").ok());
  store->reset();
  Open();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  // The same attempt (same id, same number): no second row.
  EXPECT_EQ(agent_.launches[0].attempt_id(), first_id);
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts_size(), 2);
}

TEST_F(DaemonTest, DeployDryRunChangesNothingAndReportsWhatWould) {
  agent_.snapshot.set_incarnation("inc-1");
  fleet::v1::DeployRequest r;
  *r.mutable_config() = TwoGpuConfig();
  r.set_dry_run(true);
  auto d = daemon_->Deploy(r);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->changes_size(), 2);
  EXPECT_EQ(d->changes(0).kind(), "add");
  daemon_->Step();
  EXPECT_TRUE(agent_.launches.empty());
  EXPECT_TRUE(Rows().empty());
  // For real; then the same config again is "unchanged"; a changed one is an update.
  Deploy(TwoGpuConfig());
  r.set_dry_run(true);
  d = daemon_->Deploy(r);
  EXPECT_EQ(d->changes(0).kind(), "unchanged");
  auto changed = TwoGpuConfig();
  changed.mutable_templates(0)->add_argv("--disable-cuda-graph");
  *r.mutable_config() = changed;
  d = daemon_->Deploy(r);
  EXPECT_EQ(d->changes(0).kind(), "update");
}

TEST_F(DaemonTest, DeployParsesTheYamlItIsGivenAndReappliesTheStoredConfigWhenGivenNone) {
  agent_.snapshot.set_incarnation("inc-1");
  fleet::v1::DeployRequest none;
  auto refused = daemon_->Deploy(none);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  fleet::v1::DeployRequest bad;
  bad.set_source("fleet.yaml");
  bad.set_yaml("hosts:\n  - name: local\n    containerz: []\n");
  auto rejected = daemon_->Deploy(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_THAT(std::string(rejected.status().message()),
              HasSubstr("fleet.yaml:3: hosts[0]: unknown field 'containerz'"));
  EXPECT_TRUE(Rows().empty());

  // A failure a restart cannot fix gives up; a plain deploy (no config) tries it again.
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  agent_.Say(Diagnosis(launch, "ptx_version_unsupported"));
  agent_.Say(Phase(launch, "FAILED"));
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(Rows()["local/200/gpu0"].state(), "GAVE_UP");
  auto again = daemon_->Deploy(none);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->changes_size(), 2);
  EXPECT_EQ(again->changes(0).kind(), "retry");
  EXPECT_EQ(again->changes(1).kind(), "unchanged");
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "STARTING");
  EXPECT_EQ(Rows()["local/200/gpu0"].attempt_number(), 2);
  // The new attempt says why it was made, and the row no longer shows the old diagnosis.
  EXPECT_EQ(Rows()["local/200/gpu0"].last_diagnosis_class(), "");
  auto attempts = daemon_->ListAttempts([] {
    fleet::v1::ListAttemptsRequest r;
    r.set_server("local/200/gpu0");
    return r;
  }());
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->attempts_size(), 2);
  EXPECT_EQ(attempts->attempts(0).trigger(), "initial");
  EXPECT_EQ(attempts->attempts(1).trigger(), "deploy");
  EXPECT_EQ(attempts->attempts(0).diagnosis_class(), "ptx_version_unsupported");
}

TEST_F(DaemonTest, AnAgentThatLostItsLogTailIsFollowedUnderItsNewIncarnationWithNothingSkipped) {
  // The machine went down: the agent's agent.db lost its last commits (events 4, 5 the daemon
  // had stored), so it starts a new incarnation whose numbers begin again at 1 while the server
  // it launched still runs. None of the new events may be taken for one already seen.
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  const auto launch = agent_.launches[0];
  for (const char* state : {"LOADING", "JIT_COMPILING", "CAPTURING_GRAPHS", "LOADING", "READY"}) {
    agent_.Say(Phase(launch, state));
  }
  daemon_->Step();
  ASSERT_EQ(Rows()["local/200/gpu0"].state(), "READY");
  agent_.EndStream();
  agent_.snapshot.set_incarnation("inc-2");
  agent_.snapshot.set_sequence(0);
  agent_.sequence = 0;
  auto* running = agent_.snapshot.add_servers();
  *running->mutable_server() = launch.spec().server();
  running->set_attempt_id(launch.attempt_id());
  running->set_attempt_number(launch.attempt_number());
  running->set_state("READY");
  daemon_->Step();
  clock_.Advance(absl::Seconds(1));
  daemon_->Step();
  EXPECT_EQ(agent_.follows.back(), std::make_pair(std::string("inc-2"), uint64_t{0}));
  agent_.Say(Phase(launch, "FAILED"));  // sequence 1 of inc-2
  daemon_->Step();
  EXPECT_NE(Rows()["local/200/gpu0"].state(), "READY");
  auto store = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(store.ok());
  auto stored = (*store)->db().Prepare(
      "SELECT count(*) FROM events WHERE incarnation = 'inc-2' AND sequence = 1");
  ASSERT_TRUE(stored.ok() && *stored->Step());
  EXPECT_EQ(stored->ColumnInt(0), 1);
}

TEST_F(DaemonTest, AValueGivenByFileTravelsAndIsStoredAsItsPathOnly) {
  agent_.snapshot.set_incarnation("inc-1");
  fleet::v1::FleetConfig config = TwoGpuConfig();
  (*config.mutable_hosts(0)->mutable_containers(0)->mutable_env_from_file())["HF_TOKEN"] =
      "/etc/gpu-fleet/hf_token";
  Deploy(config);
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  EXPECT_EQ(agent_.launches[0].spec().env_from_file().at("HF_TOKEN"), "/etc/gpu-fleet/hf_token");
  EXPECT_EQ(agent_.launches[0].spec().env().count("HF_TOKEN"), 0u);
  daemon_.reset();  // fleet.db whole, its WAL checkpointed
  const std::string db = fleet::testing::ReadFile(dir_.Join("fleet.db")) +
                         fleet::testing::ReadFile(dir_.Join("fleet.db-wal"));
  EXPECT_NE(db.find("/etc/gpu-fleet/hf_token"), std::string::npos);
}

}  // namespace
}  // namespace fleet::daemon
