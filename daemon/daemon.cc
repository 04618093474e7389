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

// What ingest writes of a server row (FleetStore::IngestBatch updates its state columns; the row
// exists, with its spec and policy, since before the attempt): copied under the lock for every
// server a turn touched, so without the spec and policy messages.
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

// As ToTimestamp, in place.
void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) {
    out->Clear();
    return;
  }
  const int64_t ns = absl::ToUnixNanos(t);
  int64_t seconds = ns / 1000000000;
  int64_t nanos = ns % 1000000000;
  if (nanos < 0) {
    nanos += 1000000000;
    seconds -= 1;
  }
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(nanos));
}

std::string ContainerKey(const std::string& host, const std::string& ctid) {
  return absl::StrCat(host, "/", ctid);
}

bool Alive(const std::string& state) {
  return state == "STARTING" || state == "LOADING" || state == "JIT_COMPILING" ||
         state == "CAPTURING_GRAPHS" || state == "READY" || state == "STOPPING";
}

std::string ShortClass(const std::string& c) { return c == "none" ? "" : c; }

// A host as a link keeps it: without its containers (each link has its own). A link holding the
// whole host made the daemon's memory grow with the square of the containers on a host (650 MiB
// for 1,000), and adding a container to a host reconnected every other agent of it.
fleet::v1::Host WithoutContainers(const fleet::v1::Host& h) {
  fleet::v1::Host bare = h;
  bare.clear_containers();
  return bare;
}

}  // namespace

Daemon::Daemon(std::unique_ptr<FleetStore> store, AgentClientFactory factory, Clock* clock,
               DaemonOptions options)
    : factory_(std::move(factory)),
      clock_(clock),
      options_(options),
      store_(std::move(store)),
      planner_(&CudaReleaseTable::Builtin(), options.planner) {
  for (int i = 0; i < options_.fix_threads; ++i) {
    fix_workers_.emplace_back([this] { FixWorker(); });
  }
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
  {
    // A job in progress finishes (its agent calls have deadlines); queued ones are dropped.
    absl::MutexLock lock(&fix_mu_);
    fix_stopping_ = true;
    fix_jobs_.clear();
  }
  for (std::thread& t : fix_workers_) t.join();
  {
    // Streams that wait for room read on (Admit says yes from now on), so that they can end.
    std::vector<std::function<void()>> resume;
    {
      absl::MutexLock lock(&queue_mu_);
      resume.swap(parked_);
    }
    for (auto& r : resume) r();
  }
  {
    // Calls not sent yet are dropped (the answers of those in flight start no more), and a
    // sender that holds a client lets it go: the clients are destroyed here, on this thread,
    // never on one of gRPC's whose call the destructor would wait for.
    absl::MutexLock lock(&calls_mu_);
    calls_closed_ = true;
    pending_calls_.clear();
    calls_mu_.Await(absl::Condition(
        +[](Daemon* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->calls_mu_) { return d->sending_ == 0; },
        this));
  }
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
  auto records = store_->Servers();
  if (!records.ok()) return records.status();
  for (ServerRecord& r : *records) {
    Server s;
    s.record = std::move(r);
    if (!s.record.attempt_id.empty()) {
      auto a = store_->Attempt(s.record.name, s.record.attempt_number);
      if (!a.ok()) return a.status();
      if (a->has_value()) s.attempt = **a;
      // The budget counts from the last attempt a deploy made.
      auto all = store_->Attempts(s.record.name);
      if (!all.ok()) return all.status();
      for (const AttemptRecord& past : *all) {
        if (past.trigger == "initial" || past.trigger == "deploy") s.budget_base = past.number - 1;
      }
    }
    // Times from an earlier run are in its clock's frame: after a step of the wall clock between
    // the two (common/base/clock.h) a backoff could end an hour late. None waits longer than its
    // policy's longest backoff from now.
    const absl::Time now = clock_->Now();
    const absl::Duration longest = PolicyDuration(s.record.policy.backoff_max(), absl::Minutes(5));
    if (s.record.backoff_until > now + longest) s.record.backoff_until = now + longest;
    // Changed as far as a watch is concerned: its first message is the whole table.
    Touch(s);
    servers_[s.record.name] = std::move(s);
  }
  if (absl::Status s = LoadFixes(); !s.ok()) return s;
  auto config = store_->LatestConfig();
  if (!config.ok()) return config.status();
  if (config->has_value()) {
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
  WriteUnsaved(now);
  std::vector<Call> calls;
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
      fprintf(stderr, "fleetd: record: %s (the turn's agent calls wait for a commit)\n",
              st.ToString().c_str());
      unrecorded = persist;
    }
  }
  {
    // Nothing leaves without its record: a call whose server's rows (its attempt's among them)
    // are not committed waits, its server keeping launch_in_flight or stop_sent so that no turn
    // decides it again, and the rows are written again next turn. The calls of earlier turns go
    // first once theirs are.
    std::vector<Call> ready;
    std::vector<Call> waiting;
    for (std::vector<Call>* list : {&unrecorded_calls_, &calls}) {
      for (Call& c : *list) {
        (unrecorded.count(c.server) ? waiting : ready).push_back(std::move(c));
      }
    }
    unrecorded_calls_ = std::move(waiting);
    calls = std::move(ready);
  }
  RecordPending();
  if (now - last_prune_ > absl::Hours(1)) {
    last_prune_ = now;
    store_->PruneEvents(now - options_.event_retention, options_.max_events).IgnoreError();
  }
  store_mu_.Unlock();
  if (!unrecorded.empty()) {
    absl::MutexLock lock(&mu_);
    dirty_.merge(unrecorded);
  }
  Perform(std::move(calls));
  RunJobs(std::move(jobs));
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

