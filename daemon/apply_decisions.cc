// The Daemon's side of the reconciler (reconciler.h decides): each decision applied in the turn,
// under the daemon's locks (the gate asked, the attempt row made, the call queued), the calls
// sent and their answers, and the desired state (deploy) the decisions work towards.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/proto_time.h"
#include "common/config/desired_server.h"
#include "common/config/fleet_config.h"
#include "common/config/server_name.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/log/log.h"
#include "common/state/states.h"
#include "daemon/daemon.h"
#include "daemon/events/fleet_events.h"
#include "daemon/server_state.h"
#include "google/protobuf/util/message_differencer.h"

namespace fleet::daemon {

using google::protobuf::util::MessageDifferencer;

// --- The reconciler's decisions, applied -----------------------------------------------------

std::vector<AgentCall> Daemon::Reconcile(absl::Time now, std::set<std::string>* changed,
                                         std::vector<FixJob>* jobs) {
  std::set<std::string> reachable;
  for (const auto& [container, link] : links_) {
    if (link->state == Link::kFollowing) reachable.insert(container);
  }
  std::vector<AgentCall> calls;
  for (const Decision& d : reconciler_.Step(now, servers_, reachable, bitgen_)) {
    Apply(d, now, changed, jobs, &calls);
  }
  return calls;
}

void Daemon::Apply(const Decision& d, absl::Time now, std::set<std::string>* changed,
                   std::vector<FixJob>* jobs, std::vector<AgentCall>* calls) {
  Server& s = servers_[d.server];
  ServerRecord& r = s.record;
  switch (d.kind) {
    case Decision::kStop: {
      AgentCall c{AgentCall::kStop, d.server, ContainerOf(r), {}, {}};
      c.stop.mutable_server()->set_host(r.host);
      c.stop.mutable_server()->set_container(r.container);
      c.stop.mutable_server()->set_gpu(r.gpu);
      calls->push_back(std::move(c));
      s.stop_sent = true;
      return;
    }
    case Decision::kStopUnlaunched:
      s.waiting.clear();
      r.reason.clear();
      SetState(s, v1::SERVER_STATE_STOPPED, now);
      changed->insert(d.server);
      return;
    case Decision::kResetFailures:
      s.failures = 0;
      return;
    case Decision::kRestart:
      if (d.launch && !Gate(s, now, jobs, changed)) return;  // asked again next turn
      s.restart_requested = false;
      s.stop_sent = false;
      s.stalled = false;
      r.backoff_until = d.backoff_until;
      if (d.launch) Launch(d, s, now, changed, jobs, calls);
      return;
    case Decision::kLaunch:
      Launch(d, s, now, changed, jobs, calls);
      return;
    case Decision::kRemediate:
    case Decision::kGiveUp:
    case Decision::kBackoff:
      s.stop_sent = false;
      s.stalled = false;
      if (d.kind == Decision::kRemediate) {
        Remediate(s, now, jobs, changed);
      } else if (d.kind == Decision::kGiveUp) {
        r.reason = d.reason;
        SetState(s, v1::SERVER_STATE_GAVE_UP, now);
      } else {
        s.failures = d.failures;
        r.backoff_until = d.backoff_until;
        SetState(s, v1::SERVER_STATE_RESTARTING, now);
      }
      changed->insert(d.server);
      return;
  }
}

void Daemon::Launch(const Decision& d, Server& s, absl::Time now, std::set<std::string>* changed,
                    std::vector<FixJob>* jobs, std::vector<AgentCall>* calls) {
  ServerRecord& r = s.record;
  if (d.new_attempt) {
    // Preflight, a remediation running, the canary: it may have to wait its turn.
    if (!Gate(s, now, jobs, changed)) return;
    // The attempt row exists before the agent hears of it.
    auto a = store_->CreateAttempt(d.server, d.trigger, r.spec, now);
    if (!a.ok()) {
      // Tried again by the next turn: the attempt is not launched without its row.
      RecordFailed(a.status(), {.server = d.server}, " (the attempt is made again next turn)");
      return;
    }
    // The attempt it replaces is written once more with the turn's writes (until it is): its
    // last change (its failure, say) may be in no commit yet when the record fails, and the rows
    // written from now on carry the new one (finding 16).
    if (!s.attempt.id.empty()) {
      JournalAttempt(s, now);
      unsaved_.closed.push_back(s.attempt);
    }
    s.attempt = *std::move(a);
    s.jit_warm_at_launch = fixes_[ContainerOf(r)].jit_warm;
    r.attempt_id = s.attempt.id;
    r.attempt_number = s.attempt.number;
    r.reason.clear();
    // The row's diagnosis is the current attempt's: the last one's stays in its attempt row.
    r.last_class.clear();
    r.last_summary.clear();
    s.next_trigger.clear();
    r.progress_step = r.progress_total = 0;
    SetState(s, v1::SERVER_STATE_PENDING, now);
    fleet::v1::FleetEvent started = events::ServerEvent(events::kAttemptStarted, r, s.attempt, now);
    started.set_template_(TemplateOf(r));
    started.set_jit_cache(s.jit_warm_at_launch ? "warm" : "cold");
    journal_.Add(std::move(started));
    changed->insert(d.server);
  }
  AgentCall c{AgentCall::kLaunch, d.server, ContainerOf(r), {}, {}};
  s.launch_in_flight = true;
  c.launch.set_attempt_id(s.attempt.id);
  c.launch.set_attempt_number(s.attempt.number);
  // The spec (the attempt's own) is filled in when the call is sent: thousands of queued
  // launches hold no copies of it.
  calls->push_back(std::move(c));
}

// Held while the call is handed over: a redeploy may retire the link's client meanwhile (it is
// destroyed, on a daemon thread, once no one holds it).
bool Daemon::SendCall(AgentCall& c, std::function<void()> finished) {
  std::shared_ptr<AgentClient> client;
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(c.container);
    if (link != links_.end()) client = link->second->client;
    if (c.kind == AgentCall::kLaunch) {
      Server& s = servers_[c.server];
      if (s.attempt.id != c.launch.attempt_id()) {
        client = nullptr;  // superseded while it waited
      } else if (client != nullptr) {
        *c.launch.mutable_spec() = s.attempt.spec;
      }
      if (client == nullptr) s.launch_in_flight = false;
    }
  }
  if (client == nullptr) return false;
  if (c.kind == AgentCall::kStop) {
    client->StopAsync(c.stop, [this, server = c.server, finished = std::move(finished)](
                                  absl::StatusOr<fleet::v1::StopResponse> r) {
      StopDone(server, r);
      finished();
    });
  } else {
    client->LaunchAsync(
        c.launch, [this, server = c.server, attempt = c.launch.attempt_id(),
                   finished = std::move(finished)](absl::StatusOr<fleet::v1::LaunchResponse> r) {
          LaunchDone(server, attempt, r);
          finished();
        });
  }
  return true;
}

