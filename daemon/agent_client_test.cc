// GrpcAgentClient over a real loopback gRPC channel against a scripted agent: the channel's
// message limits are the deliberate ones of common/base/rpc_limits.h, not gRPC's 4 MiB default
// (a Status from an agent with many failed servers must not cut a container off).
#include "daemon/agent_client.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/rpc_limits.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"

namespace fleet::daemon {
namespace {

// An agent whose Status answers with `bytes` of evidence.
class BigStatusAgent final : public fleet::v1::Agent::Service {
 public:
  explicit BigStatusAgent(size_t bytes) : bytes_(bytes) {}
  grpc::Status Status(grpc::ServerContext*, const fleet::v1::StatusRequest*,
                      fleet::v1::StatusResponse* response) override {
    response->set_incarnation("inc");
    auto* d = response->add_servers()->mutable_diagnosis();
    d->set_diagnosis_class("missing_shared_library");
    const std::string line(8192, 'x');
    for (size_t made = 0; made < bytes_; made += line.size()) {
      auto* e = d->add_evidence();
      e->set_line(static_cast<int64_t>(made / line.size()) + 1);
      e->set_text(line);
    }
    return grpc::Status::OK;
  }

 private:
  const size_t bytes_;
};

class ScriptedAgent {
 public:
  explicit ScriptedAgent(size_t status_bytes) : service_(status_bytes) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxSendMessageSize(64 << 20);  // an agent that sends anything
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedAgent() { server_->Shutdown(); }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  int port() const { return port_; }

 private:
  BigStatusAgent service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(GrpcAgentClient, ReadsAStatusLargerThanGrpcsDefaultLimit) {
  ScriptedAgent agent(6 << 20);  // over the 4 MiB default, under the channel's limit
  ASSERT_NE(agent.port(), 0);
  GrpcAgentClient client("local/200", agent.target());
  absl::StatusOr<fleet::v1::StatusResponse> status = client.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_GT(status->ByteSizeLong(), 6u << 20);
}

TEST(GrpcAgentClient, RefusesAStatusOverItsDeliberateLimitNamingTheContainer) {
  ScriptedAgent agent(kAgentRpcMaxMessageBytes + (1 << 20));
  ASSERT_NE(agent.port(), 0);
  GrpcAgentClient client("local/200", agent.target());
  absl::StatusOr<fleet::v1::StatusResponse> status = client.Status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.status().message().find("container local/200"), absl::string_view::npos)
      << status.status();
}

// An agent whose first event stream ends at once (as when the agent goes away) and whose next
// ones carry one event after the position asked for, then end.
class EndingStreamAgent final : public fleet::v1::Agent::Service {
 public:
  grpc::Status Events(grpc::ServerContext*, const fleet::v1::EventsRequest* request,
                      grpc::ServerWriter<fleet::v1::AgentEvent>* writer) override {
    absl::MutexLock lock(&mu_);
    if (++streams_ == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "agent restarting");
    fleet::v1::AgentEvent event;
    event.set_incarnation(request->incarnation());
    event.set_sequence(request->after_sequence() + 1);
    writer->Write(event);
    return grpc::Status::OK;
  }
  int streams() {
    absl::MutexLock lock(&mu_);
    return streams_;
  }

 private:
  absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
};

// A sink that follows again as soon as it hears that the stream ended (once), as the daemon's
// loop does when it ingests that end first: the reconnect can land before the ended stream's
// callback has returned.
class FollowAgainSink final : public EventSink {
 public:
  void set_client(AgentClient* client) { client_ = client; }
  void OnEvent(const std::string&, fleet::v1::AgentEvent event) override {
    absl::MutexLock lock(&mu_);
    if (!got_event_.HasBeenNotified()) {
      event_ = std::move(event);
      got_event_.Notify();
    }
  }
  void OnStreamEnded(const std::string&, absl::Status) override {
    bool again = false;
    {
      absl::MutexLock lock(&mu_);
      again = ++ends_ == 1;
    }
    if (again) client_->Follow("inc", 41, this);
  }
  absl::Notification got_event_;
  absl::Mutex mu_;
  fleet::v1::AgentEvent event_ ABSL_GUARDED_BY(mu_);

 private:
  AgentClient* client_ = nullptr;
  int ends_ ABSL_GUARDED_BY(mu_) = 0;
};

// Finding 15 of docs/reliability.md: a link followed again while its ended stream was still
// finishing got no stream at all (Follow found the old one and did nothing), and its events
// stopped coming with no error.
TEST(GrpcAgentClient, AFollowRightAfterTheStreamEndedStartsTheNextStream) {
  EndingStreamAgent service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  FollowAgainSink sink;  // outlives the client: its streams call it until the client is gone
  {
    GrpcAgentClient client("local/200", absl::StrCat("127.0.0.1:", port));
    sink.set_client(&client);
    client.Follow("inc", 40, &sink);
    ASSERT_TRUE(sink.got_event_.WaitForNotificationWithTimeout(absl::Seconds(60)))
        << "no event after the stream was followed again (" << service.streams()
        << " stream(s) asked of the agent)";
    absl::MutexLock lock(&sink.mu_);
    EXPECT_EQ(sink.event_.sequence(), 42u);
  }
  EXPECT_EQ(service.streams(), 2);
  server->Shutdown();
}

}  // namespace
}  // namespace fleet::daemon