// --- Events ---------------------------------------------------------------------------------

void Daemon::OnEvent(const std::string& container, fleet::v1::AgentEvent event) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back({container, false, absl::OkStatus(), std::move(event)});
  wake_ = true;
}

bool Daemon::Admit(std::function<void()> resume) {
  absl::MutexLock lock(&queue_mu_);
  if (stopping_ || queue_.size() + unsaved_events_ < options_.queue_limit) return true;
  parked_.push_back(std::move(resume));
  return false;
}

void Daemon::OnStreamEnded(const std::string& container, absl::Status status) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back({container, true, std::move(status), {}});
  wake_ = true;
}

void Daemon::ResumeStreams() {
  std::vector<std::function<void()>> resume;
  {
    absl::MutexLock lock(&queue_mu_);
    if (!stopping_ && queue_.size() + unsaved_events_ >= options_.queue_limit) return;
    resume.swap(parked_);
  }
  for (auto& r : resume) r();
}

void Daemon::Ingest(absl::Time now) {
  std::deque<Queued> batch;
  {
    absl::MutexLock lock(&queue_mu_);
    batch.swap(queue_);
  }
  // The queue has room again: the streams that waited read on (while this turn records), unless
  // events whose write failed fill it.
  ResumeStreams();
  // Streams to end for a resynchronisation: cancelled after the lock is let go.
  std::vector<std::shared_ptr<AgentClient>> resyncing;
  const size_t chunk = std::max<size_t>(options_.events_per_lock, 1);
  for (size_t first = 0; first < batch.size(); first += chunk) {
    // Applied in chunks: status queries get the lock between them.
    absl::MutexLock lock(&mu_);
    for (size_t i = first; i < std::min(batch.size(), first + chunk); ++i) {
      Queued& q = batch[i];
      auto link = links_.find(q.container);
      if (link == links_.end()) continue;
      Link& l = *link->second;
      if (q.ended) {
        l.state = Link::kIdle;
        if (l.resync) {
          // Ended to resynchronise: connected again at once (Connect takes the snapshot).
          l.retry_at = now;
          continue;
        }
        LinkFailed(l, q.status, now);
        continue;
      }
      // What a stream said after its Resync: the snapshot of the next connection covers it.
      if (l.resync) continue;
      const fleet::v1::AgentEvent& e = q.event;
      if (e.has_resync()) {
        // The agent cannot replay from our position (reinstalled, or its log was pruned): its
        // stream is ended and the link connected again, which takes the agent's snapshot (its
        // Status, asked without any lock held), records the gap, and follows on from where the
        // snapshot is. Asking here, under mu_, froze every status query for as long as the
        // agent took to answer.
        l.resync = true;
        if (l.client) resyncing.push_back(l.client);
        continue;
      }
      if (e.incarnation() == l.cursor.incarnation && e.sequence() <= l.cursor.sequence) continue;
      l.cursor = {e.incarnation(), e.sequence()};
      ApplyEvent(q.container, e, now, &unsaved_.rows[q.container]);
      unsaved_.events[q.container].push_back(std::move(q.event));
    }
  }
  for (const std::shared_ptr<AgentClient>& client : resyncing) client->CancelFollow();
}

