// AgentService: agent.proto's Agent service over the Agent, with gRPC's callback API: thin unary
// handlers, one reactor per stream (Events, Logs). Probe and Apply run tools for seconds to
// minutes, so they run on a worker thread and finish their reactor from there. The only place
// absl::Status becomes grpc::Status.
//
// Thread-safe (gRPC calls it from its own threads). Must be destroyed after the gRPC server that
// uses it has shut down.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "agent/agent.h"
#include "grpcpp/server_builder.h"
#include "proto/agent.grpc.pb.h"

namespace fleet::agent {

class AgentService final : public fleet::v1::Agent::CallbackService {
 public:
  explicit AgentService(Agent* agent);
  ~AgentService() override;

  grpc::ServerUnaryReactor* Launch(grpc::CallbackServerContext* context,
                                   const fleet::v1::LaunchRequest* request,
                                   fleet::v1::LaunchResponse* response) override;
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* context,
                                 const fleet::v1::StopRequest* request,
                                 fleet::v1::StopResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const fleet::v1::StatusRequest* request,
                                   fleet::v1::StatusResponse* response) override;
  grpc::ServerWriteReactor<fleet::v1::AgentEvent>* Events(
      grpc::CallbackServerContext* context, const fleet::v1::EventsRequest* request) override;
  grpc::ServerWriteReactor<fleet::v1::EventBatch>* EventBatches(
      grpc::CallbackServerContext* context, const fleet::v1::EventsRequest* request) override;
  grpc::ServerWriteReactor<fleet::v1::LogChunk>* Logs(
      grpc::CallbackServerContext* context, const fleet::v1::LogsRequest* request) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* context,
                                  const fleet::v1::ProbeRequest* request,
                                  fleet::v1::ProbeResponse* response) override;
  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* context,
                                  const fleet::v1::ApplyRequest* request,
                                  fleet::v1::ApplyResponse* response) override;

 private:
  void Enqueue(std::function<void()> job);
  void WorkLoop();

  Agent* const agent_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

// Sets the agent server's message limits (common/base/rpc_limits.h) on `builder`.
void SetMessageLimits(grpc::ServerBuilder* builder);

}  // namespace fleet::agent
