// The daemon's remediation decisions (a turn, under its locks): the container's preflight before
// its first launch, a plan for a failed start whose diagnosis a change may fix, one job per
// container at a time, the restarts that follow (immediately, with one canary after a change to
// the JIT build), the backoff and the budget; and fleetctl's plan / apply / remediations. The
// planner (planner/planner.h) decides what to change; the jobs run on the RemediationRunner
// (remediation_runner.h), without the daemon's locks, and their results are taken by the next
// turn (ApplyFixResults).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/proto_time.h"
#include "common/base/string_view.h"
#include "common/log/log.h"
#include "common/state/states.h"
#include "daemon/daemon.h"
#include "daemon/events/fleet_events.h"
#include "daemon/reconciler.h"
#include "daemon/server_state.h"
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

}  // namespace

absl::Status Daemon::LoadFixes() {
  auto plans = store_->Remediations("");
  if (!plans.ok()) return plans.status();
  for (fleet::v1::Plan& p : *plans) {
    Fixes& f = fixes_[p.container()];
    // A plan left "applying" when fleetd stopped is resolved (by a probe) before anything else of
    // its container is planned or launched; until then a preflight it was is not done.
    if (PlanStatusOf(p) == fleet::v1::PLAN_STATUS_APPLYING) {
      f.unresolved.push_back(p.id());
    } else if (p.trigger() == "preflight" &&
               PlanStatusOf(p) != fleet::v1::PLAN_STATUS_INTERRUPTED) {
      f.preflight_done = true;
    }
    f.history.push_back(std::move(p));
  }
  const absl::Time now = clock_->Now();
  for (auto& [name, s] : servers_) {
    Fixes& f = fixes_[ContainerOf(s.record)];
    // A container that has launched before had its preflight (or ran without one).
    if (s.record.attempt_number > 0) f.preflight_done = true;
    if (s.record.state == v1::SERVER_STATE_READY) f.jit_warm = true;
    if (s.record.state == v1::SERVER_STATE_REMEDIATING) {
      // What it waited on went with the fleetd that stopped: a plan for it that waits for
      // approval still does; else it is failed again, and planned for (once any interrupted
      // plan of its container is resolved).
      const std::string& server = name;  // clang 14 captures no structured binding
      const bool proposed =
          std::any_of(f.history.begin(), f.history.end(), [&](const fleet::v1::Plan& p) {
            return PlanStatusOf(p) == fleet::v1::PLAN_STATUS_PROPOSED && p.server() == server;
          });
      if (proposed) {
        s.waiting = "approval";
      } else {
        SetState(s, v1::SERVER_STATE_FAILED, now);
      }
    }
  }
  return absl::OkStatus();
}

