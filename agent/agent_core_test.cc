// The agent with real processes (fleet-test-child, the simulated SGLang server), its real event
// loop and store; a FakeClock where a timeout is tested; gRPC over a loopback port for the event
// stream. Waits are on the loop's descriptors (RunOnce), never fixed sleeps.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/agent_service.h"
#include "agent/agent_store.h"
#include "agent/http_readiness_prober.h"
#include "agent/proc.h"
#include "agent/server_run.h"
#include "common/state/states.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"
#include "tests/sim/startup_script.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using fleet::v1::AgentEvent;
using ::testing::HasSubstr;

// A readiness prober that answers as told and counts the checks.
class FakeProber : public ReadinessProber {
 public:
  ReadinessResult Check(const ReadinessCheck& check) override {
    ++checks;
    ReadinessResult r;
    r.ready = ready.load();
    r.http_status = r.ready ? 200 : 0;
    return r;
  }
  std::atomic<int> checks{0};
  std::atomic<bool> ready{false};
};

class AgentHarness {
 public:
  explicit AgentHarness(Clock* clock = nullptr, ReadinessProber* prober = nullptr,
                        std::string state_dir = "")
      : clock_(clock != nullptr ? clock : &real_clock_),
        prober_(prober != nullptr ? prober : &fake_prober_) {
    options_.state_dir = state_dir.empty() ? dir_.Join("state") : state_dir;
    options_.readiness_interval = absl::Milliseconds(50);
    options_.progress_sample_interval = absl::Seconds(5);
    options_.stop_grace = absl::Milliseconds(300);
    options_.log_retention = 2;
    Recreate();
  }

  void Recreate() {
    agent_.reset();
    auto a = Agent::Create(
        options_, {clock_, launcher_override_ != nullptr ? launcher_override_ : &launcher_, prober_,
                   &runner_});
    EXPECT_TRUE(a.ok()) << a.status();
    agent_ = *std::move(a);
  }
  void Destroy() { agent_.reset(); }
  // The launcher of the next Recreate (nullptr: the real one).
  void UseLauncher(ProcessLauncher* launcher) { launcher_override_ = launcher; }

  Agent& agent() { return *agent_; }
  AgentOptions& options() { return options_; }
  const fleet::testing::TempDir& dir() const { return dir_; }

  fleet::v1::ServerSpec ChildSpec(int gpu, std::vector<std::string> args) const {
    fleet::v1::ServerSpec spec;
    spec.mutable_server()->set_gpu(gpu);
    spec.add_argv(fleet::testing::BuildPath("tests/testing/fleet-test-child"));
    for (auto& a : args) spec.add_argv(a);
    (*spec.mutable_env())["PATH"] = "/usr/bin:/bin";
    spec.set_log_path(dir_.Join(absl::StrCat("logs/gpu", gpu, ".log")));
    spec.set_port(1);  // nothing listens there
    return spec;
  }

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::ServerSpec& spec,
                                                   const std::string& attempt, int64_t number = 1) {
    fleet::v1::LaunchRequest r;
    r.set_attempt_id(attempt);
    r.set_attempt_number(number);
    *r.mutable_spec() = spec;
    return agent_->Launch(r);
  }

  void Stop(int gpu) {
    fleet::v1::StopRequest r;
    r.mutable_server()->set_gpu(gpu);
    ASSERT_TRUE(agent_->Stop(r).ok());
  }

  // Runs the loop until `done(events so far)` holds, or 20 s of real time pass.
  bool RunUntil(const std::function<bool(const std::vector<AgentEvent>&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      Collect();
      if (done(events_)) return true;
      agent_->RunOnce(absl::Milliseconds(50));
    }
    Collect();
    return done(events_);
  }

  const std::vector<AgentEvent>& events() {
    Collect();
    return events_;
  }

  static bool HasPhase(const std::vector<AgentEvent>& events, const std::string& state) {
    for (const AgentEvent& e : events) {
      if (e.has_phase() && e.phase().state() == state) {
        // The typed state travels beside its spelling (proto/states.proto).
        EXPECT_EQ(StateName(e.phase().server_state()), state);
        return true;
      }
    }
    return false;
  }

  static const AgentEvent* Find(const std::vector<AgentEvent>& events,
                                const std::function<bool(const AgentEvent&)>& pred) {
    for (const AgentEvent& e : events) {
      if (pred(e)) return &e;
    }
    return nullptr;
  }

 private:
  void Collect() {
    if (!agent_) return;
    if (incarnation_.empty()) incarnation_ = agent_->incarnation();
    for (AgentEvent& e : agent_->EventsAfter(incarnation_, cursor_, 1000)) {
      incarnation_ = e.incarnation();
      cursor_ = e.sequence();
      if (!e.has_resync()) events_.push_back(std::move(e));
    }
  }

  fleet::testing::TempDir dir_;
  RealClock real_clock_;
  FakeProber fake_prober_;
  Clock* clock_;
  ReadinessProber* prober_;
  PosixProcessLauncher launcher_;
  ProcessLauncher* launcher_override_ = nullptr;
  PosixCommandRunner runner_;
  AgentOptions options_;
  std::unique_ptr<Agent> agent_;
  std::string incarnation_;
  uint64_t cursor_ = 0;
  std::vector<AgentEvent> events_;
};

class AgentTest : public ::testing::Test {
 protected:
  // Orphans of a server's group become the test process's children, as they become the
  // agent's (fleet-agent sets this too), so the agent can reap them.
  static void SetUpTestSuite() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
};

TEST_F(AgentTest, LaunchRunsInItsOwnSessionWritesItsLogAndIsIdempotent) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"lines", "3"});
  auto first = h.Launch(spec, "attempt-1");
  ASSERT_TRUE(first.ok()) << first.status();
  const int pid = first->status().pid();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(getsid(pid), pid);
  // The same attempt id again starts nothing new.
  auto again = h.Launch(spec, "attempt-1");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_running());
  EXPECT_EQ(again->status().pid(), pid);
  // Another attempt while this one runs is refused.
  EXPECT_EQ(h.Launch(spec, "attempt-2", 2).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "line 3");
  }));
  // CUDA_VISIBLE_DEVICES is the server's GPU, whatever the spec said.
  const std::string environ = fleet::testing::ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  EXPECT_THAT(environ, HasSubstr(std::string("CUDA_VISIBLE_DEVICES=0\0", 23)));

  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
  const AgentEvent* exit =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(exit->exited().exited());
  EXPECT_EQ(exit->exited().exit_code(), 0);
  EXPECT_FALSE(AgentHarness::HasPhase(h.events(), "FAILED"));
}

TEST_F(AgentTest, ProbeLooksForTheServersGpuDeviceNodesInTheAgentsDevRoot) {
  AgentHarness h;
  h.options().dev_root = h.dir().Join("dev");
  ASSERT_EQ(mkdir(h.options().dev_root.c_str(), 0755), 0);
  h.Recreate();
  // GPU 3's server, in a container whose dev dir has none of the nodes.
  fleet::v1::ServerSpec spec = h.ChildSpec(3, {"lines", "1"});
  fleet::v1::ToolchainSnapshot s = h.agent().Probe(spec);
  EXPECT_TRUE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(),
              ::testing::Contains(h.dir().Join("dev/nvidia3") + ": missing"));
  EXPECT_THAT(s.notes(), ::testing::Contains(HasSubstr("no GPU device node in this container: " +
                                                       h.dir().Join("dev/nvidia3"))));
  // An empty dev root: not looked for.
  h.options().dev_root = "";
  h.Recreate();
  s = h.agent().Probe(spec);
  EXPECT_FALSE(s.device_nodes_checked());
  EXPECT_TRUE(s.device_node_problems().empty());
}

