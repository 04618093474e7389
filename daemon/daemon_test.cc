// The reconciler, driven turn by turn (Daemon::Step) with a FakeClock and a fake agent whose
// event stream the test writes: attempts written before Launch, states from events, retry with
// backoff or give up, stall handling, stop and restart, resume and resync of the stream, and
// recovery of a daemon that died between writing an attempt and launching it.
#include "daemon/daemon.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/config/config_duration.h"
#include "common/log/log.h"
#include "daemon/bounded_stop.h"
#include "daemon/fleet_service.h"
#include "daemon/metrics/fleet_metrics.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using fleet::v1::AgentEvent;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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
    if (on_status) on_status();
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
                    const std::function<bool(const fleet::v1::LogChunk&)>&, CallCancel*) override {
    if (on_logs) on_logs();
    return absl::OkStatus();
  }
  void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) override {
    follows.emplace_back(incarnation, after);
    sink_ = sink;
    following = true;
  }
  // As a real stream: cancelled, it ends (once).
  void CancelFollow() override {
    ++cancels;
    if (!following) return;
    following = false;
    sink_->OnStreamEnded(container_, absl::CancelledError("cancelled"));
  }

  // The agent says something on its stream.
  void Say(AgentEvent e) {
    e.set_incarnation(snapshot.incarnation());
    e.set_sequence(++sequence);
    snapshot.set_sequence(sequence);
    sink_->OnEvent(container_, std::move(e));
  }
  void EndStream() {
    following = false;
    sink_->OnStreamEnded(container_, absl::UnavailableError("gone"));
  }
  // The agent logs an event that its stream does not bring (yet): Deliver sends them.
  void Keep(AgentEvent e) {
    e.set_incarnation(snapshot.incarnation());
    e.set_sequence(++sequence);
    snapshot.set_sequence(sequence);
    kept.push_back(std::move(e));
  }
  void Deliver() {
    for (AgentEvent& e : kept) sink_->OnEvent(container_, std::move(e));
    kept.clear();
  }
  int cancels = 0;
  std::vector<AgentEvent> kept;

  std::string container_;
  bool reachable = true;
  fleet::v1::StatusResponse snapshot;
  uint64_t sequence = 0;
  std::vector<fleet::v1::LaunchRequest> launches;
  std::vector<fleet::v1::StopRequest> stops;
  std::vector<std::pair<std::string, uint64_t>> follows;
  std::function<void(const fleet::v1::LaunchRequest&)> on_launch;
  std::function<void()> on_status;  // in Status, before it answers (may block)
  std::function<void()> on_logs;    // in Logs (may block)
  int status_calls = 0;
  bool following = false;
  EventSink* sink_ = nullptr;
  // The daemon's clients of this agent: made, destroyed, destroyed while one of their calls ran.
  std::atomic<int> clients_made{0};
  std::atomic<int> clients_destroyed{0};
  std::atomic<int> destroyed_in_a_call{0};
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
    // A writer that holds the database makes the daemon's writes fail soon (SQLITE_BUSY), not
    // after SQLite's default wait.
    ASSERT_TRUE((*store)->db().Exec("PRAGMA busy_timeout = 20").ok());
    auto d = Daemon::Create(
        *std::move(store),
        [this](const std::string& container, const fleet::v1::Host&,
               const fleet::v1::Container&) -> std::unique_ptr<AgentClient> {
          if (make_client_) return make_client_(container);
          // The test keeps the fake; the daemon gets a forwarding handle.
          return std::make_unique<Forward>(&agent_);
        },
        &clock_, options_);
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

  // The two-GPU fleet deployed to an agent of incarnation inc-1, one turn taken: GPU 0's launch.
  fleet::v1::LaunchRequest DeployTwoGpus() {
    agent_.snapshot.set_incarnation("inc-1");
    Deploy(TwoGpuConfig());
    daemon_->Step();
    EXPECT_FALSE(agent_.launches.empty());
    return agent_.launches.empty() ? fleet::v1::LaunchRequest() : agent_.launches[0];
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

  // A forwarding client, so the fake survives the daemon being re-created. It counts its calls
  // in progress: a client destroyed while one runs is one the daemon freed under its user.
  class Forward : public AgentClient {
   public:
    explicit Forward(FakeAgent* a) : a_(a) { ++a_->clients_made; }
    ~Forward() override {
      ++a_->clients_destroyed;
      if (calls_ > 0) ++a_->destroyed_in_a_call;
    }
    absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override {
      return a_->Launch(r);
    }
    absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override {
      return a_->Stop(r);
    }
    absl::StatusOr<fleet::v1::StatusResponse> Status() override {
      ++calls_;
      FakeAgent* const a = a_;
      auto r = a->Status();
      --calls_;
      return r;
    }
    absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) override {
      return a_->Probe(s);
    }
    absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override {
      return a_->Apply(r);
    }
    absl::Status Logs(const fleet::v1::LogsRequest& r,
                      const std::function<bool(const fleet::v1::LogChunk&)>& f,
                      CallCancel* cancel) override {
      ++calls_;
      FakeAgent* const a = a_;
      absl::Status s = a->Logs(r, f, cancel);
      --calls_;
      return s;
    }
    void Follow(const std::string& i, uint64_t after, EventSink* sink) override {
      a_->Follow(i, after, sink);
    }
    void CancelFollow() override { a_->CancelFollow(); }

   private:
    FakeAgent* a_;
    std::atomic<int> calls_{0};
  };

  // Every commit that adds an attempt row fails at COMMIT, as one does when the disk is full and
  // the WAL cannot grow: a deferred constraint, planted through `outside` (another connection),
  // that such a commit breaks. SQLite rolls the whole transaction back. Dropping the trigger
  // fault_on_attempt ends it.
  static void PlantAttemptCommitFault(FleetStore& outside) {
    ASSERT_TRUE(outside.db()
                    .Exec("CREATE TABLE fault_parent (id INTEGER PRIMARY KEY);"
                          "CREATE TABLE fault (parent INTEGER REFERENCES fault_parent(id) "
                          "DEFERRABLE INITIALLY DEFERRED);"
                          "CREATE TRIGGER fault_on_attempt AFTER INSERT ON attempts BEGIN "
                          "INSERT INTO fault (parent) VALUES (1); END;")
                    .ok());
  }

  fleet::testing::TempDir dir_;
  DaemonOptions options_ = Options();
  // Another client than the forwarding one (a real gRPC client, say).
  std::function<std::unique_ptr<AgentClient>(const std::string& container)> make_client_;
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

TEST_F(DaemonTest, AStateThisBuildDoesNotKnowLeavesTheRowsStateAsItWas) {
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  agent_.Say(Phase(launch, "LOADING"));
  daemon_->Step();
  // A newer agent's state: its number unknown here, its spelling too.
  AgentEvent newer = Phase(launch, "DRAINING");
  newer.mutable_phase()->set_server_state(static_cast<fleet::v1::ServerState>(99));
  agent_.Say(newer);
  daemon_->Step();
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "LOADING");
  EXPECT_EQ(row.server_state(), fleet::v1::SERVER_STATE_LOADING);
}

TEST_F(DaemonTest, EventsDriveTheStatesAndTheAttemptRecord) {
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
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
  // The next phase starts with no steps counted, not with the build's 3/12.
  AgentEvent next_op = Phase(launch, "JIT_COMPILING");
  next_op.mutable_phase()->set_detail("batch_prefill");
  agent_.Say(next_op);
  daemon_->Step();
  row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.phase_detail(), "batch_prefill");
  EXPECT_EQ(row.progress_step(), 0);
  EXPECT_EQ(row.progress_total(), 0);
  AgentEvent ready;
  *ready.mutable_server() = launch.spec().server();
  ready.set_attempt_id(launch.attempt_id());
  ready.mutable_ready()->mutable_time_to_ready()->set_seconds(42);
  agent_.Say(ready);
  agent_.Say(Phase(launch, "READY"));
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "READY");
  // The typed state and outcome travel beside their spellings (proto/states.proto).
  EXPECT_EQ(Rows()["local/200/gpu0"].server_state(), fleet::v1::SERVER_STATE_READY);
  auto attempts = daemon_->ListAttempts({});
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->attempts(0).outcome(), "ready");
  EXPECT_EQ(attempts->attempts(0).attempt_outcome(), fleet::v1::ATTEMPT_OUTCOME_READY);
  EXPECT_EQ(attempts->attempts(0).time_to_ready().seconds(), 42);
}

