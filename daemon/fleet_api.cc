// fleet.proto's queries and commands, as the daemon answers them: status, attempts, explain,
// restart, stop, logs. Status and Watch take the state lock only, never the record's.
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/base/proto_time.h"
#include "common/config/desired_server.h"
#include "common/config/fleet_config.h"
#include "common/config/server_name.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/state/states.h"
#include "daemon/daemon.h"
#include "daemon/server_state.h"
#include "google/protobuf/util/message_differencer.h"

namespace fleet::daemon {

using google::protobuf::util::MessageDifferencer;

namespace {

// An attempt as the wire shows it (ListAttempts, Explain).
void FillAttempt(const AttemptRecord& a, fleet::v1::Attempt* out) {
  out->set_id(a.id);
  out->set_server(a.server);
  out->set_number(a.number);
  *out->mutable_started_at() = ToProtoTime(a.created_at);
  *out->mutable_ended_at() = ToProtoTime(a.ended_at);
  SetAttemptOutcome(a.outcome, out);
  *out->mutable_exit() = a.exit;
  out->set_diagnosis_class(a.diagnosis_class);
  if (!a.diagnosis_class.empty()) {
    out->set_diagnosis_confidence(a.diagnosis.confidence() == "low" ? "low" : "high");
  }
  out->set_summary(a.summary);
  out->set_trigger(a.trigger);
  if (a.time_to_ready_ms >= 0) {
    *out->mutable_time_to_ready() = ToProtoDuration(absl::Milliseconds(a.time_to_ready_ms));
  }
}

}  // namespace

// --- Queries --------------------------------------------------------------------------------

fleet::v1::ServerRow Daemon::Row(const Server& s) const {
  fleet::v1::ServerRow row;
  FillRow(s, &row);
  return row;
}

// Written in place (into a message on the caller's arena, for Status): a fleet's table is
// thousands of rows, built while the lock is held.
void Daemon::FillRow(const Server& s, fleet::v1::ServerRow* row) const {
  const ServerRecord& r = s.record;
  row->set_server(r.name);
  SetServerState(r.state, row);
  row->set_phase_detail(r.phase_detail);
  row->set_progress_step(r.progress_step);
  row->set_progress_total(r.progress_total);
  row->set_attempt_number(r.attempt_number);
  SetProtoTime(r.state_since, row->mutable_state_since());
  SetProtoTime(s.attempt.created_at, row->mutable_attempt_started_at());
  row->set_last_diagnosis_class(r.last_class);
  row->set_last_diagnosis_summary(r.last_summary);
  row->set_port(r.spec.port());
  if (r.spec.gpus().empty()) {
    row->add_gpus(r.gpu);
  } else {
    row->mutable_gpus()->Add(r.spec.gpus().begin(), r.spec.gpus().end());
  }
  row->set_degraded(r.degraded);
  row->set_reason(r.reason);
  if (r.reason.empty()) {
    // No reason of its own: why its agent cannot be reached now, if so (what keeps it PENDING,
    // or what fleetd no longer hears from a running one).
    auto link = links_.find(ContainerKey(r.host, r.container));
    if (link != links_.end() && !link->second->last_error.empty()) {
      row->set_reason(absl::StrCat("agent unreachable: ", link->second->last_error));
    }
  }
}

fleet::v1::FleetStatusResponse Daemon::Status(const fleet::v1::FleetStatusRequest& request) {
  fleet::v1::FleetStatusResponse response;
  Status(request, &response);
  return response;
}

void Daemon::Status(const fleet::v1::FleetStatusRequest& request,
                    fleet::v1::FleetStatusResponse* response) {
  const std::set<std::string> only(request.servers().begin(), request.servers().end());
  absl::MutexLock lock(&mu_);
  response->mutable_servers()->Reserve(
      static_cast<int>(only.empty() ? servers_.size() : only.size()));
  for (const auto& [name, s] : servers_) {
    if (s.record.removed) continue;
    if (!only.empty() && !only.count(name)) continue;
    FillRow(s, response->add_servers());
  }
  SetProtoTime(clock_->Now(), response->mutable_at());
}

std::vector<fleet::v1::ServerRow> Daemon::ChangedRows(const std::set<std::string>& servers,
                                                      uint64_t* since) {
  absl::MutexLock lock(&mu_);
  std::vector<fleet::v1::ServerRow> rows;
  for (const auto& [name, s] : servers_) {
    if (s.version <= *since) continue;
    if (!servers.empty() && !servers.count(name)) continue;
    rows.push_back(Row(s));
  }
  *since = version_;
  return rows;
}

absl::StatusOr<std::optional<fleet::v1::FleetConfig>> Daemon::CurrentConfig() {
  absl::MutexLock lock(&store_mu_);
  return store_->LatestConfig();
}

absl::StatusOr<fleet::v1::ListAttemptsResponse> Daemon::ListAttempts(
    const fleet::v1::ListAttemptsRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (!request.server().empty() && !servers_.count(request.server())) {
      return absl::NotFoundError(absl::StrCat("no server ", request.server()));
    }
  }
  // The record without mu_ (status queries go on meanwhile), then the current attempts, which
  // may be newer in memory than in the record.
  absl::StatusOr<std::vector<AttemptRecord>> attempts;
  {
    absl::MutexLock store_lock(&store_mu_);
    attempts = store_->Attempts(request.server());
  }
  if (!attempts.ok()) return attempts.status();
  {
    absl::MutexLock lock(&mu_);
    for (AttemptRecord& a : *attempts) {
      auto it = servers_.find(a.server);
      if (it != servers_.end() && it->second.attempt.id == a.id) a = it->second.attempt;
    }
  }
  fleet::v1::ListAttemptsResponse response;
  for (const AttemptRecord& a : *attempts) {
    FillAttempt(a, response.add_attempts());
  }
  return response;
}

