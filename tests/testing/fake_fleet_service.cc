#include "tests/testing/fake_fleet_service.h"

#include <cstdlib>
#include <iostream>

#include "common/net/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace fleet::cli::testing {
namespace {

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

// Writes `messages` one at a time, then finishes OK, or with `hold_open` waits for the client to
// cancel. Deletes itself when gRPC is done with it.
template <typename T>
class ScriptedStream : public grpc::ServerWriteReactor<T> {
 public:
  ScriptedStream(std::vector<T> messages, bool hold_open, absl::Status error,
                 FakeFleetService* service)
      : messages_(std::move(messages)), hold_open_(hold_open), service_(service) {
    if (!error.ok()) {
      FinishOnce(ToGrpcStatus(error));
      return;
    }
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    Next();
  }
  void OnCancel() override {
    if (service_ != nullptr) service_->NoteWatchCancelled();
    FinishOnce(grpc::Status::CANCELLED);
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (next_ < messages_.size()) {
      this->StartWrite(&messages_[next_++]);
    } else if (!hold_open_) {
      finished_ = true;
      this->Finish(grpc::Status::OK);
    }
  }
  void FinishOnce(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    this->Finish(std::move(status));
  }

  absl::Mutex mu_;
  std::vector<T> messages_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  const bool hold_open_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  FakeFleetService* const service_;  // for Watch: counts cancellations; else null
};

}  // namespace

void FakeFleetService::SetStatus(v1::FleetStatusResponse response) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(response);
}
void FakeFleetService::SetAttempts(v1::ListAttemptsResponse response) {
  absl::MutexLock lock(&mu_);
  attempts_ = std::move(response);
}
void FakeFleetService::SetExplain(v1::ExplainResponse response) {
  absl::MutexLock lock(&mu_);
  explain_ = std::move(response);
}
void FakeFleetService::SetLogs(std::vector<std::string> chunks) {
  absl::MutexLock lock(&mu_);
  log_chunks_ = std::move(chunks);
}
void FakeFleetService::SetServersResponse(v1::ServersResponse response) {
  absl::MutexLock lock(&mu_);
  servers_ = std::move(response);
}
void FakeFleetService::SetDeployResponse(v1::DeployResponse response) {
  absl::MutexLock lock(&mu_);
  deploy_ = std::move(response);
}
void FakeFleetService::SetPlan(v1::PlanResponse response) {
  absl::MutexLock lock(&mu_);
  plan_ = std::move(response);
}
void FakeFleetService::SetApplyPlan(v1::ApplyPlanResponse response) {
  absl::MutexLock lock(&mu_);
  apply_ = std::move(response);
}
void FakeFleetService::SetRemediations(v1::ListRemediationsResponse response) {
  absl::MutexLock lock(&mu_);
  remediations_ = std::move(response);
}
void FakeFleetService::SetTrustHost(v1::TrustHostResponse response) {
  absl::MutexLock lock(&mu_);
  trust_ = std::move(response);
}
void FakeFleetService::SetHosts(v1::ListHostsResponse response) {
  absl::MutexLock lock(&mu_);
  hosts_ = std::move(response);
}
std::vector<v1::DeployRequest> FakeFleetService::deploy_requests() const {
  absl::MutexLock lock(&mu_);
  return deploy_requests_;
}
void FakeFleetService::SetError(absl::Status status) {
  absl::MutexLock lock(&mu_);
  error_ = std::move(status);
}
void FakeFleetService::SetWatchScript(std::vector<v1::FleetStatusResponse> script, bool hold_open) {
  absl::MutexLock lock(&mu_);
  watch_script_ = std::move(script);
  watch_hold_open_ = hold_open;
}

#define FLEET_FAKE_GETTER(type, name)                \
  std::vector<type> FakeFleetService::name() const { \
    absl::MutexLock lock(&mu_);                      \
    return name##_;                                  \
  }