// The loggers write to a file of their own while it lives; to stderr again afterwards.
class LogCapture {
 public:
  LogCapture() : fd_(open(dir_.Join("log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) {
    EXPECT_GE(fd_, 0);
    EXPECT_TRUE(log::InitLogging({.stream_fd = fd_}).ok());
  }
  ~LogCapture() {
    EXPECT_TRUE(log::InitLogging({}).ok());
    close(fd_);
  }
  std::string Text() const { return testing::ReadFile(dir_.Join("log")); }

 private:
  testing::TempDir dir_;
  const int fd_;
};

TEST_F(DaemonTest, AFailureARestartCannotFixGivesUpWithTheReason) {
  LogCapture log;
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  agent_.Say(Diagnosis(launch, "ptx_version_unsupported"));
  agent_.Say(Phase(launch, "FAILED"));
  daemon_->Step();
  daemon_->Step();
  auto row = Rows()["local/200/gpu0"];
  EXPECT_EQ(row.state(), "GAVE_UP");
  EXPECT_THAT(row.reason(), HasSubstr("ptx_version_unsupported"));
  EXPECT_EQ(row.last_diagnosis_class(), "ptx_version_unsupported");
  EXPECT_EQ(agent_.launches.size(), 2u);  // no relaunch of gpu0
  // An operator must act: an error line naming the server and its attempt.
  EXPECT_THAT(log.Text(), HasSubstr(absl::StrCat(
                              "error daemon: server=local/200/gpu0 attempt=", launch.attempt_id(),
                              " GAVE_UP: ptx_version_unsupported: ")));
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

// The wall clock stepped an hour back between two runs of fleetd: a backoff recorded in the
// first run's frame would end an hour late in the second's. It waits at most the policy's
// longest backoff (5 minutes) from the restart.
TEST_F(DaemonTest, ABackoffRecordedBeforeAClockStepEndsWithinTheLongestBackoff) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const fleet::v1::LaunchRequest first = agent_.launches[0];
  agent_.Say(Diagnosis(first, "runtime_watchdog"));
  agent_.Say(Phase(first, "FAILED"));
  daemon_->Step();
  ASSERT_EQ(Rows()["local/200/gpu0"].state(), "RESTARTING");
  clock_.Advance(-absl::Hours(1));
  Open();
  agent_.snapshot.set_sequence(agent_.sequence);
  daemon_->Step();
  EXPECT_EQ(agent_.launches.size(), 2u);
  clock_.Advance(absl::Minutes(5) + absl::Seconds(1));
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 3u) << "relaunched within the longest backoff";
  EXPECT_EQ(agent_.launches[2].spec().server().gpu(), 0);
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
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
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
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
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

// `fleetctl restart --now` then `status --until-ready`: the server stopped to be started again
// showed STOPPED for a moment, and a fleet whose every server was READY or STOPPED counts as
// stopped for good (exit 2). It shows RESTARTING instead.
TEST_F(DaemonTest, AServerStoppedToBeRestartedIsShownRestartingNotStopped) {
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  agent_.Say(Phase(launch, "READY"));
  daemon_->Step();
  fleet::v1::ServersRequest restart;
  restart.add_servers("local/200/gpu0");
  restart.set_now(true);
  ASSERT_TRUE(daemon_->Restart(restart).ok());
  daemon_->Step();
  ASSERT_EQ(agent_.stops.size(), 1u);
  // The agent says STOPPED, and its link drops at once: the relaunch waits for it, and what
  // the table shows meanwhile is the stopped server's state.
  agent_.Say(Phase(launch, "STOPPED"));
  agent_.reachable = false;
  agent_.EndStream();
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "RESTARTING");
  agent_.reachable = true;
  clock_.Advance(absl::Seconds(1));
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 3u);
  EXPECT_EQ(agent_.launches[2].attempt_number(), 2);
}

TEST_F(DaemonTest, AfterAStreamEndsItResumesFromTheStoredCursorAndAppliesNothingTwice) {
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
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

// Finding 15 of docs/reliability.md: a stream that stops bringing events without ending (it
// ended unseen, or stalled) left the link "following" forever. The link's check sees the agent's
// log ahead of the stream, and a check later still ahead of what the stream brought: it follows
// again, from its cursor, and the events come.
TEST_F(DaemonTest, AStreamThatStopsBringingTheAgentsEventsIsFollowedAgain) {
  options_.stream_check = absl::Seconds(30);
  Open();
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.follows.size(), 1u);
  const auto launch = agent_.launches[0];
  agent_.Say(Phase(launch, "LOADING"));
  daemon_->Step();
  agent_.Keep(Phase(launch, "CAPTURING_GRAPHS"));
  agent_.Keep(Phase(launch, "READY"));
  clock_.Advance(absl::Seconds(30));
  daemon_->Step();  // the check: the agent is at #3, the stream brought #1
  EXPECT_EQ(agent_.cancels, 0);
  clock_.Advance(absl::Seconds(30));
  daemon_->Step();  // a check later the stream still has #1: stalled
  EXPECT_EQ(agent_.cancels, 1);
  daemon_->Step();  // its end taken
  clock_.Advance(absl::Seconds(1));
  daemon_->Step();  // connected again
  ASSERT_EQ(agent_.follows.size(), 2u);
  EXPECT_EQ(agent_.follows.back(), std::make_pair(std::string("inc-1"), uint64_t{1}));
  agent_.Deliver();
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "READY");
}

// A stream behind the agent at each check but bringing what it had at the one before is left
// alone, however busy the agent.
TEST_F(DaemonTest, AStreamBehindTheAgentButMovingIsNotFollowedAgain) {
  options_.stream_check = absl::Seconds(30);
  Open();
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  for (int check = 0; check < 4; ++check) {
    agent_.Keep(Phase(launch, "LOADING"));
    clock_.Advance(absl::Seconds(30));
    daemon_->Step();  // the agent ahead of the stream at this check
    agent_.Deliver();
    agent_.Keep(Phase(launch, "JIT_COMPILING"));  // and again, before the next
  }
  clock_.Advance(absl::Seconds(30));
  daemon_->Step();
  EXPECT_EQ(agent_.cancels, 0);
  EXPECT_EQ(agent_.follows.size(), 1u);
  EXPECT_GE(agent_.status_calls, 5);  // the checks were asked
}

TEST_F(DaemonTest, ANewIncarnationIsResynchronisedFromItsSnapshotAndTheGapRecorded) {
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
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

// Finding 8 of docs/reliability.md: after a restart, a watch's first message held no server
// (the servers read back from the record had never been "changed"), and on a steady fleet
// nothing followed: `fleetctl status --watch --until-ready` waited for ever.
TEST_F(DaemonTest, AWatchAfterARestartStartsWithTheWholeTable) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  Open();  // a new daemon on the same record
  uint64_t since = 0;
  const std::vector<fleet::v1::ServerRow> first = daemon_->ChangedRows({}, &since);
  EXPECT_EQ(first.size(), 2u) << "the first message is the whole table";
  // And then only what changes.
  EXPECT_TRUE(daemon_->ChangedRows({}, &since).empty());
}

