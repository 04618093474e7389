// The daemon's life and its turn: start (Recover), the loop, Step (ingest, connect, reconcile,
// commit, send), the row writes, the subscribers. The parts: agent_links.cc (what the agents
// say), reconciler.h (what to do, decided) and apply_decisions.cc (done), remediation.cc (what to
// fix), fleet_api.cc (what users ask).
#include "daemon/daemon.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/proto_time.h"
#include "common/config/desired_server.h"
#include "common/config/fleet_config.h"
#include "common/config/server_name.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/events/fleet_event_json.h"
#include "common/log/log.h"
#include "daemon/events/fleet_events.h"
#include "daemon/server_state.h"
#include "google/protobuf/util/message_differencer.h"

namespace fleet::daemon {

using google::protobuf::util::MessageDifferencer;
ServerRecord StateOf(const ServerRecord& r) {
  ServerRecord out;
  out.name = r.name;
  out.host = r.host;
  out.container = r.container;
  out.gpu = r.gpu;
  out.desired_running = r.desired_running;
  out.removed = r.removed;
  out.state = r.state;
  out.phase_detail = r.phase_detail;
  out.progress_step = r.progress_step;
  out.progress_total = r.progress_total;
  out.state_since = r.state_since;
  out.attempt_id = r.attempt_id;
  out.attempt_number = r.attempt_number;
  out.last_class = r.last_class;
  out.last_summary = r.last_summary;
  out.reason = r.reason;
  out.backoff_until = r.backoff_until;
  out.degraded = r.degraded;
  return out;
}

fleet::v1::Host WithoutContainers(const fleet::v1::Host& h) {
  fleet::v1::Host bare = h;
  bare.clear_containers();
  return bare;
}

Daemon::Daemon(std::unique_ptr<FleetStore> store, AgentClientFactory factory, Clock* clock,
               DaemonOptions options)
    : factory_(options.fence ? FencedFactory(std::move(factory), options.fence)
                             : std::move(factory)),
      clock_(clock),
      options_(options),
      reconciler_(options.backoff_reset),
      store_(std::move(store)),
      pacer_(options.calls_in_flight,
             [this](AgentCall& call, std::function<void()> finished) {
               return SendCall(call, std::move(finished));
             }),
      planner_(&CudaReleaseTable::Builtin(), options.planner) {
  runner_ =
      std::make_unique<RemediationRunner>(factory_, &planner_, this, clock_, options_.fix_threads,
                                          [this](FixDone done) { FixFinished(std::move(done)); });
}

void Daemon::FixFinished(FixDone done) {
  absl::MutexLock lock(&queue_mu_);
  fix_done_.push_back(std::move(done));
  wake_ = true;
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(std::unique_ptr<FleetStore> store,
                                                       AgentClientFactory factory, Clock* clock,
                                                       DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(store), std::move(factory), clock, options));
  if (absl::Status s = d->Recover(); !s.ok()) return s;
  return d;
}

Daemon::~Daemon() {
  {
    // Log streams end first: a `logs -f` of a quiet server would wait for its next line forever.
    absl::MutexLock lock(&logs_mu_);
    logs_closed_ = true;
    for (CallCancel* c : log_calls_) c->Cancel();
    while (!log_calls_.empty()) logs_done_.Wait(&logs_mu_);
  }
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
    wake_ = true;
  }
  if (loop_.joinable()) loop_.join();
  // A job in progress finishes (its agent calls have deadlines); queued ones are dropped.
  runner_->Stop();
  {
    // Streams that wait for room read on (Admit says yes from now on), so that they can end.
    std::vector<std::function<void()>> resume;
    {
      absl::MutexLock lock(&queue_mu_);
      resume.swap(parked_);
    }
    for (auto& r : resume) r();
  }
  // Calls not sent yet are dropped (the answers of those in flight start no more), and a sender
  // that holds a client lets it go: the clients are destroyed here, on this thread, never on one
  // of gRPC's whose call the destructor would wait for.
  pacer_.Close();
  // The agents' clients go first (their streams end, their calls in flight are cancelled), then
  // the rest. Destroyed without the lock: a call's answer takes it.
  std::vector<std::shared_ptr<AgentClient>> clients;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, link] : links_) clients.push_back(std::move(link->client));
    for (auto& client : retired_) clients.push_back(std::move(client));
  }
  clients.clear();
}