TEST_F(AgentTest, StopEscalatesToSigkillWhenSigtermIsIgnoredAndReapsTheGroup) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"forker"});
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok());
  const int pid = launched->status().pid();
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "child");
  }));
  int parent = 0, child = 0;
  ASSERT_EQ(std::sscanf(fleet::testing::ReadFile(spec.log_path()).c_str(), "parent %d child %d",
                        &parent, &child),
            2);
  EXPECT_EQ(parent, pid);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
  // The parent exits on SIGTERM; its child ignores it and is killed with the group after the
  // grace period. Both are reaped: no process, not even a zombie, remains.
  ASSERT_TRUE(h.RunUntil([&](auto&) { return !ReadProcStat(child).has_value(); }))
      << "child " << child << " still exists";
  EXPECT_FALSE(ReadProcStat(pid).has_value());
}

TEST_F(AgentTest, SigkillAfterGraceForAServerThatIgnoresSigterm) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"ignore-term"});
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "ready");
  }));
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
  const AgentEvent* exit =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_FALSE(exit->exited().exited());
  EXPECT_EQ(exit->exited().signal(), SIGKILL);
}

TEST_F(AgentTest, ACrashIsAFailureWithItsSignal) {
  AgentHarness h;
  ASSERT_TRUE(h.Launch(h.ChildSpec(0, {"crash"}), "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  const AgentEvent* exit =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->exited().signal(), SIGABRT);
  const AgentEvent* diagnosis = AgentHarness::Find(
      h.events(), [](const AgentEvent& e) { return e.has_diagnosis() && e.diagnosis().final(); });
  ASSERT_NE(diagnosis, nullptr);
  EXPECT_EQ(diagnosis->diagnosis().diagnosis().diagnosis_class(), "unknown");
  EXPECT_THAT(diagnosis->diagnosis().diagnosis().summary(), HasSubstr("signal 6"));
}

TEST_F(AgentTest, ExitZeroWithAFailedLogIsAFailureWithTheLogsDiagnosis) {
  AgentHarness h;
  ASSERT_TRUE(h.Launch(h.ChildSpec(0, {"exit0-failed"}), "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  const auto& events = h.events();
  const AgentEvent* exit =
      AgentHarness::Find(events, [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(exit->exited().exited());
  EXPECT_EQ(exit->exited().exit_code(), 0);
  int finals = 0;
  for (const AgentEvent& e : events) {
    if (e.has_diagnosis() && e.diagnosis().final()) {
      ++finals;
      EXPECT_EQ(e.diagnosis().diagnosis().diagnosis_class(), "missing_shared_library");
      EXPECT_EQ(e.diagnosis().diagnosis().root_cause_line(), 4);
    }
  }
  EXPECT_EQ(finals, 1);
  // The provisional diagnosis came before the final one.
  const AgentEvent* provisional = AgentHarness::Find(
      events, [](const AgentEvent& e) { return e.has_diagnosis() && !e.diagnosis().final(); });
  ASSERT_NE(provisional, nullptr);
}

TEST_F(AgentTest, SecretsAreMaskedInTheEvidence) {
  AgentHarness h;
  auto spec = h.ChildSpec(0, {"leak", "HF_TOKEN"});
  (*spec.mutable_env())["HF_TOKEN"] = "hf_supersecret123";
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  bool saw_evidence = false;
  for (const AgentEvent& e : h.events()) {
    const std::string bytes = e.SerializeAsString();
    EXPECT_EQ(bytes.find("hf_supersecret123"), std::string::npos);
    if (e.has_diagnosis()) {
      for (const auto& line : e.diagnosis().diagnosis().evidence()) {
        if (absl::StrContains(line.text(), "token <redacted>")) saw_evidence = true;
      }
    }
  }
  EXPECT_TRUE(saw_evidence);
}

TEST_F(AgentTest, AValueFromAFileReachesTheServerAndOnlyItsPathIsKept) {
  AgentHarness h;
  h.dir().WriteFile("secrets/hf_token", "hf_fromfile456\n");
  auto spec = h.ChildSpec(0, {"leak", "HF_TOKEN"});
  (*spec.mutable_env_from_file())["HF_TOKEN"] = h.dir().Join("secrets/hf_token");
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  // The server had it in its environment (the child printed it, newline dropped)...
  EXPECT_THAT(fleet::testing::ReadFile(spec.log_path()), HasSubstr("(token hf_fromfile456)"));
  // ...and it left the agent in no event, and is not in its record.
  bool saw_evidence = false;
  for (const AgentEvent& e : h.events()) {
    EXPECT_EQ(e.SerializeAsString().find("hf_fromfile456"), std::string::npos);
    if (e.has_diagnosis()) {
      for (const auto& line : e.diagnosis().diagnosis().evidence()) {
        if (absl::StrContains(line.text(), "token <redacted>")) saw_evidence = true;
      }
    }
  }
  EXPECT_TRUE(saw_evidence);
  h.Destroy();
  const std::string db = fleet::testing::ReadFile(h.dir().Join("state/agent.db")) +
                         fleet::testing::ReadFile(h.dir().Join("state/agent.db-wal"));
  EXPECT_EQ(db.find("hf_fromfile456"), std::string::npos);
  EXPECT_NE(db.find(h.dir().Join("secrets/hf_token")), std::string::npos);
}

TEST_F(AgentTest, AMissingEnvFileFailsTheLaunchNamingTheVariable) {
  AgentHarness h;
  auto spec = h.ChildSpec(0, {"lines", "1"});
  (*spec.mutable_env_from_file())["HF_TOKEN"] = h.dir().Join("secrets/missing");
  auto launched = h.Launch(spec, "a");
  ASSERT_FALSE(launched.ok());
  EXPECT_THAT(std::string(launched.status().message()),
              HasSubstr("env_from_file HF_TOKEN: " + h.dir().Join("secrets/missing")));
  EXPECT_EQ(h.agent().Status().servers_size(), 0);
}

TEST_F(AgentTest, AReadyLineIsOnlyAHintReadyIsAnHttpAnswer) {
  FakeProber prober;
  AgentHarness h(nullptr, &prober);
  h.options().readiness_interval = absl::Hours(1);  // only the hint triggers a probe
  h.Recreate();
  ASSERT_TRUE(h.Launch(h.ChildSpec(0, {"ready-line"}), "a").ok());
  ASSERT_TRUE(h.RunUntil([&](auto&) { return prober.checks.load() >= 1; }));
  EXPECT_FALSE(AgentHarness::HasPhase(h.events(), "READY"));
  EXPECT_NE(h.agent().Status().servers(0).state(), "READY");
  // Once the endpoint answers, the next probe makes it READY.
  prober.ready = true;
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, ReadyAfterAnHttp200) {
  FakeProber prober;
  prober.ready = true;
  AgentHarness h(nullptr, &prober);
  ASSERT_TRUE(h.Launch(h.ChildSpec(0, {"lines", "1"}), "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "READY"); }));
  const AgentEvent* ready =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_ready(); });
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->ready().http_status(), 200);
  EXPECT_EQ(h.agent().Status().servers(0).state(), "READY");
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, TheServersOwnReadinessIntervalWinsOverTheAgentsDefault) {
  // The agent's default would probe once an hour; the config's readiness.interval (in the spec)
  // says 50 ms: the server is READY without any ready line to hint at it.
  FakeProber prober;
  prober.ready = true;
  AgentHarness h(nullptr, &prober);
  h.options().readiness_interval = absl::Hours(1);
  h.Recreate();
  fleet::v1::ServerSpec spec = h.ChildSpec(0, {"lines", "1"});
  spec.mutable_readiness()->mutable_interval()->set_nanos(50 * 1000 * 1000);
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "READY"); }));
  EXPECT_GE(prober.checks.load(), 1);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

// Drives the fake clock forward in `step`s for `total`, running the loop after each step; before
// each step `before_step` runs (real time passes there).
void Advance(AgentHarness& h, fleet::testing::FakeClock& clock, absl::Duration total,
             absl::Duration step, const std::function<void()>& before_step = {}) {
  for (absl::Duration done; done < total; done += step) {
    if (before_step) before_step();
    clock.Advance(step);
    h.agent().RunOnce(absl::ZeroDuration());
  }
}

TEST_F(AgentTest, AQuietServerStallsAndTheReportCarriesLastLinesAndProcesses) {
  fleet::testing::FakeClock clock;
  AgentHarness h(&clock);
  auto spec = h.ChildSpec(0, {"quiet"});
  spec.mutable_stall_timeout()->set_seconds(60);
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok());
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "loading");
  }));
  // Let its CPU settle at what starting cost it, then nothing moves for the stall timeout.
  h.agent().RunOnce(absl::ZeroDuration());
  Advance(h, clock, absl::Seconds(55), absl::Seconds(5));
  EXPECT_EQ(AgentHarness::Find(h.events(), [](auto& e) { return e.has_stalled(); }), nullptr);
  Advance(h, clock, absl::Seconds(10), absl::Seconds(5));
  const AgentEvent* stalled =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_stalled(); });
  ASSERT_NE(stalled, nullptr);
  EXPECT_EQ(stalled->stalled().diagnosis_class(), "startup_stalled");
  EXPECT_EQ(stalled->stalled().diagnosis().diagnosis_class(), "startup_stalled");
  EXPECT_FALSE(stalled->stalled().diagnosis().toolchain_fix());
  ASSERT_GE(stalled->stalled().diagnosis().evidence_size(), 1);
  EXPECT_EQ(stalled->stalled().diagnosis().evidence(0).text(), "loading");
  ASSERT_GE(stalled->stalled().running_processes_size(), 1);
  EXPECT_THAT(stalled->stalled().running_processes(0),
              HasSubstr(absl::StrCat(launched->status().pid(), " fleet-test-chil")));
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, CpuTimeOfTheServersProcessesIsProgress) {
  fleet::testing::FakeClock clock;
  AgentHarness h(&clock);
  auto spec = h.ChildSpec(0, {"busy"});
  spec.mutable_stall_timeout()->set_seconds(20);
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok());
  const pid_t pid = launched->status().pid();
  // Before each 5 s step of the fake clock the busy child really gains CPU time, which the
  // agent samples: 60 fake seconds without a log line are not a stall.
  Advance(h, clock, absl::Seconds(60), absl::Seconds(5), [&] {
    const uint64_t before = SessionCpuTicks(pid);
    while (SessionCpuTicks(pid) <= before) {
    }
  });
  EXPECT_EQ(AgentHarness::Find(h.events(), [](auto& e) { return e.has_stalled(); }), nullptr);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, StartupDeadlineBoundsTheWholeStart) {
  fleet::testing::FakeClock clock;
  AgentHarness h(&clock);
  auto spec = h.ChildSpec(0, {"quiet"});
  spec.mutable_stall_timeout()->set_seconds(100000);
  spec.mutable_startup_deadline()->set_seconds(120);
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  Advance(h, clock, absl::Seconds(125), absl::Seconds(5));
  const AgentEvent* stalled =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_stalled(); });
  ASSERT_NE(stalled, nullptr);
  EXPECT_EQ(stalled->stalled().diagnosis_class(), "startup_deadline_exceeded");
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, ARestartedAgentReadoptsItsLiveServerAndKeepsItsIncarnation) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"lines", "2"});
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok());
  const int pid = launched->status().pid();
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "line 2");
  }));
  const std::string incarnation = h.agent().incarnation();
  const uint64_t last = h.agent().last_sequence();
  h.Recreate();  // the agent goes away and comes back on the same state dir; the server stays
  EXPECT_EQ(h.agent().incarnation(), incarnation);
  const auto status = h.agent().Status();
  ASSERT_EQ(status.servers_size(), 1);
  EXPECT_EQ(status.servers(0).pid(), pid);
  EXPECT_EQ(status.servers(0).attempt_id(), "a");
  // It announced where the server is, after the old events, without repeating them.
  EXPECT_GT(h.agent().last_sequence(), last);
  // Still the same process: re-adopted, not relaunched.
  EXPECT_TRUE(IsSameLiveProcess(pid, ReadProcStat(pid)->start_ticks));
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, ARequestFromAReplacedLeaderIsFencedAlsoAfterARestart) {
  AgentHarness h;
  auto fence = [](std::string fleet, int64_t term) {
    fleet::v1::Fence f;
    f.set_fleet_id(std::move(fleet));
    f.set_term(term);
    return f;
  };
  // A fleetd alone (no term) is admitted; so is each new leader's higher term.
  EXPECT_TRUE(h.agent().AdmitFence(fleet::v1::Fence()).ok());
  EXPECT_TRUE(h.agent().AdmitFence(fence("f1", 4)).ok());
  EXPECT_TRUE(h.agent().AdmitFence(fence("f1", 7)).ok());
  EXPECT_TRUE(h.agent().AdmitFence(fence("f1", 7)).ok()) << "the same leader again";
  const absl::Status old = h.agent().AdmitFence(fence("f1", 4));
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("fenced"));
  EXPECT_EQ(h.agent().AdmitFence(fence("f1", 0)).code(), absl::StatusCode::kFailedPrecondition)
      << "once the fleet has a leader with a term, a term-less request is an old one";
  // Another fleet's terms are its own.
  EXPECT_TRUE(h.agent().AdmitFence(fence("f2", 1)).ok());
  // The highest term survives the agent's restart (agent.db).
  h.Recreate();
  EXPECT_EQ(h.agent().AdmitFence(fence("f1", 6)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(h.agent().AdmitFence(fence("f1", 7)).ok());
  EXPECT_EQ(h.agent().AdmitFence(fence("f2", 0)).code(), absl::StatusCode::kFailedPrecondition);
}

// The real launcher, and a copy of the agent's store (agent.db and its WAL) taken right after
// each spawn: the disk as an agent killed -9 at that moment leaves it.
class SnapshotAfterSpawn : public ProcessLauncher {
 public:
  SnapshotAfterSpawn(std::string state_dir, std::string snapshot_dir)
      : state_dir_(std::move(state_dir)), snapshot_dir_(std::move(snapshot_dir)) {}
  absl::StatusOr<ServerProcess> Launch(const ServerCommand& command) override {
    ++launches;
    absl::StatusOr<ServerProcess> p = real_.Launch(command);
    std::filesystem::remove_all(snapshot_dir_);
    std::filesystem::create_directories(snapshot_dir_);
    for (const char* name : {"agent.db", "agent.db-wal"}) {
      const std::filesystem::path from = std::filesystem::path(state_dir_) / name;
      if (std::filesystem::exists(from)) {
        std::filesystem::copy_file(from, std::filesystem::path(snapshot_dir_) / name);
      }
    }
    return p;
  }
  int launches = 0;

 private:
  PosixProcessLauncher real_;
  std::string state_dir_;
  std::string snapshot_dir_;
};

// The fault matrix's kill9-agent row (finding 13): the agent spawned a server and was killed
// before it recorded the launch. The restarted agent finds that server by its marks, records its
// launch, and adopts it: the daemon's repeat of the launch starts nothing a second time.
TEST_F(AgentTest, AServerSpawnedJustBeforeTheAgentDiedIsAdoptedAndItsLaunchRecorded) {
  AgentHarness h;
  const std::string snapshot = h.dir().Join("at-spawn");
  SnapshotAfterSpawn launcher(h.options().state_dir, snapshot);
  h.UseLauncher(&launcher);
  h.Recreate();
  const auto spec = h.ChildSpec(0, {"quiet"});
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok()) << launched.status();
  const int pid = launched->status().pid();
  h.Destroy();
  // The disk as it was right after the spawn: the launch's record and event never written.
  std::filesystem::remove(std::filesystem::path(h.options().state_dir) / "agent.db-shm");
  std::filesystem::remove(std::filesystem::path(h.options().state_dir) / "agent.db-wal");
  for (const auto& f : std::filesystem::directory_iterator(snapshot)) {
    std::filesystem::copy_file(f.path(),
                               std::filesystem::path(h.options().state_dir) / f.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
  }
  h.Recreate();
  const auto status = h.agent().Status();
  ASSERT_EQ(status.servers_size(), 1);
  EXPECT_EQ(status.servers(0).attempt_id(), "a");
  EXPECT_EQ(status.servers(0).pid(), pid);
  // Its launch is in the record, once.
  int starts = 0;
  for (const AgentEvent& e : h.events()) {
    if (e.attempt_id() == "a" && e.has_phase() && e.phase().state() == "STARTING") ++starts;
  }
  EXPECT_GE(starts, 1);
  // The daemon's repeat of the launch finds it running: no second process.
  auto again = h.Launch(spec, "a");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_running());
  EXPECT_EQ(again->status().pid(), pid);
  EXPECT_EQ(launcher.launches, 1);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

// Written ahead but never spawned (killed between the two): the record is what it was before,
// and the repeat of the launch starts it.
TEST_F(AgentTest, ALaunchWrittenAheadButNeverSpawnedIsLaunchedByItsRepeat) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"quiet"});
  h.Destroy();
  {
    auto store = AgentStore::Open(h.options().state_dir, 100);
    ASSERT_TRUE(store.ok()) << store.status();
    fleet::v1::ServerRecord record;
    record.mutable_launching()->set_attempt_id("a");
    record.mutable_launching()->set_attempt_number(1);
    *record.mutable_launching()->mutable_spec() = spec;
    ASSERT_TRUE((*store)->PutServer(0, record).ok());
  }
  h.Recreate();
  EXPECT_EQ(h.agent().Status().servers_size(), 0);
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_FALSE(launched->already_running());
  EXPECT_GT(launched->status().pid(), 0);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, AServerThatDiedWhileTheAgentWasAwayIsReportedWithItsDiagnosis) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"exit0-failed"});
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok());
  const int pid = launched->status().pid();
  h.Destroy();  // gone before it saw the exit
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  h.Recreate();
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  const AgentEvent* exit =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(exit->exited().status_unknown());
  const AgentEvent* d = AgentHarness::Find(
      h.events(), [](const AgentEvent& e) { return e.has_diagnosis() && e.diagnosis().final(); });
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->diagnosis().diagnosis().diagnosis_class(), "missing_shared_library");
  EXPECT_EQ(h.agent().Status().servers(0).state(), "FAILED");
}