FLEET_FAKE_GETTER(v1::FleetStatusRequest, status_requests)
FLEET_FAKE_GETTER(v1::ListAttemptsRequest, attempts_requests)
FLEET_FAKE_GETTER(v1::ExplainRequest, explain_requests)
FLEET_FAKE_GETTER(v1::ServerLogsRequest, logs_requests)
FLEET_FAKE_GETTER(v1::ServersRequest, restart_requests)
FLEET_FAKE_GETTER(v1::ServersRequest, stop_requests)
FLEET_FAKE_GETTER(v1::PlanRequest, plan_requests)
FLEET_FAKE_GETTER(v1::ApplyPlanRequest, apply_requests)
FLEET_FAKE_GETTER(v1::ListRemediationsRequest, remediations_requests)
FLEET_FAKE_GETTER(v1::TrustHostRequest, trust_requests)
FLEET_FAKE_GETTER(v1::ListHostsRequest, hosts_requests)
#undef FLEET_FAKE_GETTER

absl::Duration FakeFleetService::plan_time_left() const {
  absl::MutexLock lock(&mu_);
  return plan_time_left_;
}

absl::Duration FakeFleetService::apply_time_left() const {
  absl::MutexLock lock(&mu_);
  return apply_time_left_;
}

absl::Duration FakeFleetService::trust_time_left() const {
  absl::MutexLock lock(&mu_);
  return trust_time_left_;
}

int FakeFleetService::watches_cancelled() const {
  absl::MutexLock lock(&mu_);
  return watches_cancelled_;
}

void FakeFleetService::NoteWatchCancelled() {
  absl::MutexLock lock(&mu_);
  ++watches_cancelled_;
}

