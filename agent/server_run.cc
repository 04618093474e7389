// Agent::ServerRun's methods: one server attempt's life (server_run.h), under the Agent's mu_.
#include "agent/server_run.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/env_files.h"
#include "agent/message_budget.h"
#include "agent/proc.h"
#include "common/base/proto_time.h"
#include "common/base/secret_names.h"
#include "common/base/string_view.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/diagnosis/diagnosis_proto.h"
#include "common/log/log.h"
#include "common/state/states.h"

namespace fleet::agent {

fleet::v1::ServerState StateOfPhase(diagnosis::Phase phase) {
  switch (phase) {
    case diagnosis::Phase::kStarting:
      return fleet::v1::SERVER_STATE_STARTING;
    case diagnosis::Phase::kLoading:
      return fleet::v1::SERVER_STATE_LOADING;
    case diagnosis::Phase::kJitCompiling:
      return fleet::v1::SERVER_STATE_JIT_COMPILING;
    case diagnosis::Phase::kCapturingGraphs:
      return fleet::v1::SERVER_STATE_CAPTURING_GRAPHS;
    case diagnosis::Phase::kReady:
      return fleet::v1::SERVER_STATE_READY;
  }
  return fleet::v1::SERVER_STATE_UNSPECIFIED;
}
namespace {

using fleet::v1::AgentEvent;
using fleet::v1::ServerSpec;

// Evidence that leaves the agent has secret values masked.
void RedactDiagnosis(const std::map<std::string, std::string>& env, fleet::v1::Diagnosis* d) {
  for (auto& line : *d->mutable_evidence()) line.set_text(RedactSecretValues(line.text(), env));
  d->set_summary(RedactSecretValues(d->summary(), env));
}

spdlog::logger& ServerLog() { return log::Get(log::Component::kAgent); }

}  // namespace

std::string ServerMark(const ServerSpec& spec, const AgentOptions& options) {
  const fleet::v1::ServerRef& s = spec.server();
  return absl::StrCat(s.host().empty() ? options.host : s.host(), "/",
                      s.container().empty() ? options.container : s.container(), "/gpu", s.gpu());
}

Agent::ServerRun::ServerRun(Agent* agent, ServerSpec spec, std::string attempt_id,
                            int64_t attempt_number)
    : agent_(agent),
      spec_(std::move(spec)),
      attempt_id_(std::move(attempt_id)),
      attempt_number_(attempt_number),
      env_(ServerEnv(spec_)) {
  diagnosis::ClassifierOptions options;
  options.offline = false;  // a live log: stalls are the timers' business
  classifier_ = std::make_unique<diagnosis::Classifier>(agent_->matcher_, options, this);
}

absl::Duration Agent::ServerRun::ReadinessInterval() const {
  return ProtoDurationOr(spec_.readiness().interval(), agent_->options_.readiness_interval);
}

void Agent::ServerRun::OnData(std::string_view bytes) {
  last_progress_at_ = agent_->deps_.clock->Now();
  if (!finished_) classifier_->AddBytes(bytes);
}

void Agent::ServerRun::OnPhaseChanged(diagnosis::Phase phase, std::string_view detail,
                                      int64_t line) {
  agent_->mu_.AssertHeld();
  if (phase == diagnosis::Phase::kReady) {
    // The ready line is a hint: probe now rather than at the next interval.
    next_probe_at_ = absl::InfinitePast();
    return;
  }
  if (ready_ || exited_) return;
  state_ = StateOfPhase(phase);
  phase_detail_ = std::string(detail);
  // Progress counts the steps of one phase (weight shards, one op's build): a new phase starts
  // from none, never from the last phase's n/m.
  progress_step_ = progress_total_ = 0;
  if (replaying_) return;
  AgentEvent e = NewEvent();
  auto* p = e.mutable_phase();
  SetServerState(state_, p);
  p->set_detail(phase_detail_);
  p->set_log_line(line);
  agent_->Emit(std::move(e));
}

void Agent::ServerRun::OnProgress(int64_t step, int64_t total, int64_t line) {
  agent_->mu_.AssertHeld();
  last_progress_at_ = agent_->deps_.clock->Now();
  progress_step_ = step;
  progress_total_ = total;
  if (replaying_) return;
  AgentEvent e = NewEvent();
  auto* p = e.mutable_progress();
  p->set_step(step);
  p->set_total(total);
  p->set_log_line(line);
  agent_->Emit(std::move(e));
}

void Agent::ServerRun::OnRootCause(int64_t line) {
  agent_->mu_.AssertHeld();
  if (!replaying_) EmitDiagnosis(classifier_->Snapshot(), /*final=*/false);
}

void Agent::ServerRun::OnFailingUnitEnded(int64_t line) {
  agent_->mu_.AssertHeld();
  if (!replaying_) EmitDiagnosis(classifier_->Snapshot(), /*final=*/true);
}

absl::Status Agent::ServerRun::StartFollowing(bool replay) {
  agent_->mu_.AssertHeld();
  auto follower = LogFollower::Create(spec_.log_path(), 0, this, {});
  if (!follower.ok()) return follower.status();
  follower_ = *std::move(follower);
  agent_->WatchFd(follower_->fd(), Watch::kLog, gpu());
  replaying_ = replay;
  absl::Status s = follower_->Poll();
  replaying_ = false;
  return s;
}

void Agent::ServerRun::Launched(ServerProcess process, absl::Time now) {
  agent_->mu_.AssertHeld();
  pid_ = process.pid;
  start_ticks_ = process.start_ticks;
  pidfd_ = std::move(process.pidfd);
  is_child_ = true;
  alive_ = true;
  started_at_ = now;
  last_progress_at_ = now;
  next_probe_at_ = now + ReadinessInterval();
  next_sample_at_ = now;
  state_ = fleet::v1::SERVER_STATE_STARTING;
  agent_->WatchFd(pidfd_.get(), Watch::kExit, gpu());
}

void Agent::ServerRun::Adopted(const fleet::v1::ServerRecord& record, UniqueFd pidfd,
                               absl::Time now) {
  agent_->mu_.AssertHeld();
  pid_ = record.pid();
  start_ticks_ = record.start_ticks();
  pidfd_ = std::move(pidfd);
  is_child_ = false;
  alive_ = true;
  started_at_ = FromProtoTime(record.started_at());
  last_progress_at_ = now;
  next_probe_at_ = now;
  next_sample_at_ = now;
  ready_ = record.ready();
  stop_requested_ = record.stop_requested();
  state_ = ready_            ? fleet::v1::SERVER_STATE_READY
           : stop_requested_ ? fleet::v1::SERVER_STATE_STOPPING
                             : fleet::v1::SERVER_STATE_STARTING;
  agent_->WatchFd(pidfd_.get(), Watch::kExit, gpu());
}

void Agent::ServerRun::Restored(const fleet::v1::ServerRecord& record) {
  pid_ = record.pid();
  start_ticks_ = record.start_ticks();
  started_at_ = FromProtoTime(record.started_at());
  // The agent's own record keeps the spelling (agent_state.proto).
  state_ = ParseServerState(record.state()).value_or(fleet::v1::SERVER_STATE_UNSPECIFIED);
  ready_ = record.ready();
  exited_ = true;
  finished_ = true;
  exit_ = record.exit();
  final_diagnosis_ = record.diagnosis();
}

void Agent::ServerRun::PollLog() {
  if (follower_ == nullptr) return;
  absl::Status s = follower_->Poll();
  static_cast<void>(s);  // a read error is retried at the next event or tick
}

void Agent::ServerRun::Exited(absl::Time now, bool status_known) {
  agent_->mu_.AssertHeld();
  if (exited_) return;
  siginfo_t info{};
  bool have_status = false;
  if (is_child_ && status_known) {
    // Read, not reaped (WNOWAIT): the leader stays a zombie until its group is empty, so its
    // pid, and the group's id, cannot go to another process while the group is signalled.
    while (true) {
      info.si_pid = 0;
      if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
        have_status = info.si_pid == pid_;
        break;
      }
      if (errno != EINTR) break;
    }
  }
  // The server is gone; what it left behind in its group (a scheduler child, a compiler) goes
  // too, and is reaped as it dies (the agent, as subreaper, inherits it). Only a group whose
  // leader is verified right now is signalled: a pid recorded before a reboot is anyone's.
  KillGroup(SIGKILL);
  ReapGroup();
  exited_ = true;
  alive_ = false;
  exit_.Clear();
  *exit_.mutable_at() = ToProtoTime(now);
  if (have_status && info.si_code == CLD_EXITED) {
    exit_.set_exited(true);
    exit_.set_exit_code(info.si_status);
  } else if (have_status && (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED)) {
    exit_.set_signal(info.si_status);
  } else {
    exit_.set_status_unknown(true);
  }
  PollLog();
  diagnosis::Diagnosis d = finished_ ? diagnosis::Diagnosis() : classifier_->Finish();
  finished_ = true;
  if (d.diagnosis_class == diagnosis::classes::kNone && !stop_requested_) {
    // The process died and the log names no cause: say what is known.
    d.diagnosis_class = diagnosis::classes::kUnknown;
    d.fix = diagnosis::FixKind::kReport;
    d.toolchain_fix = false;
    d.summary = exit_.status_unknown()
                    ? "the server died while the agent was away and its log names no cause"
                : exit_.exited()
                    ? absl::StrCat("the server exited with status ", exit_.exit_code(),
                                   ready_ ? " after it was ready" : "", "; its log names no cause")
                    : absl::StrCat("the server was killed by signal ", exit_.signal(),
                                   "; its log names no cause");
  }
  state_ = stop_requested_ ? fleet::v1::SERVER_STATE_STOPPED : fleet::v1::SERVER_STATE_FAILED;
  if (follower_) agent_->UnwatchFd(follower_->fd());
  // The pidfd stays open (unwatched: it stays readable) until the group is gone: the leader is
  // signalled through it.
  agent_->UnwatchFd(pidfd_.get());
  follower_.reset();
  if (group_gone_) pidfd_.Reset();

