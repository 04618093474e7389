#include "daemon/daemon.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/config/desired_server.h"
#include "common/config/fleet_config.h"
#include "common/config/server_name.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"

namespace fleet::daemon {
namespace {

using google::protobuf::util::MessageDifferencer;
using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return {};
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

absl::Duration DurationOr(const google::protobuf::Duration& d, absl::Duration fallback) {
  const int64_t ns = TimeUtil::DurationToNanoseconds(d);
  return ns > 0 ? absl::Nanoseconds(ns) : fallback;
}

std::string ContainerKey(const std::string& host, const std::string& ctid) {
  return absl::StrCat(host, "/", ctid);
}

bool Alive(const std::string& state) {
  return state == "STARTING" || state == "LOADING" || state == "JIT_COMPILING" ||
         state == "CAPTURING_GRAPHS" || state == "READY" || state == "STOPPING";
}

std::string ShortClass(const std::string& c) { return c == "none" ? "" : c; }

}  // namespace

bool RetryMayHelp(const std::string& c) {
  return c == "runtime_watchdog" || c == "child_process_failed" || c == "unknown" ||
         c == "startup_stalled" || c == "startup_deadline_exceeded" || c == "nccl_error" ||
         c == "port_in_use" || c.empty() || c == "none";
}

Daemon::Daemon(std::unique_ptr<FleetStore> store, AgentClientFactory factory, Clock* clock,
               DaemonOptions options)
    : factory_(std::move(factory)), clock_(clock), options_(options), store_(std::move(store)) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(std::unique_ptr<FleetStore> store,
                                                       AgentClientFactory factory, Clock* clock,
                                                       DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(store), std::move(factory), clock, options));
  if (absl::Status s = d->Recover(); !s.ok()) return s;
  return d;
}

Daemon::~Daemon() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
    wake_ = true;
  }
  if (loop_.joinable()) loop_.join();
  // The agents' clients go first (their streams end), then the rest.
  absl::MutexLock lock(&mu_);
  for (auto& [name, link] : links_) link->client.reset();
}

// After a start (or a kill -9): the servers and their current attempts from the record, the
// links from the stored config. What the agents run now is learned when each link syncs.
absl::Status Daemon::Recover() {
  absl::MutexLock lock(&mu_);
  auto records = store_->Servers();
  if (!records.ok()) return records.status();
  for (ServerRecord& r : *records) {
    Server s;
    s.record = std::move(r);
    if (!s.record.attempt_id.empty()) {
      auto a = store_->Attempt(s.record.name, s.record.attempt_number);
      if (!a.ok()) return a.status();
      if (a->has_value()) s.attempt = **a;
    }
    servers_[s.record.name] = std::move(s);
  }
  auto config = store_->LatestConfig();
  if (!config.ok()) return config.status();
  if (config->has_value()) {
    for (const fleet::v1::Host& h : (*config)->hosts()) {
      for (const fleet::v1::Container& c : h.containers()) {
        const std::string key = ContainerKey(h.name(), c.ctid());
        auto link = std::make_unique<Link>();
        link->container = key;
        link->host = h;
        link->config = c;
        auto cursor = store_->Cursor(key);
        if (!cursor.ok()) return cursor.status();
        link->cursor = *cursor;
        links_[key] = std::move(link);
      }
    }
  }
  return absl::OkStatus();
}

void Daemon::Start() {
  loop_ = std::thread([this] { Loop(); });
}

void Daemon::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.AwaitWithTimeout(
          absl::Condition(
              +[](Daemon* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->queue_mu_) { return d->wake_; },
              this),
          options_.tick);
      if (stopping_) return;
      wake_ = false;
    }
    Step();
  }
}

void Daemon::Step() {
  const absl::Time now = clock_->Now();
  Ingest(now);
  Connect(now);
  std::vector<Call> calls;
  {
    absl::MutexLock lock(&mu_);
    calls = Reconcile(now);
    if (now - last_prune_ > absl::Hours(1)) {
      last_prune_ = now;
      store_->PruneEvents(now - options_.event_retention, options_.max_events).IgnoreError();
    }
  }
  Perform(calls);
  NotifySubscribers();
}