TEST_F(AgentTest, EarlierAttemptsLogsAreKeptWithBoundedRetention) {
  AgentHarness h;  // log_retention 2
  const auto spec = h.ChildSpec(0, {"lines", "1"});
  for (int attempt = 1; attempt <= 4; ++attempt) {
    ASSERT_TRUE(h.Launch(spec, absl::StrCat("a", attempt), attempt).ok());
    ASSERT_TRUE(h.RunUntil([&](auto&) {
      return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "line 1");
    }));
    h.Stop(0);
    ASSERT_TRUE(h.RunUntil([&](auto& ev) {
      int stopped = 0;
      for (const AgentEvent& e : ev) stopped += e.has_phase() && e.phase().state() == "STOPPED";
      return stopped == attempt;
    }));
  }
  EXPECT_TRUE(absl::StrContains(fleet::testing::ReadFile(spec.log_path() + ".3"), "line 1"));
  EXPECT_TRUE(absl::StrContains(fleet::testing::ReadFile(spec.log_path() + ".2"), "line 1"));
  EXPECT_EQ(access((spec.log_path() + ".1").c_str(), F_OK), -1);  // beyond retention
  EXPECT_EQ(h.agent().LogPath(0, 3), spec.log_path() + ".3");
  EXPECT_EQ(h.agent().LogPath(0, 1), "");
}