absl::StatusOr<fleet::v1::ExplainResponse> Daemon::Explain(
    const fleet::v1::ExplainRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (!servers_.count(request.server())) {
      return absl::NotFoundError(absl::StrCat("no server ", request.server()));
    }
  }
  absl::StatusOr<std::optional<AttemptRecord>> a;
  {
    absl::MutexLock store_lock(&store_mu_);  // the record without mu_
    a = store_->Attempt(request.server(), request.attempt_number());
  }
  if (!a.ok()) return a.status();
  absl::MutexLock lock(&mu_);
  if (!a->has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "server ", request.server(), " has no attempt",
        request.attempt_number() > 0 ? absl::StrCat(" ", request.attempt_number()) : ""));
  }
  // The current attempt may be newer in memory than in the record.
  const Server& s = servers_[request.server()];
  const AttemptRecord& attempt = (*a)->id == s.attempt.id ? s.attempt : **a;
  fleet::v1::ExplainResponse response;
  FillAttempt(attempt, response.mutable_attempt());
  *response.mutable_diagnosis() = attempt.diagnosis;
  if (response.diagnosis().diagnosis_class().empty()) {
    response.mutable_diagnosis()->set_diagnosis_class(diagnosis::classes::kNone);
    response.mutable_diagnosis()->set_summary("no failure was diagnosed for this attempt");
  }
  return response;
}

absl::StatusOr<std::vector<std::string>> Daemon::Select(const fleet::v1::ServersRequest& request) {
  std::vector<std::string> names;
  if (request.all()) {
    for (const auto& [name, s] : servers_) {
      if (!s.record.removed) names.push_back(name);
    }
    return names;
  }
  if (request.servers().empty()) {
    return absl::InvalidArgumentError("name one or more servers (host/ctid/gpuN), or --all");
  }
  for (const std::string& name : request.servers()) {
    if (!servers_.count(name) || servers_[name].record.removed) {
      return absl::NotFoundError(absl::StrCat("no server ", name));
    }
    names.push_back(name);
  }
  return names;
}

absl::StatusOr<fleet::v1::ServersResponse> Daemon::ChangeSelected(
    const fleet::v1::ServersRequest& request, const std::function<void(Server&)>& change) {
  fleet::v1::ServersResponse response;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock store_lock(&store_mu_);
    auto names = Select(request);
    if (!names.ok()) return names.status();
    std::set<std::string> persist;
    for (const std::string& name : *names) {
      Server& s = servers_[name];
      change(s);
      Touch(s);
      persist.insert(name);
      *response.add_servers() = Row(s);
    }
    Persist(persist);
  }
  Wake();
  return response;
}

absl::StatusOr<fleet::v1::ServersResponse> Daemon::Restart(
    const fleet::v1::ServersRequest& request) {
  return ChangeSelected(request, [now = request.now()](Server& s) {
    s.record.desired_running = true;
    s.restart_requested = true;
    s.restart_now = now;
    s.next_trigger = "restart";
    s.stop_sent = false;
  });
}

absl::StatusOr<fleet::v1::ServersResponse> Daemon::Stop(const fleet::v1::ServersRequest& request) {
  return ChangeSelected(request, [](Server& s) {
    s.record.desired_running = false;
    s.restart_requested = false;
  });
}

absl::Status Daemon::Logs(const fleet::v1::ServerLogsRequest& request,
                          const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                          CallCancel* cancel) {
  CallCancel own;
  if (cancel == nullptr) cancel = &own;
  {
    absl::MutexLock lock(&logs_mu_);
    if (logs_closed_) return absl::UnavailableError("fleetd is stopping");
    log_calls_.insert(cancel);
  }
  absl::Status status = [&]() -> absl::Status {
    // The client is held for the stream's length: a redeploy that changes the container's
    // channel retires it, and it is destroyed when this call lets it go.
    std::shared_ptr<AgentClient> client;
    fleet::v1::LogsRequest agent_request;
    {
      absl::MutexLock lock(&mu_);
      auto it = servers_.find(request.server());
      if (it == servers_.end()) {
        return absl::NotFoundError(absl::StrCat("no server ", request.server()));
      }
      const ServerRecord& r = it->second.record;
      auto link = links_.find(ContainerKey(r.host, r.container));
      if (link == links_.end() || !link->second->client) {
        return absl::UnavailableError(
            absl::StrCat("container ", r.host, "/", r.container, ": its agent is not connected"));
      }
      client = link->second->client;
      agent_request.mutable_server()->set_host(r.host);
      agent_request.mutable_server()->set_container(r.container);
      agent_request.mutable_server()->set_gpu(r.gpu);
      agent_request.set_attempt_number(request.attempt_number());
      agent_request.set_follow(request.follow());
      agent_request.set_tail_lines(request.tail_lines());
    }
    return client->Logs(agent_request, on_chunk, cancel);
  }();
  absl::MutexLock lock(&logs_mu_);
  log_calls_.erase(cancel);
  logs_done_.SignalAll();
  return status;
}

}  // namespace fleet::daemon