  AgentEvent e = NewEvent();
  *e.mutable_exited() = exit_;
  agent_->Emit(std::move(e));
  // The final diagnosis was already sent when the failing unit ended, unless the exit changed
  // it (a unit still open, no cause in the log): send it only then.
  const bool already_sent = final_diagnosis_.has_value() &&
                            final_diagnosis_->diagnosis_class() == d.diagnosis_class &&
                            final_diagnosis_->root_cause_line() == d.root_cause_line;
  if (!stop_requested_ && !already_sent) EmitDiagnosis(d, /*final=*/true);
  AgentEvent phase = NewEvent();
  SetServerState(state_, phase.mutable_phase());
  agent_->Emit(std::move(phase));
}

void Agent::ServerRun::RequestStop(absl::Time now, absl::Duration grace) {
  agent_->mu_.AssertHeld();
  if (waiting_for_gpu_) {
    NotLaunched(now, diagnosis::Diagnosis());
    return;
  }
  if (!alive_) return;
  stop_requested_ = true;
  stop_deadline_ = now + grace;
  KillGroup(SIGTERM);
  state_ = fleet::v1::SERVER_STATE_STOPPING;
  AgentEvent e = NewEvent();
  SetServerState(state_, e.mutable_phase());
  agent_->Emit(std::move(e));
}