// The agent's gRPC service on a loopback port (the limits fleet-agent sets), and a stub to it
// with gRPC's default limits (as an older daemon has).
struct ServedAgent {
  explicit ServedAgent(Agent* agent) : service(agent) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    SetMessageLimits(&builder);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    stub = fleet::v1::Agent::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~ServedAgent() { server->Shutdown(); }
  AgentService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<fleet::v1::Agent::Stub> stub;
};

TEST_F(AgentTest, TheEventStreamResumesOverGrpcWithoutGapOrDuplicate) {
  AgentHarness h;
  h.agent().Start();
  ServedAgent served(&h.agent());
  ASSERT_NE(served.port, 0);
  auto& stub = served.stub;

  const auto spec = h.ChildSpec(0, {"lines", "2"});
  ASSERT_TRUE(h.Launch(spec, "a").ok());

  // Reads events from (incarnation, after) until `enough` holds; returns them.
  auto read = [&](const std::string& incarnation, uint64_t after,
                  const std::function<bool(const std::vector<AgentEvent>&)>& enough) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    fleet::v1::EventsRequest request;
    request.set_incarnation(incarnation);
    request.set_after_sequence(after);
    auto reader = stub->Events(&context, request);
    std::vector<AgentEvent> got;
    AgentEvent e;
    while (!enough(got) && reader->Read(&e)) got.push_back(e);
    context.TryCancel();
    return got;
  };

  const std::string incarnation = h.agent().incarnation();
  // The first event (STARTING), then the client goes away.
  std::vector<AgentEvent> first = read(incarnation, 0, [](auto& got) { return !got.empty(); });
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].sequence(), 1u);
  EXPECT_EQ(first[0].phase().state(), "STARTING");
  h.Stop(0);
  // Reconnected at its position: what came since, each event once, in order.
  std::vector<AgentEvent> rest = read(incarnation, 1, [](auto& got) {
    return !got.empty() && got.back().has_phase() && got.back().phase().state() == "STOPPED";
  });
  ASSERT_GE(rest.size(), 3u);  // STOPPING, exited, STOPPED
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].sequence(), 2 + i);
  EXPECT_EQ(rest[0].phase().state(), "STOPPING");
  // From the middle again: the next one, not a repeat.
  std::vector<AgentEvent> again = read(incarnation, 2, [](auto& got) { return !got.empty(); });
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].sequence(), 3u);

  // A position from another incarnation is told so: a Resync at the current sequence.
  std::vector<AgentEvent> foreign = read("another", 7, [](auto& got) { return !got.empty(); });
  ASSERT_EQ(foreign.size(), 1u);
  ASSERT_TRUE(foreign[0].has_resync());
  EXPECT_EQ(foreign[0].resync().previous_incarnation(), "another");
  EXPECT_EQ(foreign[0].incarnation(), incarnation);
  EXPECT_EQ(foreign[0].sequence(), h.agent().last_sequence());
}

// EventBatches: the same stream, what the agent holds past a position in one message (a backlog
// is not sent one event to a message), then each new event as it comes, in order, no hole.
TEST_F(AgentTest, EventBatchesSendsTheBacklogInOneMessageThenWhatComes) {
  AgentHarness h;
  const auto spec = h.ChildSpec(0, {"lines", "2"});
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  h.Stop(0);
  // The backlog: STARTING .. STOPPED, all logged before anyone reads.
  ASSERT_TRUE(h.RunUntil([](const auto& got) { return AgentHarness::HasPhase(got, "STOPPED"); }));
  const uint64_t backlog = h.agent().last_sequence();
  ASSERT_GE(backlog, 4u);
  h.agent().Start();
  ServedAgent served(&h.agent());
  ASSERT_NE(served.port, 0);
  auto& stub = served.stub;

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  fleet::v1::EventsRequest request;
  request.set_incarnation(h.agent().incarnation());
  request.set_after_sequence(0);
  auto reader = stub->EventBatches(&context, request);
  fleet::v1::EventBatch batch;
  ASSERT_TRUE(reader->Read(&batch));
  ASSERT_EQ(batch.events_size(), static_cast<int>(backlog));
  for (int i = 0; i < batch.events_size(); ++i) {
    EXPECT_EQ(batch.events(i).sequence(), static_cast<uint64_t>(i + 1));
  }
  EXPECT_EQ(batch.events(0).phase().state(), "STARTING");
  // A new launch: its events come on the same stream, numbered on.
  ASSERT_TRUE(h.Launch(spec, "b").ok());
  ASSERT_TRUE(reader->Read(&batch));
  ASSERT_GE(batch.events_size(), 1);
  EXPECT_EQ(batch.events(0).sequence(), backlog + 1);
  EXPECT_EQ(batch.events(0).attempt_id(), "b");
  context.TryCancel();
}

