// The daemon's links to its agents: the event streams' queue (held while the record cannot keep
// up), the events and snapshots applied to the servers, and the links' connection, backoff and
// reasons. No lock is held across an agent call.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/proto_time.h"
#include "common/config/desired_server.h"
#include "common/config/fleet_config.h"
#include "common/config/server_name.h"
#include "common/log/log.h"
#include "common/state/states.h"
#include "daemon/daemon.h"
#include "daemon/events/fleet_events.h"
#include "daemon/server_state.h"
#include "google/protobuf/util/message_differencer.h"

namespace fleet::daemon {

using google::protobuf::util::MessageDifferencer;

// --- Events ---------------------------------------------------------------------------------

void Daemon::OnEvent(const std::string& container, fleet::v1::AgentEvent event) {
  absl::MutexLock lock(&queue_mu_);
  ++events_ingested_;
  queue_.push_back({container, false, absl::OkStatus(), std::move(event)});
  wake_ = true;
}

void Daemon::OnEvents(const std::string& container, std::vector<fleet::v1::AgentEvent> events) {
  absl::MutexLock lock(&queue_mu_);
  events_ingested_ += events.size();
  for (fleet::v1::AgentEvent& e : events) {
    queue_.push_back({container, false, absl::OkStatus(), std::move(e)});
  }
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
  if (u.events.empty() && u.rows.empty() && u.closed.empty() && u.gaps.empty()) {
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
  std::vector<AttemptRecord> closed_failed;
  std::vector<Unsaved::Gap> gaps_failed;
  {
    FleetStore::Batch write(store_.get());
    for (const AttemptRecord& a : u.closed) {
      if (absl::Status st = store_->PutAttempt(a); !st.ok()) {
        RecordFailed(st, {.server = a.server, .attempt = a.id});
        closed_failed.push_back(a);
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
        RecordFailed(st, {.container = container});
        failed.insert(container);
      }
    }
    if (absl::Status st = write.Commit(); !st.ok()) {
      RecordFailed(st, {});
      for (const auto& [container, w] : writes) failed.insert(container);
      closed_failed = u.closed;
      gaps_failed = u.gaps;
    } else if (failed.empty() && closed_failed.empty() && gaps_failed.empty()) {
      RecordWritten();
    }
  }
  store_mu_.Unlock();
  size_t held = 0;
  if (!failed.empty() || !closed_failed.empty() || !gaps_failed.empty()) {
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
    closed_failed.insert(closed_failed.end(), unsaved_.closed.begin(), unsaved_.closed.end());
    unsaved_.closed = std::move(closed_failed);
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

void Daemon::SetState(Server& s, v1::ServerState state, absl::Time now) {
  if (state == v1::SERVER_STATE_UNSPECIFIED) {
    // A state this build has no value for (a newer agent's): the one it has stays, so that the row
    // never loses its state and the column never gets an empty spelling.
    log::Get(log::Component::kDaemon)
        .warn("{} a state this fleetd does not know was reported: kept {}",
              log::LogFields{.server = s.record.name, .attempt = s.attempt.id},
              StateName(s.record.state));
    Touch(s);
    return;
  }
  JournalAttempt(s, now);
  if (s.record.state != state) {
    const v1::ServerState previous = s.record.state;
    const absl::Time since = s.record.state_since;
    s.record.state = state;
    s.record.state_since = now;
    fleet::v1::FleetEvent e = events::ServerEvent(events::kServerState, s.record, s.attempt, now);
    e.set_previous_state(std::string(StateName(previous)));
    if (since != absl::InfinitePast() && since <= now) {
      *e.mutable_duration() = ToProtoDuration(now - since);
    }
    journal_.Add(std::move(e));
    // What an operator must act on (fix the cause, then `fleetctl restart`); the reason is set.
    if (state == v1::SERVER_STATE_GAVE_UP) {
      log::Get(log::Component::kDaemon)
          .error("{} GAVE_UP: {}", log::LogFields{.server = s.record.name, .attempt = s.attempt.id},
                 s.record.reason);
      journal_.Add(events::ServerEvent(events::kGaveUp, s.record, s.attempt, now));
    } else if (state == v1::SERVER_STATE_READY && s.failed_since_ready) {
      // READY after failures (a fix, a person's or a remediation's, or a retry worked): the
      // all-clear of a gave_up or a crash loop. The event carries the attempt's trigger, and the
      // class it recovered from.
      fleet::v1::FleetEvent r = events::ServerEvent(events::kRecovered, s.record, s.attempt, now);
      if (r.diagnosis_class().empty()) r.set_diagnosis_class(s.recovered_from);
      journal_.Add(std::move(r));
    }
    if (state == v1::SERVER_STATE_READY) s.failed_since_ready = false;
  }
  Touch(s);
}

void Daemon::JournalAttempt(Server& s, absl::Time now) {
  const AttemptRecord& a = s.attempt;
  if (a.id.empty() || s.attempt_told == a.id) return;
  if (a.outcome != v1::ATTEMPT_OUTCOME_READY && a.outcome != v1::ATTEMPT_OUTCOME_FAILED &&
      a.outcome != v1::ATTEMPT_OUTCOME_STOPPED && a.outcome != v1::ATTEMPT_OUTCOME_LOST) {
    return;
  }
  s.attempt_told = a.id;
  if (a.outcome == v1::ATTEMPT_OUTCOME_FAILED || a.outcome == v1::ATTEMPT_OUTCOME_LOST) {
    s.failed_since_ready = true;
    s.recovered_from = a.diagnosis_class;
  }
  fleet::v1::FleetEvent e = events::ServerEvent(events::kAttemptFinished, s.record, a, now);
  e.set_outcome(std::string(OutcomeName(a.outcome)));
  const absl::Time start = a.launched_at != absl::InfinitePast() ? a.launched_at : a.created_at;
  const absl::Time end = a.ended_at != absl::InfinitePast() ? a.ended_at : now;
  if (start != absl::InfinitePast() && start <= end) {
    *e.mutable_duration() = ToProtoDuration(end - start);
  }
  e.set_template_(TemplateOf(s.record));
  e.set_jit_cache(s.jit_warm_at_launch ? "warm" : "cold");
  journal_.Add(std::move(e));
}

std::string Daemon::TemplateOf(const ServerRecord& r) const {
  auto link = links_.find(ContainerOf(r));
  return link == links_.end() ? std::string() : link->second->config.template_();
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
  if (a.outcome == v1::ATTEMPT_OUTCOME_PENDING) {
    a.outcome = v1::ATTEMPT_OUTCOME_RUNNING;
    if (a.launched_at == absl::InfinitePast()) a.launched_at = now;
    s->attempt_unsaved = true;
  }
  // The phase's state in its stable spelling (an agent of the release before sends only that).
  const v1::ServerState state =
      e.has_phase() ? ServerStateOf(e.phase()) : v1::SERVER_STATE_UNSPECIFIED;
  // Only progress and the phases in between leave the attempt as it was.
  if (e.kind_case() != fleet::v1::AgentEvent::kProgress &&
      (!e.has_phase() || state == v1::SERVER_STATE_FAILED || state == v1::SERVER_STATE_STOPPED ||
       state == v1::SERVER_STATE_READY)) {
    s->attempt_unsaved = true;
  }
  switch (e.kind_case()) {
    case fleet::v1::AgentEvent::kPhase: {
      s->record.phase_detail = e.phase().detail();
      // Progress is the current phase's (the agent's rule too): a new phase starts from none.
      s->record.progress_step = s->record.progress_total = 0;
      if (state == v1::SERVER_STATE_FAILED) {
        a.outcome = v1::ATTEMPT_OUTCOME_FAILED;
        a.ended_at = now;
        s->record.reason = a.summary.empty() ? "the server failed" : a.summary;
      } else if (state == v1::SERVER_STATE_STOPPED) {
        if (s->stalled) {
          // Stopped because it stalled: a failure with the stall's diagnosis.
          a.outcome = v1::ATTEMPT_OUTCOME_FAILED;
          SetState(*s, v1::SERVER_STATE_FAILED, now);
          a.ended_at = now;
          s->record.reason = a.summary;
          break;
        }
        if (a.outcome != v1::ATTEMPT_OUTCOME_FAILED) a.outcome = v1::ATTEMPT_OUTCOME_STOPPED;
        a.ended_at = now;
        if (s->restart_requested) {
          // Stopped to be started again: never shown STOPPED (`status --until-ready` would take
          // a fleet whose every server restarts for one stopped for good).
          SetState(*s, v1::SERVER_STATE_RESTARTING, now);
          break;
        }
      } else if (state == v1::SERVER_STATE_READY) {
        a.outcome = v1::ATTEMPT_OUTCOME_READY;
      }
      if (state == v1::SERVER_STATE_READY) {
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
      a.time_to_ready_ms = absl::ToInt64Milliseconds(FromProtoDuration(e.ready().time_to_ready()));
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
      journal_.Add(events::ServerEvent(events::kStalled, s->record, a, now));
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
      const v1::ServerState state = ServerStateOf(*st);
      if (s.attempt.outcome == v1::ATTEMPT_OUTCOME_PENDING) {
        s.attempt.outcome = v1::ATTEMPT_OUTCOME_RUNNING;
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
      if (state == v1::SERVER_STATE_FAILED) {
        s.attempt.outcome = v1::ATTEMPT_OUTCOME_FAILED;
        s.attempt.ended_at = now;
        s.record.reason = s.attempt.summary;
      } else if (state == v1::SERVER_STATE_STOPPED) {
        if (s.attempt.outcome != v1::ATTEMPT_OUTCOME_FAILED)
          s.attempt.outcome = v1::ATTEMPT_OUTCOME_STOPPED;
        s.attempt.ended_at = now;
      } else if (state == v1::SERVER_STATE_READY) {
        s.attempt.outcome = v1::ATTEMPT_OUTCOME_READY;
      }
      SetState(s,
               state == v1::SERVER_STATE_STOPPED && s.restart_requested
                   ? v1::SERVER_STATE_RESTARTING
                   : state,
               now);
      s.attempt_unsaved = true;
      touched->insert(name);
    } else if (s.attempt.outcome == v1::ATTEMPT_OUTCOME_RUNNING ||
               s.attempt.outcome == v1::ATTEMPT_OUTCOME_READY ||
               (forgot && s.attempt.outcome == v1::ATTEMPT_OUTCOME_PENDING &&
                !s.launch_in_flight)) {
      // We had it running, the agent does not know it (state lost): the attempt is lost, and a
      // new one will be made.
      s.attempt.outcome = v1::ATTEMPT_OUTCOME_LOST;
      s.attempt.ended_at = now;
      s.record.reason = "the agent lost this attempt (its state was reset)";
      SetState(s, v1::SERVER_STATE_PENDING, now);
      s.record.attempt_id.clear();
      touched->insert(name);
      // The lost attempt's row is closed with the turn's writes; the next attempt gets the next
      // number (its row is there already).
      unsaved_.closed.push_back(s.attempt);
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
  std::vector<Due> checks;  // followed links whose stream's check is due
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, link] : links_) {
      if (link->state == Link::kFollowing && !link->checking && now >= link->check_at) {
        link->checking = true;
        link->check_at = now + options_.stream_check;
        checks.push_back({key, link->client, link->cursor});
        continue;
      }
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
  for (const Due& d : checks) {
    d.client->StatusAsync([this, container = d.container, client = d.client.get()](
                              absl::StatusOr<fleet::v1::StatusResponse> snapshot) {
      StreamChecked(container, client, snapshot);
    });
  }
}

void Daemon::StreamChecked(const std::string& container, const AgentClient* client,
                           const absl::StatusOr<fleet::v1::StatusResponse>& snapshot) {
  // Streams held while the record catches up (Admit) bring nothing meanwhile, as they should.
  bool held = false;
  {
    absl::MutexLock lock(&queue_mu_);
    held = !parked_.empty();
  }
  std::shared_ptr<AgentClient> restart;
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(container);
    if (link == links_.end() || link->second->client.get() != client) return;
    Link& l = *link->second;
    l.checking = false;
    // Not followed now (ended, resynchronising), held, or the agent did not answer (its stream
    // says so when it is gone): nothing to judge; the next check starts again.
    if (l.state != Link::kFollowing || l.resync || held || !snapshot.ok()) {
      l.agent_was_at.reset();
      return;
    }
    const AgentCursor& have = l.cursor;
    if (l.agent_was_at.has_value() && (have.incarnation != l.agent_was_at->incarnation ||
                                       have.sequence < l.agent_was_at->sequence)) {
      // A whole check interval, and the stream has not brought what the agent had at its
      // start: it ended without a word reaching us, or stopped moving. Followed again (the
      // cancel ends it; the link connects again from the cursor, as after any end).
      log::Get(log::Component::kLinks)
          .warn(
              "{} event stream stalled: the agent's log was at {}#{} a check ago, fleetd has "
              "{}#{}; following it again",
              log::LogFields{.container = container}, l.agent_was_at->incarnation,
              l.agent_was_at->sequence, have.incarnation, have.sequence);
      l.agent_was_at.reset();
      restart = l.client;
    } else if (snapshot->incarnation() != have.incarnation ||
               snapshot->sequence() > have.sequence) {
      l.agent_was_at = AgentCursor{snapshot->incarnation(), snapshot->sequence()};
    } else {
      l.agent_was_at.reset();
    }
  }
  if (restart) restart->CancelFollow();
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
    l.checking = false;
    l.agent_was_at.reset();
    l.check_at = options_.stream_check > absl::ZeroDuration() ? now + options_.stream_check
                                                              : absl::InfiniteFuture();
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
  if (l.up) {
    // It answered before, and no longer does: a person may have to look (agent_lost).
    l.up = false;
    journal_.Add(events::LinkEvent(events::kAgentLost, l.container, message, now));
  }
  if (message == l.last_error) return;  // said once; the retries say nothing new
  l.last_error = message;
  log::Get(log::Component::kLinks)
      .warn("{} agent unreachable: {} (retrying, next in {})",
            log::LogFields{.container = l.container}, message, absl::FormatDuration(wait));
  TouchContainer(l.container);
}

void Daemon::LinkUp(Link& l) {
  if (!l.up) {
    l.up = true;
    journal_.Add(events::LinkEvent(events::kAgentConnected, l.container, "", clock_->Now()));
  }
  if (!l.last_error.empty()) {
    log::Get(log::Component::kLinks)
        .info("{} agent reachable again (after {} failed tries)",
              log::LogFields{.container = l.container}, l.failures);
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

}  // namespace fleet::daemon