void Daemon::WithFixes(const std::string& container, fleet::v1::ServerSpec* spec) {
  auto f = fixes_.find(container);
  if (f == fixes_.end()) return;
  for (const fleet::v1::Plan& p : f->second.history) {
    if (PlanStatusOf(p) == fleet::v1::PLAN_STATUS_APPLIED) ApplyActionsToSpec(p.actions(), spec);
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
  const int32_t max_attempts = MaxAttempts(r.policy);
  if (s.AttemptsThisDeploy() >= max_attempts) {
    r.reason = absl::StrCat("attempt budget spent (", max_attempts,
                            "); last: ", s.attempt.diagnosis_class, ": ", s.attempt.summary);
    SetState(s, v1::SERVER_STATE_GAVE_UP, now);
    return;
  }
  s.failures = std::max(s.failures, 0) + 1;
  r.backoff_until = BackoffUntil(r.policy, s.failures, now, bitgen_);
  SetState(s, v1::SERVER_STATE_RESTARTING, now);
}

FixJob Daemon::MakeJob(FixJob::Kind kind, const Server& s) {
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
                        !c->second.record.removed &&
                        c->second.record.state != v1::SERVER_STATE_GAVE_UP &&
                        c->second.record.state != v1::SERVER_STATE_STOPPED;
      if (live) {
        Wait(s, "canary",
             absl::StrCat("waiting: the canary ", f.canary,
                          " builds the JIT cache first (the rest start from it)"),
             changed);
        return false;
      }
      if (c != servers_.end() && c->second.record.state == v1::SERVER_STATE_GAVE_UP &&
          MayRemediateClass(c->second.attempt.diagnosis_class)) {
        // The container's toolchain failed the canary: this one would fail the same way.
        s.waiting.clear();
        s.record.reason =
            absl::StrCat("the canary ", f.canary, " gave up: ", c->second.record.reason);
        SetState(s, v1::SERVER_STATE_GAVE_UP, now);
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

void Daemon::Remediate(Server& s, absl::Time now, std::vector<FixJob>* jobs,
                       std::set<std::string>* changed) {
  const std::string container = ContainerOf(s.record);
  Fixes& f = fixes_[container];
  s.fix_class = s.attempt.diagnosis_class;
  if (Resolve(s, "fix", now, jobs, changed)) {
    if (s.record.state != v1::SERVER_STATE_REMEDIATING)
      SetState(s, v1::SERVER_STATE_REMEDIATING, now);
    return;
  }
  if (f.busy) {
    Wait(s, "fix",
         absl::StrCat("waiting: the container's remediation",
                      f.busy_class.empty() ? "" : " for " + f.busy_class, " runs"),
         changed);
    if (s.record.state != v1::SERVER_STATE_REMEDIATING)
      SetState(s, v1::SERVER_STATE_REMEDIATING, now);
    return;
  }
  auto link = links_.find(container);
  const bool reachable = link != links_.end() && link->second->state == Link::kFollowing;
  if (!reachable || now < f.retry_at) return;  // stays FAILED until the agent can be asked
  jobs->push_back(MakeJob(FixJob::kDiagnosis, s));
  f.busy = true;
  f.busy_class = s.fix_class;
  Wait(s, "fix", absl::StrCat("remediating: ", s.fix_class), changed);
  SetState(s, v1::SERVER_STATE_REMEDIATING, now);
}

// --- Jobs (no daemon lock held) ------------------------------------------------------------

namespace {

// The fleet events of a plan recorded: its status (remediation), and what a person may have to
// act on: a plan the policy `ask` holds for `fleetctl apply`, a fix that failed.
void JournalPlan(FleetJournal& journal, const fleet::v1::Plan& plan, bool created, absl::Time now) {
  journal.Add(events::PlanEvent(events::kRemediation, plan, now));
  const fleet::v1::PlanStatus status = PlanStatusOf(plan);
  if (created && status == fleet::v1::PLAN_STATUS_PROPOSED && plan.trigger() != "manual") {
    journal.Add(events::PlanEvent(events::kRemediationAwaitingApproval, plan, now));
  } else if (status == fleet::v1::PLAN_STATUS_FAILED ||
             status == fleet::v1::PLAN_STATUS_ROLLED_BACK) {
    journal.Add(events::PlanEvent(events::kRemediationFailed, plan, now));
  }
}

}  // namespace

absl::Status Daemon::Record(fleet::v1::Plan* plan, bool create) {
  absl::MutexLock lock(&store_mu_);
  if (!create) {
    absl::Status s = store_->UpdateRemediation(*plan);
    if (s.ok()) {
      unrecorded_plans_.erase(plan->id());
      JournalPlan(journal_, *plan, false, clock_->Now());
    } else {
      // The record is busy or full: the plan's newest state is kept and written by a later turn
      // (RecordPending), never lost (a plan left "applying" would be resolved as interrupted).
      log::Get(log::Component::kRemediation)
          .warn("{} remediation {}: record: {} (written again later)",
                log::LogFields{.server = plan->server(), .container = plan->container()},
                plan->id(), s);
      unrecorded_plans_[plan->id()] = *plan;
    }
    return s;
  }
  auto created = store_->CreateRemediation(*plan, clock_->Now());
  if (!created.ok()) return created.status();
  *plan = *std::move(created);
  JournalPlan(journal_, *plan, true, clock_->Now());
  return absl::OkStatus();
}

void Daemon::RecordPending() {
  for (auto it = unrecorded_plans_.begin(); it != unrecorded_plans_.end();) {
    if (!store_->UpdateRemediation(it->second).ok()) return;  // still failing: the next turn
    JournalPlan(journal_, it->second, false, clock_->Now());
    it = unrecorded_plans_.erase(it);
  }
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
    const absl::Duration initial = ProtoDurationOr(policy.backoff_initial(), absl::Seconds(10));
    const absl::Duration max = ProtoDurationOr(policy.backoff_max(), absl::Minutes(5));
    const absl::Duration wait = std::min(max, initial * (1 << std::min(n - 1, 16)));
    f.retry_at = now + wait;
    f.preflight_reason =
        absl::StrCat("preflight: the agent's probe failed (", n, " of ", attempts, "): ", error,
                     "; tried again in ", absl::FormatDuration(wait));
    log::Get(log::Component::kRemediation)
        .warn("{} {}", log::LogFields{.container = job.container}, f.preflight_reason);
    for (Server* s : waiting) Wait(*s, "preflight", f.preflight_reason, changed);
    return;
  }
  f.probe_failures = 0;
  f.preflight_reason.clear();
  f.retry_at = absl::InfinitePast();
  const bool give_up = policy.preflight_failure() == fleet::v1::Policy::GIVE_UP;
  log::Get(log::Component::kRemediation)
      .log(give_up ? spdlog::level::err : spdlog::level::warn,
           "{} the preflight probe failed {} times (last: {}): {}",
           log::LogFields{.container = job.container}, attempts, error,
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
      SetState(*s, v1::SERVER_STATE_GAVE_UP, now);
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
        if (p.id() != id || PlanStatusOf(p) != fleet::v1::PLAN_STATUS_APPLIED) continue;
        SetPlanStatus(fleet::v1::PLAN_STATUS_FAILED, &p);
        p.set_outcome_reason(absl::StrCat(job.diagnosis.diagnosis_class(),
                                          " came back after it (attempt ", job.attempt_id, ")"));
        store_->UpdateRemediation(p).IgnoreError();
        store_->LinkRemediationAttempt(p.id(), job.attempt_id).IgnoreError();
      }
    }
    if (!done.error.empty()) {
      log::Get(log::Component::kRemediation)
          .warn("{} remediation of {}: {}",
                log::LogFields{.server = job.server, .attempt = job.attempt_id}, job.container,
                done.error);
      f.retry_at = now + absl::Seconds(5);
    }
    if (job.kind == FixJob::kResolve && done.error.empty()) {
      if (!f.unresolved.empty() && f.unresolved.front() == job.manual.id()) {
        f.unresolved.pop_front();
      }
      log::Get(log::Component::kRemediation)
          .info("{} remediation {} of {}, interrupted when fleetd stopped: {}",
                log::LogFields{.server = job.manual.server()}, job.manual.id(), job.container,
                done.plan ? done.plan->status() : "?");
      if (done.plan && PlanStatusOf(*done.plan) == fleet::v1::PLAN_STATUS_APPLIED &&
          done.plan->trigger() == "preflight") {
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
          !(done.plan && PlanStatusOf(*done.plan) == fleet::v1::PLAN_STATUS_APPLIED &&
            !done.plan->outcome_reason().empty() && ++f.preflight_rounds < kMaxPreflightRounds);
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
    const bool applied = plan != nullptr && PlanStatusOf(*plan) == fleet::v1::PLAN_STATUS_APPLIED;
    const bool proposed = plan != nullptr && PlanStatusOf(*plan) == fleet::v1::PLAN_STATUS_PROPOSED;
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
          s.waiting == "fix" ||
          (s.waiting == "approval" && s.record.state == v1::SERVER_STATE_REMEDIATING);
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
        SetState(s, v1::SERVER_STATE_RESTARTING, now);
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
          SetState(s, v1::SERVER_STATE_GAVE_UP, now);
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
      SetState(s, v1::SERVER_STATE_FAILED, now);
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
      if (PlanStatusOf(*p) == fleet::v1::PLAN_STATUS_PROPOSED) {
        *response.mutable_plan() = *p;
        return response;
      }
    }
    const bool failed = !s.attempt.id.empty() && s.attempt.outcome == v1::ATTEMPT_OUTCOME_FAILED &&
                        !s.attempt.diagnosis_class.empty() &&
                        s.attempt.diagnosis_class != diagnosis::classes::kNone;
    job = MakeJob(failed ? FixJob::kDiagnosis : FixJob::kPreflight, s);
  }
  std::unique_ptr<AgentClient> client = factory_(job.container, job.host, job.config);
  if (client == nullptr) return absl::UnavailableError(absl::StrCat(job.container, ": no agent"));
  absl::StatusOr<RemediationRunner::Proposal> proposal =
      runner_->Propose(*client, job, /*asked=*/true);
  if (!proposal.ok()) return proposal.status();
  fleet::v1::PlanResponse response;
  fleet::v1::Plan& plan = *response.mutable_plan();
  plan = std::move(proposal->plan);
  if (!proposal->decision.plan) return response;
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
    if (PlanStatusOf(*found) != fleet::v1::PLAN_STATUS_PROPOSED) {
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
  FixDone done = runner_->Run(job);
  fleet::v1::ApplyPlanResponse response;
  if (done.plan) {
    *response.mutable_plan() = *done.plan;
    *response.mutable_results() = done.plan->results();
  }
  const std::string error = done.error;
  FixFinished(std::move(done));
  if (!error.empty()) return absl::UnavailableError(error);
  return response;
}

}  // namespace fleet::daemon