TEST_F(AgentTest, LogsGivesTheTailThenFollowsOverGrpc) {
  AgentHarness h;
  h.agent().Start();
  ServedAgent served(&h.agent());
  ASSERT_NE(served.port, 0);
  auto& stub = served.stub;
  const auto spec = h.ChildSpec(0, {"lines", "5"});
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "line 5");
  }));

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  fleet::v1::LogsRequest request;
  request.mutable_server()->set_gpu(0);
  request.set_tail_lines(2);
  request.set_follow(true);
  auto reader = stub->Logs(&context, request);
  std::string got;
  fleet::v1::LogChunk chunk;
  while (got.size() < 14 && reader->Read(&chunk)) got += chunk.data();
  EXPECT_EQ(got, "line 4\nline 5\n");
  // Following: what the server writes next arrives on the same stream.
  h.Stop(0);  // the child prints "terminated" on SIGTERM
  while (!absl::StrContains(got, "terminated") && reader->Read(&chunk)) got += chunk.data();
  EXPECT_EQ(got, "line 4\nline 5\nterminated\n");
  context.TryCancel();
  reader->Finish().IgnoreError();

  grpc::ClientContext missing_context;
  fleet::v1::LogsRequest missing;
  missing.mutable_server()->set_gpu(7);
  auto none = stub->Logs(&missing_context, missing);
  EXPECT_FALSE(none->Read(&chunk));
  EXPECT_EQ(none->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AgentTest, ARecordedPidNowOwnedByAnotherProcessIsNeverSignalled) {
  AgentHarness h;
  // An unrelated process, leader of a group of its own, has the pid a server had before a
  // container reboot (recorded with the server's start time, which differs from its own).
  auto bystander =
      fleet::testing::Spawn({fleet::testing::BuildPath("tests/testing/fleet-test-child"), "quiet"},
                            {.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}}});
  ASSERT_TRUE(bystander.ok()) << bystander.status();
  const pid_t pid = *bystander;
  ASSERT_EQ(getpgid(pid), pid);
  const std::optional<ProcStat> before = ReadProcStat(pid);
  ASSERT_TRUE(before.has_value());
  h.Destroy();
  {
    auto store = AgentStore::Open(h.options().state_dir, 100);
    ASSERT_TRUE(store.ok()) << store.status();
    fleet::v1::ServerRecord record;
    *record.mutable_spec() = h.ChildSpec(0, {"quiet"});
    record.set_attempt_id("before-reboot");
    record.set_attempt_number(1);
    record.set_pid(pid);
    record.set_start_ticks(before->start_ticks + 4242);
    record.set_state("READY");
    record.set_ready(true);
    ASSERT_TRUE((*store)->PutServer(0, record).ok());
  }
  h.Recreate();  // re-adoption: the identity does not match
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  for (int i = 0; i < 5; ++i) h.agent().RunOnce(absl::Milliseconds(20));
  // The bystander lives on, untouched: not killed (no zombie of it to reap), same process.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT), 0);
  EXPECT_EQ(info.si_pid, 0) << "the bystander was killed by signal " << info.si_status;
  const std::optional<ProcStat> after = ReadProcStat(pid);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->start_ticks, before->start_ticks);
  EXPECT_NE(after->state, 'Z');
  // The server is reported exited with an unknown status, not killed.
  const AgentEvent* exit =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(exit->exited().status_unknown());
  EXPECT_EQ(h.agent().Status().servers(0).state(), "FAILED");
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

TEST_F(AgentTest, AGrandchildLeftInTheServersGroupIsKilledAndReapedWhenTheServerExits) {
  AgentHarness h;
  fleet::v1::ServerSpec spec = h.ChildSpec(0, {});
  spec.clear_argv();
  // The grandchild stays in the server's group; the server exits at once.
  spec.add_argv("/bin/sh");
  spec.add_argv("-c");
  spec.add_argv("sleep 1000 & echo grandchild $!; exit 3");
  auto launched = h.Launch(spec, "a");
  ASSERT_TRUE(launched.ok()) << launched.status();
  const pid_t pid = launched->status().pid();
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "FAILED"); }));
  int grandchild = 0;
  ASSERT_EQ(
      std::sscanf(fleet::testing::ReadFile(spec.log_path()).c_str(), "grandchild %d", &grandchild),
      1);
  const AgentEvent* exit =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_exited(); });
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(exit->exited().exited());
  EXPECT_EQ(exit->exited().exit_code(), 3);
  // Killed with the group and reaped (not even a zombie left), the leader too.
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return !ReadProcStat(grandchild).has_value() && !ReadProcStat(pid).has_value();
  })) << "grandchild "
      << grandchild << " or leader " << pid << " still exists";
}

TEST_F(AgentTest, AProcessThatLeftTheServersGroupIsNotItsProgress) {
  // The group is the server's unit: a process that moved to a group of its own is out of the
  // agent's reach (a stop does not signal it), so its CPU time is not the server's progress.
  fleet::testing::FakeClock clock;
  AgentHarness h(&clock);
  auto spec = h.ChildSpec(0, {"escaper"});
  spec.mutable_stall_timeout()->set_seconds(20);
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([&](auto&) {
    return absl::StrContains(fleet::testing::ReadFile(spec.log_path()), "escaper");
  }));
  int escaper = 0;
  ASSERT_EQ(std::sscanf(fleet::testing::ReadFile(spec.log_path()).c_str(), "escaper %d", &escaper),
            1);
  h.agent().RunOnce(absl::ZeroDuration());
  // Before each 5 s step the escaped process really gains CPU time.
  Advance(h, clock, absl::Seconds(30), absl::Seconds(5), [&] {
    const std::optional<ProcStat> start = ReadProcStat(escaper);
    ASSERT_TRUE(start.has_value());
    while (true) {
      const std::optional<ProcStat> now = ReadProcStat(escaper);
      if (!now || now->utime + now->stime > start->utime + start->stime) break;
    }
  });
  const AgentEvent* stalled =
      AgentHarness::Find(h.events(), [](const AgentEvent& e) { return e.has_stalled(); });
  EXPECT_NE(stalled, nullptr);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
  // Still there: the stop did not reach it. This test started it; it ends it.
  const std::optional<ProcStat> left = ReadProcStat(escaper);
  ASSERT_TRUE(left.has_value());
  EXPECT_NE(left->pgrp, left->session);
  kill(escaper, SIGKILL);
  waitpid(escaper, nullptr, 0);
}

// A real full disk: a 1 MiB tmpfs mounted for one test (root only), unmounted after it.
class SmallDisk {
 public:
  explicit SmallDisk(std::string path) : path_(std::move(path)) {
    mkdir(path_.c_str(), 0700);
    if (geteuid() != 0) {
      why_ = "a full disk is a tmpfs of 1 MiB, and mounting one needs root";
      return;
    }
    if (mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0700") != 0) {
      why_ = absl::StrCat("cannot mount a tmpfs at ", path_, ": ", strerror(errno));
      return;
    }
    mounted_ = true;
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }

  // Writes a filler file until the disk is full.
  void Fill() {
    std::string block(4096, 'x');
    const int fd =
        open((path_ + "/filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    while (write(fd, block.data(), block.size()) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
    close(fd);
  }
  void Free() { ASSERT_EQ(unlink((path_ + "/filler").c_str()), 0); }

 private:
  std::string path_;
  std::string why_;
  bool mounted_ = false;
};

// No launch without its record: with agent.db's disk full the launch cannot be written ahead of
// its spawn, so it is refused (UNAVAILABLE: fleetd keeps the attempt pending and sends it again)
// and nothing is started; once the disk has room, the repeat starts it.
TEST_F(AgentTest, ALaunchThatCannotBeWrittenAheadIsRefusedAndStartsNothing) {
  fleet::testing::TempDir dir;
  SmallDisk disk(dir.Join("disk"));
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  AgentHarness h(nullptr, nullptr, disk.path() + "/state");
  SnapshotAfterSpawn launcher(h.options().state_dir, dir.Join("unused"));
  h.UseLauncher(&launcher);
  h.Recreate();
  const auto spec = h.ChildSpec(0, {"quiet"});
  disk.Fill();
  auto refused = h.Launch(spec, "a");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("cannot be recorded"));
  EXPECT_EQ(launcher.launches, 0);
  EXPECT_EQ(h.agent().Status().servers_size(), 0);
  disk.Free();
  auto started = h.Launch(spec, "a");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(launcher.launches, 1);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, EventsAreKeptInMemoryWhileTheDiskIsFullAndStoredUnderTheirNumbersOnceItIsNot) {
  fleet::testing::TempDir dir;
  SmallDisk disk(dir.Join("disk"));
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  FakeProber prober;
  AgentHarness h(nullptr, &prober, disk.path() + "/state");
  h.options().store_retry_interval = absl::Milliseconds(10);
  h.Recreate();
  const auto spec = h.ChildSpec(0, {"lines", "1"});  // its log is on another disk
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STARTING"); }));
  disk.Fill();
  prober.ready = true;
  // The transition is not lost: served from memory, with the numbers that follow on.
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "READY"); }));
  const std::vector<AgentEvent> seen = h.events();
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].sequence(), i + 1);
  const AgentEvent* ready =
      AgentHarness::Find(seen, [](const AgentEvent& e) { return e.has_ready(); });
  ASSERT_NE(ready, nullptr);
  const uint64_t ready_sequence = ready->sequence();
  fleet::v1::StatusResponse status = h.agent().Status();
  EXPECT_TRUE(status.degraded());
  EXPECT_THAT(status.degraded_reason(), HasSubstr("agent.db"));
  EXPECT_GE(status.events_unstored(), 2u);  // the ready event and the READY phase at least
  EXPECT_EQ(status.events_dropped(), 0u);
  EXPECT_EQ(status.sequence(), h.agent().last_sequence());
  EXPECT_EQ(status.servers(0).state(), "READY");

  disk.Free();
  ASSERT_TRUE(h.RunUntil([&](auto&) { return !h.agent().Status().degraded(); }));
  EXPECT_EQ(h.agent().Status().events_unstored(), 0u);
  // Stored: an agent restarted on the record replays the READY event under the same number.
  const std::string incarnation = h.agent().incarnation();
  h.Recreate();
  std::vector<AgentEvent> replay = h.agent().EventsAfter(incarnation, ready_sequence - 1, 1);
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_TRUE(replay[0].has_ready());
  EXPECT_EQ(replay[0].sequence(), ready_sequence);
  h.Stop(0);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, EventsBeyondTheMemoryBoundLeaveAGapThatAStreamIsResynchronisedOver) {
  fleet::testing::TempDir dir;
  SmallDisk disk(dir.Join("disk"));
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  AgentHarness h(nullptr, nullptr, disk.path() + "/state");
  h.options().store_retry_interval = absl::Milliseconds(10);
  h.options().max_unstored_events = 2;
  h.Recreate();
  const auto spec = h.ChildSpec(0, {"lines", "1"});
  ASSERT_TRUE(h.Launch(spec, "a").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STARTING"); }));
  const std::string incarnation = h.agent().incarnation();
  const uint64_t position = h.agent().last_sequence();  // a reader stopped here
  disk.Fill();
  h.Stop(0);  // STOPPING, exited, STOPPED: more than memory keeps
  ASSERT_TRUE(
      h.RunUntil([&](auto&) { return h.agent().Status().servers(0).state() == "STOPPED"; }));
  const fleet::v1::StatusResponse status = h.agent().Status();
  EXPECT_TRUE(status.degraded());
  EXPECT_GE(status.events_dropped(), 1u);
  EXPECT_EQ(status.events_unstored(), 2u);
  // The reader's next event was dropped: it is told to resynchronise, at the current sequence.
  std::vector<AgentEvent> next = h.agent().EventsAfter(incarnation, position, 100);
  ASSERT_EQ(next.size(), 1u);
  ASSERT_TRUE(next[0].has_resync());
  EXPECT_EQ(next[0].sequence(), h.agent().last_sequence());
  // The newest events are there, without a hole.
  next = h.agent().EventsAfter(incarnation, h.agent().last_sequence() - 2, 100);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[1].sequence(), h.agent().last_sequence());

  disk.Free();
  ASSERT_TRUE(h.RunUntil([&](auto&) { return !h.agent().Status().degraded(); }));
  // The gap stays a gap in the stored log, across a restart.
  const uint64_t last = h.agent().last_sequence();
  h.Recreate();
  EXPECT_EQ(h.agent().last_sequence(), last);
  next = h.agent().EventsAfter(incarnation, position, 100);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_TRUE(next[0].has_resync());
  next = h.agent().EventsAfter(incarnation, last - 1, 100);
  ASSERT_GE(next.size(), 1u);
  EXPECT_EQ(next[0].sequence(), last);
}

TEST_F(AgentTest, AStatusOfEightServersWithTheLongestEvidenceCrossesADefaultGrpcChannel) {
  AgentHarness h;
  // The worst log: a traceback of 400 frames of lines longer than the classifier keeps, ending
  // in a root cause that is just as long.
  const std::string pad(9000, 'x');
  std::string log = "Traceback (most recent call last):\n";
  for (int i = 0; i < 400; ++i) {
    absl::StrAppend(&log, "  File \"/venv/lib/python3.12/site-packages/m", i, ".py\", line ", i,
                    ", in f ", pad, "\n");
  }
  absl::StrAppend(&log,
                  "ImportError: libnvrtc.so.13: cannot open shared object file: No such file or "
                  "directory ",
                  pad, "\n");
  h.dir().WriteFile("worst.log", log);
  for (int gpu = 0; gpu < 8; ++gpu) {
    fleet::v1::ServerSpec spec = h.ChildSpec(gpu, {});
    spec.clear_argv();
    spec.add_argv("/bin/sh");
    spec.add_argv("-c");
    spec.add_argv("cat \"$0\"; exit 1");
    spec.add_argv(h.dir().Join("worst.log"));
    ASSERT_TRUE(h.Launch(spec, absl::StrCat("a", gpu)).ok());
  }
  ASSERT_TRUE(h.RunUntil([](auto& ev) {
    int failed = 0;
    for (const AgentEvent& e : ev) failed += e.has_phase() && e.phase().state() == "FAILED";
    return failed == 8;
  }));
  h.agent().Start();
  ServedAgent served(&h.agent());
  ASSERT_NE(served.port, 0);
  auto& stub = served.stub;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  fleet::v1::StatusResponse status;
  const grpc::Status s = stub->Status(&context, fleet::v1::StatusRequest(), &status);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_LE(status.ByteSizeLong(), 4u << 20);
  RecordProperty("status_bytes", static_cast<int>(status.ByteSizeLong()));
  EXPECT_GT(status.evidence_lines_omitted(), 0u);
  ASSERT_EQ(status.servers_size(), 8);
  for (const fleet::v1::ServerStatus& st : status.servers()) {
    const fleet::v1::Diagnosis& d = st.diagnosis();
    EXPECT_EQ(d.diagnosis_class(), "missing_shared_library");
    // The root-cause line is still there, and a marker says lines were left out.
    bool root_cause = false, elided = false;
    for (const auto& line : d.evidence()) {
      root_cause |=
          line.line() == d.root_cause_line() && absl::StartsWith(line.text(), "ImportError");
      elided |= line.line() == 0 && absl::StrContains(line.text(), "left out of this message");
    }
    EXPECT_TRUE(root_cause);
    EXPECT_TRUE(elided);
  }
  // Every event, the final diagnoses with their fuller evidence included, crosses it too.
  grpc::ClientContext events_context;
  events_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  fleet::v1::EventsRequest request;
  request.set_incarnation(h.agent().incarnation());
  auto reader = stub->Events(&events_context, request);
  AgentEvent e;
  uint64_t read = 0;
  size_t largest = 0;
  while (read < h.agent().last_sequence() && reader->Read(&e)) {
    read = e.sequence();
    largest = std::max(largest, e.ByteSizeLong());
  }
  EXPECT_EQ(read, h.agent().last_sequence());
  EXPECT_GT(largest, 1u << 20);  // the events carry more evidence than a snapshot's share
  RecordProperty("largest_event_bytes", static_cast<int>(largest));
  events_context.TryCancel();
  reader->Finish().IgnoreError();
}