void Daemon::WriteUnsaved(absl::Time now) {
  // What to write: the events, the rows as they are now and each container's cursor, copied under
  // mu_; written with store_mu_ alone, taken before mu_ is let go, so that no write of a newer
  // state can come first. Per container all or nothing; the whole turn one commit (a row that
  // many events changed is written once). What could not be written is put back, ahead of what
  // came meanwhile, and written with the next turn: the stored cursor moves only with the
  // events it covers, and no event is dropped.
  struct Write {
    std::vector<ServerRecord> servers;
    std::vector<AttemptRecord> attempts;
    AgentCursor cursor;
  };
  std::map<std::string, Write> writes;
  Unsaved u;
  mu_.Lock();
  std::swap(u, unsaved_);
  if (u.events.empty() && u.rows.empty() && u.lost.empty() && u.gaps.empty()) {
    mu_.Unlock();
    return;
  }
  for (const auto& [container, list] : u.events) writes[container];
  for (const auto& [container, names] : u.rows) {
    Write& w = writes[container];
    for (const std::string& name : names) {
      Server& s = servers_[name];
      w.servers.push_back(StateOf(s.record));
      if (!s.attempt.id.empty() && s.attempt_unsaved) {
        w.attempts.push_back(s.attempt);
        s.attempt_unsaved = false;
      }
    }
  }
  for (auto& [container, w] : writes) w.cursor = links_[container]->cursor;
  store_mu_.Lock();
  mu_.Unlock();
  std::set<std::string> failed;  // containers whose batch was not stored
  std::vector<AttemptRecord> lost_failed;
  std::vector<Unsaved::Gap> gaps_failed;
  {
    FleetStore::Batch write(store_.get());
    for (const AttemptRecord& a : u.lost) {
      if (absl::Status st = store_->PutAttempt(a); !st.ok()) {
        fprintf(stderr, "fleetd: record %s: %s\n", a.server.c_str(), st.ToString().c_str());
        lost_failed.push_back(a);
      }
    }
    for (const Unsaved::Gap& g : u.gaps) {
      if (absl::Status st = store_->RecordGap(g.container, g.from, g.to, now); !st.ok()) {
        gaps_failed.push_back(g);
      }
    }
    for (auto& [container, w] : writes) {
      absl::Status st =
          store_->IngestBatch(container, u.events[container], w.servers, w.attempts, w.cursor, now);
      if (!st.ok()) {
        fprintf(stderr, "fleetd: record: %s\n", st.ToString().c_str());
        failed.insert(container);
      }
    }
    if (absl::Status st = write.Commit(); !st.ok()) {
      fprintf(stderr, "fleetd: record: %s\n", st.ToString().c_str());
      for (const auto& [container, w] : writes) failed.insert(container);
      lost_failed = u.lost;
      gaps_failed = u.gaps;
    }
  }
  store_mu_.Unlock();
  size_t held = 0;
  if (!failed.empty() || !lost_failed.empty() || !gaps_failed.empty()) {
    absl::MutexLock lock(&mu_);
    for (const std::string& container : failed) {
      std::vector<fleet::v1::AgentEvent>& later = unsaved_.events[container];
      std::vector<fleet::v1::AgentEvent>& kept = u.events[container];
      kept.insert(kept.end(), std::make_move_iterator(later.begin()),
                  std::make_move_iterator(later.end()));
      later = std::move(kept);
      if (later.empty()) unsaved_.events.erase(container);
      auto rows = u.rows.find(container);
      if (rows == u.rows.end()) continue;
      for (const std::string& name : rows->second) {
        Server& s = servers_[name];
        if (!s.attempt.id.empty()) s.attempt_unsaved = true;
      }
      unsaved_.rows[container].merge(rows->second);
    }
    lost_failed.insert(lost_failed.end(), unsaved_.lost.begin(), unsaved_.lost.end());
    unsaved_.lost = std::move(lost_failed);
    gaps_failed.insert(gaps_failed.end(), unsaved_.gaps.begin(), unsaved_.gaps.end());
    unsaved_.gaps = std::move(gaps_failed);
    for (const auto& [container, list] : unsaved_.events) held += list.size();
  }
  {
    absl::MutexLock lock(&queue_mu_);
    unsaved_events_ = held;
  }
  ResumeStreams();
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
    s->attempt_unsaved = true;
  }
  // Only progress and the phases in between leave the attempt as it was.
  if (e.kind_case() != fleet::v1::AgentEvent::kProgress &&
      (!e.has_phase() || e.phase().state() == "FAILED" || e.phase().state() == "STOPPED" ||
       e.phase().state() == "READY")) {
    s->attempt_unsaved = true;
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
        if (s->restart_requested) {
          // Stopped to be started again: never shown STOPPED (`status --until-ready` would take
          // a fleet whose every server restarts for one stopped for good).
          SetState(*s, "RESTARTING", now);
          break;
        }
      } else if (state == "READY") {
        a.outcome = "ready";
        s->record.progress_step = s->record.progress_total = 0;
      }
      if (state == "READY") {
        // Past the JIT phase (SGLang JIT-compiles during graph capture, so READY is the first
        // state that is surely past it): the container's JIT cache is warm, the canary is done.
        fixes_[container].jit_warm = true;
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
  // The container's servers: the names that start with "host/ctid/" (not a scan of the fleet).
  const std::string prefix = link.container + "/";
  // An agent that lost its record (a new incarnation) may have launched an attempt we still call
  // pending (we died before its answer was recorded): it may have run, so it is lost too, and the
  // next launch is a new attempt. The same incarnation never forgets a launch it answered.
  const bool forgot =
      !link.cursor.incarnation.empty() && link.cursor.incarnation != snapshot.incarnation();
  for (auto entry = servers_.lower_bound(prefix);
       entry != servers_.end() && entry->first.compare(0, prefix.size(), prefix) == 0; ++entry) {
    const std::string& name = entry->first;
    Server& s = entry->second;
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
      SetState(s, st->state() == "STOPPED" && s.restart_requested ? "RESTARTING" : st->state(),
               now);
      s.attempt_unsaved = true;
      touched->insert(name);
    } else if (s.attempt.outcome == "running" || s.attempt.outcome == "ready" ||
               (forgot && s.attempt.outcome == "pending" && !s.launch_in_flight)) {
      // We had it running, the agent does not know it (state lost): the attempt is lost, and a
      // new one will be made.
      s.attempt.outcome = "lost";
      s.attempt.ended_at = now;
      s.record.reason = "the agent lost this attempt (its state was reset)";
      SetState(s, "PENDING", now);
      s.record.attempt_id.clear();
      touched->insert(name);
      // The lost attempt's row is closed with the turn's writes; the next attempt gets the next
      // number (its row is there already).
      unsaved_.lost.push_back(s.attempt);
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
    std::shared_ptr<AgentClient> client;  // held for the call: a redeploy may retire it meanwhile
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
          TouchContainer(key);
          continue;
        }
      }
      link->state = Link::kConnecting;
      due.push_back({key, link->client, link->cursor});
    }
  }
  // Know what each agent runs before following it: its incarnation tells whether its stream
  // can resume from our cursor. All asked at once; each answer is taken as it comes.
  for (const Due& d : due) {
    // The answer names the client it came from (compared, never used: the link's own is).
    d.client->StatusAsync([this, container = d.container, client = d.client.get()](
                              absl::StatusOr<fleet::v1::StatusResponse> snapshot) {
      Connected(container, client, snapshot);
    });
  }
}