void Daemon::StopDone(const std::string& server, const absl::StatusOr<fleet::v1::StopResponse>& r) {
  {
    absl::MutexLock lock(&mu_);
    Server& s = servers_[server];
    if (!r.ok()) {
      s.stop_sent = false;  // try again next turn
    } else if (ServerStateOf(r->status()) == fleet::v1::SERVER_STATE_STOPPING &&
               Alive(s.record.state)) {
      // The answer comes on a gRPC thread: the stream's STOPPED may have been applied already,
      // and must not be overwritten (the server would stay STOPPING for good).
      SetState(s, v1::SERVER_STATE_STOPPING, clock_->Now());
    }
  }
  Wake();
}

void Daemon::LaunchDone(const std::string& server, const std::string& attempt_id,
                        const absl::StatusOr<fleet::v1::LaunchResponse>& r) {
  {
    const absl::Time now = clock_->Now();
    absl::MutexLock lock(&mu_);
    Server& s = servers_[server];
    if (s.attempt.id != attempt_id) return;
    s.launch_in_flight = false;
    if (r.ok()) {
      if (s.attempt.outcome == v1::ATTEMPT_OUTCOME_PENDING)
        s.attempt.outcome = v1::ATTEMPT_OUTCOME_RUNNING;
      if (s.attempt.launched_at == absl::InfinitePast()) s.attempt.launched_at = now;
      if (s.record.state == v1::SERVER_STATE_PENDING) SetState(s, v1::SERVER_STATE_STARTING, now);
      s.stop_sent = false;
    } else if (absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status()) ||
               absl::IsCancelled(r.status())) {
      // The agent is away (or fleetd is stopping): the attempt stays pending and is launched
      // (same id) when it is back.
      return;
    } else {
      // The agent refused it (a spec it cannot run, a GPU busy with another attempt).
      s.attempt.outcome = v1::ATTEMPT_OUTCOME_FAILED;
      s.attempt.ended_at = now;
      s.attempt.diagnosis_class = diagnosis::classes::kUnknown;
      s.attempt.summary = absl::StrCat("launch refused: ", r.status().message());
      s.record.last_class = diagnosis::classes::kUnknown;
      s.record.last_summary = s.attempt.summary;
      s.record.reason = s.attempt.summary;
      SetState(s, v1::SERVER_STATE_GAVE_UP, now);
    }
    // Written by the loop with the others of its turn: one commit for thousands of answers.
    dirty_.insert(server);
  }
  Wake();
}

