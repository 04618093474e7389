// FakeFleetService: an in-process stand-in for fleetd's fleet.v1.Fleet service, for the CLI's
// tests. It serves canned answers (status rows, attempts, explain responses, log chunks, restart
// and stop results, plans, apply outcomes, remediations, hosts and host keys), plays a scripted
// Watch stream, and records the requests it got. FakeFleetServer serves it on a real unix socket in
// a temp dir, as fleetd does.
//
// Thread-safe: gRPC calls the handlers on its threads while the test reads the recorded requests.
#pragma once

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cli/command_context.h"
#include "proto/fleet.grpc.pb.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/subprocess.h"

namespace fleet::cli::testing {

class FakeFleetService final : public v1::Fleet::CallbackService {
 public:
  // Canned answers. An error status makes the call fail with it.
  void SetStatus(v1::FleetStatusResponse response);
  void SetAttempts(v1::ListAttemptsResponse response);
  void SetExplain(v1::ExplainResponse response);
  void SetLogs(std::vector<std::string> chunks);
  void SetServersResponse(v1::ServersResponse response);
  void SetDeployResponse(v1::DeployResponse response);
  void SetPlan(v1::PlanResponse response);
  void SetApplyPlan(v1::ApplyPlanResponse response);
  void SetRemediations(v1::ListRemediationsResponse response);
  void SetTrustHost(v1::TrustHostResponse response);
  void SetHosts(v1::ListHostsResponse response);
  void SetError(absl::Status status);  // every call fails with it

  // The Watch stream: these messages in order, then the stream ends OK (`hold_open` false) or
  // stays open until the client cancels (`hold_open` true, as fleetd does). Nothing at all is
  // sent when `script` is empty and `hold_open` is true: a daemon that never answers.
  void SetWatchScript(std::vector<v1::FleetStatusResponse> script, bool hold_open);

  // The requests received, in order.
  std::vector<v1::FleetStatusRequest> status_requests() const;
  std::vector<v1::ListAttemptsRequest> attempts_requests() const;
  std::vector<v1::ExplainRequest> explain_requests() const;
  std::vector<v1::ServerLogsRequest> logs_requests() const;
  std::vector<v1::ServersRequest> restart_requests() const;
  std::vector<v1::ServersRequest> stop_requests() const;
  std::vector<v1::DeployRequest> deploy_requests() const;
  std::vector<v1::PlanRequest> plan_requests() const;
  std::vector<v1::ApplyPlanRequest> apply_requests() const;
  std::vector<v1::ListRemediationsRequest> remediations_requests() const;
  std::vector<v1::TrustHostRequest> trust_requests() const;
  std::vector<v1::ListHostsRequest> hosts_requests() const;
  // How long the last TrustHost call had left before its deadline when it arrived.
  absl::Duration trust_time_left() const;
  // How long the last Plan / ApplyPlan call had left before its deadline when it arrived.
  absl::Duration plan_time_left() const;
  absl::Duration apply_time_left() const;
  // Watch streams that ended because the client cancelled them.
  int watches_cancelled() const;

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::FleetStatusRequest* request,
                                   v1::FleetStatusResponse* response) override;
  grpc::ServerWriteReactor<v1::FleetStatusResponse>* Watch(
      grpc::CallbackServerContext* context, const v1::FleetStatusRequest* request) override;
  grpc::ServerWriteReactor<v1::LogChunk>* Logs(grpc::CallbackServerContext* context,
                                               const v1::ServerLogsRequest* request) override;
  grpc::ServerUnaryReactor* ListAttempts(grpc::CallbackServerContext* context,
                                         const v1::ListAttemptsRequest* request,
                                         v1::ListAttemptsResponse* response) override;
  grpc::ServerUnaryReactor* Explain(grpc::CallbackServerContext* context,
                                    const v1::ExplainRequest* request,
                                    v1::ExplainResponse* response) override;
  grpc::ServerUnaryReactor* Restart(grpc::CallbackServerContext* context,
                                    const v1::ServersRequest* request,
                                    v1::ServersResponse* response) override;
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* context,
                                 const v1::ServersRequest* request,
                                 v1::ServersResponse* response) override;
  grpc::ServerUnaryReactor* Deploy(grpc::CallbackServerContext* context,
                                   const v1::DeployRequest* request,
                                   v1::DeployResponse* response) override;
  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* context,
                                 const v1::PlanRequest* request,
                                 v1::PlanResponse* response) override;
  grpc::ServerUnaryReactor* ApplyPlan(grpc::CallbackServerContext* context,
                                      const v1::ApplyPlanRequest* request,
                                      v1::ApplyPlanResponse* response) override;
  grpc::ServerUnaryReactor* ListRemediations(grpc::CallbackServerContext* context,
                                             const v1::ListRemediationsRequest* request,
                                             v1::ListRemediationsResponse* response) override;
  grpc::ServerUnaryReactor* TrustHost(grpc::CallbackServerContext* context,
                                      const v1::TrustHostRequest* request,
                                      v1::TrustHostResponse* response) override;
  grpc::ServerUnaryReactor* ListHosts(grpc::CallbackServerContext* context,
                                      const v1::ListHostsRequest* request,
                                      v1::ListHostsResponse* response) override;

  // Used by the stream reactors.
  void NoteWatchCancelled();

 private:
  mutable absl::Mutex mu_;
  v1::FleetStatusResponse status_ ABSL_GUARDED_BY(mu_);
  v1::ListAttemptsResponse attempts_ ABSL_GUARDED_BY(mu_);
  v1::ExplainResponse explain_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> log_chunks_ ABSL_GUARDED_BY(mu_);
  v1::ServersResponse servers_ ABSL_GUARDED_BY(mu_);
  v1::DeployResponse deploy_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DeployRequest> deploy_requests_ ABSL_GUARDED_BY(mu_);
  v1::PlanResponse plan_ ABSL_GUARDED_BY(mu_);
  v1::ApplyPlanResponse apply_ ABSL_GUARDED_BY(mu_);
  v1::ListRemediationsResponse remediations_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::PlanRequest> plan_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ApplyPlanRequest> apply_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListRemediationsRequest> remediations_requests_ ABSL_GUARDED_BY(mu_);
  absl::Duration plan_time_left_ ABSL_GUARDED_BY(mu_);
  absl::Duration apply_time_left_ ABSL_GUARDED_BY(mu_);
  v1::TrustHostResponse trust_ ABSL_GUARDED_BY(mu_);
  v1::ListHostsResponse hosts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TrustHostRequest> trust_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListHostsRequest> hosts_requests_ ABSL_GUARDED_BY(mu_);
  absl::Duration trust_time_left_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::FleetStatusResponse> watch_script_ ABSL_GUARDED_BY(mu_);
  bool watch_hold_open_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<v1::FleetStatusRequest> status_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListAttemptsRequest> attempts_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ExplainRequest> explain_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ServerLogsRequest> logs_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ServersRequest> restart_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ServersRequest> stop_requests_ ABSL_GUARDED_BY(mu_);
  int watches_cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