void Daemon::Connected(const std::string& container, const AgentClient* client,
                       const absl::StatusOr<fleet::v1::StatusResponse>& snapshot) {
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(container);
    // A deploy replaced the link meanwhile: the new one connects on its own.
    if (link == links_.end() || link->second->client.get() != client) return;
    Link& l = *link->second;
    if (!snapshot.ok()) {
      LinkFailed(l, snapshot.status(), now);
      return;
    }
    if (l.resync || snapshot->incarnation() != l.cursor.incarnation) {
      // The snapshot's rows, the gap and the new cursor are written with the loop's next writes
      // (a callback never waits for the record while it holds mu_).
      const AgentCursor from = l.cursor;
      ApplySnapshot(l, *snapshot, now, &unsaved_.rows[container]);
      if (l.resync || !from.incarnation.empty()) {
        unsaved_.gaps.push_back({container, from, l.cursor});
      }
      l.resync = false;
    }
    l.state = Link::kFollowing;
    LinkUp(l);
    // Follow only starts the stream (its events come on gRPC's threads, to the queue): it does
    // not wait for the agent.
    l.client->Follow(l.cursor.incarnation, l.cursor.sequence, this);
  }
  Wake();  // a turn: its servers can be launched now
}

void Daemon::LinkFailed(Link& l, const absl::Status& why, absl::Time now) {
  l.state = Link::kIdle;
  l.failures = std::min(l.failures + 1, 20);
  const absl::Duration wait = std::min(
      options_.reconnect_max, options_.reconnect_initial * (1 << std::min(l.failures, 10)));
  l.retry_at = now + wait;
  if (absl::IsCancelled(why)) return;
  const std::string message(why.message());
  if (message == l.last_error) return;  // said once; the retries say nothing new
  l.last_error = message;
  fprintf(stderr, "fleetd: %s: agent unreachable: %s (retrying, next in %s)\n", l.container.c_str(),
          message.c_str(), absl::FormatDuration(wait).c_str());
  TouchContainer(l.container);
}