// --- Desired state --------------------------------------------------------------------------

absl::Status Daemon::ApplyConfig(const fleet::v1::FleetConfig& config,
                                 const std::set<std::string>& only,
                                 std::vector<fleet::v1::Change>* changes, bool dry_run) {
  auto desired = config::ExpandServers(config);
  if (!desired.ok()) return desired.status();
  // `--only` names servers of this config, or ones it removes; any other name is a mistake,
  // refused before anything changes (nothing applied, no config version saved).
  for (const std::string& name : only) {
    const bool in_config =
        std::any_of(desired->begin(), desired->end(),
                    [&](const config::DesiredServer& d) { return d.name == name; });
    auto known = servers_.find(name);
    if (!in_config && (known == servers_.end() || known->second.record.removed)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "deploy --only: no server ", name, " in the config or the fleet: nothing deployed"));
    }
  }
  if (!dry_run) notify_.assign(config.notify().begin(), config.notify().end());
  const absl::Time now = clock_->Now();
  std::set<std::string> seen;
  std::set<std::string> persist;
  auto selected = [&](const std::string& name) { return only.empty() || only.count(name) > 0; };
  for (config::DesiredServer& d : *desired) {
    seen.insert(d.name);
    if (!selected(d.name)) continue;
    // The fixes of the container's applied remediations stay in the spec across deploys.
    WithFixes(ContainerKey(d.spec.server().host(), d.spec.server().container()), &d.spec);
    fleet::v1::Change change;
    change.set_server(d.name);
    auto it = servers_.find(d.name);
    if (it == servers_.end() || it->second.record.removed) {
      change.set_kind("add");
      change.set_detail(absl::StrCat(d.spec.gpus_size() > 1 ? "gpus " : "gpu ",
                                     d.spec.gpus_size() > 1 ? absl::StrJoin(d.spec.gpus(), ",")
                                                            : absl::StrCat(d.spec.server().gpu()),
                                     ", port ", d.spec.port()));
    } else if (!MessageDifferencer::Equals(it->second.record.spec, d.spec) ||
               !MessageDifferencer::Equals(it->second.record.policy, d.policy)) {
      change.set_kind("update");
      change.set_detail("spec or policy changed: the server restarts with it");
    } else {
      change.set_kind(it->second.record.state == v1::SERVER_STATE_GAVE_UP ? "retry" : "unchanged");
      if (change.kind() == "retry") change.set_detail("it gave up: a new deploy tries again");
    }
    changes->push_back(change);
    if (dry_run || change.kind() == "unchanged") continue;
    Server& s = servers_[d.name];
    const bool is_new = change.kind() == "add";
    s.record.name = d.name;
    s.record.host = d.spec.server().host();
    s.record.container = d.spec.server().container();
    s.record.gpu = d.spec.server().gpu();
    s.record.spec = d.spec;
    s.record.policy = d.policy;
    s.record.desired_running = true;
    s.record.removed = false;
    s.next_trigger = is_new ? "initial" : "deploy";
    s.budget_base = s.record.attempt_number;  // a deploy gives it the policy's whole budget
    if (is_new || s.record.state == v1::SERVER_STATE_GAVE_UP ||
        s.record.state == v1::SERVER_STATE_STOPPED) {
      s.restart_requested = false;
      SetState(s, v1::SERVER_STATE_PENDING, now);
      s.attempt = s.attempt.outcome == v1::ATTEMPT_OUTCOME_PENDING ? s.attempt : AttemptRecord();
    } else {
      s.restart_requested = true;  // a changed spec: stop, then start with the new one
      s.restart_now = true;
    }
    Touch(s);
    persist.insert(d.name);
  }
  for (auto& [name, s] : servers_) {
    if (seen.count(name) || s.record.removed || !selected(name)) continue;
    fleet::v1::Change change;
    change.set_server(name);
    change.set_kind("remove");
    change.set_detail("no longer in the config: stopped");
    changes->push_back(change);
    if (dry_run) continue;
    s.record.removed = true;
    Touch(s);
    persist.insert(name);
  }
  if (dry_run) return absl::OkStatus();
  // Links: one per container of the config.
  for (const fleet::v1::Host& h : config.hosts()) {
    const fleet::v1::Host bare = WithoutContainers(h);
    for (const fleet::v1::Container& c : h.containers()) {
      const std::string key = ContainerKey(h.name(), c.ctid());
      auto& link = links_[key];
      if (link && MessageDifferencer::Equals(link->config, c) &&
          MessageDifferencer::Equals(link->host, bare)) {
        continue;
      }
      // The old client is destroyed after the lock is released (its calls' answers take it).
      if (link && link->client) retired_.push_back(std::move(link->client));
      auto fresh = std::make_unique<Link>();
      fresh->container = key;
      fresh->host = bare;
      fresh->config = c;
      if (link) {
        // Where the old link read to: its events are stored, or wait in unsaved_ for a write
        // (with this cursor), so the stored one may be behind.
        fresh->cursor = link->cursor;
      } else if (auto cursor = store_->Cursor(key); cursor.ok()) {
        fresh->cursor = *cursor;
      }
      link = std::move(fresh);
    }
  }
  Persist(persist);
  return absl::OkStatus();
}

