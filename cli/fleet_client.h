// FleetClient: fleetctl's connection to fleetd (proto/fleet.proto, service fleet.v1.Fleet) over
// its unix socket, or over TCP to `fleetd --listen` with mutual TLS (fleetctl --server). It owns
// the channels and stubs, puts a deadline on every call, and is the one place where grpc::Status
// becomes absl::Status, with messages a person can act on:
//   Unavailable       "cannot reach fleetd at unix:PATH: ..." (no daemon, wrong socket, no access)
//                     "cannot reach fleetd at 10.0.0.5:7443: ..." (over TCP: gRPC's reason, e.g.
//                     connection refused or the TLS handshake refused)
//   DeadlineExceeded  "fleetd at unix:PATH did not answer within 10s"
//   anything else     the daemon's own code and message ("unknown server pve1/200/gpu9")
//
// Several addresses (fleetd and its standbys): they are tried in order and the first that answers
// is used for every later call of this client. An address that refuses the connection or the TLS
// handshake is passed over at once; one that does not answer at all gets min(timeout, 5s). An
// address is passed over only when its connection was never up and the call failed Unavailable,
// so no request that a fleetd may have run is sent twice. Once chosen, an address is kept (its
// failures are the call's). When every address fails, the error names each with its reason.
//
// Leader finding: an answer FailedPrecondition carrying the trailing metadata
// `fleet-leader: ADDR` means "not the leader; the leader is at ADDR" (the request was refused, not
// run): the client moves to ADDR (added to its list when new) and sends the call again there, at
// most twice per call. A standby fleetd (issue 16) sends it for every write and stream. Over the
// unix socket it is not followed: the client has no TLS settings for TCP, and a plaintext
// connection to the leader would be a downgrade nobody asked for; the standby's message names the
// leader and its address.
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
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cli/command_context.h"
#include "grpcpp/security/credentials.h"
#include "proto/fleet.grpc.pb.h"

namespace fleet::cli {

// The trailing metadata key of a "not the leader" answer: the leader's address.
inline constexpr char kLeaderMetadataKey[] = "fleet-leader";

class FleetClient {
 public:
  // Over fleetd's unix socket.
  FleetClient(const std::string& socket_path, absl::Duration timeout);
  // Over TCP, to `servers.addresses` in order (host:port, [v6]:port), with mutual TLS from
  // `servers.tls` (its files are read at the first call: an unreadable one fails every call,
  // InvalidArgument), or plaintext when `servers.insecure`.
  FleetClient(const ServerOptions& servers, absl::Duration timeout);
  // What `ctx` says: its servers when it has any, else its socket.
  FleetClient(const CommandContext& ctx, absl::Duration timeout);

  // The address of fleetd as messages show it: "unix:" + the socket path, or the TCP address
  // chosen (before the first call: the first one given).
  std::string target() const;

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
  void Init();
  // One address of fleetd with its channel (made at first use).
  struct Endpoint {
    std::string address;  // as messages show it: "unix:PATH" or "HOST:PORT"
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Fleet::Stub> stub;
  };
  // What one attempt of a call on one address came to.
  struct Outcome {
    grpc::Status status;
    bool timed_out = false;  // our own watchdog cancelled it
    bool answered = false;   // a message arrived (a stream): never passed over
    std::string leader;      // a "not the leader" answer's leader address
  };
  using Attempt = std::function<Outcome(Endpoint&)>;

  template <typename Request, typename Response>
  using StubMethod = grpc::Status (v1::Fleet::Stub::*)(grpc::ClientContext*, const Request&,
                                                       Response*);
  // Runs `attempt` on the chosen address, or on each in order until one answers (see the top of
  // this file), following "not the leader" answers; the result translated.
  absl::Status Run(const char* method, const Attempt& attempt);
  // The channel of endpoints_[i], made now when it is not yet.
  absl::Status Open(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The index of `address` in endpoints_, added when new.
  size_t IndexOf(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A unary call with the deadline, its status translated.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(const char* method, StubMethod<Request, Response> fn,
                                const Request& request);
  template <typename Request, typename Response>
  absl::Status CallInto(const char* method, StubMethod<Request, Response> fn,
                        const Request& request, Response* response);

  absl::Time Deadline() const { return absl::Now() + timeout_; }
  // `method` names the call in messages; `timed_out` says our own watchdog cancelled it.
  absl::Status Translate(const Endpoint& endpoint, const grpc::Status& status, const char* method,
                         bool timed_out) const;

  // Constant after construction.
  const std::string socket_path_;  // empty: over TCP
  const ServerOptions servers_;
  const absl::Duration timeout_;

  mutable absl::Mutex mu_;
  // The addresses: the socket, or the servers in order (and leaders named since).
  std::vector<std::unique_ptr<Endpoint>> endpoints_ ABSL_GUARDED_BY(mu_);
  int chosen_ ABSL_GUARDED_BY(mu_) = -1;  // the address that answered; -1: none yet
  // Over TCP: made from the TLS files at the first call (or its error).
  std::shared_ptr<grpc::ChannelCredentials> credentials_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fleet::cli