void Daemon::LinkUp(Link& l) {
  if (!l.last_error.empty()) {
    fprintf(stderr, "fleetd: %s: agent reachable again (after %d failed tries)\n",
            l.container.c_str(), l.failures);
    l.last_error.clear();
    TouchContainer(l.container);
  }
  l.failures = 0;
}

void Daemon::TouchContainer(const std::string& container) {
  for (auto& [name, s] : servers_) {
    if (ContainerKey(s.record.host, s.record.container) == container) Touch(s);
  }
}

// --- The reconciler -------------------------------------------------------------------------

std::vector<Daemon::Call> Daemon::Reconcile(absl::Time now, std::set<std::string>* changed,
                                            std::vector<FixJob>* jobs) {
  std::vector<Call> calls;
  std::set<std::string>& persist = *changed;
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
      mu_.AssertHeld();  // the lambdas run within Reconcile, under its lock
      if (s.stop_sent || !reachable) return;
      Call c{Call::kStop, name, container, {}, {}};
      c.stop.mutable_server()->set_host(r.host);
      c.stop.mutable_server()->set_container(r.container);
      c.stop.mutable_server()->set_gpu(r.gpu);
      calls.push_back(std::move(c));
      s.stop_sent = true;
    };
    auto launch = [&](const std::string& trigger) {
      mu_.AssertHeld();
      store_mu_.AssertHeld();
      if (!reachable || s.launch_in_flight) return;
      // Preflight, a remediation running, the canary: it may have to wait its turn.
      if ((s.attempt.id.empty() || s.attempt.outcome != "pending") &&
          !Gate(s, now, jobs, changed)) {
        return;
      }
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
      s.launch_in_flight = true;
      c.launch.set_attempt_id(s.attempt.id);
      c.launch.set_attempt_number(s.attempt.number);
      // The spec (the attempt's own) is filled in when the call is sent: thousands of queued
      // launches hold no copies of it.
      calls.push_back(std::move(c));
    };

    if (!wanted) {
      if (alive && r.state != "STOPPING") stop();
      // A server that never launched (waiting for the preflight or the canary) stops at once.
      if (!alive && r.state != "STOPPED" && r.state != "GAVE_UP" && r.state != "FAILED" &&
          (s.attempt.id.empty() || s.attempt.outcome != "pending")) {
        s.waiting.clear();
        r.reason.clear();
        SetState(s, "STOPPED", now);
        persist.insert(name);
      }
      continue;
    }
    if (s.stalled && alive && r.state != "STOPPING") {
      stop();
      continue;
    }
    if (r.state == "READY" && s.failures > 0 && now - r.state_since >= options_.backoff_reset) {
      s.failures = 0;
    }
    if (s.restart_requested) {
      if (alive) {
        stop();
        continue;
      }
      if (reachable && !s.launch_in_flight && !Gate(s, now, jobs, changed)) continue;
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
    if ((r.state == "FAILED" || (r.state == "STOPPED" && s.attempt.outcome == "failed")) &&
        s.waiting != "approval") {
      s.stop_sent = false;
      s.stalled = false;
      const int32_t max_attempts = r.policy.max_attempts() > 0 ? r.policy.max_attempts() : 8;
      if (s.AttemptsThisDeploy() < max_attempts && Remediate(s, now, jobs, changed)) {
        // A change may fix it: planned (once for the container), then restarted at once.
        persist.insert(name);
      } else if (!RetryMayHelp(s.attempt.diagnosis_class)) {
        r.reason =
            absl::StrCat(s.attempt.diagnosis_class, ": ", s.attempt.summary,
                         " (a restart would meet the same failure",
                         r.policy.remediation() == fleet::v1::Policy::OFF
                             ? absl::StrCat("; remediation is off in policy ", r.policy.name(), ")")
                             : "; no change in the container fixes it)");
        SetState(s, "GAVE_UP", now);
        persist.insert(name);
      } else if (s.AttemptsThisDeploy() >= max_attempts) {
        r.reason = absl::StrCat("attempt budget spent (", max_attempts,
                                "); last: ", s.attempt.diagnosis_class, ": ", s.attempt.summary);
        SetState(s, "GAVE_UP", now);
        persist.insert(name);
      } else {
        Backoff(s, now);
        persist.insert(name);
      }
      continue;
    }
    if (r.state == "RESTARTING" && now >= r.backoff_until) {
      launch(s.next_trigger.empty() ? "restart" : s.next_trigger);
      continue;
    }
  }
  return calls;
}