// --- Events ---------------------------------------------------------------------------------

void Daemon::OnEvent(const std::string& container, fleet::v1::AgentEvent event) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back({container, false, absl::OkStatus(), std::move(event)});
  wake_ = true;
}

void Daemon::OnStreamEnded(const std::string& container, absl::Status status) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back({container, true, std::move(status), {}});
  wake_ = true;
}

void Daemon::Ingest(absl::Time now) {
  std::deque<Queued> batch;
  {
    absl::MutexLock lock(&queue_mu_);
    batch.swap(queue_);
  }
  if (batch.empty()) return;
  absl::MutexLock lock(&mu_);
  // Per container, in arrival order: its events, the rows they touched and the new cursor, in
  // one transaction.
  std::map<std::string, std::vector<fleet::v1::AgentEvent>> events;
  std::map<std::string, std::set<std::string>> touched;
  for (Queued& q : batch) {
    auto link = links_.find(q.container);
    if (link == links_.end()) continue;
    Link& l = *link->second;
    if (q.ended) {
      l.state = Link::kIdle;
      l.failures = std::min(l.failures + 1, 20);
      l.last_error = std::string(q.status.message());
      l.retry_at = now + std::min(options_.reconnect_max,
                                  options_.reconnect_initial * (1 << std::min(l.failures, 10)));
      continue;
    }
    const fleet::v1::AgentEvent& e = q.event;
    if (e.has_resync()) {
      // The agent cannot replay from our position (reinstalled, or its log was pruned): take its
      // snapshot, record the gap, and go on from where the snapshot is.
      auto snapshot = l.client->Status();
      if (snapshot.ok()) {
        const AgentCursor from = l.cursor;
        ApplySnapshot(l, *snapshot, now, &touched[q.container]);
        store_->RecordGap(q.container, from, l.cursor, now).IgnoreError();
      }
      continue;
    }
    if (e.incarnation() == l.cursor.incarnation && e.sequence() <= l.cursor.sequence) continue;
    l.cursor = {e.incarnation(), e.sequence()};
    ApplyEvent(q.container, e, now, &touched[q.container]);
    events[q.container].push_back(e);
  }
  for (auto& [container, names] : touched) {
    std::vector<ServerRecord> servers;
    std::vector<AttemptRecord> attempts;
    for (const std::string& name : names) {
      const Server& s = servers_[name];
      servers.push_back(s.record);
      if (!s.attempt.id.empty()) attempts.push_back(s.attempt);
    }
    const Link& l = *links_[container];
    absl::Status st =
        store_->IngestBatch(container, events[container], servers, attempts, l.cursor, now);
    if (!st.ok()) fprintf(stderr, "fleetd: record: %s\n", st.ToString().c_str());
  }
  for (auto& [container, list] : events) {
    if (touched.count(container)) continue;
    const Link& l = *links_[container];
    store_->IngestBatch(container, list, {}, {}, l.cursor, now).IgnoreError();
  }
}

Daemon::Server* Daemon::FindServer(const fleet::v1::ServerRef& ref) {
  auto it = servers_.find(config::ServerName(ref.host(), ref.container(), ref.gpu()));
  return it == servers_.end() ? nullptr : &it->second;
}

void Daemon::SetState(Server& s, const std::string& state, absl::Time now) {
  if (s.record.state != state) {
    s.record.state = state;
    s.record.state_since = now;
  }
  Touch(s);
}

void Daemon::Touch(Server& s) {
  s.version = ++version_;
  changed_ = true;
}