absl::StatusOr<fleet::v1::DeployResponse> Daemon::Deploy(const fleet::v1::DeployRequest& request) {
  fleet::v1::DeployResponse response;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock store_lock(&store_mu_);
    std::set<std::string> only(request.only().begin(), request.only().end());
    for (const std::string& name : only) {
      if (!config::ParseServerName(name).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("deploy --only: '", name, "' is not host/ctid/gpuN"));
      }
    }
    // The config: its YAML text when given (parsed here too: a client is not trusted to have
    // checked it), else the message, else the one stored (a plain `fleetctl deploy` applies it
    // again).
    fleet::v1::FleetConfig config;
    std::string source = request.source();
    std::string yaml = request.yaml();
    if (!request.yaml().empty()) {
      auto parsed = config::ParseFleetConfig(request.yaml(),
                                             source.empty() ? std::string("<deploy>") : source);
      if (!parsed.ok()) return parsed.status();
      config = *std::move(parsed);
    } else if (request.has_config()) {
      config = request.config();
      config::ApplyConfigDefaults(&config);
      if (absl::Status s = config::ValidateFleetConfig(config); !s.ok()) return s;
    } else {
      auto stored = store_->LatestConfig();
      if (!stored.ok()) return stored.status();
      if (!stored->has_value()) {
        return absl::FailedPreconditionError("fleetd holds no config yet: deploy one with -f FILE");
      }
      config = **stored;
      source = "(the stored config)";
    }
    std::vector<fleet::v1::Change> changes;
    FleetStore::Batch write(store_.get());  // the servers and the config: one commit
    if (absl::Status s = ApplyConfig(config, only, &changes, request.dry_run()); !s.ok()) {
      return s;
    }
    for (auto& c : changes) *response.add_changes() = std::move(c);
    if (!request.dry_run()) {
      auto version = store_->SaveConfig(config, source, yaml, clock_->Now());
      if (!version.ok()) return version.status();
      response.set_config_version(*version);
    }
  }
  ReleaseRetired();
  if (!request.dry_run()) ConfigureSink();
  {
    absl::MutexLock lock(&queue_mu_);
    wake_ = true;
  }
  NotifySubscribers();
  return response;
}

}  // namespace fleet::daemon