void Agent::ServerRun::Ready(const ReadinessResult& result, absl::Time now) {
  agent_->mu_.AssertHeld();
  ready_ = true;
  state_ = fleet::v1::SERVER_STATE_READY;
  phase_detail_.clear();
  AgentEvent e = NewEvent();
  e.mutable_ready()->set_http_status(result.http_status);
  *e.mutable_ready()->mutable_time_to_ready() = ToProtoDuration(now - started_at_);
  agent_->Emit(std::move(e));
  AgentEvent phase = NewEvent();
  SetServerState(state_, phase.mutable_phase());
  agent_->Emit(std::move(phase));
}

void Agent::ServerRun::KillGroup(int sig) {
  if (pid_ <= 0 || group_unverified_) return;
  absl::Status s =
      SignalServerGroup(pid_, start_ticks_, pidfd_.get(), sig, agent_->options_.proc_root);
  if (s.ok()) return;
  if (s.code() == absl::StatusCode::kFailedPrecondition) group_unverified_ = true;
  ServerLog().warn("{} {}", log::LogFields{ServerMark(spec_, agent_->options_), attempt_id_}, s);
}

bool Agent::ServerRun::ReapGroup() {
  if (group_gone_) return true;
  if (pid_ <= 0) return group_gone_ = true;  // never launched (it waited for its GPU): no group
  const std::optional<ProcStat> leader = ReadProcStat(pid_, agent_->options_.proc_root);
  if (group_unverified_ || !leader || leader->start_ticks != start_ticks_) {
    group_gone_ = true;
    pidfd_.Reset();
    return true;
  }
  bool members_left = false;
  for (const SessionProcess& p : ListGroup(pid_, agent_->options_.proc_root, true)) {
    if (p.stat.pid == pid_) continue;
    const bool dead = p.stat.state == 'Z' || p.stat.state == 'X';
    // A zombie that is not the agent's child is its parent's to reap: wait for it.
    if (dead && waitpid(p.stat.pid, nullptr, WNOHANG) == p.stat.pid) continue;
    members_left = true;
  }
  if (members_left) return false;
  // A leader that is not the agent's child is its parent's to reap: the next look finds it gone.
  if (!is_child_ || waitpid(pid_, nullptr, WNOHANG) == 0) return false;
  group_gone_ = true;
  pidfd_.Reset();
  return true;
}

