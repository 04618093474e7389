// FleetService: fleet.proto's Fleet service (what fleetctl calls) over the Daemon, with gRPC's
// callback API: thin unary handlers; one reactor per Watch stream (subscribed to status changes)
// and per Logs stream (a thread relaying the agent's stream, which it cancels as soon as its
// client goes away or fleetd stops). TrustHost and ListHosts work on the
// stored config's hosts (ssh_reach.h), with known_hosts defaulting to STATE_DIR/known_hosts.
// absl::Status becomes grpc::Status only here. Thread-safe; destroy after the gRPC server has
// shut down.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "daemon/daemon.h"
#include "proto/fleet.grpc.pb.h"

namespace fleet::daemon {

// Who leads the fleet, as this fleetd sees it (issue 16: fleetds sharing a PostgreSQL record).
struct LeaderView {
  bool self = true;     // this fleetd leads (or runs alone): it serves every verb
  std::string holder;   // else the leader, when one holds the lease now ("" when none does)
  std::string address;  // and its --listen address ("" when it has none)
  int64_t term = 0;     // the term this fleetd leads with (0: alone, or not leading)
};

// The trailing metadata key of a "not the leader" answer (fleetctl follows it: cli/fleet_client.h).
inline constexpr char kLeaderMetadataKey[] = "fleet-leader";

class FleetService final : public fleet::v1::Fleet::CallbackService {
 public:
  // `state_dir`: fleetd's --state-dir (the default place of known_hosts). `leader` (empty: this
  // fleetd always leads) is asked at each call. A standby answers the read verbs (Status,
  // ListAttempts, Explain, ListRemediations, ListHosts) from the record, read again when its copy
  // is older than a second (Daemon::Reload), and refuses the rest, which the leader serves
  // (writes, and the streams: Watch, Logs, FleetEvents), with FAILED_PRECONDITION and the
  // leader's address in the trailing metadata `fleet-leader`, or UNAVAILABLE while no fleetd
  // leads (a takeover in progress).
  explicit FleetService(Daemon* daemon, std::string state_dir = "/var/lib/gpu-fleet",
                        std::function<LeaderView()> leader = nullptr);
  ~FleetService() override;

  grpc::ServerUnaryReactor* Deploy(grpc::CallbackServerContext* c,
                                   const fleet::v1::DeployRequest* request,
                                   fleet::v1::DeployResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* c,
                                   const fleet::v1::FleetStatusRequest* request,
                                   fleet::v1::FleetStatusResponse* response) override;
  grpc::ServerWriteReactor<fleet::v1::FleetStatusResponse>* Watch(
      grpc::CallbackServerContext* c, const fleet::v1::FleetStatusRequest* request) override;
  grpc::ServerWriteReactor<fleet::v1::LogChunk>* Logs(
      grpc::CallbackServerContext* c, const fleet::v1::ServerLogsRequest* request) override;
  grpc::ServerUnaryReactor* ListAttempts(grpc::CallbackServerContext* c,
                                         const fleet::v1::ListAttemptsRequest* request,
                                         fleet::v1::ListAttemptsResponse* response) override;
  grpc::ServerUnaryReactor* Explain(grpc::CallbackServerContext* c,
                                    const fleet::v1::ExplainRequest* request,
                                    fleet::v1::ExplainResponse* response) override;
  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* c,
                                 const fleet::v1::PlanRequest* request,
                                 fleet::v1::PlanResponse* response) override;
  grpc::ServerUnaryReactor* ApplyPlan(grpc::CallbackServerContext* c,
                                      const fleet::v1::ApplyPlanRequest* request,
                                      fleet::v1::ApplyPlanResponse* response) override;
  grpc::ServerUnaryReactor* ListRemediations(
      grpc::CallbackServerContext* c, const fleet::v1::ListRemediationsRequest* request,
      fleet::v1::ListRemediationsResponse* response) override;
  grpc::ServerUnaryReactor* Restart(grpc::CallbackServerContext* c,
                                    const fleet::v1::ServersRequest* request,
                                    fleet::v1::ServersResponse* response) override;
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* c,
                                 const fleet::v1::ServersRequest* request,
                                 fleet::v1::ServersResponse* response) override;
  grpc::ServerUnaryReactor* TrustHost(grpc::CallbackServerContext* c,
                                      const fleet::v1::TrustHostRequest* request,
                                      fleet::v1::TrustHostResponse* response) override;
  grpc::ServerWriteReactor<fleet::v1::FleetEventsResponse>* FleetEvents(
      grpc::CallbackServerContext* c, const fleet::v1::FleetEventsRequest* request) override;
  grpc::ServerUnaryReactor* ListHosts(grpc::CallbackServerContext* c,
                                      const fleet::v1::ListHostsRequest* request,
                                      fleet::v1::ListHostsResponse* response) override;

 private:
  class StatusAllocator;

  // OK when this fleetd serves `verb` now (it leads, or the verb is a read and the record was read
  // again); else the refusal, its metadata added to `c`.
  absl::Status Serves(grpc::CallbackServerContext* c, const char* verb, bool read);

  Daemon* const daemon_;
  const std::string state_dir_;
  const std::function<LeaderView()> leader_;
  std::unique_ptr<StatusAllocator> status_allocator_;
};

}  // namespace fleet::daemon