grpc::ServerUnaryReactor* FakeFleetService::Status(grpc::CallbackServerContext* context,
                                                   const v1::FleetStatusRequest* request,
                                                   v1::FleetStatusResponse* response) {
  absl::MutexLock lock(&mu_);
  status_requests_.push_back(*request);
  *response = status_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::ListAttempts(grpc::CallbackServerContext* context,
                                                         const v1::ListAttemptsRequest* request,
                                                         v1::ListAttemptsResponse* response) {
  absl::MutexLock lock(&mu_);
  attempts_requests_.push_back(*request);
  *response = attempts_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::Explain(grpc::CallbackServerContext* context,
                                                    const v1::ExplainRequest* request,
                                                    v1::ExplainResponse* response) {
  absl::MutexLock lock(&mu_);
  explain_requests_.push_back(*request);
  *response = explain_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::Restart(grpc::CallbackServerContext* context,
                                                    const v1::ServersRequest* request,
                                                    v1::ServersResponse* response) {
  absl::MutexLock lock(&mu_);
  restart_requests_.push_back(*request);
  *response = servers_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::Deploy(grpc::CallbackServerContext* context,
                                                   const v1::DeployRequest* request,
                                                   v1::DeployResponse* response) {
  absl::MutexLock lock(&mu_);
  deploy_requests_.push_back(*request);
  *response = deploy_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::Stop(grpc::CallbackServerContext* context,
                                                 const v1::ServersRequest* request,
                                                 v1::ServersResponse* response) {
  absl::MutexLock lock(&mu_);
  stop_requests_.push_back(*request);
  *response = servers_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::Plan(grpc::CallbackServerContext* context,
                                                 const v1::PlanRequest* request,
                                                 v1::PlanResponse* response) {
  absl::MutexLock lock(&mu_);
  plan_requests_.push_back(*request);
  plan_time_left_ = absl::FromChrono(context->deadline()) - absl::Now();
  *response = plan_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::ApplyPlan(grpc::CallbackServerContext* context,
                                                      const v1::ApplyPlanRequest* request,
                                                      v1::ApplyPlanResponse* response) {
  absl::MutexLock lock(&mu_);
  apply_requests_.push_back(*request);
  apply_time_left_ = absl::FromChrono(context->deadline()) - absl::Now();
  *response = apply_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::ListRemediations(
    grpc::CallbackServerContext* context, const v1::ListRemediationsRequest* request,
    v1::ListRemediationsResponse* response) {
  absl::MutexLock lock(&mu_);
  remediations_requests_.push_back(*request);
  *response = remediations_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::TrustHost(grpc::CallbackServerContext* context,
                                                      const v1::TrustHostRequest* request,
                                                      v1::TrustHostResponse* response) {
  absl::MutexLock lock(&mu_);
  trust_requests_.push_back(*request);
  trust_time_left_ = absl::FromChrono(context->deadline()) - absl::Now();
  *response = trust_;
  return Answer(context, error_);
}

grpc::ServerUnaryReactor* FakeFleetService::ListHosts(grpc::CallbackServerContext* context,
                                                      const v1::ListHostsRequest* request,
                                                      v1::ListHostsResponse* response) {
  absl::MutexLock lock(&mu_);
  hosts_requests_.push_back(*request);
  *response = hosts_;
  return Answer(context, error_);
}

grpc::ServerWriteReactor<v1::FleetStatusResponse>* FakeFleetService::Watch(
    grpc::CallbackServerContext* context, const v1::FleetStatusRequest* request) {
  absl::MutexLock lock(&mu_);
  status_requests_.push_back(*request);
  return new ScriptedStream<v1::FleetStatusResponse>(watch_script_, watch_hold_open_, error_, this);
}

grpc::ServerWriteReactor<v1::LogChunk>* FakeFleetService::Logs(
    grpc::CallbackServerContext* context, const v1::ServerLogsRequest* request) {
  absl::MutexLock lock(&mu_);
  logs_requests_.push_back(*request);
  std::vector<v1::LogChunk> chunks;
  int64_t line = 1;
  for (const std::string& data : log_chunks_) {
    v1::LogChunk& chunk = chunks.emplace_back();
    chunk.set_first_line(line++);
    chunk.set_data(data);
  }
  return new ScriptedStream<v1::LogChunk>(std::move(chunks), /*hold_open=*/false, error_, nullptr);
}

FakeFleetServer::FakeFleetServer(const std::string& socket_path) : socket_path_(socket_path) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    std::cerr << "FakeFleetServer: cannot listen on unix:" << socket_path_ << "\n";
    std::abort();
  }
}

FakeFleetServer::~FakeFleetServer() {
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

FakeFleetEnv::FakeFleetEnv()
    : server_(std::make_unique<FakeFleetServer>(dir_.Join("fleetd.sock"))) {}

FakeFleetEnv::Outcome FakeFleetEnv::Run(const Verb& verb, const std::vector<std::string>& args,
                                        const RunOptions& options) {
  std::ostringstream out, err;
  CommandContext ctx;
  ctx.socket_path = options.socket_path.empty() ? socket_path() : options.socket_path;
  ctx.timeout = options.timeout;
  ctx.stdout_is_tty = options.tty;
  ctx.no_color = options.no_color;
  ctx.terminal_width = options.terminal_width;
  ctx.clock = &clock_;
  ctx.out = &out;
  ctx.err = &err;
  const int code = verb(args, ctx);
  return {code, out.str(), err.str()};
}

v1::ServerRow MakeRow(const std::string& server, const std::string& state, absl::Time now) {
  v1::ServerRow row;
  row.set_server(server);
  row.set_state(state);
  row.set_attempt_number(1);
  row.set_port(30000);
  const int64_t started = absl::ToUnixSeconds(now) - 75;
  row.mutable_attempt_started_at()->set_seconds(started);
  row.mutable_state_since()->set_seconds(absl::ToUnixSeconds(now) - 5);
  return row;
}

v1::Plan MakePlan(absl::Time now) {
  v1::Plan plan;
  plan.set_id("7");
  plan.set_container("pve1/200");
  plan.set_server("pve1/200/gpu3");
  plan.set_diagnosis_class("ptx_version_unsupported");
  plan.set_status("proposed");
  plan.set_trigger("manual");
  plan.add_causes("ptx_version_unsupported");
  plan.set_fingerprint("3f2a9c");
  plan.set_summary("use the pip CUDA 13.2 nvcc so that ptxas accepts PTX ISA 9.2");
  plan.add_constraints("nvcc 13.0.88 accepts PTX ISA up to 9.0; flashinfer emits 9.2");
  plan.add_unresolved("ninja_not_found: the venv has no ninja and apt_install is not allowed");
  plan.set_cuda_release("13.2");
  plan.set_affects_jit_build(true);
  plan.set_save_package_set(true);
  (*plan.mutable_env_changes())["CUDA_HOME"] = "/opt/venv/cu13";
  plan.set_attempt_id("pve1/200/gpu3#1-5c2e91ab");
  v1::Fact* fact = plan.add_trigger_facts();
  fact->set_key("ptx_wanted");
  fact->add_values("9.2");
  const auto add = [&plan](v1::Action action, const std::string& reason) {
    v1::PlannedAction* a = plan.add_actions();
    *a->mutable_action() = std::move(action);
    a->set_reason(reason);
  };
  v1::Action pip;
  v1::Requirement* r = pip.mutable_pip_install()->add_requirements();
  r->set_name("nvidia-cuda-nvcc");
  r->set_version("13.2.78");
  add(pip, "ptxas of CUDA 13.2 accepts PTX ISA 9.2");
  v1::Action path;
  path.mutable_prepend_path()->set_variable("PATH");
  path.mutable_prepend_path()->set_directory("/opt/venv/cu13/bin");
  add(path, "the pip nvcc first on PATH");
  v1::Action link;
  link.mutable_symlink()->set_link("/opt/venv/cu13/lib64");
  link.mutable_symlink()->set_target("lib");
  add(link, "flashinfer links against CUDA_HOME/lib64");
  plan.mutable_created_at()->set_seconds(absl::ToUnixSeconds(now) - 120);
  return plan;
}

v1::Plan AppliedPlan(v1::Plan plan, absl::Time now) {
  plan.set_status("applied");
  plan.mutable_applied_at()->set_seconds(absl::ToUnixSeconds(now));
  int i = 0;
  for (const v1::PlannedAction& a : plan.actions()) {
    v1::ActionResult* r = plan.add_results();
    *r->mutable_action() = a.action();
    r->set_ok(true);
    r->set_message(i == 0 ? "installed nvidia-cuda-nvcc 13.2.78" : "done");
    r->mutable_took()->set_seconds(i == 0 ? 12 : 0);
    r->mutable_took()->set_nanos(i == 0 ? 300000000 : 40000000);
    ++i;
  }
  return plan;
}

v1::ListHostsResponse MakeHosts() {
  v1::ListHostsResponse response;
  v1::HostRow* local = response.add_hosts();
  local->set_name("local");
  local->set_reach("local");
  local->set_containers(1);
  v1::HostRow* pve1 = response.add_hosts();
  pve1->set_name("pve1");
  pve1->set_reach("ssh");
  pve1->set_address("10.0.0.5");
  pve1->set_port(22);
  pve1->set_user("root");
  pve1->set_known_hosts("/var/lib/gpu-fleet/known_hosts");
  pve1->set_containers(2);
  v1::SshHostKey* key = pve1->add_host_keys();
  key->set_key_type("ssh-ed25519");
  key->set_fingerprint(kPve1Fingerprint);
  v1::HostRow* pve2 = response.add_hosts();
  pve2->set_name("pve2");
  pve2->set_reach("ssh");
  pve2->set_address("pve2.lan");
  pve2->set_port(2222);
  pve2->set_user("admin");
  pve2->set_identity_file("/etc/gpu-fleet/id_ed25519");
  pve2->set_known_hosts("/etc/gpu-fleet/known_hosts");
  pve2->set_containers(1);
  return response;
}

v1::TrustHostResponse MakeTrustHost(const std::string& state, bool recorded) {
  v1::TrustHostResponse response;
  response.set_host("pve1");
  response.set_address("10.0.0.5:22");
  response.set_key_type("ssh-ed25519");
  response.set_fingerprint(kPve1Fingerprint);
  response.set_key_state(state);
  response.set_recorded(recorded);
  response.set_known_hosts("/var/lib/gpu-fleet/known_hosts");
  if (state != "new") {
    v1::SshHostKey* previous = response.add_previous_keys();
    previous->set_key_type("ssh-ed25519");
    previous->set_fingerprint(state == "changed" ? kPve1OldFingerprint : kPve1Fingerprint);
  }
  return response;
}

}  // namespace fleet::cli::testing
