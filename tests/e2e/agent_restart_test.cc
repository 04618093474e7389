// The real fleet-agent binary, killed with SIGKILL and started again on the same state dir: it
// re-adopts the server still running (same pid, same attempt, same incarnation), its event stream
// continues where a client left it with no gap and no repeat, and a server that died while the
// agent was down is reported with its log's diagnosis.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using fleet::sim::testing::BackgroundProcess;
using fleet::v1::AgentEvent;

constexpr std::string_view kAnnouncement = "serving agent.proto on port ";

class RunningAgent {
 public:
  RunningAgent(const testing::TempDir& dir, int incarnation_of_run) {
    const std::string log = dir.Join(absl::StrCat("agent-run", incarnation_of_run, ".log"));
    auto p = BackgroundProcess::Start(
        {testing::BuildPath("agent/fleet-agent"), "--listen", "127.0.0.1:0", "--insecure-listen",
         "--state-dir", dir.Join("state"), "--readiness-interval", "3600"},
        {{"PATH", "/usr/bin:/bin"}}, log);
    EXPECT_TRUE(p.ok()) << p.status();
    process_ = *std::move(p);
    // Wait for the whole announcement line, not just a prefix of it: the port is read from it.
    auto port_in = [](const std::string& s, int* port) {
      const size_t at = s.find(kAnnouncement);
      if (at == std::string::npos) return false;
      const size_t begin = at + kAnnouncement.size();
      const size_t end = s.find(',', begin);
      return end != std::string::npos && absl::SimpleAtoi(s.substr(begin, end - begin), port) &&
             *port > 0;
    };
    EXPECT_TRUE(process_
                    ->WaitForLog(
                        [&](const std::string& s) {
                          int found = 0;
                          return port_in(s, &found);
                        },
                        std::chrono::seconds(20))
                    .ok())
        << process_->Log();
    EXPECT_TRUE(port_in(process_->Log(), &port_)) << process_->Log();
    stub_ = v1::Agent::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }

  v1::Agent::Stub& stub() { return *stub_; }
  void Kill9() { ASSERT_TRUE(process_->Stop(SIGKILL, std::chrono::seconds(10)).ok()); }
  void Terminate() { process_->Stop(SIGTERM, std::chrono::seconds(10)).IgnoreError(); }

  v1::StatusResponse Status() {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatusResponse r;
    EXPECT_TRUE(stub_->Status(&c, v1::StatusRequest(), &r).ok());
    return r;
  }

  // Events after (incarnation, after) until `enough` holds (20 s at most).
  std::vector<AgentEvent> Read(const std::string& incarnation, uint64_t after,
                               const std::function<bool(const std::vector<AgentEvent>&)>& enough) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::EventsRequest request;
    request.set_incarnation(incarnation);
    request.set_after_sequence(after);
    auto reader = stub_->Events(&c, request);
    std::vector<AgentEvent> got;
    AgentEvent e;
    while (!enough(got) && reader->Read(&e)) got.push_back(e);
    c.TryCancel();
    return got;
  }

 private:
  std::unique_ptr<BackgroundProcess> process_;
  int port_ = 0;
  std::unique_ptr<v1::Agent::Stub> stub_;
};

v1::ServerSpec ChildSpec(const testing::TempDir& dir, int gpu, const std::string& mode) {
  v1::ServerSpec spec;
  spec.mutable_server()->set_gpu(gpu);
  spec.add_argv(testing::BuildPath("tests/testing/fleet-test-child"));
  spec.add_argv(mode);
  if (mode == "lines") spec.add_argv("2");
  (*spec.mutable_env())["PATH"] = "/usr/bin:/bin";
  spec.set_log_path(dir.Join(absl::StrCat("logs/gpu", gpu, ".log")));
  spec.set_port(1);
  return spec;
}

bool Launch(RunningAgent& agent, const v1::ServerSpec& spec, const std::string& attempt, int* pid) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::LaunchRequest request;
  request.set_attempt_id(attempt);
  request.set_attempt_number(1);
  *request.mutable_spec() = spec;
  v1::LaunchResponse response;
  const grpc::Status s = agent.stub().Launch(&c, request, &response);
  *pid = response.status().pid();
  return s.ok();
}

bool Alive(int pid) { return kill(pid, 0) == 0; }

TEST(AgentRestart, AfterKill9ItReadoptsLiveServersAndReportsTheDeadOnes) {
  // Servers orphaned by the killed agent become this test's children, as they would become the
  // restarted agent's on a real machine (the agent is a subreaper).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::TempDir dir;
  int live_pid = 0, doomed_pid = 0;
  std::string incarnation;
  uint64_t seen = 0;
  {
    RunningAgent first(dir, 1);
    ASSERT_TRUE(Launch(first, ChildSpec(dir, 0, "lines"), "live-1", &live_pid));
    ASSERT_TRUE(Launch(first, ChildSpec(dir, 1, "quiet"), "doomed-1", &doomed_pid));
    incarnation = first.Status().incarnation();
    // A client reads the first events, remembering where it is.
    auto events = first.Read(incarnation, 0, [](auto& got) { return got.size() >= 2; });
    ASSERT_EQ(events.size(), 2u);
    seen = events.back().sequence();
    first.Kill9();
  }
  ASSERT_TRUE(Alive(live_pid));
  // The second server dies while no agent is there.
  ASSERT_EQ(kill(doomed_pid, SIGTERM), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(doomed_pid), &info, WEXITED | WNOWAIT), 0);

  RunningAgent second(dir, 2);
  const v1::StatusResponse status = second.Status();
  EXPECT_EQ(status.incarnation(), incarnation);
  ASSERT_EQ(status.servers_size(), 2);
  EXPECT_EQ(status.servers(0).pid(), live_pid);
  EXPECT_EQ(status.servers(0).attempt_id(), "live-1");
  EXPECT_NE(status.servers(0).state(), "FAILED");
  EXPECT_EQ(status.servers(1).attempt_id(), "doomed-1");
  EXPECT_EQ(status.servers(1).state(), "FAILED");
  EXPECT_TRUE(status.servers(1).exit().status_unknown());
  EXPECT_TRUE(Alive(live_pid));  // re-adopted, not relaunched

  // The client resumes at its position: the next sequence, every event once, up to the report of
  // the dead server.
  auto rest = second.Read(incarnation, seen, [](auto& got) {
    for (const AgentEvent& e : got) {
      if (e.attempt_id() == "doomed-1" && e.has_phase() && e.phase().state() == "FAILED") {
        return true;
      }
    }
    return false;
  });
  ASSERT_FALSE(rest.empty());
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].incarnation(), incarnation);
    EXPECT_EQ(rest[i].sequence(), seen + 1 + i);
    EXPECT_FALSE(rest[i].has_resync());
  }

  // The re-adopted server is stopped through the new agent.
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StopRequest stop;
  stop.mutable_server()->set_gpu(0);
  v1::StopResponse stopped;
  ASSERT_TRUE(second.stub().Stop(&c, stop, &stopped).ok());
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(live_pid), &info, WEXITED | WNOWAIT), 0);
  second.Terminate();
  waitpid(live_pid, nullptr, WNOHANG);
  waitpid(doomed_pid, nullptr, WNOHANG);
}

}  // namespace
}  // namespace fleet