// A gRPC server for a FakeFleetService on unix:`socket_path`; shut down on destruction.
class FakeFleetServer {
 public:
  explicit FakeFleetServer(const std::string& socket_path);
  ~FakeFleetServer();

  FakeFleetService& service() { return service_; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  std::string socket_path_;
  FakeFleetService service_;
  std::unique_ptr<grpc::Server> server_;
};

// What a verb test needs: a fake fleetd on `DIR/fleetd.sock` in a fresh temp dir, a FakeClock
// (at 2027-01-15T08:00:00Z) and a way to run a verb in-process with its output captured.
class FakeFleetEnv {
 public:
  FakeFleetEnv();

  FakeFleetService& service() { return server_->service(); }
  fleet::testing::FakeClock& clock() { return clock_; }
  const fleet::testing::TempDir& dir() const { return dir_; }
  const std::string& socket_path() const { return server_->socket_path(); }

  struct Outcome {
    int code;
    std::string out;
    std::string err;
  };
  using Verb = std::function<int(const std::vector<std::string>&, const CommandContext&)>;
  struct RunOptions {
    bool tty = false;
    bool no_color = false;
    absl::Duration timeout = absl::Seconds(10);
    std::string socket_path;  // empty: the fake's
    int terminal_width = 0;   // the terminal's columns (with `tty`); 0: unknown
  };
  Outcome Run(const Verb& verb, const std::vector<std::string>& args, const RunOptions& options);
  Outcome Run(const Verb& verb, const std::vector<std::string>& args) {
    return Run(verb, args, RunOptions());
  }

 private:
  fleet::testing::TempDir dir_;
  fleet::testing::FakeClock clock_;
  std::unique_ptr<FakeFleetServer> server_;
};

// A status row as fleetd would send it; times relative to `now`.
v1::ServerRow MakeRow(const std::string& server, const std::string& state, absl::Time now);

// Plan 7 for pve1/200/gpu3 as fleetd proposes it after a PTX failure (trigger manual, created 2
// minutes before `now`): pip_install nvidia-cuda-nvcc==13.2.78, prepend_path PATH
// /opt/venv/cu13/bin, symlink /opt/venv/cu13/lib64 -> lib, each with its reason; a constraint,
// an unresolved problem, CUDA 13.2, an env change, the triggering attempt and its facts.
v1::Plan MakePlan(absl::Time now);
// `plan` as fleetd answers an apply: status `applied` (at `now`), each action's result ok.
v1::Plan AppliedPlan(v1::Plan plan, absl::Time now);

// pve1's ed25519 host key as it is now, and the one recorded before pve1 was reinstalled.
inline constexpr char kPve1Fingerprint[] = "SHA256:n9Hty281FMDdEs1OnD87D59fPq+EK6uzMUSsoXnpnOo";
inline constexpr char kPve1OldFingerprint[] = "SHA256:1fsspwhzz0YaGyZ0Pyjaf63HMCP6DA1L/vmt7gLxpYY";
// fleetd's hosts: `local` (one container); pve1 (ssh to 10.0.0.5:22 as root with the ssh-agent,
// two containers, its key recorded); pve2 (ssh to pve2.lan:2222 as admin with a key file and its
// own known_hosts, one container, no key recorded).
v1::ListHostsResponse MakeHosts();
// fleetd's answer to `hosts trust pve1`: pve1 (10.0.0.5:22) shows ssh-ed25519 kPve1Fingerprint,
// whose `state` is "new", "trusted" (recorded before) or "changed" (kPve1OldFingerprint recorded
// before); `recorded` when the request had the fingerprint.
v1::TrustHostResponse MakeTrustHost(const std::string& state, bool recorded);

}  // namespace fleet::cli::testing