// The fault matrix's power-loss row: fleetd sent a Launch and died before it recorded the
// answer (its row says pending), and the agent lost its own record of the launch with the power
// (it comes back as a new incarnation). The attempt may have run: it is lost, and the next launch
// is a new attempt, never the same one a second time.
TEST_F(DaemonTest, APendingAttemptANewIncarnationDoesNotKnowIsLostNotLaunchedAgain) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const std::string first_id = agent_.launches[0].attempt_id();
  agent_.launches.clear();
  daemon_.reset();
  {
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(
        (*store)->db().Exec("UPDATE attempts SET outcome = 'pending', launched_at = NULL").ok());
    ASSERT_TRUE((*store)->db().Exec("UPDATE servers SET state = 'PENDING'").ok());
  }
  agent_.snapshot.set_incarnation("inc-2");
  agent_.snapshot.clear_servers();
  agent_.snapshot.set_sequence(0);
  agent_.sequence = 0;
  Open();
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  for (const fleet::v1::LaunchRequest& l : agent_.launches) {
    EXPECT_NE(l.attempt_id(), first_id);
    EXPECT_EQ(l.attempt_number(), 2);
  }
  auto attempts = daemon_->ListAttempts([] {
    fleet::v1::ListAttemptsRequest r;
    r.set_server("local/200/gpu0");
    return r;
  }());
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->attempts_size(), 2);
  EXPECT_EQ(attempts->attempts(0).outcome(), "lost");
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

TEST_F(DaemonTest, DeployOnlyWithAnUnknownServerFailsNamingItAndSavesNothing) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  auto configs = [this]() -> int64_t {
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    EXPECT_TRUE(store.ok()) << store.status();
    auto count = (*store)->db().Prepare("SELECT count(*) FROM configs");
    EXPECT_TRUE(count.ok() && *count->Step());
    return count->ColumnInt(0);
  };
  ASSERT_EQ(configs(), 1);
  // A changed config, aimed at one server that exists and one that does not.
  fleet::v1::FleetConfig changed = TwoGpuConfig();
  changed.mutable_templates(0)->add_argv("--disable-cuda-graph");
  fleet::v1::DeployRequest r;
  *r.mutable_config() = changed;
  r.add_only("local/200/gpu0");
  r.add_only("local/200/gpu7");
  auto refused = daemon_->Deploy(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("local/200/gpu7"));
  // Nothing saved, nothing changed: the same config version, gpu0's spec as it was.
  EXPECT_EQ(configs(), 1);
  auto current = daemon_->CurrentConfig();
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_EQ((*current)->templates(0).argv_size(), TwoGpuConfig().templates(0).argv_size());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  for (const auto& launch : agent_.launches) {
    EXPECT_THAT(launch.spec().argv(), ::testing::Not(::testing::Contains("--disable-cuda-graph")));
  }
  // A dry run is refused the same way; a known name alone is deployed.
  r.set_dry_run(true);
  EXPECT_EQ(daemon_->Deploy(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.set_dry_run(false);
  r.clear_only();
  r.add_only("local/200/gpu0");
  auto deployed = daemon_->Deploy(r);
  ASSERT_TRUE(deployed.ok()) << deployed.status();
  EXPECT_EQ(configs(), 2);
}

// A fleet config as fleetctl and fleetd read it: `gpus` GPUs in local/200.
std::string ConfigYaml(int gpus, const std::string& extra_argv = "") {
  std::string list;
  for (int g = 0; g < gpus; ++g) absl::StrAppend(&list, g == 0 ? "" : ", ", g);
  return absl::StrCat(
      "hosts:\n"
      "  - name: local\n"
      "    containers:\n"
      "      - ctid: \"200\"\n"
      "        channel: {kind: loopback, address: \"unix:/nonexistent.sock\"}\n"
      "        gpus: [",
      list,
      "]\n"
      "        template: sglang\n"
      "        policy: p\n"
      "        base_port: 30000\n"
      "templates:\n"
      "  - name: sglang\n"
      "    engine: sglang\n"
      "    argv: [/venv/bin/python, -m, sglang.launch_server, --port, \"{port}\"",
      extra_argv,
      "]\n"
      "    log_path: /logs/gpu{gpu}.log\n"
      "policies:\n"
      "  - name: p\n"
      "    remediation: \"off\"\n"
      "    canary: false\n");
}

TEST(StartupConfig, TheFileSeedsAnEmptyRecordIsIgnoredUnchangedAndAppliedChanged) {
  const std::string a = ConfigDigest("a");
  const std::string b = ConfigDigest("b");
  EXPECT_NE(a, b);
  EXPECT_EQ(DecideStartupConfig(false, std::nullopt, a), StartupConfigAction::kSeeded);
  EXPECT_EQ(DecideStartupConfig(false, a, a), StartupConfigAction::kSeeded);
  EXPECT_EQ(DecideStartupConfig(true, a, a), StartupConfigAction::kIgnored);
  EXPECT_EQ(DecideStartupConfig(true, a, b), StartupConfigAction::kApplied);
  EXPECT_EQ(DecideStartupConfig(true, std::nullopt, a), StartupConfigAction::kApplied);
}

TEST_F(DaemonTest, ARestartWithTheSameConfigFileKeepsWhatADeployChangedSince) {
  agent_.snapshot.set_incarnation("inc-1");
  const std::string file = dir_.Join("fleet.yaml");
  auto seeded = daemon_->ApplyStartupConfig(file, ConfigYaml(1));
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  EXPECT_EQ(seeded->action, StartupConfigAction::kSeeded);
  EXPECT_THAT(seeded->message, HasSubstr("seeded"));
  EXPECT_EQ(Rows().size(), 1u);
  // `fleetctl deploy -f` adds a server.
  fleet::v1::DeployRequest r;
  r.set_source("/home/op/fleet-2.yaml");
  r.set_yaml(ConfigYaml(2));
  auto deployed = daemon_->Deploy(r);
  ASSERT_TRUE(deployed.ok()) << deployed.status();
  ASSERT_EQ(Rows().size(), 2u);
  // systemd restarts fleetd with --config FILE, FILE as it was: the deployed state stays.
  Open();
  auto again = daemon_->ApplyStartupConfig(file, ConfigYaml(1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->action, StartupConfigAction::kIgnored);
  EXPECT_EQ(again->version, deployed->config_version());
  EXPECT_THAT(again->message, HasSubstr("the record's config is newer"));
  const auto rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows.count("local/200/gpu1"), 1u);
  auto current = daemon_->CurrentConfig();
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_EQ((*current)->hosts(0).containers(0).gpus_size(), 2);
}

TEST_F(DaemonTest, AConfigFileChangedSinceItWasAppliedIsAppliedAtStart) {
  agent_.snapshot.set_incarnation("inc-1");
  const std::string file = dir_.Join("fleet.yaml");
  ASSERT_TRUE(daemon_->ApplyStartupConfig(file, ConfigYaml(2)).ok());
  // Unchanged, the record holds it: ignored.
  Open();
  auto same = daemon_->ApplyStartupConfig(file, ConfigYaml(2));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->action, StartupConfigAction::kIgnored);
  // The operator edits FILE and restarts: applied.
  Open();
  auto changed = daemon_->ApplyStartupConfig(file, ConfigYaml(2, ", --disable-cuda-graph"));
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(changed->action, StartupConfigAction::kApplied);
  EXPECT_THAT(changed->message, HasSubstr("changed since it was applied"));
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  EXPECT_THAT(agent_.launches[0].spec().argv(), ::testing::Contains("--disable-cuda-graph"));
}