TEST_F(AgentTest, ProbeAndApplyChangeAndReadTheSimulatedWorld) {
  fleet::testing::TempDir world;
  auto made = fleet::testing::Run(
      {"bash", fleet::testing::SourcePath("tests/sim/make_sim_world.sh"), world.Join("w"),
       "--state", "seed", "--server", fleet::testing::BuildPath("tests/sim/sglang-server-sim")},
      {.output_path = world.Join("make.out")});
  ASSERT_TRUE(made.ok() && made->exit_code == 0)
      << fleet::testing::ReadFile(world.Join("make.out"));
  AgentHarness h;
  fleet::v1::ServerSpec spec;
  spec.mutable_server()->set_gpu(0);
  spec.add_argv(world.Join("w/venv/bin/python"));
  const std::string env_text = fleet::testing::ReadFile(world.Join("w/server.env"));
  for (const std::string_view line : fleet::testing::SplitLines(env_text)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    (*spec.mutable_env())[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  spec.mutable_tools()->add_pip("/bin/bash");
  spec.mutable_tools()->add_pip(world.Join("w/venv/bin/pip"));
  spec.mutable_tools()->add_nvidia_smi(world.Join("w/bin/nvidia-smi"));
  spec.mutable_tools()->set_venv(world.Join("w/venv"));

  const fleet::v1::ToolchainSnapshot before = h.agent().Probe(spec);
  EXPECT_TRUE(before.nvcc().path().empty());  // the seed: no compiler
  EXPECT_EQ(before.gpus_size(), 8);

  fleet::v1::ApplyRequest apply;
  *apply.mutable_spec() = spec;
  apply.set_save_package_set(true);
  auto* pip = apply.add_actions()->mutable_pip_install()->add_requirements();
  pip->set_name("nvidia-cuda-nvcc");
  pip->set_version("13.2.78");
  const fleet::v1::ApplyResponse response = h.agent().Apply(apply);
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_TRUE(response.results(0).ok()) << response.results(0).message();
  // The package set before the change was saved for a rollback, without the new package.
  EXPECT_GT(response.saved_package_set_size(), 0);
  for (const auto& p : response.saved_package_set()) EXPECT_NE(p.name(), "nvidia-cuda-nvcc");
  bool installed = false;
  for (const auto& p : response.after().pip_packages()) {
    installed |= p.name() == "nvidia-cuda-nvcc" && p.version() == "13.2.78";
  }
  EXPECT_TRUE(installed);

  // An injection attempt runs nothing and says why.
  fleet::v1::ApplyRequest bad;
  *bad.mutable_spec() = spec;
  auto* evil = bad.add_actions()->mutable_pip_install()->add_requirements();
  evil->set_name("torch; rm -rf /");
  evil->set_version("2.0");
  const fleet::v1::ApplyResponse refused = h.agent().Apply(bad);
  ASSERT_EQ(refused.results_size(), 1);
  EXPECT_FALSE(refused.results(0).ok());
  EXPECT_THAT(refused.results(0).message(), HasSubstr("rejected"));
}

// Launches the simulated SGLang server in a fixed world under an agent that probes readiness
// with `prober`, and expects it to go through its phases to READY, then stops it.
void ExpectTheSimulatedServerGetsReady(ReadinessProber* prober) {
  fleet::testing::TempDir world;
  auto made = fleet::testing::Run(
      {"bash", fleet::testing::SourcePath("tests/sim/make_sim_world.sh"), world.Join("w"),
       "--state", "fixed", "--server", fleet::testing::BuildPath("tests/sim/sglang-server-sim")},
      {.output_path = world.Join("make.out")});
  ASSERT_TRUE(made.ok() && made->exit_code == 0)
      << fleet::testing::ReadFile(world.Join("make.out"));
  AgentHarness h(nullptr, prober);
  fleet::v1::ServerSpec spec;
  spec.mutable_server()->set_gpu(3);
  // A free port: bound with port 0 by the simulator's helper, then released.
  auto ports = fleet::testing::Run({fleet::testing::BuildPath("tests/sim/sim-free-ports"), "1"},
                                   {.output_path = world.Join("port")});
  ASSERT_TRUE(ports.ok());
  const int port = std::atoi(fleet::testing::ReadFile(world.Join("port")).c_str());
  ASSERT_GT(port, 0);
  // As a user starts it: the world's python, SGLang's module and flags.
  for (const std::string& a :
       {world.Join("w/venv/bin/python"), std::string("-m"), std::string("sglang.launch_server"),
        std::string("--model-path"), world.Join("w/models/tiny"), std::string("--host"),
        std::string("127.0.0.1"), std::string("--port"), absl::StrCat(port)}) {
    spec.add_argv(a);
  }
  spec.set_port(port);
  const std::string env_text = fleet::testing::ReadFile(world.Join("w/server.env"));
  for (const std::string_view line : fleet::testing::SplitLines(env_text)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    (*spec.mutable_env())[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  (*spec.mutable_env())["FLEET_SIM_SPEED"] = "100";
  spec.set_log_path(world.Join("w/logs/sglang_gpu3.log"));
  spec.mutable_readiness()->set_path("/health_generate");
  ASSERT_TRUE(h.Launch(spec, "sim-1").ok());
  ASSERT_TRUE(h.RunUntil([](auto& ev) {
    return AgentHarness::HasPhase(ev, "READY") || AgentHarness::HasPhase(ev, "FAILED");
  }));
  const auto& events = h.events();
  EXPECT_TRUE(AgentHarness::HasPhase(events, "READY"));
  EXPECT_TRUE(AgentHarness::HasPhase(events, "LOADING"));
  EXPECT_TRUE(AgentHarness::HasPhase(events, "JIT_COMPILING"));
  EXPECT_TRUE(AgentHarness::HasPhase(events, "CAPTURING_GRAPHS"));
  EXPECT_NE(AgentHarness::Find(events, [](auto& e) { return e.has_progress(); }), nullptr);
  // The weight shards count while the weights load (tqdm's bar, redrawn with "\r"); every phase
  // starts from no steps, so the build's first n/m comes after a JIT phase of its own.
  std::string phase;
  int64_t shards_seen = 0;
  for (const AgentEvent& e : events) {
    if (e.has_phase()) phase = e.phase().state();
    if (!e.has_progress()) continue;
    if (e.progress().total() == fleet::sim::kWeightShards) {
      EXPECT_EQ(phase, "LOADING");
      shards_seen = std::max(shards_seen, e.progress().step());
    } else {
      EXPECT_EQ(phase, "JIT_COMPILING");
    }
  }
  EXPECT_EQ(shards_seen, fleet::sim::kWeightShards);
  // The simulated world runs the server with CUDA_VISIBLE_DEVICES=3.
  EXPECT_THAT(fleet::testing::ReadFile(spec.log_path()), HasSubstr("TP0"));
  h.Stop(3);
  ASSERT_TRUE(h.RunUntil([](auto& ev) { return AgentHarness::HasPhase(ev, "STOPPED"); }));
}

TEST_F(AgentTest, TheSimulatedServerGoesFromStartingToReadyOverRealHttp) {
  HttpReadinessProber http;
  ExpectTheSimulatedServerGetsReady(&http);
}

// As fleet-agent probes: the fleet-http-probe helper, run for each check.
TEST_F(AgentTest, TheSimulatedServerGetsReadyThroughTheHttpProbeHelper) {
  PosixCommandRunner runner;
  ProcessReadinessProber prober(fleet::testing::BuildPath("agent/fleet-http-probe"), &runner);
  ExpectTheSimulatedServerGetsReady(&prober);
}

// A loopback HTTP/1.0-style server for readiness checks: port 0, one request per connection,
// answers from a table of paths, records "METHOD PATH BODY" of every request. Stopped (and its
// thread joined) on destruction.
class TinyHttpServer {
 public:
  struct Answer {
    int status;
    std::string body;
  };

  explicit TinyHttpServer(std::map<std::string, Answer> answers)
      : answers_(std::move(answers)), server_([this](int conn) { return Reply(conn); }) {}

  int port() const { return server_.port(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  bool Reply(int conn) {
    const std::string in = fleet::testing::ReadHttpRequest(conn);
    const size_t header_end = in.find("\r\n\r\n");
    if (header_end == std::string::npos) return true;
    const size_t sp1 = in.find(' ');
    const size_t sp2 = in.find(' ', sp1 + 1);
    const std::string method = in.substr(0, sp1);
    const std::string path = in.substr(sp1 + 1, sp2 - sp1 - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(absl::StrCat(method, " ", path, " ", in.substr(header_end + 4)));
    }
    auto it = answers_.find(path);
    const Answer answer = it != answers_.end() ? it->second : Answer{404, ""};
    fleet::testing::WriteAll(
        conn, absl::StrCat("HTTP/1.1 ", answer.status, " X\r\nContent-Type: application/json\r\n",
                           "Content-Length: ", answer.body.size(), "\r\nConnection: close\r\n\r\n",
                           answer.body));
    return true;
  }

  const std::map<std::string, Answer> answers_;
  std::mutex mu_;
  std::vector<std::string> requests_;
  fleet::testing::LoopbackServer server_;  // last: stopped first
};

class ProcessReadinessProberTest : public ::testing::Test {
 protected:
  ReadinessResult Check(int port, const std::string& path, bool completion_check = false) {
    ProcessReadinessProber prober(fleet::testing::BuildPath("agent/fleet-http-probe"), &runner_);
    ReadinessCheck check;
    check.port = port;
    check.path = path;
    check.completion_check = completion_check;
    return prober.Check(check);
  }

  PosixCommandRunner runner_;
};

TEST_F(ProcessReadinessProberTest, ReadyWhenTheHealthEndpointAnswers200) {
  TinyHttpServer server({{"/health_generate", {200, "{}"}}});
  const ReadinessResult r = Check(server.port(), "/health_generate");
  EXPECT_TRUE(r.ready) << r.detail;
  EXPECT_EQ(r.http_status, 200);
  EXPECT_THAT(server.requests(), ::testing::ElementsAre("GET /health_generate "));
}

TEST_F(ProcessReadinessProberTest, NotReadyWithTheStatusAndTheReasonOfAnotherAnswer) {
  TinyHttpServer server({{"/health_generate", {503, "loading"}}});
  const ReadinessResult r = Check(server.port(), "/health_generate");
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.detail, "GET /health_generate: HTTP 503");
}

TEST_F(ProcessReadinessProberTest, NotReadyWithStatusZeroWhenNothingListens) {
  // Bound but not listening: connections are refused, and no other process can take the port.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const ReadinessResult r = Check(ntohs(addr.sin_port), "/health");
  close(fd);
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.http_status, 0);
  EXPECT_THAT(r.detail, HasSubstr("GET /health: "));
}

TEST_F(ProcessReadinessProberTest, TheCompletionCheckAsksForTheModelTheServerNames) {
  TinyHttpServer server({{"/health", {200, ""}},
                         {"/v1/models", {200, R"({"object":"list","data":[{"id":"tiny-7b"}]})"}},
                         {"/v1/completions", {200, R"({"choices":[{"text":"!"}]})"}}});
  const ReadinessResult r = Check(server.port(), "/health", /*completion_check=*/true);
  EXPECT_TRUE(r.ready) << r.detail;
  EXPECT_EQ(r.http_status, 200);
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0], "GET /health ");
  EXPECT_EQ(requests[1], "GET /v1/models ");
  EXPECT_THAT(requests[2], HasSubstr("POST /v1/completions "));
  EXPECT_THAT(requests[2], HasSubstr(R"("model":"tiny-7b")"));
  EXPECT_THAT(requests[2], HasSubstr(R"("max_tokens":1)"));
}

TEST_F(ProcessReadinessProberTest, AFailedCompletionIsNotReady) {
  TinyHttpServer server({{"/health", {200, ""}}, {"/v1/completions", {500, "oops"}}});
  const ReadinessResult r = Check(server.port(), "/health", /*completion_check=*/true);
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.http_status, 500);
  EXPECT_EQ(r.detail, "POST /v1/completions: HTTP 500");
}

TEST_F(ProcessReadinessProberTest, AMissingHelperIsNotReadyAndNamed) {
  ProcessReadinessProber prober("/nonexistent/fleet-http-probe", &runner_);
  ReadinessCheck check;
  check.port = 1;
  const ReadinessResult r = prober.Check(check);
  EXPECT_FALSE(r.ready);
  EXPECT_THAT(r.detail, HasSubstr("/nonexistent/fleet-http-probe"));
}

TEST_F(ProcessReadinessProberTest, AHelperUsageErrorIsNotReadyWithItsMessage) {
  const ReadinessResult r = Check(/*port=*/0, "/health");
  EXPECT_FALSE(r.ready);
  EXPECT_THAT(r.detail, HasSubstr("exit 2"));
  EXPECT_THAT(r.detail, HasSubstr("--port must be 1..65535"));
}

TEST_F(ProcessReadinessProberTest, AHelperAnsweringSomethingElseIsNotReady) {
  // /bin/echo exits 0 and prints its arguments: not a readiness line.
  ProcessReadinessProber prober("/bin/echo", &runner_);
  ReadinessCheck check;
  check.port = 1;
  const ReadinessResult r = prober.Check(check);
  EXPECT_FALSE(r.ready);
  EXPECT_THAT(r.detail, HasSubstr("unexpected output '--host 127.0.0.1 --port 1"));
}

TEST(ReadinessLine, ParsesTheHelpersLines) {
  absl::StatusOr<ReadinessResult> ready = ParseReadinessLine("ready 200\n");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(ready->ready);
  EXPECT_EQ(ready->http_status, 200);
  EXPECT_EQ(ready->detail, "");

  absl::StatusOr<ReadinessResult> refused =
      ParseReadinessLine("not-ready 0 GET /health: Couldn't connect to server\n");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->ready);
  EXPECT_EQ(refused->http_status, 0);
  EXPECT_EQ(refused->detail, "GET /health: Couldn't connect to server");

  for (const char* bad : {"", "ready", "ready two", "maybe 200", "not-ready -1 x", "READY 200"}) {
    EXPECT_FALSE(ParseReadinessLine(bad).ok()) << bad;
  }
}

TEST(StateOfPhase, EachClassifierPhaseIsTheStateOfTheSameSpelling) {
  for (diagnosis::Phase p :
       {diagnosis::Phase::kStarting, diagnosis::Phase::kLoading, diagnosis::Phase::kJitCompiling,
        diagnosis::Phase::kCapturingGraphs, diagnosis::Phase::kReady}) {
    EXPECT_EQ(StateName(StateOfPhase(p)), diagnosis::PhaseName(p));
  }
}

}  // namespace
}  // namespace fleet::agent
