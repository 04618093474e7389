// The daemon's remediation: the container's preflight before its first launch, a plan for a failed
// start whose diagnosis a change may fix, the plan run through the agent (recorded before and
// after, rolled back when it made things worse), and the restarts that follow (immediately, with
// one canary after a change to the JIT build). The planner (planner.h) decides; this file does
// the rest. Jobs call the agent without the daemon's lock, one per container at a time; their
// results are taken by the next turn (ApplyFixResults).
#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/string_view.h"
#include "common/diagnosis/diagnosis_class.h"
#include "daemon/daemon.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"

namespace fleet::daemon {
namespace {

// Preflight rounds per container: each one applied a fix that uncovered the next problem.
constexpr int kMaxPreflightRounds = 3;
// Failed preflight probes before the policy's preflight_failure decides (policy
// preflight_attempts, when not set).
constexpr int kDefaultPreflightAttempts = 5;
constexpr char kPreflightWaiting[] =
    "preflight: the container's toolchain is probed before the first launch";

using google::protobuf::util::TimeUtil;

bool MessageDifferencerEquals(const fleet::v1::ServerSpec& a, const fleet::v1::ServerSpec& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

std::string ContainerOf(const ServerRecord& r) { return absl::StrCat(r.host, "/", r.container); }

google::protobuf::Timestamp Stamp(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

// Whether a change in the container may fix this failure (the planner's fix kinds); the other
// classes are retried with backoff or given up, never planned for.
bool MayRemediate(const fleet::v1::Diagnosis& d) {
  using diagnosis::FixKind;
  const diagnosis::DiagnosisClassInfo* info = diagnosis::FindDiagnosisClass(d.diagnosis_class());
  if (info == nullptr) return false;
  FixKind fix = info->fix;
  if (std::optional<FixKind> k = diagnosis::ParseFixKind(d.fix_kind())) fix = *k;
  return fix == FixKind::kToolchain || fix == FixKind::kEnv || fix == FixKind::kJitCache ||
         fix == FixKind::kLaunchFlags;
}

bool MayRemediateClass(const std::string& cls) {
  fleet::v1::Diagnosis d;
  d.set_diagnosis_class(cls);
  return MayRemediate(d);
}

// The times one fix may be cut short before it counts as failed.
constexpr int kMaxInterruptions = 3;

// A recorded plan as the planner's history: what it addressed, what became of it.
PastRemediation Past(const fleet::v1::Plan& p) {
  PastRemediation r;
  r.id = p.id();
  r.causes.assign(p.causes().begin(), p.causes().end());
  r.fingerprint = p.fingerprint();
  for (const fleet::v1::PlannedAction& a : p.actions()) r.actions.push_back(a.action());
  // A plan still "applying" runs now (or is resolved, at a start, before anything is planned):
  // counted failed so that it is not proposed twice at once.
  r.outcome = p.status() == "rolled_back" ? RemediationOutcome::kRolledBack
              : p.status() == "applied"   ? RemediationOutcome::kApplied
                                          : RemediationOutcome::kFailed;
  r.trigger_facts.assign(p.trigger_facts().begin(), p.trigger_facts().end());
  r.trigger_class = p.diagnosis_class();
  return r;
}

std::vector<PastRemediation> History(const std::vector<fleet::v1::Plan>& plans) {
  // An interrupted plan (fleetd stopped while it ran, or the agent's answer broke off, and the
  // probe did not show it in effect) neither worked nor failed: it may be planned again. The
  // same fix interrupted kMaxInterruptions times counts as failed (an agent that dies each time
  // it runs it would otherwise be asked for ever).
  std::map<std::string, int> interruptions;
  for (const fleet::v1::Plan& p : plans) {
    if (p.status() == "interrupted") ++interruptions[p.fingerprint()];
  }
  std::vector<PastRemediation> out;
  for (const fleet::v1::Plan& p : plans) {
    if (p.status() == "proposed" || p.status() == "superseded") continue;
    if (p.status() == "interrupted" && interruptions[p.fingerprint()] < kMaxInterruptions) {
      continue;
    }
    out.push_back(Past(p));
  }
  return out;
}

// The problems a preflight of this toolchain would address or leave: their classes.
std::set<std::string> Problems(const PlannerDecision& d) {
  return std::set<std::string>(d.problems.begin(), d.problems.end());
}

// The planner's decision for `job` as the record keeps it (fleet.proto Plan): a plan with its
// actions and what the planner knew, or (no plan) a report.
fleet::v1::Plan PlanRecord(const PlannerDecision& decision, const std::string& container,
                           const std::string& server, const std::string& attempt_id,
                           const fleet::v1::Diagnosis& diagnosis,
                           const fleet::v1::ToolchainSnapshot& before) {
  fleet::v1::Plan plan;
  plan.set_container(container);
  plan.set_server(server);
  plan.set_diagnosis_class(diagnosis.diagnosis_class());
  for (const std::string& c : decision.constraints) plan.add_constraints(c);
  *plan.mutable_before() = before;
  if (!decision.plan) {
    if (decision.report) plan.set_report_only(decision.report->reason);
    plan.set_status("report");
    return plan;
  }
  const RemediationPlan& rp = *decision.plan;
  plan.set_trigger(rp.trigger);
  for (const PlannedAction& a : rp.actions) {
    fleet::v1::PlannedAction* out = plan.add_actions();
    *out->mutable_action() = a.action;
    out->set_reason(a.reason);
  }
  for (const std::string& c : rp.causes) plan.add_causes(c);
  plan.set_fingerprint(rp.fingerprint);
  plan.set_summary(rp.summary);
  for (const std::string& u : rp.unresolved) plan.add_unresolved(u);
  plan.set_cuda_release(rp.cuda_release);
  plan.set_affects_jit_build(rp.affects_jit_build);
  plan.set_degraded(rp.degraded);
  plan.set_save_package_set(rp.save_package_set);
  for (const auto& [k, v] : rp.env_changes) (*plan.mutable_env_changes())[k] = v;
  plan.set_attempt_id(attempt_id);
  *plan.mutable_trigger_facts() = diagnosis.facts();
  plan.set_status("proposed");
  return plan;
}

std::string CanonicalPipName(std::string name) {
  absl::AsciiStrToLower(&name);
  std::replace(name.begin(), name.end(), '_', '-');
  std::replace(name.begin(), name.end(), '.', '-');
  return name;
}

// What of `plan` the probe `seen` (taken with the plan's env changes) does not show in effect,
// one phrase each; empty when all of it is. Env and argv changes are the daemon's (they travel
// in the spec); pip packages show in the probe; apt packages, cleared caches and symlinks
// cannot be told from it, so a plan with them is run again (they are idempotent).
std::vector<std::string> NotInEffect(const fleet::v1::Plan& plan,
                                     const fleet::v1::ToolchainSnapshot& seen) {
  std::map<std::string, std::string> installed;
  for (const fleet::v1::Package& p : seen.pip_packages()) {
    installed[CanonicalPipName(p.name())] = p.version();
  }
  std::vector<std::string> missing;
  for (const fleet::v1::PlannedAction& planned : plan.actions()) {
    const fleet::v1::Action& a = planned.action();
    if (a.has_set_env() || a.has_prepend_path() || a.has_add_server_args() ||
        a.has_remove_server_args()) {
      continue;
    }
    if (a.has_pip_install()) {
      for (const fleet::v1::Requirement& r : a.pip_install().requirements()) {
        auto it = installed.find(CanonicalPipName(r.name()));
        if (it == installed.end() || it->second != r.version()) {
          missing.push_back(absl::StrCat(r.name(), "==", r.version(), " not installed"));
        }
      }
      continue;
    }
    if (a.has_pip_uninstall()) {
      for (const std::string& name : a.pip_uninstall().packages()) {
        if (installed.count(CanonicalPipName(name)) > 0) {
          missing.push_back(absl::StrCat(name, " still installed"));
        }
      }
      continue;
    }
    missing.push_back(absl::StrCat(AsAbsl(ActionKind(a)), " cannot be seen by a probe"));
  }
  return missing;
}

// A plan whose run was cut short (`what`: fleetd stopped, the agent's connection broke) is
// resolved by a probe with the plan's env changes: "applied" when it shows the plan in effect,
// else "interrupted" (planned again, not excluded). A probe that fails tells nothing: interrupted
// too (what comes next for the container, a preflight or a diagnosis' plan, meets the probe's
// error and says it).
void ResolveByProbe(AgentClient& client, const fleet::v1::ServerSpec& spec, const std::string& what,
                    const std::string& when, fleet::v1::Plan* plan) {
  fleet::v1::ServerSpec after_spec = spec;
  ApplyActionsToSpec(plan->actions(), &after_spec);
  absl::StatusOr<fleet::v1::ToolchainSnapshot> seen = client.Probe(after_spec);
  const std::vector<std::string> missing =
      seen.ok()
          ? NotInEffect(*plan, *seen)
          : std::vector<std::string>{absl::StrCat("the probe failed: ", seen.status().message())};
  if (seen.ok()) *plan->mutable_after() = *seen;
  if (missing.empty()) {
    plan->set_status("applied");
    plan->set_outcome_reason(absl::StrCat(what, "; ", when, " the probe showed it in effect"));
  } else {
    plan->set_status("interrupted");
    plan->set_outcome_reason(
        absl::StrCat(what, "; ", when, " the probe did not show it in effect (",
                     absl::StrJoin(missing, ", "), "): it may be planned again"));
  }
}

// An Apply that broke off on the way (the agent died or restarted, the link dropped, the
// deadline passed) may have run all, some or none of its actions: not a failed action.
bool CutShort(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsAborted(s) || absl::IsUnknown(s);
}

}  // namespace

absl::Duration PolicyDuration(const google::protobuf::Duration& d, absl::Duration fallback) {
  const int64_t ns = TimeUtil::DurationToNanoseconds(d);
  return ns > 0 ? absl::Nanoseconds(ns) : fallback;
}

absl::Status Daemon::LoadFixes() {
  auto plans = store_->Remediations("");
  if (!plans.ok()) return plans.status();
  for (fleet::v1::Plan& p : *plans) {
    Fixes& f = fixes_[p.container()];
    // A plan left "applying" when fleetd stopped is resolved (by a probe) before anything else of
    // its container is planned or launched; until then a preflight it was is not done.
    if (p.status() == "applying") {
      f.unresolved.push_back(p.id());
    } else if (p.trigger() == "preflight" && p.status() != "interrupted") {
      f.preflight_done = true;
    }
    f.history.push_back(std::move(p));
  }
  const absl::Time now = clock_->Now();
  for (auto& [name, s] : servers_) {
    Fixes& f = fixes_[ContainerOf(s.record)];
    // A container that has launched before had its preflight (or ran without one).
    if (s.record.attempt_number > 0) f.preflight_done = true;
    if (s.record.state == "READY") f.jit_warm = true;
    if (s.record.state == "REMEDIATING") {
      // What it waited on went with the fleetd that stopped: a plan for it that waits for
      // approval still does; else it is failed again, and planned for (once any interrupted
      // plan of its container is resolved).
      const std::string& server = name;  // clang 14 captures no structured binding
      const bool proposed =
          std::any_of(f.history.begin(), f.history.end(), [&](const fleet::v1::Plan& p) {
            return p.status() == "proposed" && p.server() == server;
          });
      if (proposed) {
        s.waiting = "approval";
      } else {
        SetState(s, "FAILED", now);
      }
    }
  }
  return absl::OkStatus();
}

void Daemon::WithFixes(const std::string& container, fleet::v1::ServerSpec* spec) {
  auto f = fixes_.find(container);
  if (f == fixes_.end()) return;
  for (const fleet::v1::Plan& p : f->second.history) {
    if (p.status() == "applied") ApplyActionsToSpec(p.actions(), spec);
  }
}

void Daemon::Wait(Server& s, const std::string& why, const std::string& reason,
                  std::set<std::string>* changed) {
  if (s.waiting == why && s.record.reason == reason) return;
  s.waiting = why;
  s.record.reason = reason;
  Touch(s);
  changed->insert(s.record.name);
}

void Daemon::Backoff(Server& s, absl::Time now) {
  ServerRecord& r = s.record;
  const int32_t max_attempts = r.policy.max_attempts() > 0 ? r.policy.max_attempts() : 8;
  if (s.AttemptsThisDeploy() >= max_attempts) {
    r.reason = absl::StrCat("attempt budget spent (", max_attempts,
                            "); last: ", s.attempt.diagnosis_class, ": ", s.attempt.summary);
    SetState(s, "GAVE_UP", now);
    return;
  }
  const absl::Duration initial = PolicyDuration(r.policy.backoff_initial(), absl::Seconds(10));
  const absl::Duration max = PolicyDuration(r.policy.backoff_max(), absl::Minutes(5));
  s.failures = std::max(s.failures, 0) + 1;
  const int n = std::min(s.failures, 16);
  // +-25%: servers that failed together do not all come back in the same instant.
  const double jitter = absl::Uniform(bitgen_, 0.75, 1.25);
  r.backoff_until = now + std::min(max, initial * (1 << (n - 1))) * jitter;
  SetState(s, "RESTARTING", now);
}

Daemon::FixJob Daemon::MakeJob(FixJob::Kind kind, const Server& s) {
  FixJob job;
  job.kind = kind;
  job.container = ContainerOf(s.record);
  if (auto link = links_.find(job.container); link != links_.end()) {
    job.host = link->second->host;
    job.config = link->second->config;
  }
  job.server = s.record.name;
  if (kind == FixJob::kDiagnosis) {
    job.attempt_id = s.attempt.id;
    job.diagnosis = s.attempt.diagnosis;
    if (job.diagnosis.diagnosis_class().empty()) {
      job.diagnosis.set_diagnosis_class(s.attempt.diagnosis_class);
    }
  }
  job.spec = s.record.spec;
  job.policy = s.record.policy;
  job.history = fixes_[job.container].history;
  return job;
}

bool Daemon::Resolve(Server& s, const std::string& why, absl::Time now, std::vector<FixJob>* jobs,
                     std::set<std::string>* changed) {
  const std::string container = ContainerOf(s.record);
  Fixes& f = fixes_[container];
  if (f.unresolved.empty()) return false;
  const std::string id = f.unresolved.front();
  auto link = links_.find(container);
  const bool reachable = link != links_.end() && link->second->state == Link::kFollowing;
  if (!f.busy && reachable && now >= f.retry_at) {
    auto plan = std::find_if(f.history.begin(), f.history.end(),
                             [&](const fleet::v1::Plan& p) { return p.id() == id; });
    if (plan == f.history.end()) {
      f.unresolved.pop_front();  // not in the history: nothing to resolve
      return Resolve(s, why, now, jobs, changed);
    }
    FixJob job = MakeJob(FixJob::kResolve, s);
    job.manual = *plan;
    jobs->push_back(std::move(job));
    f.busy = true;
    f.busy_class.clear();
  }
  Wait(s, why,
       absl::StrCat("waiting: remediation ", id,
                    " was interrupted when fleetd stopped; a probe tells whether it is in effect"),
       changed);
  return true;
}

bool Daemon::Gate(Server& s, absl::Time now, std::vector<FixJob>* jobs,
                  std::set<std::string>* changed) {
  const std::string container = ContainerOf(s.record);
  Fixes& f = fixes_[container];
  const bool remediate = s.record.policy.remediation() != fleet::v1::Policy::OFF;
  if (remediate && Resolve(s, "resolve", now, jobs, changed)) return false;
  if (remediate && !f.preflight_done) {
    auto link = links_.find(container);
    const bool reachable = link != links_.end() && link->second->state == Link::kFollowing;
    if (!f.busy && reachable && now >= f.retry_at) {
      jobs->push_back(MakeJob(FixJob::kPreflight, s));
      f.busy = true;
      f.busy_class.clear();
    }
    // After a failed probe, its error (and when it is tried next) is the reason shown.
    Wait(s, "preflight", f.preflight_reason.empty() ? kPreflightWaiting : f.preflight_reason,
         changed);
    return false;
  }
  if (s.waiting == "approval") return false;
  if (f.busy) {
    Wait(s, "remediation", "waiting: a remediation of the container runs", changed);
    return false;
  }
  if (s.record.policy.canary() && !f.jit_warm) {
    if (!f.canary.empty() && f.canary != s.record.name) {
      auto c = servers_.find(f.canary);
      const bool live = c != servers_.end() && c->second.record.desired_running &&
                        !c->second.record.removed && c->second.record.state != "GAVE_UP" &&
                        c->second.record.state != "STOPPED";
      if (live) {
        Wait(s, "canary",
             absl::StrCat("waiting: the canary ", f.canary,
                          " builds the JIT cache first (the rest start from it)"),
             changed);
        return false;
      }
      if (c != servers_.end() && c->second.record.state == "GAVE_UP" &&
          MayRemediateClass(c->second.attempt.diagnosis_class)) {
        // The container's toolchain failed the canary: this one would fail the same way.
        s.waiting.clear();
        s.record.reason =
            absl::StrCat("the canary ", f.canary, " gave up: ", c->second.record.reason);
        SetState(s, "GAVE_UP", now);
        changed->insert(s.record.name);
        return false;
      }
    }
    f.canary = s.record.name;
  }
  if (!s.waiting.empty()) {
    s.waiting.clear();
    s.record.reason.clear();
    Touch(s);
    changed->insert(s.record.name);
  }
  return true;
}

bool Daemon::Remediate(Server& s, absl::Time now, std::vector<FixJob>* jobs,
                       std::set<std::string>* changed) {
  if (s.record.policy.remediation() == fleet::v1::Policy::OFF) return false;
  if (!MayRemediate(s.attempt.diagnosis) && !MayRemediateClass(s.attempt.diagnosis_class)) {
    return false;
  }
  const std::string container = ContainerOf(s.record);
  Fixes& f = fixes_[container];
  s.fix_class = s.attempt.diagnosis_class;
  if (Resolve(s, "fix", now, jobs, changed)) {
    if (s.record.state != "REMEDIATING") SetState(s, "REMEDIATING", now);
    return true;
  }
  if (f.busy) {
    Wait(s, "fix",
         absl::StrCat("waiting: the container's remediation",
                      f.busy_class.empty() ? "" : " for " + f.busy_class, " runs"),
         changed);
    if (s.record.state != "REMEDIATING") SetState(s, "REMEDIATING", now);
    return true;
  }
  auto link = links_.find(container);
  const bool reachable = link != links_.end() && link->second->state == Link::kFollowing;
  if (!reachable || now < f.retry_at) return true;  // stays FAILED until the agent can be asked
  jobs->push_back(MakeJob(FixJob::kDiagnosis, s));
  f.busy = true;
  f.busy_class = s.fix_class;
  Wait(s, "fix", absl::StrCat("remediating: ", s.fix_class), changed);
  SetState(s, "REMEDIATING", now);
  return true;
}

// --- Jobs (no daemon lock held) ------------------------------------------------------------

void Daemon::RunJobs(std::vector<FixJob> jobs) {
  if (jobs.empty()) return;
  if (options_.fix_threads <= 0) {
    for (FixJob& job : jobs) {
      FixDone done = RunJob(std::move(job));
      absl::MutexLock lock(&queue_mu_);
      fix_done_.push_back(std::move(done));
      wake_ = true;
    }
    return;
  }
  absl::MutexLock lock(&fix_mu_);
  for (FixJob& job : jobs) fix_jobs_.push_back(std::move(job));
}

void Daemon::FixWorker() {
  while (true) {
    FixJob job;
    {
      absl::MutexLock lock(&fix_mu_);
      fix_mu_.Await(absl::Condition(
          +[](Daemon* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->fix_mu_) {
            return d->fix_stopping_ || !d->fix_jobs_.empty();
          },
          this));
      if (fix_stopping_) return;
      job = std::move(fix_jobs_.front());
      fix_jobs_.pop_front();
    }
    FixDone done = RunJob(std::move(job));
    absl::MutexLock lock(&queue_mu_);
    fix_done_.push_back(std::move(done));
    wake_ = true;
  }
}

absl::Status Daemon::Record(fleet::v1::Plan* plan, bool create) {
  absl::MutexLock lock(&store_mu_);
  if (!create) {
    absl::Status s = store_->UpdateRemediation(*plan);
    if (s.ok()) {
      unrecorded_plans_.erase(plan->id());
    } else {
      // The record is busy or full: the plan's newest state is kept and written by a later turn
      // (RecordPending), never lost (a plan left "applying" would be resolved as interrupted).
      fprintf(stderr, "fleetd: remediation %s: record: %s (written again later)\n",
              plan->id().c_str(), s.ToString().c_str());
      unrecorded_plans_[plan->id()] = *plan;
    }
    return s;
  }
  auto created = store_->CreateRemediation(*plan, clock_->Now());
  if (!created.ok()) return created.status();
  *plan = *std::move(created);
  return absl::OkStatus();
}

void Daemon::RecordPending() {
  for (auto it = unrecorded_plans_.begin(); it != unrecorded_plans_.end();) {
    if (!store_->UpdateRemediation(it->second).ok()) return;  // still failing: the next turn
    it = unrecorded_plans_.erase(it);
  }
}

Daemon::FixDone Daemon::RunJob(FixJob job) {
  FixDone done;
  // The job's outcome is `plan`, once the record holds it.
  auto recorded = [&](fleet::v1::Plan plan) {
    if (absl::Status s = Record(&plan, false); !s.ok()) {
      done.error = absl::StrCat("record: ", s.message());
    } else {
      done.plan = std::move(plan);
    }
    done.job = std::move(job);
    return std::move(done);
  };
  std::unique_ptr<AgentClient> client = factory_(job.container, job.host, job.config);
  if (client == nullptr) {
    done.error = absl::StrCat(job.container, ": no agent client");
    done.job = std::move(job);
    return done;
  }
  if (job.kind == FixJob::kResolve) {
    // Left "applying" by a fleetd that stopped: the probe, with the plan's env changes, tells
    // whether it is in effect (applied) or not (interrupted: planned again, not excluded).
    fleet::v1::Plan plan = job.manual;
    ResolveByProbe(*client, job.spec, "fleetd stopped while it ran", "at the next start", &plan);
    return recorded(std::move(plan));
  }
  if (job.kind == FixJob::kManual) {
    fleet::v1::Plan plan = job.manual;
    const fleet::v1::ToolchainSnapshot before = plan.before();
    plan.set_status("applying");
    if (absl::Status s = Record(&plan, false); !s.ok()) {
      done.error = std::string(s.message());
    } else {
      Execute(*client, job, before, &plan);
      done.plan = std::move(plan);
    }
    done.job = std::move(job);
    return done;
  }
  absl::StatusOr<fleet::v1::ToolchainSnapshot> snapshot = client->Probe(job.spec);
  if (!snapshot.ok()) {
    done.error = absl::StrCat("probe: ", snapshot.status().message());
    done.job = std::move(job);
    return done;
  }
  PlannerInput input{*snapshot, job.spec, job.policy, History(job.history)};
  PlannerDecision decision = job.kind == FixJob::kPreflight ? planner_.Preflight(input)
                                                            : planner_.Plan(job.diagnosis, input);
  done.failed_remediations = decision.failed_remediations;
  if (decision.report && job.kind == FixJob::kDiagnosis) {
    // A fix cut short earlier (interrupted: the probe then failed or did not show it) that the
    // probe shows in effect now did its work after all (the agent's pip outlived the agent, say):
    // it is applied, and the servers that wait for it restart with it.
    for (auto p = job.history.rbegin(); p != job.history.rend(); ++p) {
      if (p->status() != "interrupted" || p->diagnosis_class() != job.diagnosis.diagnosis_class() ||
          !NotInEffect(*p, *snapshot).empty()) {
        continue;
      }
      fleet::v1::Plan plan = *p;
      plan.set_status("applied");
      plan.set_outcome_reason(
          absl::StrCat(p->outcome_reason(), "; a later probe showed it in effect"));
      *plan.mutable_after() = *snapshot;
      return recorded(std::move(plan));
    }
  }
  if (decision.report) {
    done.report = std::move(decision.report);
    done.job = std::move(job);
    return done;
  }
  fleet::v1::Plan plan =
      PlanRecord(decision, job.container, job.server, job.attempt_id, job.diagnosis, *snapshot);
  const bool ask = job.policy.remediation() == fleet::v1::Policy::ASK;
  plan.set_status(ask ? "proposed" : "applying");
  if (absl::Status s = Record(&plan, true); !s.ok()) {
    done.error = absl::StrCat("record: ", s.message());
    done.job = std::move(job);
    return done;
  }
  if (!ask) Execute(*client, job, *snapshot, &plan);
  done.plan = std::move(plan);
  done.job = std::move(job);
  return done;
}

void Daemon::Execute(AgentClient& client, const FixJob& job,
                     const fleet::v1::ToolchainSnapshot& before, fleet::v1::Plan* plan) {
  fleet::v1::ApplyRequest request;
  request.set_remediation_id(absl::StrCat(job.container, "#", plan->id()));
  *request.mutable_spec() = job.spec;
  for (const fleet::v1::PlannedAction& a : plan->actions()) *request.add_actions() = a.action();
  request.set_save_package_set(plan->save_package_set());
  absl::StatusOr<fleet::v1::ApplyResponse> applied = client.Apply(request);
  *plan->mutable_applied_at() = Stamp(clock_->Now());
  if (!applied.ok() && CutShort(applied.status())) {
    ResolveByProbe(client, job.spec,
                   absl::StrCat("the agent's answer broke off while it ran (",
                                applied.status().message(), ")"),
                   "then", plan);
    Record(plan, false).IgnoreError();
    return;
  }
  if (!applied.ok()) {
    plan->set_status("failed");
    plan->set_outcome_reason(
        absl::StrCat("the agent did not apply it: ", applied.status().message()));
    Record(plan, false).IgnoreError();
    return;
  }
  *plan->mutable_results() = applied->results();
  *plan->mutable_saved_package_set() = applied->saved_package_set();
  *plan->mutable_after() = applied->after();
  for (const fleet::v1::ActionResult& r : applied->results()) {
    if (!r.ok()) {
      plan->set_status("failed");
      plan->set_outcome_reason(
          absl::StrCat(AsAbsl(ActionKind(r.action())), " failed: ", r.message()));
      Record(plan, false).IgnoreError();
      return;
    }
  }
  if (applied->results_size() < plan->actions_size()) {
    plan->set_status("failed");
    plan->set_outcome_reason("the agent ran only part of it");
    Record(plan, false).IgnoreError();
    return;
  }

  // Worse? Problems the probe shows after it that it did not show before (the plan's own causes
  // still there is a fix that did not work, found at the next start; this is a new breakage).
  // The agent probed with the spec it was given; the servers will start with the plan's env
  // changes, so the toolchain they will see is probed again with those.
  fleet::v1::ServerSpec after_spec = job.spec;
  ApplyActionsToSpec(plan->actions(), &after_spec);
  if (!MessageDifferencerEquals(after_spec, job.spec)) {
    absl::StatusOr<fleet::v1::ToolchainSnapshot> seen = client.Probe(after_spec);
    if (seen.ok()) *plan->mutable_after() = *std::move(seen);
  }
  const std::vector<PastRemediation> history = History(job.history);
  const std::set<std::string> was =
      Problems(planner_.Preflight(PlannerInput{before, job.spec, job.policy, history}));
  const std::set<std::string> is =
      Problems(planner_.Preflight(PlannerInput{plan->after(), after_spec, job.policy, history}));
  std::vector<std::string> worse;
  for (const std::string& p : is) {
    if (!was.count(p) &&
        std::find(plan->causes().begin(), plan->causes().end(), p) == plan->causes().end()) {
      worse.push_back(p);
    }
  }
  // A plan that only changes the servers' environment changes nothing installed: it points them
  // at another toolchain, and what that one lacks was out of sight before (no nvcc, no headers to
  // compare), not caused by it. Those problems are the next layer: the next preflight round (or
  // the next start's diagnosis) takes them.
  const bool env_only = std::all_of(
      plan->actions().begin(), plan->actions().end(),
      [](const auto& a) { return a.action().has_set_env() || a.action().has_prepend_path(); });
  if (worse.empty() || env_only) {
    plan->set_status("applied");
    if (!worse.empty()) {
      plan->set_outcome_reason(
          absl::StrCat("the toolchain it points at shows next: ", absl::StrJoin(worse, ", ")));
    }
    Record(plan, false).IgnoreError();
    return;
  }
  const std::string why =
      absl::StrCat("made things worse: after it the probe shows ", absl::StrJoin(worse, ", "),
                   ", which it did not show before");
  if (!plan->save_package_set() || plan->saved_package_set().empty()) {
    plan->set_status("failed");
    plan->set_outcome_reason(absl::StrCat(why, " (no package set saved: nothing to roll back)"));
    Record(plan, false).IgnoreError();
    return;
  }
  // Back to the package set saved before it: the versions it replaced, and what it added gone.
  std::map<std::string, std::string> saved;
  for (const fleet::v1::Package& p : plan->saved_package_set()) {
    saved[CanonicalPipName(p.name())] = p.version();
  }
  fleet::v1::ApplyRequest rollback;
  rollback.set_remediation_id(absl::StrCat(job.container, "#", plan->id(), "-rollback"));
  *rollback.mutable_spec() = job.spec;
  fleet::v1::Action reinstall, uninstall;
  for (const fleet::v1::PlannedAction& a : plan->actions()) {
    if (!a.action().has_pip_install()) continue;
    for (const fleet::v1::Requirement& r : a.action().pip_install().requirements()) {
      auto old = saved.find(CanonicalPipName(r.name()));
      if (old == saved.end()) {
        uninstall.mutable_pip_uninstall()->add_packages(r.name());
      } else if (old->second != r.version()) {
        fleet::v1::Requirement* back = reinstall.mutable_pip_install()->add_requirements();
        back->set_name(r.name());
        back->set_version(old->second);
      }
    }
  }
  if (reinstall.has_pip_install()) *rollback.add_actions() = reinstall;
  if (uninstall.has_pip_uninstall()) *rollback.add_actions() = uninstall;
  absl::StatusOr<fleet::v1::ApplyResponse> undone = client.Apply(rollback);
  bool ok = undone.ok();
  if (undone.ok()) {
    for (const fleet::v1::ActionResult& r : undone->results()) {
      *plan->add_results() = r;
      ok = ok && r.ok();
    }
    *plan->mutable_after() = undone->after();
  }
  plan->set_status("rolled_back");
  plan->set_outcome_reason(absl::StrCat(
      why, "; rolled back to the package set saved before it",
      ok ? ""
         : absl::StrCat(" (the rollback failed: ",
                        undone.ok() ? "an action failed" : undone.status().message(), ")")));
  Record(plan, false).IgnoreError();
}

// --- Results (a turn, under the locks) ------------------------------------------------------

void Daemon::PreflightFailed(const FixJob& job, const std::string& error, absl::Time now,
                             std::set<std::string>* changed) {
  Fixes& f = fixes_[job.container];
  const fleet::v1::Policy& policy = job.policy;
  const int attempts =
      policy.preflight_attempts() > 0 ? policy.preflight_attempts() : kDefaultPreflightAttempts;
  const int n = ++f.probe_failures;
  std::vector<Server*> waiting;
  for (auto& entry : servers_) {
    Server& s = entry.second;
    if (ContainerOf(s.record) == job.container && s.waiting == "preflight") waiting.push_back(&s);
  }
  if (n < attempts) {
    // Tried again after the policy's backoff, doubling: an agent that cannot probe is not asked
    // every few seconds for ever.
    const absl::Duration initial = PolicyDuration(policy.backoff_initial(), absl::Seconds(10));
    const absl::Duration max = PolicyDuration(policy.backoff_max(), absl::Minutes(5));
    const absl::Duration wait = std::min(max, initial * (1 << std::min(n - 1, 16)));
    f.retry_at = now + wait;
    f.preflight_reason =
        absl::StrCat("preflight: the agent's probe failed (", n, " of ", attempts, "): ", error,
                     "; tried again in ", absl::FormatDuration(wait));
    fprintf(stderr, "fleetd: %s: %s\n", job.container.c_str(), f.preflight_reason.c_str());
    for (Server* s : waiting) Wait(*s, "preflight", f.preflight_reason, changed);
    return;
  }
  f.probe_failures = 0;
  f.preflight_reason.clear();
  f.retry_at = absl::InfinitePast();
  const bool give_up = policy.preflight_failure() == fleet::v1::Policy::GIVE_UP;
  fprintf(stderr, "fleetd: %s: the preflight probe failed %d times (last: %s): %s\n",
          job.container.c_str(), attempts, error.c_str(),
          give_up ? "its servers give up (policy preflight_failure: give_up)"
                  : "launching without the preflight (a failed start is still diagnosed and "
                    "remediated)");
  if (!give_up) f.preflight_done = true;
  for (Server* s : waiting) {
    s->waiting.clear();
    changed->insert(s->record.name);
    if (give_up) {
      s->record.reason =
          absl::StrCat("preflight: the agent's probe failed ", attempts, " times: ", error);
      SetState(*s, "GAVE_UP", now);
    } else {
      s->record.reason.clear();
      Touch(*s);  // launched by the next turn
    }
  }
}

void Daemon::ApplyFixResults(absl::Time now, std::set<std::string>* changed) {
  std::deque<FixDone> results;
  {
    absl::MutexLock lock(&queue_mu_);
    results.swap(fix_done_);
  }
  for (FixDone& done : results) {
    const FixJob& job = done.job;
    Fixes& f = fixes_[job.container];
    f.busy = false;
    f.busy_class.clear();
    // Fixes that did not hold: their cause came back.
    for (const std::string& id : done.failed_remediations) {
      for (fleet::v1::Plan& p : f.history) {
        if (p.id() != id || p.status() != "applied") continue;
        p.set_status("failed");
        p.set_outcome_reason(absl::StrCat(job.diagnosis.diagnosis_class(),
                                          " came back after it (attempt ", job.attempt_id, ")"));
        store_->UpdateRemediation(p).IgnoreError();
        store_->LinkRemediationAttempt(p.id(), job.attempt_id).IgnoreError();
      }
    }
    if (!done.error.empty()) {
      fprintf(stderr, "fleetd: remediation of %s: %s\n", job.container.c_str(), done.error.c_str());
      f.retry_at = now + absl::Seconds(5);
    }
    if (job.kind == FixJob::kResolve && done.error.empty()) {
      if (!f.unresolved.empty() && f.unresolved.front() == job.manual.id()) {
        f.unresolved.pop_front();
      }
      fprintf(stderr, "fleetd: remediation %s of %s, interrupted when fleetd stopped: %s\n",
              job.manual.id().c_str(), job.container.c_str(),
              done.plan ? done.plan->status().c_str() : "?");
      if (done.plan && done.plan->status() == "applied" && done.plan->trigger() == "preflight") {
        f.preflight_done = true;
      }
    }
    if (job.kind == FixJob::kPreflight && !done.error.empty()) {
      PreflightFailed(job, done.error, now, changed);
      continue;
    }
    if (job.kind == FixJob::kPreflight && done.error.empty()) {
      f.probe_failures = 0;
      f.preflight_reason.clear();
      // An applied preflight that uncovered the next layer of problems gets another round, with
      // its fix in the spec (a few at most: each round must apply something new).
      f.preflight_done =
          !(done.plan && done.plan->status() == "applied" && !done.plan->outcome_reason().empty() &&
            ++f.preflight_rounds < kMaxPreflightRounds);
    }
    const fleet::v1::Plan* plan = nullptr;
    if (done.plan) {
      auto known = std::find_if(f.history.begin(), f.history.end(), [&](const fleet::v1::Plan& p) {
        return p.id() == done.plan->id();
      });
      if (known != f.history.end()) {
        *known = *done.plan;
        plan = &*known;
      } else {
        f.history.push_back(*done.plan);
        plan = &f.history.back();
      }
    }
    const bool applied = plan != nullptr && plan->status() == "applied";
    const bool proposed = plan != nullptr && plan->status() == "proposed";
    if (applied) {
      if (plan->affects_jit_build()) {
        f.jit_warm = false;
        f.canary.clear();
      }
    }
    for (auto& entry : servers_) {
      Server& s = entry.second;
      if (ContainerOf(s.record) != job.container) continue;
      if (applied) {
        // The fix travels with every later Launch of every server of the container; a fallback
        // (no CUDA graphs, another attention backend) shows as degraded.
        ApplyActionsToSpec(plan->actions(), &s.record.spec);
        if (plan->degraded()) s.record.degraded = true;
        changed->insert(s.record.name);
        Touch(s);
      }
      if (s.waiting.empty() || s.waiting == "canary") continue;
      if (s.waiting == "approval" && job.kind != FixJob::kManual) continue;
      // Restarted by the outcome: those that failed and wait for the fix (or for the approval
      // of a plan for their failure); the others were only held back from a first launch.
      const bool fix_waiter =
          s.waiting == "fix" || (s.waiting == "approval" && s.record.state == "REMEDIATING");
      changed->insert(s.record.name);
      Touch(s);
      if (proposed) {
        s.waiting = "approval";
        s.record.reason = absl::StrCat("plan ", plan->id(), " waits for approval: fleetctl apply ",
                                       plan->id(), " (", plan->summary(), ")");
        continue;
      }
      s.waiting.clear();
      s.record.reason.clear();
      if (!fix_waiter) continue;  // held for the job: launched by the next turn
      if (applied) {
        // The cause is fixed: no backoff.
        s.next_trigger = absl::StrCat("remediation:", plan->id());
        s.record.backoff_until = absl::InfinitePast();
        SetState(s, "RESTARTING", now);
        if (!s.attempt.id.empty() && !plan->id().empty()) {
          store_->LinkRemediationAttempt(plan->id(), s.attempt.id).IgnoreError();
        }
        continue;
      }
      if (done.report && s.fix_class == job.diagnosis.diagnosis_class()) {
        if (done.report->retry_with_backoff) {
          Backoff(s, now);
        } else {
          s.record.reason = done.report->reason;
          SetState(s, "GAVE_UP", now);
        }
        continue;
      }
      if (!done.error.empty() && job.kind == FixJob::kDiagnosis) {
        // The agent could not be asked (its probe fails): restarted without a fix after backoff,
        // so the attempt budget bounds it, instead of asking again every few seconds.
        s.record.reason = absl::StrCat("remediation of ", s.fix_class, " could not run (",
                                       done.error, "): restarted without it after backoff");
        Backoff(s, now);
        continue;
      }
      // A failed or rolled-back plan, or a report about another class: back to FAILED, planned
      // again (a failed plan is not proposed twice).
      if (plan != nullptr) {
        s.record.reason = absl::StrCat("remediation ", plan->id(), " ", plan->status(), ": ",
                                       plan->outcome_reason());
      }
      SetState(s, "FAILED", now);
    }
  }
}

// --- fleetctl plan / apply / remediations --------------------------------------------------

absl::StatusOr<fleet::v1::ListRemediationsResponse> Daemon::ListRemediations(
    const fleet::v1::ListRemediationsRequest& request) {
  std::string container = request.container();
  {
    absl::MutexLock lock(&mu_);
    if (auto s = servers_.find(container); s != servers_.end()) {
      container = ContainerOf(s->second.record);
    } else if (!container.empty() && fixes_.count(container) == 0 && links_.count(container) == 0) {
      return absl::NotFoundError(absl::StrCat("no server or container ", container));
    }
  }
  absl::MutexLock lock(&store_mu_);
  auto plans = store_->Remediations(container);
  if (!plans.ok()) return plans.status();
  fleet::v1::ListRemediationsResponse response;
  for (fleet::v1::Plan& p : *plans) *response.add_plans() = std::move(p);
  return response;
}

absl::StatusOr<fleet::v1::PlanResponse> Daemon::Plan(const fleet::v1::PlanRequest& request) {
  FixJob job;
  {
    absl::MutexLock lock(&mu_);
    auto it = servers_.find(request.server());
    if (it == servers_.end()) {
      return absl::NotFoundError(absl::StrCat("no server ", request.server()));
    }
    const Server& s = it->second;
    const std::string container = ContainerOf(s.record);
    fleet::v1::PlanResponse response;
    for (auto p = fixes_[container].history.rbegin(); p != fixes_[container].history.rend(); ++p) {
      if (p->status() == "proposed") {
        *response.mutable_plan() = *p;
        return response;
      }
    }
    const bool failed = !s.attempt.id.empty() && s.attempt.outcome == "failed" &&
                        !s.attempt.diagnosis_class.empty() && s.attempt.diagnosis_class != "none";
    job = MakeJob(failed ? FixJob::kDiagnosis : FixJob::kPreflight, s);
  }
  std::unique_ptr<AgentClient> client = factory_(job.container, job.host, job.config);
  if (client == nullptr) return absl::UnavailableError(absl::StrCat(job.container, ": no agent"));
  absl::StatusOr<fleet::v1::ToolchainSnapshot> snapshot = client->Probe(job.spec);
  if (!snapshot.ok()) return snapshot.status();
  PlannerInput input{*snapshot, job.spec, job.policy, History(job.history)};
  // Asked for, so shown whatever the policy's mode: a plan for `off` is shown, not run.
  if (input.policy.remediation() == fleet::v1::Policy::OFF) {
    input.policy.set_remediation(fleet::v1::Policy::ASK);
  }
  PlannerDecision decision = job.kind == FixJob::kPreflight ? planner_.Preflight(input)
                                                            : planner_.Plan(job.diagnosis, input);
  fleet::v1::PlanResponse response;
  fleet::v1::Plan& plan = *response.mutable_plan();
  plan = PlanRecord(decision, job.container, job.server, job.attempt_id, job.diagnosis, *snapshot);
  if (!decision.plan) return response;
  plan.set_trigger("manual");
  if (absl::Status s = Record(&plan, true); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    fixes_[job.container].history.push_back(plan);
  }
  return response;
}

absl::StatusOr<fleet::v1::ApplyPlanResponse> Daemon::ApplyPlan(
    const fleet::v1::ApplyPlanRequest& request) {
  FixJob job;
  {
    absl::MutexLock lock(&mu_);
    const fleet::v1::Plan* found = nullptr;
    std::string container;
    for (const auto& [name, f] : fixes_) {
      for (const fleet::v1::Plan& p : f.history) {
        if (p.id() == request.plan_id()) {
          found = &p;
          container = name;
        }
      }
    }
    if (found == nullptr) return absl::NotFoundError(absl::StrCat("no plan ", request.plan_id()));
    if (found->status() != "proposed") {
      return absl::FailedPreconditionError(absl::StrCat("plan ", request.plan_id(), " is ",
                                                        found->status(),
                                                        ": only a proposed plan is applied"));
    }
    Fixes& f = fixes_[container];
    if (f.busy) {
      return absl::UnavailableError(
          absl::StrCat("a remediation of ", container, " runs now; try again when it is done"));
    }
    auto s = servers_.find(found->server());
    if (s == servers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("plan ", request.plan_id(), ": no server ", found->server()));
    }
    job = MakeJob(FixJob::kManual, s->second);
    job.manual = *found;
    job.attempt_id = found->attempt_id();
    job.diagnosis.set_diagnosis_class(found->diagnosis_class());
    f.busy = true;
    f.busy_class = found->diagnosis_class();
  }
  FixDone done = RunJob(job);
  fleet::v1::ApplyPlanResponse response;
  if (done.plan) {
    *response.mutable_plan() = *done.plan;
    *response.mutable_results() = done.plan->results();
  }
  const std::string error = done.error;
  {
    absl::MutexLock lock(&queue_mu_);
    fix_done_.push_back(std::move(done));
    wake_ = true;
  }
  if (!error.empty()) return absl::UnavailableError(error);
  return response;
}

}  // namespace fleet::daemon