TEST_F(DaemonTest, AConfigFileNeverAppliedIsAppliedOverAnotherSourcesConfig) {
  agent_.snapshot.set_incarnation("inc-1");
  fleet::v1::DeployRequest r;
  r.set_source("cli.yaml");
  r.set_yaml(ConfigYaml(1));
  ASSERT_TRUE(daemon_->Deploy(r).ok());
  Open();
  auto applied = daemon_->ApplyStartupConfig(dir_.Join("fleet.yaml"), ConfigYaml(2));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->action, StartupConfigAction::kApplied);
  EXPECT_THAT(applied->message, HasSubstr("never applied"));
  EXPECT_EQ(Rows().size(), 2u);
}

TEST_F(DaemonTest, ARecordOfAnOlderFleetdWithoutDigestsIsJudgedByItsStoredText) {
  agent_.snapshot.set_incarnation("inc-1");
  const std::string file = dir_.Join("fleet.yaml");
  ASSERT_TRUE(daemon_->ApplyStartupConfig(file, ConfigYaml(1)).ok());
  fleet::v1::DeployRequest r;
  r.set_source("cli.yaml");
  r.set_yaml(ConfigYaml(2));
  ASSERT_TRUE(daemon_->Deploy(r).ok());
  daemon_.reset();
  {
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->db().Exec("UPDATE configs SET digest = NULL").ok());
  }
  Open();
  auto again = daemon_->ApplyStartupConfig(file, ConfigYaml(1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->action, StartupConfigAction::kIgnored);
  EXPECT_EQ(Rows().size(), 2u);
}

// --- fleetd's stop and systemd's (issue 12, defect 9) ----------------------------------------

TEST(StopWithin, WaitsForAStopThatEndsAndNotLongerThanTheTimeoutForOneThatDoesNot) {
  bool ran = false;
  EXPECT_TRUE(StopWithin(absl::Seconds(30), [&ran] { ran = true; }));
  EXPECT_TRUE(ran);
  auto release = std::make_shared<absl::Notification>();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(StopWithin(absl::Milliseconds(100), [release] { release->WaitForNotification(); }));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(100));
  EXPECT_LT(waited, absl::Seconds(10));
  release->Notify();  // the abandoned stop ends
}

class FleetdUnit : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Units, FleetdUnit,
                         ::testing::Values("deploy/fleetd.service", "deploy/fleetd-ha.service"));

TEST_P(FleetdUnit, SystemdWaitsLongerThanFleetdTakesToStopAndRestartsAfterALostLease) {
  std::ifstream in(fleet::testing::SourcePath(GetParam()));
  ASSERT_TRUE(in.good());
  std::string restart;
  absl::Duration systemd = absl::InfiniteDuration();
  absl::Duration fleetd = kDefaultStopTimeout;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view text(line);
    if (absl::ConsumePrefix(&text, "TimeoutStopSec=")) {
      absl::ConsumeSuffix(&text, "s");
      int64_t seconds = 0;
      ASSERT_TRUE(absl::SimpleAtoi(text, &seconds)) << line;
      systemd = absl::Seconds(seconds);
    }
    if (absl::StartsWith(line, "Restart=")) restart = line.substr(8);
    // A leader that lost its lease exits 75 and must come back as a standby.
    EXPECT_FALSE(absl::StartsWith(line, "RestartPreventExitStatus=") &&
                 absl::StrContains(line, "75"))
        << line;
    if (absl::StartsWith(line, "ExecStart=")) {
      const size_t flag = line.find("--stop-timeout");
      if (flag != std::string::npos) {
        std::string value = line.substr(flag + std::string("--stop-timeout").size() + 1);
        value = value.substr(0, value.find(' '));
        auto d = config::ParseConfigDuration(value);
        ASSERT_TRUE(d.ok()) << line;
        fleetd = *d;
      }
    }
  }
  // Without TimeoutStopSec, systemd's default (90 s) applies, whatever fleetd takes.
  ASSERT_NE(systemd, absl::InfiniteDuration()) << GetParam() << " sets no TimeoutStopSec";
  EXPECT_GE(systemd, fleetd + absl::Seconds(10))
      << "systemd would SIGKILL fleetd before it ends on its own";
  EXPECT_TRUE(restart == "on-failure" || restart == "always") << "Restart=" << restart;
}

// The config with container 200 reached through another channel: a redeploy replaces its client.
fleet::v1::FleetConfig MovedChannel() {
  fleet::v1::FleetConfig c = TwoGpuConfig();
  c.mutable_hosts(0)->mutable_containers(0)->mutable_channel()->set_address("unix:/moved.sock");
  return c;
}

// Notifies once (a fake's hook may be called again after the test released it).
void NotifyOnce(absl::Notification& n) {
  if (!n.HasBeenNotified()) n.Notify();
}

TEST_F(DaemonTest, NoLaunchLeavesUntilTheCommitHoldingItsAttemptRowSucceeds) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  // Every commit that adds an attempt row fails at COMMIT (a full disk).
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok()) << outside.status();
  PlantAttemptCommitFault(**outside);
  for (int turn = 0; turn < 3; ++turn) {
    daemon_->Step();
    clock_.Advance(absl::Seconds(20));
  }
  EXPECT_TRUE(agent_.launches.empty()) << "a Launch left without its attempt row";
  {
    // (Scoped: a statement left on a row keeps its read transaction, and its old view.)
    auto count = (*outside)->db().Prepare("SELECT count(*) FROM attempts");
    ASSERT_TRUE(count.ok() && *count->Step());
    EXPECT_EQ(count->ColumnInt(0), 0);
  }

  // The fault clears: the attempts the failed turns made are recorded, then launched, once.
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER fault_on_attempt").ok());
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  auto attempts = (*outside)->Attempts("");
  ASSERT_TRUE(attempts.ok()) << attempts.status();
  ASSERT_EQ(attempts->size(), 2u);
  std::set<std::string> launched;
  for (const auto& l : agent_.launches) {
    EXPECT_EQ(l.attempt_number(), 1);  // none skipped
    launched.insert(l.attempt_id());
  }
  for (const AttemptRecord& a : *attempts) {
    EXPECT_EQ(a.number, 1);
    EXPECT_TRUE(launched.count(a.id)) << a.id << " was recorded but another attempt launched";
  }
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "STARTING");
}

// A full disk fails every write of every turn: fleetd says so once (three warnings every half
// second said nothing new in the fault matrix's fleetd-disk-full row), and once that it is over.
TEST_F(DaemonTest, ARecordThatCannotBeWrittenIsLoggedOnceAndItsRecoveryOnce) {
  LogCapture log;
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok()) << outside.status();
  PlantAttemptCommitFault(**outside);
  for (int turn = 0; turn < 6; ++turn) {
    daemon_->Step();
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER fault_on_attempt").ok());
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const std::string text = log.Text();
  size_t warnings = 0;
  for (size_t at = text.find("warning store:"); at != std::string::npos;
       at = text.find("warning store:", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << text;
  EXPECT_THAT(text, HasSubstr("FOREIGN KEY constraint failed"));
  EXPECT_THAT(text, HasSubstr("record: written again, after "));
}

// Finding 16 of docs/reliability.md: fleet.db's disk full while a server failed and was started
// again. Its failure was in no commit yet when the next attempt took its place, and the rows
// written from then on carried only the new attempt: the failed one stayed `pending` for good.
TEST_F(DaemonTest, AnAttemptReplacedWhileTheRecordFailsIsStoredAsItEnded) {
  const fleet::v1::LaunchRequest first = DeployTwoGpus();
  agent_.Say(Phase(first, "LOADING"));
  daemon_->Step();  // stored: attempt 1 running
  // The disk fills: every commit that writes an attempt row fails at COMMIT.
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok()) << outside.status();
  PlantAttemptCommitFault(**outside);
  ASSERT_TRUE((*outside)
                  ->db()
                  .Exec("CREATE TRIGGER fault_on_attempt_update AFTER UPDATE ON attempts BEGIN "
                        "INSERT INTO fault (parent) VALUES (1); END;")
                  .ok());
  agent_.Say(Diagnosis(first, "runtime_watchdog"));
  agent_.Say(Phase(first, "FAILED"));
  daemon_->Step();
  clock_.Advance(absl::Seconds(13));  // past the backoff: attempt 2 is made (and not stored)
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u) << "no launch leaves without its attempt row";
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER fault_on_attempt").ok());
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER fault_on_attempt_update").ok());
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 3u);
  EXPECT_EQ(agent_.launches[2].attempt_number(), 2);
  auto attempt = (*outside)->Attempt("local/200/gpu0", 1);
  ASSERT_TRUE(attempt.ok() && attempt->has_value());
  EXPECT_EQ((*attempt)->outcome, v1::ATTEMPT_OUTCOME_FAILED);
  EXPECT_EQ((*attempt)->diagnosis_class, "runtime_watchdog");
}

