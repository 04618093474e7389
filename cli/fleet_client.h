// FleetClient: fleetctl's connection to fleetd (proto/fleet.proto, service fleet.v1.Fleet) over
// its unix socket. It owns the channel and the stub, puts a deadline on every call, and is the one
// place where grpc::Status becomes absl::Status, with messages a person can act on:
//   Unavailable       "cannot reach fleetd at unix:PATH: ..." (no daemon, wrong socket, no access)
//   DeadlineExceeded  "fleetd at unix:PATH did not answer within 10s"
//   anything else     the daemon's own code and message ("unknown server pve1/200/gpu9")
//
// Deadlines: a unary call has `timeout`. A Watch must deliver its first message (the current
// table) within `timeout`, then stays open for as long as the caller wants. A Logs call without
// follow must deliver each chunk within `timeout` of the previous one; with follow it stays open
// (an empty log sends nothing for as long as nothing is written), and a stopped or unreachable
// daemon still ends it at once (the socket closes).
//
// Creating a client does no I/O: gRPC connects on the first call, and a call fails at once (no
// waiting for the daemon to appear) when nothing listens. Calls may be made from several threads;
// a stream's callback runs on the calling thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/fleet.grpc.pb.h"

namespace fleet::cli {

class FleetClient {
 public:
  FleetClient(const std::string& socket_path, absl::Duration timeout);

  // "unix:" + the socket path, as messages show it.
  const std::string& target() const { return target_; }

  absl::StatusOr<v1::DeployResponse> Deploy(const v1::DeployRequest& request);
  absl::StatusOr<v1::FleetStatusResponse> Status(const v1::FleetStatusRequest& request);
  // The same into the caller's message, which may live on an arena: a fleet's table is thousands
  // of rows, each a dozen strings, and an arena takes them in a few blocks.
  absl::Status Status(const v1::FleetStatusRequest& request, v1::FleetStatusResponse* response);
  absl::StatusOr<v1::ListAttemptsResponse> ListAttempts(const v1::ListAttemptsRequest& request);
  absl::StatusOr<v1::ExplainResponse> Explain(const v1::ExplainRequest& request);
  absl::StatusOr<v1::ServersResponse> Restart(const v1::ServersRequest& request);
  absl::StatusOr<v1::ServersResponse> Stop(const v1::ServersRequest& request);
  absl::StatusOr<v1::PlanResponse> Plan(const v1::PlanRequest& request);
  // Blocks until fleetd has run the plan (agent actions, a pip install): give the client a
  // timeout long enough for that (`fleetctl apply` uses at least 15 minutes).
  absl::StatusOr<v1::ApplyPlanResponse> ApplyPlan(const v1::ApplyPlanRequest& request);
  absl::StatusOr<v1::ListRemediationsResponse> ListRemediations(
      const v1::ListRemediationsRequest& request);
  // fleetd connects to the host over ssh: give the client a timeout longer than the host's
  // connect timeout (`fleetctl hosts trust` uses at least a minute).
  absl::StatusOr<v1::TrustHostResponse> TrustHost(const v1::TrustHostRequest& request);
  absl::StatusOr<v1::ListHostsResponse> ListHosts(const v1::ListHostsRequest& request);

  // Streams call `on_message` for each message, on this thread; when it returns false the call is
  // cancelled and the result is OK. The result is OK too when the daemon ends the stream cleanly.
  using WatchCallback = std::function<bool(const v1::FleetStatusResponse&)>;
  using LogsCallback = std::function<bool(const v1::LogChunk&)>;
  absl::Status Watch(const v1::FleetStatusRequest& request, const WatchCallback& on_message);
  absl::Status Logs(const v1::ServerLogsRequest& request, const LogsCallback& on_message);
  // The fleet's events (FleetEvents RPC): as Logs, the deadline only until the first message
  // when following.
  using EventsCallback = std::function<bool(const v1::FleetEventsResponse&)>;
  absl::Status FleetEvents(const v1::FleetEventsRequest& request, const EventsCallback& on_message);

 private:
  template <typename Request, typename Response>
  using StubMethod = grpc::Status (v1::Fleet::Stub::*)(grpc::ClientContext*, const Request&,
                                                       Response*);
  // A unary call with the deadline, its status translated.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(const char* method, StubMethod<Request, Response> fn,
                                const Request& request);
  template <typename Request, typename Response>
  absl::Status CallInto(const char* method, StubMethod<Request, Response> fn,
                        const Request& request, Response* response);

  absl::Time Deadline() const { return absl::Now() + timeout_; }
  // `method` names the call in messages; `timed_out` says our own watchdog cancelled it.
  absl::Status Translate(const grpc::Status& status, const char* method, bool timed_out) const;

  const std::string socket_path_;
  const std::string target_;
  const absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Fleet::Stub> stub_;
};

}  // namespace fleet::cli