void Daemon::Perform(std::vector<Call> calls) {
  if (calls.empty()) return;
  {
    absl::MutexLock lock(&calls_mu_);
    for (Call& c : calls) pending_calls_.push_back(std::move(c));
  }
  StartCalls();
}

// Sends queued calls while fewer than options_.calls_in_flight are unanswered; each answer is
// applied when it comes (on a gRPC thread, or at once for a client that answers at once) and
// lets the next call go. Thousands of Launches at once held thousands of gRPC calls (and their
// requests) in memory together.
void Daemon::StartCalls() {
  // An answer that comes at once, inside the loop below, must not start a loop of its own.
  static thread_local bool starting = false;
  if (starting) return;
  starting = true;
  while (true) {
    Call c;
    {
      absl::MutexLock lock(&calls_mu_);
      if (calls_closed_ || pending_calls_.empty() || in_flight_ >= options_.calls_in_flight) {
        break;
      }
      c = std::move(pending_calls_.front());
      pending_calls_.pop_front();
      ++in_flight_;
      ++sending_;
    }
    // Held while the call is handed over: a redeploy may retire the link's client meanwhile (it
    // is destroyed, on a daemon thread, once no one holds it).
    std::shared_ptr<AgentClient> client;
    {
      absl::MutexLock lock(&mu_);
      auto link = links_.find(c.container);
      if (link != links_.end()) client = link->second->client;
      if (c.kind == Call::kLaunch) {
        Server& s = servers_[c.server];
        if (s.attempt.id != c.launch.attempt_id()) {
          client = nullptr;  // superseded while it waited
        } else if (client != nullptr) {
          *c.launch.mutable_spec() = s.attempt.spec;
        }
        if (client == nullptr) s.launch_in_flight = false;
      }
    }
    if (client == nullptr) {
      absl::MutexLock lock(&calls_mu_);
      --in_flight_;
      --sending_;
      continue;
    }
    if (c.kind == Call::kStop) {
      client->StopAsync(c.stop,
                        [this, server = c.server](absl::StatusOr<fleet::v1::StopResponse> r) {
                          StopDone(server, r);
                          CallFinished();
                        });
    } else {
      client->LaunchAsync(c.launch, [this, server = c.server, attempt = c.launch.attempt_id()](
                                        absl::StatusOr<fleet::v1::LaunchResponse> r) {
        LaunchDone(server, attempt, r);
        CallFinished();
      });
    }
    client.reset();
    absl::MutexLock lock(&calls_mu_);
    --sending_;
  }
  starting = false;
}