// After a start (or a kill -9): the servers and their current attempts from the record, the
// links from the stored config. What the agents run now is learned when each link syncs.
absl::Status Daemon::Recover() {
  absl::MutexLock lock(&mu_);
  absl::MutexLock store_lock(&store_mu_);
  return RecoverLocked();
}

absl::Status Daemon::Reload(absl::Duration max_age) {
  absl::MutexLock lock(&mu_);
  absl::MutexLock store_lock(&store_mu_);
  // A read that decided "standby" just before this fleetd took over and started must not wipe
  // the live state (its links, unsaved rows, calls in flight): it reads that state instead.
  if (started_) return absl::OkStatus();
  const absl::Time now = clock_->Now();
  if (loaded_at_ > now - max_age && max_age > absl::ZeroDuration()) return absl::OkStatus();
  // A standby never connected a link nor ran a turn: nothing here is the only copy of anything.
  servers_.clear();
  links_.clear();
  fixes_.clear();
  unsaved_ = Unsaved();
  dirty_.clear();
  absl::Status s = RecoverLocked();
  if (s.ok()) changed_ = true;
  return s;
}

void Daemon::FenceRecord(const std::string& fleet_id, int64_t term) {
  absl::MutexLock store_lock(&store_mu_);
  store_->SetFence(fleet_id, term);
}

absl::StatusOr<std::string> Daemon::FleetId() {
  absl::MutexLock store_lock(&store_mu_);
  return store_->FleetId();
}