void Daemon::ApplyEvent(const std::string& container, const fleet::v1::AgentEvent& e,
                        absl::Time now, std::set<std::string>* touched) {
  Server* s = FindServer(e.server());
  if (s == nullptr) return;
  // Events of an older attempt (late, or replayed) update nothing current.
  if (e.attempt_id() != s->attempt.id) return;
  touched->insert(s->record.name);
  AttemptRecord& a = s->attempt;
  if (a.outcome == "pending") {
    a.outcome = "running";
    if (a.launched_at == absl::InfinitePast()) a.launched_at = now;
  }
  switch (e.kind_case()) {
    case fleet::v1::AgentEvent::kPhase: {
      const std::string& state = e.phase().state();
      s->record.phase_detail = e.phase().detail();
      if (state == "FAILED") {
        a.outcome = "failed";
        a.ended_at = now;
        s->record.reason = a.summary.empty() ? "the server failed" : a.summary;
      } else if (state == "STOPPED") {
        if (s->stalled) {
          // Stopped because it stalled: a failure with the stall's diagnosis.
          a.outcome = "failed";
          SetState(*s, "FAILED", now);
          a.ended_at = now;
          s->record.reason = a.summary;
          break;
        }
        if (a.outcome != "failed") a.outcome = "stopped";
        a.ended_at = now;
      } else if (state == "READY") {
        a.outcome = "ready";
        s->record.progress_step = s->record.progress_total = 0;
      }
      SetState(*s, state, now);
      break;
    }
    case fleet::v1::AgentEvent::kProgress:
      s->record.progress_step = e.progress().step();
      s->record.progress_total = e.progress().total();
      Touch(*s);
      break;
    case fleet::v1::AgentEvent::kDiagnosis: {
      const fleet::v1::Diagnosis& d = e.diagnosis().diagnosis();
      a.diagnosis = d;
      a.diagnosis_class = d.diagnosis_class();
      a.summary = d.summary();
      s->record.last_class = ShortClass(d.diagnosis_class());
      s->record.last_summary = d.summary();
      Touch(*s);
      break;
    }
    case fleet::v1::AgentEvent::kExited:
      a.exit = e.exited();
      a.ended_at = now;
      Touch(*s);
      break;
    case fleet::v1::AgentEvent::kReady:
      a.time_to_ready_ms = TimeUtil::DurationToMilliseconds(e.ready().time_to_ready());
      Touch(*s);
      break;
    case fleet::v1::AgentEvent::kStalled: {
      const fleet::v1::Diagnosis& d = e.stalled().diagnosis();
      a.diagnosis = d;
      a.diagnosis_class = d.diagnosis_class();
      a.summary = d.summary();
      s->record.last_class = d.diagnosis_class();
      s->record.last_summary = d.summary();
      s->stalled = true;
      Touch(*s);
      break;
    }
    default:
      break;
  }
}

// What the agent runs now, after a (re)connection it could not replay from our position.
void Daemon::ApplySnapshot(Link& link, const fleet::v1::StatusResponse& snapshot, absl::Time now,
                           std::set<std::string>* touched) {
  std::map<int32_t, const fleet::v1::ServerStatus*> by_gpu;
  for (const fleet::v1::ServerStatus& st : snapshot.servers()) by_gpu[st.server().gpu()] = &st;
  for (auto& [name, s] : servers_) {
    if (ContainerKey(s.record.host, s.record.container) != link.container) continue;
    if (s.attempt.id.empty()) continue;
    auto it = by_gpu.find(s.record.gpu);
    const fleet::v1::ServerStatus* st = it == by_gpu.end() ? nullptr : it->second;
    if (st != nullptr && st->attempt_id() == s.attempt.id) {
      // The agent knows our attempt: take its view.
      if (s.attempt.outcome == "pending") {
        s.attempt.outcome = "running";
        s.attempt.launched_at = now;
      }
      s.record.phase_detail = st->phase_detail();
      s.record.progress_step = st->progress_step();
      s.record.progress_total = st->progress_total();
      if (st->has_diagnosis()) {
        s.attempt.diagnosis = st->diagnosis();
        s.attempt.diagnosis_class = st->diagnosis().diagnosis_class();
        s.attempt.summary = st->diagnosis().summary();
        s.record.last_class = ShortClass(st->diagnosis().diagnosis_class());
        s.record.last_summary = st->diagnosis().summary();
      }
      if (st->has_exit()) s.attempt.exit = st->exit();
      if (st->state() == "FAILED") {
        s.attempt.outcome = "failed";
        s.attempt.ended_at = now;
        s.record.reason = s.attempt.summary;
      } else if (st->state() == "STOPPED") {
        if (s.attempt.outcome != "failed") s.attempt.outcome = "stopped";
        s.attempt.ended_at = now;
      } else if (st->state() == "READY") {
        s.attempt.outcome = "ready";
      }
      SetState(s, st->state(), now);
      touched->insert(name);
    } else if (s.attempt.outcome == "running" || s.attempt.outcome == "ready") {
      // We had it running, the agent does not know it (state lost): the attempt is lost, and a
      // new one will be made.
      s.attempt.outcome = "lost";
      s.attempt.ended_at = now;
      s.record.reason = "the agent lost this attempt (its state was reset)";
      SetState(s, "PENDING", now);
      s.record.attempt_id.clear();
      touched->insert(name);
      // Close the lost attempt's row now; the next attempt gets the next number.
      if (absl::Status put = store_->PutAttempt(s.attempt); !put.ok()) {
        fprintf(stderr, "fleetd: record %s: %s\n", name.c_str(), put.ToString().c_str());
      }
      s.attempt = AttemptRecord();
    }
  }
  link.cursor = {snapshot.incarnation(), snapshot.sequence()};
}