// Finding 16 with a crash: fleetd stopped while the replaced attempt's end still waited for a
// commit. The next fleetd closes it (lost) rather than leave it open for good.
TEST_F(DaemonTest, AReplacedAttemptStillOpenAfterACrashIsClosedAsLost) {
  const fleet::v1::LaunchRequest first = DeployTwoGpus();
  agent_.Say(Phase(first, "LOADING"));
  daemon_->Step();  // stored: attempt 1 running
  // Every commit that changes gpu0's attempt 1 fails at COMMIT; the others go through.
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok()) << outside.status();
  PlantAttemptCommitFault(**outside);
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER fault_on_attempt").ok());
  ASSERT_TRUE((*outside)
                  ->db()
                  .Exec("CREATE TRIGGER fault_on_first AFTER UPDATE ON attempts "
                        "WHEN OLD.id LIKE 'local/200/gpu0#1-%' BEGIN "
                        "INSERT INTO fault (parent) VALUES (1); END;")
                  .ok());
  agent_.Say(Diagnosis(first, "runtime_watchdog"));
  agent_.Say(Phase(first, "FAILED"));
  daemon_->Step();
  clock_.Advance(absl::Seconds(13));
  daemon_->Step();
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 3u);  // attempt 2 recorded and launched
  daemon_.reset();                        // fleetd stops: attempt 1's end never stored
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER fault_on_first").ok());
  Open();
  daemon_->Step();
  auto attempt = (*outside)->Attempt("local/200/gpu0", 1);
  ASSERT_TRUE(attempt.ok() && attempt->has_value());
  EXPECT_EQ((*attempt)->outcome, v1::ATTEMPT_OUTCOME_LOST);
  auto current = (*outside)->Attempt("local/200/gpu0", 2);
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_NE((*current)->outcome, v1::ATTEMPT_OUTCOME_LOST);
}

TEST_F(DaemonTest, EventsWhoseWriteFailsAreKeptAndStoredOnceWhenTheRecordIsBack) {
  options_.queue_limit = 4;
  Open();
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const auto launch = agent_.launches[0];
  // An outside writer holds the database: every write of the daemon fails with SQLITE_BUSY.
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok()) << outside.status();
  ASSERT_TRUE((*outside)->db().Exec("BEGIN IMMEDIATE").ok());
  for (const char* state : {"LOADING", "JIT_COMPILING", "CAPTURING_GRAPHS"}) {
    agent_.Say(Phase(launch, state));
    agent_.Say(Phase(agent_.launches[1], state));
  }
  daemon_->Step();
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "CAPTURING_GRAPHS");  // applied, not yet stored
  // Six events wait for the record, more than the queue may hold: the streams are held.
  bool resumed = false;
  EXPECT_FALSE(daemon_->Admit([&] { resumed = true; }));
  agent_.Say(Phase(launch, "READY"));
  daemon_->Step();
  EXPECT_FALSE(resumed);
  ASSERT_TRUE((*outside)->db().Exec("ROLLBACK").ok());

  daemon_->Step();
  EXPECT_TRUE(resumed);
  auto events = (*outside)->db().Prepare(
      "SELECT count(*), count(DISTINCT sequence), min(sequence), max(sequence) FROM events "
      "WHERE incarnation = 'inc-1' AND kind != 'gap'");
  ASSERT_TRUE(events.ok() && *events->Step());
  EXPECT_EQ(events->ColumnInt(0), static_cast<int64_t>(agent_.sequence));
  EXPECT_EQ(events->ColumnInt(1), static_cast<int64_t>(agent_.sequence));
  EXPECT_EQ(events->ColumnInt(2), 1);
  EXPECT_EQ(events->ColumnInt(3), static_cast<int64_t>(agent_.sequence));
  auto cursor = (*outside)->Cursor("local/200");
  ASSERT_TRUE(cursor.ok());
  EXPECT_EQ(cursor->incarnation, "inc-1");
  EXPECT_EQ(cursor->sequence, agent_.sequence);
  auto attempt = (*outside)->Attempt("local/200/gpu0", 1);
  ASSERT_TRUE(attempt.ok() && attempt->has_value());
  EXPECT_EQ((*attempt)->outcome, v1::ATTEMPT_OUTCOME_READY);
}

TEST_F(DaemonTest, ARedeployThatMovesTheChannelKeepsTheCursorOfEventsNotYetStored) {
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok()) << outside.status();
  ASSERT_TRUE((*outside)->db().Exec("BEGIN IMMEDIATE").ok());
  agent_.Say(Phase(launch, "LOADING"));
  agent_.Say(Phase(launch, "JIT_COMPILING"));
  daemon_->Step();  // applied, not stored
  ASSERT_TRUE((*outside)->db().Exec("ROLLBACK").ok());
  // The container's link is replaced before the events are written: the new one goes on from
  // where the old one read, not from the stored cursor behind it.
  Deploy(MovedChannel());
  daemon_->Step();
  daemon_->Step();
  auto cursor = (*outside)->Cursor("local/200");
  ASSERT_TRUE(cursor.ok());
  EXPECT_EQ(cursor->sequence, agent_.sequence);
  ASSERT_FALSE(agent_.follows.empty());
  EXPECT_EQ(agent_.follows.back(), std::make_pair(std::string("inc-1"), agent_.sequence));
  auto events = (*outside)->db().Prepare("SELECT count(*) FROM events WHERE kind != 'gap'");
  ASSERT_TRUE(events.ok() && *events->Step());
  EXPECT_EQ(events->ColumnInt(0), static_cast<int64_t>(agent_.sequence));
}

TEST_F(DaemonTest, StatusAnswersWhileAnAgentTakesItsTimeToAnswerAResync) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  // The agent can no longer replay from our position; its Status then blocks until released
  // (an unreachable container: 15 s; an SSH host: a whole bootstrap).
  absl::Notification asked, release;
  agent_.on_status = [&] {
    NotifyOnce(asked);
    release.WaitForNotification();
  };
  AgentEvent resync;
  resync.mutable_resync()->set_previous_incarnation("inc-1");
  agent_.Say(resync);
  std::thread turns([&] {
    daemon_->Step();
    daemon_->Step();
  });
  ASSERT_TRUE(asked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  absl::Notification answered;
  std::thread query([&] {
    const fleet::v1::FleetStatusResponse status = daemon_->Status({});
    EXPECT_EQ(status.servers_size(), 2);
    answered.Notify();
  });
  EXPECT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "fleetctl status waited for an agent's answer";
  release.Notify();
  turns.join();
  query.join();
  // The resynchronisation itself went through: the snapshot taken, the gap recorded.
  daemon_->Step();
  auto store = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(store.ok());
  auto gap = (*store)->db().Prepare("SELECT count(*) FROM events WHERE kind = 'gap'");
  ASSERT_TRUE(gap.ok() && *gap->Step());
  EXPECT_EQ(gap->ColumnInt(0), 1);
  EXPECT_GE(agent_.follows.size(), 2u);
}