absl::Status Daemon::RecoverLocked() {
  loaded_at_ = clock_->Now();
  auto records = store_->Servers();
  if (!records.ok()) return records.status();
  for (ServerRecord& r : *records) {
    Server s;
    s.record = std::move(r);
    if (!s.record.attempt_id.empty()) {
      auto a = store_->Attempt(s.record.name, s.record.attempt_number);
      if (!a.ok()) return a.status();
      if (a->has_value()) s.attempt = **a;
      // Its outcome, if it has one, was told before the stop (attempt_finished once).
      if (s.attempt.outcome != v1::ATTEMPT_OUTCOME_PENDING &&
          s.attempt.outcome != v1::ATTEMPT_OUTCOME_RUNNING) {
        s.attempt_told = s.attempt.id;
      }
      if (s.attempt.outcome == v1::ATTEMPT_OUTCOME_FAILED ||
          s.attempt.outcome == v1::ATTEMPT_OUTCOME_LOST) {
        s.failed_since_ready = true;
        s.recovered_from = s.attempt.diagnosis_class;
      }
      // The budget counts from the last attempt a deploy made.
      auto all = store_->Attempts(s.record.name);
      if (!all.ok()) return all.status();
      for (const AttemptRecord& past : *all) {
        if (past.trigger == "initial" || past.trigger == "deploy") s.budget_base = past.number - 1;
        // An earlier attempt the record still has open: its end was waiting for a commit
        // (finding 16) when fleetd stopped. The server has moved on; it is closed as lost.
        if (past.number < s.record.attempt_number &&
            (past.outcome == v1::ATTEMPT_OUTCOME_PENDING ||
             past.outcome == v1::ATTEMPT_OUTCOME_RUNNING)) {
          AttemptRecord closed = past;
          closed.outcome = v1::ATTEMPT_OUTCOME_LOST;
          closed.ended_at = clock_->Now();
          unsaved_.closed.push_back(std::move(closed));
        }
      }
    }
    // Times from an earlier run are in its clock's frame: after a step of the wall clock between
    // the two (common/base/clock.h) a backoff could end an hour late. None waits longer than its
    // policy's longest backoff from now.
    const absl::Time now = clock_->Now();
    const absl::Duration longest = ProtoDurationOr(s.record.policy.backoff_max(), absl::Minutes(5));
    if (s.record.backoff_until > now + longest) s.record.backoff_until = now + longest;
    // Changed as far as a watch is concerned: its first message is the whole table.
    Touch(s);
    servers_[s.record.name] = std::move(s);
  }
  if (absl::Status s = LoadFixes(); !s.ok()) return s;
  auto config = store_->LatestConfig();
  if (!config.ok()) return config.status();
  auto range = store_->FleetEventRange();
  if (!range.ok()) return range.status();
  journal_.SetLastIndex(range->second);
  if (config->has_value()) {
    notify_.assign((*config)->notify().begin(), (*config)->notify().end());
    for (const fleet::v1::Host& h : (*config)->hosts()) {
      const fleet::v1::Host bare = WithoutContainers(h);
      for (const fleet::v1::Container& c : h.containers()) {
        const std::string key = ContainerKey(h.name(), c.ctid());
        auto link = std::make_unique<Link>();
        link->container = key;
        link->host = bare;
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
  {
    absl::MutexLock lock(&mu_);
    started_ = true;  // from now on the state in memory is the live one: Reload leaves it
  }
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
  // A leader that may no longer act (its lease lapsed; it steps down) does nothing more: its
  // writes would be fenced and its agent requests refused, but nothing is even tried.
  if (options_.may_act && !options_.may_act()) return;
  const absl::Time now = clock_->Now();
  Ingest(now);
  Connect(now);
  WriteUnsaved(now);
  std::vector<AgentCall> calls;
  std::vector<FixJob> jobs;
  std::set<std::string> persist;
  std::set<std::string> unrecorded;  // servers whose rows this turn could not write
  mu_.Lock();
  store_mu_.Lock();
  {
    // The turn's attempts and rows: one commit, made before any Launch is sent. The rows are
    // copied under mu_ and written without it.
    FleetStore::Batch write(store_.get());
    ApplyFixResults(now, &persist);
    calls = Reconcile(now, &persist, &jobs);
    persist.merge(dirty_);
    dirty_.clear();
    const std::vector<RowWrite> rows = Collect(persist);
    mu_.Unlock();
    WriteRows(rows, &unrecorded);
    if (absl::Status st = write.Commit(); !st.ok()) {
      RecordFailed(st, {}, " (the turn's agent calls wait for a commit)");
      unrecorded = persist;
    } else if (unrecorded.empty()) {
      RecordWritten();
    }
  }
  {
    // Nothing leaves without its record: a call whose server's rows (its attempt's among them)
    // are not committed waits, its server keeping launch_in_flight or stop_sent so that no turn
    // decides it again, and the rows are written again next turn. The calls of earlier turns go
    // first once theirs are.
    std::vector<AgentCall> ready;
    std::vector<AgentCall> waiting;
    for (std::vector<AgentCall>* list : {&unrecorded_calls_, &calls}) {
      for (AgentCall& c : *list) {
        (unrecorded.count(c.server) ? waiting : ready).push_back(std::move(c));
      }
    }
    unrecorded_calls_ = std::move(waiting);
    calls = std::move(ready);
  }
  RecordPending();
  // The turn's fleet events, in a commit of their own once its rows are in theirs (an event is
  // never told of a change the record could still lose), with the deliveries they make.
  std::vector<DeliveryRecord> deliveries;
  const std::vector<fleet::v1::FleetEvent> journaled = WriteJournal(now, &deliveries);
  if (now - last_prune_ > absl::Hours(1)) {
    last_prune_ = now;
    store_->PruneEvents(now - options_.event_retention, options_.max_events).IgnoreError();
  }
  store_mu_.Unlock();
  journal_.Publish(journaled);
  if (!deliveries.empty()) {
    absl::MutexLock lock(&sink_mu_);
    if (delivery_sink_ != nullptr) delivery_sink_->Deliver(std::move(deliveries));
  }
  if (!unrecorded.empty()) {
    absl::MutexLock lock(&mu_);
    dirty_.merge(unrecorded);
  }
  pacer_.Submit(std::move(calls));
  runner_->Submit(std::move(jobs));
  {
    // What answers already came (a client that answers at once) is recorded in this turn.
    absl::MutexLock lock(&mu_);
    absl::MutexLock store_lock(&store_mu_);
    if (!dirty_.empty()) {
      std::set<std::string> dirty;
      dirty.swap(dirty_);
      Persist(dirty);
    }
  }
  ReleaseRetired();
  NotifySubscribers();
}

std::vector<fleet::v1::FleetEvent> Daemon::WriteJournal(absl::Time now,
                                                        std::vector<DeliveryRecord>* deliveries) {
  std::vector<fleet::v1::FleetEvent> batch = journal_.Take();
  if (batch.empty()) return batch;
  for (const fleet::v1::FleetEvent& e : batch) {
    if (!events::IsNotifiable(e.type())) continue;
    for (const fleet::v1::Notify& n : notify_) {
      if (!n.events().empty() &&
          std::find(n.events().begin(), n.events().end(), e.type()) == n.events().end()) {
        continue;
      }
      DeliveryRecord d;
      d.event_index = e.index();
      d.notify = n.name();
      d.event_type = e.type();
      d.server = e.server();
      d.next_at = now;
      d.body = fleet::events::WebhookBody(e);
      deliveries->push_back(std::move(d));
    }
  }
  if (absl::Status st = store_->AppendFleetEvents(batch, deliveries, now); !st.ok()) {
    RecordFailed(st, {}, " (the fleet events are written again next turn)");
    deliveries->clear();
    journal_.Requeue(std::move(batch));
    return {};
  }
  journal_.Committed(batch);
  return batch;
}

absl::StatusOr<std::vector<fleet::v1::FleetEvent>> Daemon::FleetEvents(int64_t since, size_t limit,
                                                                       int64_t* oldest) {
  std::vector<fleet::v1::FleetEvent> out;
  absl::MutexLock lock(&store_mu_);
  auto range = store_->FleetEventRange();
  if (!range.ok()) return range.status();
  *oldest = range->first;
  if (journal_.Recent(since, limit, &out)) return out;
  return store_->FleetEvents(since, static_cast<int64_t>(limit));
}

uint64_t Daemon::EventsIngested() const {
  absl::MutexLock lock(&queue_mu_);
  return events_ingested_;
}

void Daemon::SetDeliverySink(DeliverySink* sink) {
  if (sink == nullptr) {
    absl::MutexLock lock(&sink_mu_);
    delivery_sink_ = nullptr;
    return;
  }
  std::vector<fleet::v1::Notify> notify;
  absl::StatusOr<std::vector<DeliveryRecord>> pending;
  {
    absl::MutexLock lock(&store_mu_);
    notify = notify_;
    pending = store_->PendingDeliveries(100000);
  }
  absl::MutexLock lock(&sink_mu_);
  delivery_sink_ = sink;
  sink->Configure(std::move(notify));
  if (!pending.ok()) {
    log::Get(log::Component::kDaemon)
        .error("webhooks: the pending deliveries: {}", pending.status());
    return;
  }
  if (!pending->empty()) sink->Deliver(*std::move(pending));
}

void Daemon::ConfigureSink() {
  std::vector<fleet::v1::Notify> notify;
  {
    absl::MutexLock lock(&store_mu_);
    notify = notify_;
  }
  absl::MutexLock lock(&sink_mu_);
  if (delivery_sink_ != nullptr) delivery_sink_->Configure(std::move(notify));
}

absl::Status Daemon::RecordDelivery(const DeliveryRecord& delivery) {
  absl::MutexLock lock(&store_mu_);
  return store_->UpdateDelivery(delivery);
}

FleetSnapshot Daemon::Snapshot() const {
  FleetSnapshot out;
  absl::MutexLock lock(&mu_);
  out.servers.reserve(servers_.size());
  std::set<std::string> approvals;
  for (const auto& [name, s] : servers_) {
    if (s.record.removed) continue;
    FleetSnapshot::ServerInfo info;
    info.name = name;
    info.host = s.record.host;
    info.ctid = s.record.container;
    info.gpu = s.record.gpu;
    if (s.record.spec.gpus().empty()) {
      info.gpus = {s.record.gpu};
    } else {
      info.gpus.assign(s.record.spec.gpus().begin(), s.record.spec.gpus().end());
    }
    info.state = s.record.state;
    info.state_since = s.record.state_since;
    info.diagnosis_class =
        s.record.last_class.empty() ? diagnosis::classes::kNone : s.record.last_class;
    info.template_name = TemplateOf(s.record);
    info.ready = s.record.state == v1::SERVER_STATE_READY;
    info.port = s.record.spec.port();
    info.engine = s.record.spec.engine();
    out.servers.push_back(std::move(info));
    const std::string container = ContainerOf(s.record);
    if (s.waiting == "approval" && approvals.insert(container).second) {
      out.approvals.push_back({s.record.host, s.record.container,
                               s.fix_class.empty() ? s.attempt.diagnosis_class : s.fix_class});
    }
  }
  for (const auto& [key, l] : links_) {
    FleetSnapshot::LinkInfo info;
    info.host = l->host.name();
    info.ctid = l->config.ctid();
    info.ssh = l->host.reach().kind() == fleet::v1::Reach::SSH;
    info.connected = l->state == Link::kFollowing;
    if (!l->config.server_address().empty()) {
      info.address = l->config.server_address();
    } else if (l->config.channel().kind() == fleet::v1::Channel::DIRECT &&
               !absl::StartsWith(l->config.channel().address(), "unix:")) {
      info.address = l->config.channel().address();
    } else if (!info.ssh) {
      info.address = "127.0.0.1";
    }
    out.links.push_back(std::move(info));
  }
  return out;
}

void Daemon::Wake() {
  absl::MutexLock lock(&queue_mu_);
  wake_ = true;
}

void Daemon::Persist(const std::set<std::string>& names) {
  FleetStore::Batch write(store_.get());
  std::set<std::string> failed;
  WriteRows(Collect(names), &failed);
  if (absl::Status st = write.Commit(); !st.ok()) {
    RecordFailed(st, {}, " (written again next turn)");
    failed = names;
  }
  dirty_.merge(failed);
}

void Daemon::RecordFailed(const absl::Status& status, const log::LogFields& fields,
                          std::string_view consequence) {
  // The same failure seen from another write (one reason wraps the other) is no news either.
  const bool again = record_failures_ > 0 && (absl::StrContains(status.message(), record_error_) ||
                                              absl::StrContains(record_error_, status.message()));
  record_error_ = std::string(status.message());
  ++record_failures_;
  const std::string who = log::FormatFields(fields);
  log::Get(log::Component::kStore)
      .log(again ? spdlog::level::debug : spdlog::level::warn, "{}{}record: {}{}", who,
           who.empty() ? "" : " ", status, consequence);
}

void Daemon::RecordWritten() {
  if (record_failures_ == 0) return;
  log::Get(log::Component::kStore)
      .info("record: written again, after {} failed write(s) (the last: {})", record_failures_,
            record_error_);
  record_error_.clear();
  record_failures_ = 0;
}

std::vector<Daemon::RowWrite> Daemon::Collect(const std::set<std::string>& names) {
  std::vector<RowWrite> rows;
  rows.reserve(names.size());
  for (const std::string& name : names) {
    const Server& s = servers_[name];
    rows.push_back({s.record, s.attempt});
  }
  return rows;
}

void Daemon::WriteRows(const std::vector<RowWrite>& rows, std::set<std::string>* failed) {
  for (const RowWrite& row : rows) {
    absl::Status st = store_->PutServer(row.record);
    if (st.ok() && !row.attempt.id.empty()) st = store_->PutAttempt(row.attempt);
    if (!st.ok()) {
      RecordFailed(st, {.server = row.record.name, .attempt = row.attempt.id});
      failed->insert(row.record.name);
    }
  }
}

void Daemon::ReleaseRetired() {
  std::vector<std::shared_ptr<AgentClient>> unused;
  {
    absl::MutexLock lock(&mu_);
    // Only links_ and retired_ hand out a client (under mu_), and a retired one is no longer in
    // links_: once only retired_ holds it, it stays so.
    for (auto it = retired_.begin(); it != retired_.end();) {
      if (it->use_count() == 1) {
        unused.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  unused.clear();
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