// --- Links ----------------------------------------------------------------------------------

void Daemon::Connect(absl::Time now) {
  // Which links are due, and their clients (made on first use), under the lock; the calls
  // without it.
  struct Due {
    std::string container;
    AgentClient* client;
    AgentCursor cursor;
  };
  std::vector<Due> due;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, link] : links_) {
      if (link->state != Link::kIdle || now < link->retry_at) continue;
      if (!link->client) {
        link->client = factory_(key, link->host, link->config);
        if (!link->client) {
          link->retry_at = absl::InfiniteFuture();
          link->last_error = "no way to reach this container yet";
          continue;
        }
      }
      due.push_back({key, link->client.get(), link->cursor});
    }
  }
  for (const Due& d : due) {
    // Know what the agent runs before following it: its incarnation tells whether its stream
    // can resume from our cursor.
    absl::StatusOr<fleet::v1::StatusResponse> snapshot = d.client->Status();
    absl::MutexLock lock(&mu_);
    Link& l = *links_[d.container];
    if (!snapshot.ok()) {
      l.failures = std::min(l.failures + 1, 20);
      l.last_error = std::string(snapshot.status().message());
      l.retry_at = now + std::min(options_.reconnect_max,
                                  options_.reconnect_initial * (1 << std::min(l.failures, 10)));
      continue;
    }
    if (snapshot->incarnation() != l.cursor.incarnation) {
      std::set<std::string> touched;
      const AgentCursor from = l.cursor;
      ApplySnapshot(l, *snapshot, now, &touched);
      if (!from.incarnation.empty())
        store_->RecordGap(d.container, from, l.cursor, now).IgnoreError();
      std::vector<ServerRecord> servers;
      std::vector<AttemptRecord> attempts;
      for (const std::string& name : touched) {
        servers.push_back(servers_[name].record);
        if (!servers_[name].attempt.id.empty()) attempts.push_back(servers_[name].attempt);
      }
      store_->IngestBatch(d.container, {}, servers, attempts, l.cursor, now).IgnoreError();
    }
    l.state = Link::kFollowing;
    l.failures = 0;
    l.last_error.clear();
    l.client->Follow(l.cursor.incarnation, l.cursor.sequence, this);
  }
}

// --- The reconciler -------------------------------------------------------------------------