TEST_F(DaemonTest, WhyAnAgentCannotBeReachedIsItsServersReasonUntilItAnswers) {
  // An agent fleetd cannot reach (a host unreachable, a bootstrap cut off): its servers stay
  // PENDING, and status and a watch say why, not just PENDING; the log says it once, and again
  // when it answers.
  LogCapture log;
  agent_.snapshot.set_incarnation("inc-1");
  agent_.reachable = false;
  uint64_t since = 0;
  Deploy(TwoGpuConfig());
  daemon_->ChangedRows({}, &since);
  daemon_->Step();
  EXPECT_TRUE(agent_.launches.empty());
  auto rows = Rows();
  EXPECT_EQ(rows["local/200/gpu0"].state(), "PENDING");
  EXPECT_EQ(rows["local/200/gpu0"].reason(), "agent unreachable: agent away");
  EXPECT_EQ(rows["local/200/gpu1"].reason(), "agent unreachable: agent away");
  const std::vector<fleet::v1::ServerRow> watched = daemon_->ChangedRows({}, &since);
  ASSERT_EQ(watched.size(), 2u) << "a watch was not told";
  EXPECT_EQ(watched[0].reason(), "agent unreachable: agent away");
  // It answers again: the reason goes, and the servers launch.
  agent_.reachable = true;
  clock_.Advance(options_.reconnect_max);
  daemon_->Step();
  daemon_->Step();
  EXPECT_EQ(agent_.launches.size(), 2u);
  rows = Rows();
  EXPECT_EQ(rows["local/200/gpu0"].reason(), "");
  EXPECT_EQ(rows["local/200/gpu0"].state(), "STARTING");
  const std::string text = log.Text();
  EXPECT_THAT(text, HasSubstr("warning links: container=local/200 agent unreachable: agent away "
                              "(retrying, next in "));
  EXPECT_THAT(text, HasSubstr("info links: container=local/200 agent reachable again (after "));
}

TEST_F(DaemonTest, ARedeployThatMovesTheChannelKeepsTheClientALogStreamUses) {
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(TwoGpuConfig());
  daemon_->Step();
  absl::Notification streaming, release;
  agent_.on_logs = [&] {
    NotifyOnce(streaming);
    release.WaitForNotification();
  };
  absl::Status logs;
  std::thread follower([&] {
    fleet::v1::ServerLogsRequest r;
    r.set_server("local/200/gpu0");
    r.set_follow(true);
    logs = daemon_->Logs(r, [](const fleet::v1::LogChunk&) { return true; });
  });
  ASSERT_TRUE(streaming.WaitForNotificationWithTimeout(absl::Seconds(30)));
  Deploy(MovedChannel());
  EXPECT_EQ(agent_.destroyed_in_a_call.load(), 0) << "the client was destroyed under Logs";
  EXPECT_EQ(agent_.clients_destroyed.load(), 0);
  release.Notify();
  follower.join();
  EXPECT_TRUE(logs.ok()) << logs;
  // Once the stream let it go, the next turn destroys the retired client.
  daemon_->Step();
  EXPECT_EQ(agent_.clients_destroyed.load(), 1);
  EXPECT_EQ(agent_.destroyed_in_a_call.load(), 0);
}

