// AgentClient: the daemon's handle on one container's agent: the unary calls of agent.proto, each
// with a deadline, and the event stream followed from a cursor. Events are handed to an
// EventSink as they arrive, in order; when the stream ends (agent gone, network) the sink hears
// it once, and the daemon follows again, after a backoff, from its stored cursor.
//
// GrpcAgentClient is the real one (callback API: no thread per stream). Tests and the scale
// benchmark may provide others. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/agent.grpc.pb.h"

namespace fleet::daemon {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnEvent(const std::string& container, fleet::v1::AgentEvent event) = 0;
  // The stream ended (after every event it carried); `status` says why.
  virtual void OnStreamEnded(const std::string& container, absl::Status status) = 0;
};

class AgentClient {
 public:
  virtual ~AgentClient() = default;
  virtual absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) = 0;
  virtual absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) = 0;
  virtual absl::StatusOr<fleet::v1::StatusResponse> Status() = 0;
  virtual absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) = 0;
  virtual absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) = 0;
  // Streams a server's log: `on_chunk` for each piece until the agent ends it or `on_chunk`
  // returns false. Blocks.
  virtual absl::Status Logs(const fleet::v1::LogsRequest& r,
                            const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk) = 0;
  // Starts following the event stream after (incarnation, sequence). One stream at a time.
  virtual void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) = 0;
  // Cancels the stream (OnStreamEnded follows).
  virtual void CancelFollow() = 0;
};

class GrpcAgentClient : public AgentClient {
 public:
  // `target` is a gRPC target: "unix:/path/agent.sock" or "127.0.0.1:50151". `container` is the
  // "host/ctid" the events are reported under.
  GrpcAgentClient(std::string container, const std::string& target);
  ~GrpcAgentClient() override;

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override;
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override;
  absl::StatusOr<fleet::v1::StatusResponse> Status() override;
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) override;
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override;
  absl::Status Logs(const fleet::v1::LogsRequest& r,
                    const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk) override;
  void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) override;
  void CancelFollow() override;

 private:
  class Stream;

  const std::string container_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fleet::v1::Agent::Stub> stub_;
  absl::Mutex mu_;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // owned by itself; deletes itself when done
  absl::CondVar stream_done_;
};

// A gRPC status as an absl::Status naming the container and the call.
absl::Status FromGrpc(const grpc::Status& s, const std::string& container, const char* call);

}  // namespace fleet::daemon