std::vector<Daemon::Call> Daemon::Reconcile(absl::Time now) {
  std::vector<Call> calls;
  std::set<std::string> persist;
  for (auto& entry : servers_) {
    // Named, not bound: the lambdas below capture them (clang 14 cannot capture bindings).
    const std::string& name = entry.first;
    Server& s = entry.second;
    ServerRecord& r = s.record;
    const std::string container = ContainerKey(r.host, r.container);
    auto link = links_.find(container);
    const bool reachable = link != links_.end() && link->second->state == Link::kFollowing;
    const bool wanted = r.desired_running && !r.removed;
    const bool alive = Alive(r.state);

    auto stop = [&]() {
      if (s.stop_sent || !reachable) return;
      Call c{Call::kStop, name, container, {}, {}};
      c.stop.mutable_server()->set_host(r.host);
      c.stop.mutable_server()->set_container(r.container);
      c.stop.mutable_server()->set_gpu(r.gpu);
      calls.push_back(std::move(c));
      s.stop_sent = true;
    };
    auto launch = [&](const std::string& trigger) {
      if (!reachable) return;
      if (s.attempt.id.empty() || s.attempt.outcome != "pending") {
        // The attempt row exists before the agent hears of it.
        auto a = store_->CreateAttempt(name, trigger, r.spec, now);
        if (!a.ok()) {
          fprintf(stderr, "fleetd: %s\n", a.status().ToString().c_str());
          return;
        }
        s.attempt = *std::move(a);
        r.attempt_id = s.attempt.id;
        r.attempt_number = s.attempt.number;
        r.reason.clear();
        // The row's diagnosis is the current attempt's: the last one's stays in its attempt row.
        r.last_class.clear();
        r.last_summary.clear();
        s.next_trigger.clear();
        r.progress_step = r.progress_total = 0;
        SetState(s, "PENDING", now);
        persist.insert(name);
      }
      Call c{Call::kLaunch, name, container, {}, {}};
      c.launch.set_attempt_id(s.attempt.id);
      c.launch.set_attempt_number(s.attempt.number);
      *c.launch.mutable_spec() = r.spec;
      calls.push_back(std::move(c));
    };

    if (!wanted) {
      if (alive && r.state != "STOPPING") stop();
      if (!alive && r.state != "STOPPED" && r.state != "GAVE_UP" && r.state != "FAILED" &&
          s.attempt.outcome != "pending") {
        SetState(s, "STOPPED", now);
        persist.insert(name);
      }
      continue;
    }
    if (s.stalled && alive && r.state != "STOPPING") {
      stop();
      continue;
    }
    if (s.restart_requested) {
      if (alive) {
        stop();
        continue;
      }
      s.restart_requested = false;
      s.stop_sent = false;
      s.stalled = false;
      r.backoff_until = s.restart_now ? absl::InfinitePast() : now;
      launch(s.next_trigger.empty() ? "restart" : s.next_trigger);
      continue;
    }
    if (r.state == "PENDING") {
      launch(!s.next_trigger.empty() ? s.next_trigger
             : r.attempt_number == 0 ? "initial"
                                     : "recovery");
      continue;
    }
    if (r.state == "FAILED" || (r.state == "STOPPED" && s.attempt.outcome == "failed")) {
      s.stop_sent = false;
      s.stalled = false;
      const int32_t max_attempts = r.policy.max_attempts() > 0 ? r.policy.max_attempts() : 8;
      if (!RetryMayHelp(s.attempt.diagnosis_class)) {
        r.reason = absl::StrCat(
            s.attempt.diagnosis_class, ": ", s.attempt.summary,
            " (a restart would meet the same failure; the remediation planner makes the fix)");
        SetState(s, "GAVE_UP", now);
        persist.insert(name);
      } else if (r.attempt_number >= max_attempts) {
        r.reason = absl::StrCat("attempt budget spent (", max_attempts,
                                "); last: ", s.attempt.diagnosis_class, ": ", s.attempt.summary);
        SetState(s, "GAVE_UP", now);
        persist.insert(name);
      } else {
        const absl::Duration initial = DurationOr(r.policy.backoff_initial(), absl::Seconds(5));
        const absl::Duration max = DurationOr(r.policy.backoff_max(), absl::Minutes(5));
        const int n = static_cast<int>(std::min<int64_t>(r.attempt_number, 16));
        r.backoff_until = now + std::min(max, initial * (1 << (n - 1)));
        SetState(s, "RESTARTING", now);
        persist.insert(name);
      }
      continue;
    }
    if (r.state == "RESTARTING" && now >= r.backoff_until) {
      launch("restart");
      continue;
    }
  }
  Persist(persist);
  return calls;
}