TEST_F(DaemonTest, ARedeployThatMovesTheChannelKeepsTheClientAStatusCallUses) {
  agent_.snapshot.set_incarnation("inc-1");
  absl::Notification asked, release;
  agent_.on_status = [&] {
    NotifyOnce(asked);
    release.WaitForNotification();
  };
  Deploy(TwoGpuConfig());
  std::thread turn([&] { daemon_->Step(); });  // connects: asks the agent's Status
  ASSERT_TRUE(asked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  Deploy(MovedChannel());
  EXPECT_EQ(agent_.destroyed_in_a_call.load(), 0) << "the client was destroyed under Status";
  release.Notify();
  turn.join();
  daemon_->Step();  // the retired client goes; the moved link connects with a new one
  EXPECT_EQ(agent_.clients_destroyed.load(), 1);
  EXPECT_EQ(agent_.destroyed_in_a_call.load(), 0);
  daemon_->Step();
  EXPECT_EQ(agent_.clients_made.load(), 2);
  EXPECT_EQ(Rows()["local/200/gpu0"].state(), "STARTING");
}

// An agent whose servers never write a line: its Logs streams wait until cancelled.
class QuietAgentService : public fleet::v1::Agent::CallbackService {
 public:
  grpc::ServerWriteReactor<fleet::v1::LogChunk>* Logs(grpc::CallbackServerContext*,
                                                      const fleet::v1::LogsRequest*) override {
    return new Quiet(this);
  }

  // Waits (bounded) until `n` streams have started / were cancelled.
  bool WaitStarted(int n) { return WaitFor(&started_, n); }
  bool WaitCancelled(int n) { return WaitFor(&cancelled_, n); }

 private:
  class Quiet : public grpc::ServerWriteReactor<fleet::v1::LogChunk> {
   public:
    explicit Quiet(QuietAgentService* s) : s_(s) { s_->Count(&s_->started_); }
    void OnCancel() override {
      s_->Count(&s_->cancelled_);
      Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    QuietAgentService* const s_;
  };

  void Count(int* counter) {
    absl::MutexLock lock(&mu_);
    ++*counter;
  }
  bool WaitFor(int* counter, int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [counter, n]() { return *counter >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(30));
  }

  absl::Mutex mu_;
  int started_ = 0;
  int cancelled_ = 0;
};

TEST_F(DaemonTest, ACancelledLogsFollowOnAQuietServerEndsTheAgentStreamAndFleetdStops) {
  QuietAgentService agent;
  grpc::ServerBuilder agent_builder;
  agent_builder.AddListeningPort("unix:" + dir_.Join("agent.sock"),
                                 grpc::InsecureServerCredentials());
  agent_builder.RegisterService(&agent);
  std::unique_ptr<grpc::Server> agent_server = agent_builder.BuildAndStart();
  ASSERT_NE(agent_server, nullptr);
  make_client_ = [this](const std::string& container) -> std::unique_ptr<AgentClient> {
    return std::make_unique<GrpcAgentClient>(container, "unix:" + dir_.Join("agent.sock"));
  };
  Open();
  Deploy(TwoGpuConfig());
  daemon_->Step();  // the container's client is made

  FleetService service(daemon_.get(), dir_.path());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> fleetd = builder.BuildAndStart();
  ASSERT_NE(fleetd, nullptr);
  auto stub = fleet::v1::Fleet::NewStub(fleetd->InProcessChannel(grpc::ChannelArguments()));
  fleet::v1::ServerLogsRequest request;
  request.set_server("local/200/gpu0");
  request.set_follow(true);
  {
    // `fleetctl logs -f`, interrupted while the server says nothing.
    grpc::ClientContext context;
    auto reader = stub->Logs(&context, request);
    ASSERT_TRUE(agent.WaitStarted(1));
    context.TryCancel();
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(agent.WaitCancelled(1)) << "fleetd kept following the agent's log";

  // A stream still open when fleetd stops is ended by it: the daemon can be destroyed.
  absl::Status open_stream;
  std::thread follower([&] {
    open_stream = daemon_->Logs(request, [](const fleet::v1::LogChunk&) { return true; });
  });
  ASSERT_TRUE(agent.WaitStarted(2));
  fleetd->Shutdown(std::chrono::system_clock::now());
  daemon_.reset();
  follower.join();
  EXPECT_TRUE(agent.WaitCancelled(2));
  agent_server->Shutdown(std::chrono::system_clock::now());
}

TEST_F(DaemonTest, AnAgentThatLostItsLogTailIsFollowedUnderItsNewIncarnationWithNothingSkipped) {
  // The machine went down: the agent's agent.db lost its last commits (events 4, 5 the daemon
  // had stored), so it starts a new incarnation whose numbers begin again at 1 while the server
  // it launched still runs. None of the new events may be taken for one already seen.
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
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

// The fleet events (daemon/events/): what a give-up tells, in what order, under which indexes.
class CollectEvents : public FleetEventListener {
 public:
  void OnFleetEvents(const std::vector<fleet::v1::FleetEvent>& events) override {
    for (const auto& e : events) got.push_back(e);
  }
  std::vector<fleet::v1::FleetEvent> got;
};

class CollectDeliveries : public DeliverySink {
 public:
  void Configure(std::vector<fleet::v1::Notify> n) override { notify = std::move(n); }
  void Deliver(std::vector<DeliveryRecord> d) override {
    for (auto& one : d) got.push_back(std::move(one));
  }
  std::vector<fleet::v1::Notify> notify;
  std::vector<DeliveryRecord> got;
};

AgentEvent WithEvidence(AgentEvent e) {
  fleet::v1::Diagnosis* d = e.mutable_diagnosis()->mutable_diagnosis();
  d->set_root_cause_line(12);
  for (int line = 10; line <= 13; ++line) {
    fleet::v1::EvidenceLine* l = d->add_evidence();
    l->set_line(line);
    l->set_text(line == 12 ? "ptxas fatal   : Unsupported .version 9.2; current version is '9.0'"
                           : absl::StrCat("context line ", line));
  }
  return e;
}

TEST_F(DaemonTest, AGiveUpIsToldAsEventsInOrderWithItsClassAndRootCauseUnderContiguousIndexes) {
  CollectEvents listener;
  daemon_->journal().AddListener(&listener);
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  agent_.Say(WithEvidence(Diagnosis(launch, "ptx_version_unsupported")));
  agent_.Say(Phase(launch, "FAILED"));
  daemon_->Step();
  daemon_->Step();
  daemon_->journal().RemoveListener(&listener);
  ASSERT_FALSE(listener.got.empty());
  for (size_t i = 0; i < listener.got.size(); ++i) {
    EXPECT_EQ(listener.got[i].index(), static_cast<int64_t>(i + 1)) << listener.got[i].type();
  }
  std::vector<std::string> gpu0;
  const fleet::v1::FleetEvent* finished = nullptr;
  const fleet::v1::FleetEvent* gave_up = nullptr;
  for (const auto& e : listener.got) {
    if (e.server() != "local/200/gpu0") continue;
    gpu0.push_back(e.type() == "server_state" ? absl::StrCat(e.type(), ":", e.state()) : e.type());
    if (e.type() == "attempt_finished") finished = &e;
    if (e.type() == "gave_up") gave_up = &e;
  }
  EXPECT_THAT(gpu0,
              ::testing::IsSupersetOf({"attempt_started", "attempt_finished", "server_state:FAILED",
                                       "server_state:GAVE_UP", "gave_up"}));
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->outcome(), "failed");
  EXPECT_EQ(finished->diagnosis_class(), "ptx_version_unsupported");
  EXPECT_EQ(finished->trigger(), "initial");
  EXPECT_EQ(finished->attempt_id(), launch.attempt_id());
  ASSERT_NE(gave_up, nullptr);
  EXPECT_EQ(gave_up->diagnosis_class(), "ptx_version_unsupported");
  EXPECT_EQ(gave_up->summary(), "ptx_version_unsupported happened");
  EXPECT_THAT(gave_up->root_cause_line(), HasSubstr("Unsupported .version 9.2"));
  EXPECT_EQ(gave_up->evidence_size(), 4);
  EXPECT_THAT(gave_up->reason(), HasSubstr("ptx_version_unsupported"));

  // The record holds the same events; a restarted fleetd goes on after the last index and does
  // not tell the finished attempt again.
  int64_t oldest = 0;
  auto stored = daemon_->FleetEvents(0, 1000, &oldest);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), listener.got.size());
  EXPECT_EQ(oldest, 1);
  const int64_t last = listener.got.back().index();
  Open();
  CollectEvents after;
  daemon_->journal().AddListener(&after);
  fleet::v1::ServersRequest restart;
  restart.add_servers("local/200/gpu0");
  ASSERT_TRUE(daemon_->Restart(restart).ok());
  daemon_->Step();
  daemon_->Step();
  daemon_->journal().RemoveListener(&after);
  ASSERT_FALSE(after.got.empty());
  EXPECT_EQ(after.got.front().index(), last + 1);
  for (const auto& e : after.got) {
    EXPECT_FALSE(e.type() == "attempt_finished" && e.attempt_id() == launch.attempt_id())
        << "told twice: " << e.index();
  }
}

TEST_F(DaemonTest, EventsWhoseWriteFailsKeepTheirIndexesAndAreToldOnceWritten) {
  auto outside = FleetStore::Open(dir_.Join("fleet.db"));
  ASSERT_TRUE(outside.ok());
  ASSERT_TRUE((*outside)
                  ->db()
                  .Exec("CREATE TRIGGER no_events BEFORE INSERT ON fleet_events BEGIN "
                        "SELECT RAISE(ABORT, 'disk full'); END;")
                  .ok());
  CollectEvents listener;
  daemon_->journal().AddListener(&listener);
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  agent_.Say(Phase(launch, "LOADING"));
  daemon_->Step();
  EXPECT_TRUE(listener.got.empty());  // nothing told that the record does not hold
  ASSERT_TRUE((*outside)->db().Exec("DROP TRIGGER no_events").ok());
  daemon_->Step();
  daemon_->journal().RemoveListener(&listener);
  ASSERT_FALSE(listener.got.empty());
  for (size_t i = 0; i < listener.got.size(); ++i) {
    EXPECT_EQ(listener.got[i].index(), static_cast<int64_t>(i + 1));
  }
  int64_t oldest = 0;
  auto stored = daemon_->FleetEvents(0, 1000, &oldest);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), listener.got.size());
}

TEST_F(DaemonTest, AGiveUpMakesADeliveryForEachNotifyAskingForItAndAStartHandsBackThePending) {
  fleet::v1::FleetConfig config = TwoGpuConfig();
  fleet::v1::Notify* all = config.add_notify();
  all->set_name("oncall");
  all->set_url("https://hooks.example.com/fleet");
  fleet::v1::Notify* recovered = config.add_notify();
  recovered->set_name("chat");
  recovered->set_url("http://127.0.0.1:9/hook");
  recovered->add_events("recovered");
  CollectDeliveries sink;
  daemon_->SetDeliverySink(&sink);
  agent_.snapshot.set_incarnation("inc-1");
  Deploy(config);
  EXPECT_EQ(sink.notify.size(), 2u);  // told the config's webhooks at the deploy
  daemon_->Step();
  ASSERT_FALSE(agent_.launches.empty());
  const fleet::v1::LaunchRequest launch = agent_.launches[0];
  agent_.Say(WithEvidence(Diagnosis(launch, "ptx_version_unsupported")));
  agent_.Say(Phase(launch, "FAILED"));
  daemon_->Step();
  daemon_->Step();
  std::vector<DeliveryRecord> gave_up;
  for (const auto& d : sink.got) {
    if (d.event_type == "gave_up") gave_up.push_back(d);
  }
  ASSERT_EQ(gave_up.size(), 1u);  // "chat" asked only for recovered
  EXPECT_EQ(gave_up[0].notify, "oncall");
  EXPECT_EQ(gave_up[0].server, "local/200/gpu0");
  EXPECT_GT(gave_up[0].id, 0);
  EXPECT_THAT(gave_up[0].body, HasSubstr("\"class\":\"ptx_version_unsupported\""));
  EXPECT_THAT(gave_up[0].body, HasSubstr("fleetctl explain --server local/200/gpu0"));
  EXPECT_THAT(gave_up[0].body, HasSubstr("\"text\":\"gpu-fleet: local/200/gpu0 gave up"));
  daemon_->SetDeliverySink(nullptr);
  // Not delivered before the stop: the next fleetd hands it to its sink again.
  Open();
  CollectDeliveries next;
  daemon_->SetDeliverySink(&next);
  bool handed = false;
  for (const auto& d : next.got) handed = handed || d.id == gave_up[0].id;
  EXPECT_TRUE(handed);
  daemon_->SetDeliverySink(nullptr);
}