absl::Time Agent::ServerRun::Tick(absl::Time now) {
  agent_->mu_.AssertHeld();
  if (exited_ && !group_gone_ && pid_ > 0) {
    // A member forked while the group was being killed gets the signal too.
    KillGroup(SIGKILL);
    return ReapGroup() ? absl::InfiniteFuture() : now + absl::Milliseconds(100);
  }
  if (!alive_) return absl::InfiniteFuture();
  absl::Time next = absl::InfiniteFuture();
  if (stop_requested_) {
    if (now >= stop_deadline_) {
      KillGroup(SIGKILL);
      stop_deadline_ = absl::InfiniteFuture();
    }
    return stop_deadline_;
  }
  if (ready_) return next;
  if (!probe_in_flight_ && now >= next_probe_at_) {
    probe_in_flight_ = true;
    next_probe_at_ = now + ReadinessInterval();
    ReadinessCheck check;
    check.port = spec_.port();
    check.path = spec_.readiness().path().empty() ? std::string("/health_generate")
                                                  : spec_.readiness().path();
    check.completion_check = spec_.readiness().completion_check();
    agent_->RequestProbe({gpu(), attempt_id_, check});
  }
  if (!probe_in_flight_) next = std::min(next, next_probe_at_);
  if (now >= next_sample_at_) {
    const uint64_t ticks = GroupCpuTicks(pid_, agent_->options_.proc_root);
    if (ticks > cpu_ticks_) {
      cpu_ticks_ = ticks;
      last_progress_at_ = now;
    }
    next_sample_at_ = now + agent_->options_.progress_sample_interval;
  }
  next = std::min(next, next_sample_at_);
  const absl::Duration stall =
      ProtoDurationOr(spec_.stall_timeout(), agent_->options_.default_stall_timeout);
  if (!stall_reported_) {
    if (now - last_progress_at_ >= stall) {
      stall_reported_ = true;
      EmitStalled(
          diagnosis::classes::kStartupStalled,
          absl::StrCat("no new log line, build step or CPU time for ",
                       absl::FormatDuration(now - last_progress_at_), " in ",
                       AsAbsl(StateName(state_)),
                       phase_detail_.empty() ? "" : absl::StrCat(" (", phase_detail_, ")")));
    } else {
      next = std::min(next, last_progress_at_ + stall);
    }
  }
  const absl::Duration deadline =
      ProtoDurationOr(spec_.startup_deadline(), agent_->options_.default_startup_deadline);
  if (!deadline_reported_) {
    if (now - started_at_ >= deadline) {
      deadline_reported_ = true;
      EmitStalled(diagnosis::classes::kStartupDeadlineExceeded,
                  absl::StrCat("still not ready after ", absl::FormatDuration(now - started_at_),
                               " (startup deadline ", absl::FormatDuration(deadline), "), in ",
                               AsAbsl(StateName(state_))));
    } else {
      next = std::min(next, started_at_ + deadline);
    }
  }
  return next;
}

void Agent::ServerRun::ProbeDone(const ReadinessResult& result, absl::Time now) {
  agent_->mu_.AssertHeld();
  probe_in_flight_ = false;
  if (result.ready && alive_ && !ready_ && !stop_requested_) Ready(result, now);
}

fleet::v1::ServerRecord Agent::ServerRun::Record() const {
  fleet::v1::ServerRecord r;
  *r.mutable_spec() = spec_;
  r.set_attempt_id(attempt_id_);
  r.set_attempt_number(attempt_number_);
  r.set_pid(pid_);
  r.set_start_ticks(start_ticks_);
  *r.mutable_started_at() = ToProtoTime(started_at_);
  r.set_state(std::string(StateName(state_)));
  r.set_stop_requested(stop_requested_);
  r.set_ready(ready_);
  if (exited_) *r.mutable_exit() = exit_;
  if (final_diagnosis_.has_value()) *r.mutable_diagnosis() = *final_diagnosis_;
  return r;
}

fleet::v1::ServerStatus Agent::ServerRun::Status() const {
  fleet::v1::ServerStatus s;
  *s.mutable_server() = spec_.server();
  s.set_attempt_id(attempt_id_);
  s.set_attempt_number(attempt_number_);
  SetServerState(state_, &s);
  s.set_phase_detail(phase_detail_);
  s.set_progress_step(progress_step_);
  s.set_progress_total(progress_total_);
  s.set_pid(pid_);
  *s.mutable_started_at() = ToProtoTime(started_at_);
  if (final_diagnosis_.has_value()) {
    *s.mutable_diagnosis() = *final_diagnosis_;
  } else if (!finished_) {
    const diagnosis::Diagnosis d = classifier_->Snapshot();
    if (d.diagnosis_class != diagnosis::classes::kNone) {
      diagnosis::ToProto(d, s.mutable_diagnosis());
      RedactDiagnosis(env_, s.mutable_diagnosis());
    }
  }
  if (exited_) *s.mutable_exit() = exit_;
  return s;
}