void Daemon::Perform(const std::vector<Call>& calls) {
  for (const Call& c : calls) {
    AgentClient* client = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto link = links_.find(c.container);
      if (link != links_.end()) client = link->second->client.get();
    }
    if (client == nullptr) continue;
    if (c.kind == Call::kStop) {
      absl::StatusOr<fleet::v1::StopResponse> r = client->Stop(c.stop);
      absl::MutexLock lock(&mu_);
      Server& s = servers_[c.server];
      if (!r.ok()) {
        s.stop_sent = false;  // try again next turn
      } else if (r->status().state() == "STOPPING") {
        SetState(s, "STOPPING", clock_->Now());
      }
      continue;
    }
    absl::StatusOr<fleet::v1::LaunchResponse> r = client->Launch(c.launch);
    const absl::Time now = clock_->Now();
    absl::MutexLock lock(&mu_);
    Server& s = servers_[c.server];
    if (s.attempt.id != c.launch.attempt_id()) continue;
    if (r.ok()) {
      if (s.attempt.outcome == "pending") s.attempt.outcome = "running";
      if (s.attempt.launched_at == absl::InfinitePast()) s.attempt.launched_at = now;
      if (s.record.state == "PENDING") SetState(s, "STARTING", now);
      s.stop_sent = false;
    } else if (absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status())) {
      // The agent is away: the attempt stays pending and is launched (same id) when it is back.
      continue;
    } else {
      // The agent refused it (a spec it cannot run, a GPU busy with another attempt).
      s.attempt.outcome = "failed";
      s.attempt.ended_at = now;
      s.attempt.diagnosis_class = "unknown";
      s.attempt.summary = absl::StrCat("launch refused: ", r.status().message());
      s.record.last_class = "unknown";
      s.record.last_summary = s.attempt.summary;
      s.record.reason = s.attempt.summary;
      SetState(s, "GAVE_UP", now);
    }
    Persist({c.server});
  }
}

void Daemon::Persist(const std::set<std::string>& names) {
  for (const std::string& name : names) {
    Server& s = servers_[name];
    absl::Status st = store_->PutServer(s.record);
    if (st.ok() && !s.attempt.id.empty()) st = store_->PutAttempt(s.attempt);
    if (!st.ok()) fprintf(stderr, "fleetd: record %s: %s\n", name.c_str(), st.ToString().c_str());
  }
}

// --- Desired state --------------------------------------------------------------------------