TEST_F(DaemonTest, MetricsCountAttemptsByClassAndShowEachServersStateAndDiagnosis) {
  FleetMetrics metrics(daemon_.get());
  const fleet::v1::LaunchRequest launch = DeployTwoGpus();
  agent_.Say(Diagnosis(launch, "ptx_version_unsupported"));
  agent_.Say(Phase(launch, "FAILED"));
  daemon_->Step();
  daemon_->Step();
  const std::string text = metrics.Text();
  EXPECT_THAT(text,
              HasSubstr("fleet_attempts_total{class=\"ptx_version_unsupported\","
                        "outcome=\"failed\",server=\"local/200/gpu0\",trigger=\"initial\"} 1"));
  EXPECT_THAT(text, HasSubstr("fleet_server_state{ctid=\"200\",gpu=\"0\",host=\"local\","
                              "server=\"local/200/gpu0\",state=\"GAVE_UP\"} 1"));
  EXPECT_THAT(text, HasSubstr("fleet_server_state{ctid=\"200\",gpu=\"0\",host=\"local\","
                              "server=\"local/200/gpu0\",state=\"READY\"} 0"));
  EXPECT_THAT(text,
              HasSubstr("fleet_server_diagnosis_info{class=\"ptx_version_unsupported\","
                        "ctid=\"200\",gpu=\"0\",host=\"local\",server=\"local/200/gpu0\"} 1"));
  EXPECT_THAT(text, HasSubstr("fleet_agent_connected{ctid=\"200\",host=\"local\"} 1"));
  EXPECT_THAT(text, HasSubstr("fleet_startup_duration_seconds_count{jit_cache=\"cold\","
                              "outcome=\"failed\",template=\"sglang\"} 1"));
  EXPECT_THAT(text, HasSubstr("fleet_build_info{"));
  // One diagnosis series per server, whatever classes it had (alert rules join on it).
  size_t series = 0;
  for (size_t at = text.find("fleet_server_diagnosis_info{"); at != std::string::npos;
       at = text.find("fleet_server_diagnosis_info{", at + 1)) {
    const std::string needle = "server=\"local/200/gpu0\"";
    if (text.compare(text.find("server=", at), needle.size(), needle) == 0) ++series;
  }
  EXPECT_EQ(series, 1u);
  // No attempt id in any label.
  EXPECT_THAT(text, Not(HasSubstr(launch.attempt_id())));
}

TEST_F(DaemonTest, ATensorParallelServerIsOneServerOnItsGpusInLaunchStatusAndMetrics) {
  fleet::v1::FleetConfig config = TwoGpuConfig();
  auto* ct = config.mutable_hosts(0)->mutable_containers(0);
  ct->clear_gpus();
  ct->add_gpus(2);
  auto* tp = ct->add_servers();
  tp->add_gpus(0);
  tp->add_gpus(1);
  auto* t = config.mutable_templates(0);
  t->add_argv("--tp-size");
  t->add_argv("{gpu_count}");
  fleet::v1::DeployRequest r;
  *r.mutable_config() = config;
  r.set_source("test.yaml");
  auto d = daemon_->Deploy(r);
  ASSERT_TRUE(d.ok()) << d.status();
  std::map<std::string, std::string> details;
  for (const fleet::v1::Change& c : d->changes()) details[c.server()] = c.detail();
  EXPECT_EQ(details["local/200/gpu0"], "gpus 0,1, port 30000");
  EXPECT_EQ(details["local/200/gpu2"], "gpu 2, port 30002");
  EXPECT_EQ(details.count("local/200/gpu1"), 0u) << "GPU 1 is the TP server's, not a server";
  daemon_->Step();
  ASSERT_EQ(agent_.launches.size(), 2u);
  const fleet::v1::LaunchRequest* launch = nullptr;
  for (const auto& l : agent_.launches) {
    if (l.spec().server().gpu() == 0) launch = &l;
  }
  ASSERT_NE(launch, nullptr);
  EXPECT_THAT(launch->spec().gpus(), ElementsAre(0, 1));
  EXPECT_EQ(launch->spec().env().at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(launch->spec().argv(launch->spec().argv_size() - 1), "2");
  agent_.Say(Phase(*launch, "READY"));
  daemon_->Step();

  std::map<std::string, fleet::v1::ServerRow> rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_THAT(rows["local/200/gpu0"].gpus(), ElementsAre(0, 1));
  EXPECT_THAT(rows["local/200/gpu2"].gpus(), ElementsAre(2));
  {
    // Gone before the daemon it watches is.
    FleetMetrics metrics(daemon_.get());
    const std::string text = metrics.Text();
    EXPECT_THAT(text, HasSubstr("fleet_server_gpus{ctid=\"200\",gpu=\"0\",gpus=\"0,1\","
                                "host=\"local\",server=\"local/200/gpu0\"} 2"));
    EXPECT_THAT(text, HasSubstr("fleet_server_gpus{ctid=\"200\",gpu=\"2\",gpus=\"2\","
                                "host=\"local\",server=\"local/200/gpu2\"} 1"));
    EXPECT_THAT(text, HasSubstr("fleet_server_state{ctid=\"200\",gpu=\"0\",host=\"local\","
                                "server=\"local/200/gpu0\",state=\"READY\"} 1"));
    EXPECT_THAT(metrics.Targets(), HasSubstr("\"gpus\":\"0,1\""));
  }

  // A fleetd started again over the record knows the same.
  Open();
  rows = Rows();
  EXPECT_THAT(rows["local/200/gpu0"].gpus(), ElementsAre(0, 1));
}

TEST_F(DaemonTest, AServerReadyAfterAFailureIsToldRecoveredWithTheClassItRecoveredFrom) {
  CollectEvents listener;
  daemon_->journal().AddListener(&listener);
  const fleet::v1::LaunchRequest first = DeployTwoGpus();
  agent_.Say(Diagnosis(first, "runtime_watchdog"));
  agent_.Say(Phase(first, "FAILED"));
  daemon_->Step();
  clock_.Advance(absl::Seconds(15));  // past the backoff
  daemon_->Step();
  fleet::v1::LaunchRequest second;
  for (const auto& l : agent_.launches) {
    if (l.spec().server().gpu() == 0 && l.attempt_number() == 2) second = l;
  }
  ASSERT_FALSE(second.attempt_id().empty());
  agent_.Say(Phase(second, "READY"));
  daemon_->Step();
  // gpu1 started READY the first time: not a recovery.
  const fleet::v1::LaunchRequest* gpu1 = nullptr;
  for (const auto& l : agent_.launches) {
    if (l.spec().server().gpu() == 1) gpu1 = &l;
  }
  if (gpu1 != nullptr) {
    agent_.Say(Phase(*gpu1, "READY"));
    daemon_->Step();
  }
  daemon_->Step();
  daemon_->journal().RemoveListener(&listener);
  std::vector<const fleet::v1::FleetEvent*> recovered;
  for (const auto& e : listener.got) {
    if (e.type() == "recovered") recovered.push_back(&e);
  }
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0]->server(), "local/200/gpu0");
  EXPECT_EQ(recovered[0]->diagnosis_class(), "runtime_watchdog");
  EXPECT_EQ(recovered[0]->attempt_number(), 2);
  EXPECT_EQ(recovered[0]->trigger(), "restart");
}

}  // namespace
}  // namespace fleet::daemon