void Daemon::CallFinished() {
  {
    absl::MutexLock lock(&calls_mu_);
    --in_flight_;
  }
  StartCalls();
}

void Daemon::StopDone(const std::string& server, const absl::StatusOr<fleet::v1::StopResponse>& r) {
  {
    absl::MutexLock lock(&mu_);
    Server& s = servers_[server];
    if (!r.ok()) {
      s.stop_sent = false;  // try again next turn
    } else if (r->status().state() == "STOPPING" && Alive(s.record.state)) {
      // The answer comes on a gRPC thread: the stream's STOPPED may have been applied already,
      // and must not be overwritten (the server would stay STOPPING for good).
      SetState(s, "STOPPING", clock_->Now());
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
      if (s.attempt.outcome == "pending") s.attempt.outcome = "running";
      if (s.attempt.launched_at == absl::InfinitePast()) s.attempt.launched_at = now;
      if (s.record.state == "PENDING") SetState(s, "STARTING", now);
      s.stop_sent = false;
    } else if (absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status()) ||
               absl::IsCancelled(r.status())) {
      // The agent is away (or fleetd is stopping): the attempt stays pending and is launched
      // (same id) when it is back.
      return;
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
    // Written by the loop with the others of its turn: one commit for thousands of answers.
    dirty_.insert(server);
  }
  Wake();
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
    fprintf(stderr, "fleetd: record: %s (written again next turn)\n", st.ToString().c_str());
    failed = names;
  }
  dirty_.merge(failed);
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
      fprintf(stderr, "fleetd: record %s: %s\n", row.record.name.c_str(), st.ToString().c_str());
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
    s.budget_base = s.record.attempt_number;  // a deploy gives it the policy's whole budget
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
  FillRow(s, &row);
  return row;
}

// Written in place (into a message on the caller's arena, for Status): a fleet's table is
// thousands of rows, built while the lock is held.
void Daemon::FillRow(const Server& s, fleet::v1::ServerRow* row) const {
  const ServerRecord& r = s.record;
  row->set_server(r.name);
  row->set_state(r.state);
  row->set_phase_detail(r.phase_detail);
  row->set_progress_step(r.progress_step);
  row->set_progress_total(r.progress_total);
  row->set_attempt_number(r.attempt_number);
  SetTimestamp(r.state_since, row->mutable_state_since());
  SetTimestamp(s.attempt.created_at, row->mutable_attempt_started_at());
  row->set_last_diagnosis_class(r.last_class);
  row->set_last_diagnosis_summary(r.last_summary);
  row->set_port(r.spec.port());
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
  SetTimestamp(clock_->Now(), response->mutable_at());
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
    absl::MutexLock store_lock(&store_mu_);
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
    absl::MutexLock store_lock(&store_mu_);
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