absl::Status Daemon::ApplyConfig(const fleet::v1::FleetConfig& config,
                                 const std::set<std::string>& only,
                                 std::vector<fleet::v1::Change>* changes, bool dry_run) {
  auto desired = config::ExpandServers(config);
  if (!desired.ok()) return desired.status();
  const absl::Time now = clock_->Now();
  std::set<std::string> seen;
  std::set<std::string> persist;
  auto selected = [&](const std::string& name) { return only.empty() || only.count(name) > 0; };
  for (const config::DesiredServer& d : *desired) {
    seen.insert(d.name);
    if (!selected(d.name)) continue;
    fleet::v1::Change change;
    change.set_server(d.name);
    auto it = servers_.find(d.name);
    if (it == servers_.end() || it->second.record.removed) {
      change.set_kind("add");
      change.set_detail(absl::StrCat("gpu ", d.spec.server().gpu(), ", port ", d.spec.port()));
    } else if (!MessageDifferencer::Equals(it->second.record.spec, d.spec) ||
               !MessageDifferencer::Equals(it->second.record.policy, d.policy)) {
      change.set_kind("update");
      change.set_detail("spec or policy changed: the server restarts with it");
    } else {
      change.set_kind(it->second.record.state == "GAVE_UP" ? "retry" : "unchanged");
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
    if (is_new || s.record.state == "GAVE_UP" || s.record.state == "STOPPED") {
      s.restart_requested = false;
      SetState(s, "PENDING", now);
      s.attempt = s.attempt.outcome == "pending" ? s.attempt : AttemptRecord();
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
    for (const fleet::v1::Container& c : h.containers()) {
      const std::string key = ContainerKey(h.name(), c.ctid());
      auto& link = links_[key];
      if (link && MessageDifferencer::Equals(link->config, c) &&
          MessageDifferencer::Equals(link->host, h)) {
        continue;
      }
      auto fresh = std::make_unique<Link>();
      fresh->container = key;
      fresh->host = h;
      fresh->config = c;
      auto cursor = store_->Cursor(key);
      if (cursor.ok()) fresh->cursor = *cursor;
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
  {
    absl::MutexLock lock(&queue_mu_);
    wake_ = true;
  }
  NotifySubscribers();
  return response;
}

// --- Queries --------------------------------------------------------------------------------

fleet::v1::ServerRow Daemon::Row(const Server& s) const {
  fleet::v1::ServerRow row;
  const ServerRecord& r = s.record;
  row.set_server(r.name);
  row.set_state(r.state);
  row.set_phase_detail(r.phase_detail);
  row.set_progress_step(r.progress_step);
  row.set_progress_total(r.progress_total);
  row.set_attempt_number(r.attempt_number);
  *row.mutable_state_since() = ToTimestamp(r.state_since);
  *row.mutable_attempt_started_at() = ToTimestamp(s.attempt.created_at);
  row.set_last_diagnosis_class(r.last_class);
  row.set_last_diagnosis_summary(r.last_summary);
  row.set_port(r.spec.port());
  row.set_degraded(r.degraded);
  row.set_reason(r.reason);
  return row;
}

fleet::v1::FleetStatusResponse Daemon::Status(const fleet::v1::FleetStatusRequest& request) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> only(request.servers().begin(), request.servers().end());
  fleet::v1::FleetStatusResponse response;
  for (const auto& [name, s] : servers_) {
    if (s.record.removed) continue;
    if (!only.empty() && !only.count(name)) continue;
    *response.add_servers() = Row(s);
  }
  *response.mutable_at() = ToTimestamp(clock_->Now());
  return response;
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

absl::StatusOr<fleet::v1::ListAttemptsResponse> Daemon::ListAttempts(
    const fleet::v1::ListAttemptsRequest& request) {
  absl::MutexLock lock(&mu_);
  if (!request.server().empty() && !servers_.count(request.server())) {
    return absl::NotFoundError(absl::StrCat("no server ", request.server()));
  }
  auto attempts = store_->Attempts(request.server());
  if (!attempts.ok()) return attempts.status();
  fleet::v1::ListAttemptsResponse response;
  for (const AttemptRecord& a : *attempts) {
    auto* out = response.add_attempts();
    out->set_id(a.id);
    out->set_server(a.server);
    out->set_number(a.number);
    *out->mutable_started_at() = ToTimestamp(a.created_at);
    *out->mutable_ended_at() = ToTimestamp(a.ended_at);
    out->set_outcome(a.outcome);
    *out->mutable_exit() = a.exit;
    out->set_diagnosis_class(a.diagnosis_class);
    out->set_summary(a.summary);
    out->set_trigger(a.trigger);
    if (a.time_to_ready_ms >= 0) {
      *out->mutable_time_to_ready() = TimeUtil::MillisecondsToDuration(a.time_to_ready_ms);
    }
  }
  return response;
}

absl::StatusOr<fleet::v1::ExplainResponse> Daemon::Explain(
    const fleet::v1::ExplainRequest& request) {
  absl::MutexLock lock(&mu_);
  if (!servers_.count(request.server())) {
    return absl::NotFoundError(absl::StrCat("no server ", request.server()));
  }
  auto a = store_->Attempt(request.server(), request.attempt_number());
  if (!a.ok()) return a.status();
  if (!a->has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "server ", request.server(), " has no attempt",
        request.attempt_number() > 0 ? absl::StrCat(" ", request.attempt_number()) : ""));
  }
  // The current attempt may be newer in memory than in the record.
  const Server& s = servers_[request.server()];
  const AttemptRecord& attempt = (*a)->id == s.attempt.id ? s.attempt : **a;
  fleet::v1::ExplainResponse response;
  auto* out = response.mutable_attempt();
  out->set_id(attempt.id);
  out->set_server(attempt.server);
  out->set_number(attempt.number);
  *out->mutable_started_at() = ToTimestamp(attempt.created_at);
  *out->mutable_ended_at() = ToTimestamp(attempt.ended_at);
  out->set_outcome(attempt.outcome);
  *out->mutable_exit() = attempt.exit;
  out->set_diagnosis_class(attempt.diagnosis_class);
  out->set_summary(attempt.summary);
  out->set_trigger(attempt.trigger);
  *response.mutable_diagnosis() = attempt.diagnosis;
  if (response.diagnosis().diagnosis_class().empty()) {
    response.mutable_diagnosis()->set_diagnosis_class("none");
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

absl::StatusOr<fleet::v1::ServersResponse> Daemon::Restart(
    const fleet::v1::ServersRequest& request) {
  fleet::v1::ServersResponse response;
  {
    absl::MutexLock lock(&mu_);
    auto names = Select(request);
    if (!names.ok()) return names.status();
    std::set<std::string> persist;
    for (const std::string& name : *names) {
      Server& s = servers_[name];
      s.record.desired_running = true;
      s.restart_requested = true;
      s.restart_now = request.now();
      s.next_trigger = "restart";
      s.stop_sent = false;
      Touch(s);
      persist.insert(name);
      *response.add_servers() = Row(s);
    }
    Persist(persist);
  }
  {
    absl::MutexLock lock(&queue_mu_);
    wake_ = true;
  }
  return response;
}

absl::StatusOr<fleet::v1::ServersResponse> Daemon::Stop(const fleet::v1::ServersRequest& request) {
  fleet::v1::ServersResponse response;
  {
    absl::MutexLock lock(&mu_);
    auto names = Select(request);
    if (!names.ok()) return names.status();
    std::set<std::string> persist;
    for (const std::string& name : *names) {
      Server& s = servers_[name];
      s.record.desired_running = false;
      s.restart_requested = false;
      Touch(s);
      persist.insert(name);
      *response.add_servers() = Row(s);
    }
    Persist(persist);
  }
  {
    absl::MutexLock lock(&queue_mu_);
    wake_ = true;
  }
  return response;
}

absl::Status Daemon::Logs(const fleet::v1::ServerLogsRequest& request,
                          const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk) {
  AgentClient* client = nullptr;
  fleet::v1::LogsRequest agent_request;
  {
    absl::MutexLock lock(&mu_);
    auto it = servers_.find(request.server());
    if (it == servers_.end())
      return absl::NotFoundError(absl::StrCat("no server ", request.server()));
    const ServerRecord& r = it->second.record;
    auto link = links_.find(ContainerKey(r.host, r.container));
    if (link == links_.end() || !link->second->client) {
      return absl::UnavailableError(
          absl::StrCat("container ", r.host, "/", r.container, ": its agent is not connected"));
    }
    client = link->second->client.get();
    agent_request.mutable_server()->set_host(r.host);
    agent_request.mutable_server()->set_container(r.container);
    agent_request.mutable_server()->set_gpu(r.gpu);
    agent_request.set_attempt_number(request.attempt_number());
    agent_request.set_follow(request.follow());
    agent_request.set_tail_lines(request.tail_lines());
  }
  return client->Logs(agent_request, on_chunk);
}

// --- Subscribers ----------------------------------------------------------------------------

void Daemon::Subscribe(StatusSubscriber* s) {
  absl::MutexLock lock(&mu_);
  subscribers_.insert(s);
}

void Daemon::Unsubscribe(StatusSubscriber* s) {
  absl::MutexLock notify(&notify_mu_);
  absl::MutexLock lock(&mu_);
  subscribers_.erase(s);
}

void Daemon::NotifySubscribers() {
  absl::MutexLock notify(&notify_mu_);
  std::vector<StatusSubscriber*> to_notify;
  {
    absl::MutexLock lock(&mu_);
    if (!changed_) return;
    changed_ = false;
    to_notify.assign(subscribers_.begin(), subscribers_.end());
  }
  for (StatusSubscriber* s : to_notify) s->OnStatusChanged();
}

}  // namespace fleet::daemon