void Agent::ServerRun::WaitForGpu(absl::Time now, std::string detail) {
  waiting_for_gpu_ = true;
  started_at_ = now;
  state_ = fleet::v1::SERVER_STATE_STARTING;
  phase_detail_ = std::move(detail);
}

void Agent::ServerRun::GpuBusy(const std::string& detail) {
  agent_->mu_.AssertHeld();
  if (detail == phase_detail_) return;
  phase_detail_ = detail;
  AgentEvent e = NewEvent();
  SetServerState(state_, e.mutable_phase());
  e.mutable_phase()->set_detail(phase_detail_);
  agent_->Emit(std::move(e));
}

void Agent::ServerRun::NotLaunched(absl::Time now, const diagnosis::Diagnosis& failure) {
  agent_->mu_.AssertHeld();
  waiting_for_gpu_ = false;
  exited_ = finished_ = group_gone_ = true;
  exit_.Clear();
  *exit_.mutable_at() = ToProtoTime(now);
  phase_detail_.clear();
  if (failure.diagnosis_class == diagnosis::classes::kNone) {
    stop_requested_ = true;
    state_ = fleet::v1::SERVER_STATE_STOPPED;
  } else {
    state_ = fleet::v1::SERVER_STATE_FAILED;
    EmitDiagnosis(failure, /*final=*/true);
  }
  AgentEvent e = NewEvent();
  SetServerState(state_, e.mutable_phase());
  agent_->Emit(std::move(e));
}

void Agent::ServerRun::AnnounceAdopted() {
  agent_->mu_.AssertHeld();
  AgentEvent e = NewEvent();
  SetServerState(state_, e.mutable_phase());
  e.mutable_phase()->set_detail(phase_detail_);
  agent_->Emit(std::move(e));
  const diagnosis::Diagnosis d = classifier_->Snapshot();
  if (d.diagnosis_class != diagnosis::classes::kNone) EmitDiagnosis(d, /*final=*/false);
}

AgentEvent Agent::ServerRun::NewEvent() const {
  AgentEvent e;
  *e.mutable_at() = ToProtoTime(agent_->deps_.clock->Now());
  *e.mutable_server() = spec_.server();
  e.set_attempt_id(attempt_id_);
  return e;
}

void Agent::ServerRun::EmitDiagnosis(const diagnosis::Diagnosis& d, bool final) {
  agent_->mu_.AssertHeld();
  AgentEvent e = NewEvent();
  auto* de = e.mutable_diagnosis();
  de->set_final(final);
  diagnosis::ToProto(d, de->mutable_diagnosis());
  de->mutable_diagnosis()->set_provisional(!final);
  RedactDiagnosis(env_, de->mutable_diagnosis());
  if (final) final_diagnosis_ = de->diagnosis();
  agent_->Emit(std::move(e));
}

void Agent::ServerRun::EmitStalled(const std::string& diagnosis_class, const std::string& summary) {
  agent_->mu_.AssertHeld();
  AgentEvent e = NewEvent();
  auto* st = e.mutable_stalled();
  st->set_diagnosis_class(diagnosis_class);
  diagnosis::Diagnosis d = classifier_->Snapshot();
  d.diagnosis_class = diagnosis_class;
  d.summary = summary;
  d.fix = diagnosis::FixKind::kSupervisor;
  d.confidence = diagnosis::Confidence::kHigh;  // the supervisor's own finding, not an inference
  d.toolchain_fix = false;
  d.evidence = classifier_->LastLines();
  d.root_cause_line = d.evidence.empty() ? 0 : d.evidence.back().line;
  diagnosis::ToProto(d, st->mutable_diagnosis());
  RedactDiagnosis(env_, st->mutable_diagnosis());
  for (const SessionProcess& p : ListGroup(pid_, agent_->options_.proc_root)) {
    if (st->running_processes_size() >= kMaxReportedProcesses) break;
    st->add_running_processes(absl::StrCat(p.stat.pid, " ", p.stat.comm,
                                           " cpu=", p.stat.utime + p.stat.stime, " ",
                                           RedactSecretValues(p.cmdline, env_)));
  }
  agent_->Emit(std::move(e));
}

}  // namespace fleet::agent
