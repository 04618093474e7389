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

// A sink that records what it is given and how often the stream ended.
class RecordingSink final : public EventSink {
 public:
  void OnEvent(const std::string&, fleet::v1::AgentEvent event) override {
    absl::MutexLock lock(&mu_);
    sequences_.push_back(event.sequence());
  }
  void OnEvents(const std::string& container, std::vector<fleet::v1::AgentEvent> events) override {
    {
      absl::MutexLock lock(&mu_);
      ++batches_;
    }
    EventSink::OnEvents(container, std::move(events));
  }
  void OnStreamEnded(const std::string&, absl::Status status) override {
    absl::MutexLock lock(&mu_);
    ends_.push_back(std::move(status));
    ended_.Notify();
  }
  absl::Notification ended_;
  absl::Mutex mu_;
  std::vector<uint64_t> sequences_ ABSL_GUARDED_BY(mu_);
  int batches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Status> ends_ ABSL_GUARDED_BY(mu_);
};

fleet::v1::AgentEvent Numbered(const fleet::v1::EventsRequest& request, uint64_t n) {
  fleet::v1::AgentEvent event;
  event.set_incarnation(request.incarnation());
  event.set_sequence(request.after_sequence() + n);
  return event;
}

// An agent of today: EventBatches, two messages of three events, then the end.
class BatchingAgent final : public fleet::v1::Agent::Service {
 public:
  grpc::Status EventBatches(grpc::ServerContext*, const fleet::v1::EventsRequest* request,
                            grpc::ServerWriter<fleet::v1::EventBatch>* writer) override {
    for (uint64_t first : {1, 4}) {
      fleet::v1::EventBatch batch;
      for (uint64_t n = first; n < first + 3; ++n) *batch.add_events() = Numbered(*request, n);
      writer->Write(batch);
    }
    return grpc::Status::OK;
  }
};

// An agent of before EventBatches: Events only (EventBatches is UNIMPLEMENTED there).
class EventsOnlyAgent final : public fleet::v1::Agent::Service {
 public:
  grpc::Status Events(grpc::ServerContext*, const fleet::v1::EventsRequest* request,
                      grpc::ServerWriter<fleet::v1::AgentEvent>* writer) override {
    for (uint64_t n = 1; n <= 4; ++n) writer->Write(Numbered(*request, n));
    return grpc::Status::OK;
  }
};

// Follows `service`'s stream from sequence 10 to its end; the sink as it was then.
void FollowToTheEnd(grpc::Service* service, RecordingSink* sink) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  {
    GrpcAgentClient client("local/200", absl::StrCat("127.0.0.1:", port));
    client.Follow("inc", 10, sink);
    ASSERT_TRUE(sink->ended_.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
  server->Shutdown();
}

TEST(GrpcAgentClient, FollowsEventBatchesAndHandsOnEachBatchInOrder) {
  BatchingAgent service;
  RecordingSink sink;
  FollowToTheEnd(&service, &sink);
  absl::MutexLock lock(&sink.mu_);
  EXPECT_EQ(sink.sequences_, (std::vector<uint64_t>{11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(sink.batches_, 2);
  ASSERT_EQ(sink.ends_.size(), 1u);
  EXPECT_TRUE(absl::IsUnavailable(sink.ends_[0])) << sink.ends_[0];  // the agent ended it
}

// An older agent (Events only) is followed with Events: its UNIMPLEMENTED is not an end the
// daemon sees (no "agent unreachable", no backoff).
TEST(GrpcAgentClient, AnAgentWithoutEventBatchesIsFollowedWithEvents) {
  EventsOnlyAgent service;
  RecordingSink sink;
  FollowToTheEnd(&service, &sink);
  absl::MutexLock lock(&sink.mu_);
  EXPECT_EQ(sink.sequences_, (std::vector<uint64_t>{11, 12, 13, 14}));
  EXPECT_EQ(sink.batches_, 0);
  ASSERT_EQ(sink.ends_.size(), 1u);
  EXPECT_TRUE(absl::IsUnavailable(sink.ends_[0])) << sink.ends_[0];
}

}  // namespace
}  // namespace fleet::daemon
