#include "daemon/remediation_runner.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/proto_time.h"
#include "common/base/string_view.h"
#include "common/state/states.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"

namespace fleet::daemon {
namespace {

bool MessageDifferencerEquals(const fleet::v1::ServerSpec& a, const fleet::v1::ServerSpec& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
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
  r.outcome = PlanStatusOf(p) == fleet::v1::PLAN_STATUS_ROLLED_BACK
                  ? RemediationOutcome::kRolledBack
              : PlanStatusOf(p) == fleet::v1::PLAN_STATUS_APPLIED ? RemediationOutcome::kApplied
                                                                  : RemediationOutcome::kFailed;
  r.trigger_facts.assign(p.trigger_facts().begin(), p.trigger_facts().end());
  r.trigger_class = p.diagnosis_class();
  return r;
}

std::vector<PastRemediation> HistoryOf(const std::vector<fleet::v1::Plan>& plans) {
  // An interrupted plan (fleetd stopped while it ran, or the agent's answer broke off, and the
  // probe did not show it in effect) neither worked nor failed: it may be planned again. The
  // same fix interrupted kMaxInterruptions times counts as failed (an agent that dies each time
  // it runs it would otherwise be asked for ever).
  std::map<std::string, int> interruptions;
  for (const fleet::v1::Plan& p : plans) {
    if (PlanStatusOf(p) == fleet::v1::PLAN_STATUS_INTERRUPTED) ++interruptions[p.fingerprint()];
  }
  std::vector<PastRemediation> out;
  for (const fleet::v1::Plan& p : plans) {
    if (PlanStatusOf(p) == fleet::v1::PLAN_STATUS_PROPOSED ||
        PlanStatusOf(p) == fleet::v1::PLAN_STATUS_SUPERSEDED)
      continue;
    if (PlanStatusOf(p) == fleet::v1::PLAN_STATUS_INTERRUPTED &&
        interruptions[p.fingerprint()] < kMaxInterruptions) {
      continue;
    }
    out.push_back(Past(p));
  }
  return out;
}

// The problems a preflight of this toolchain would address or leave: their classes.
// The job's spec as its probes get it: the policy's preflight.test_compile (default on) as the
// agent's skip_test_compile. Never stored: a Launch's spec has it unset.
fleet::v1::ServerSpec WithTestCompilePolicy(const FixJob& job) {
  fleet::v1::ServerSpec spec = job.spec;
  spec.set_skip_test_compile(job.policy.preflight().has_test_compile() &&
                             !job.policy.preflight().test_compile());
  return spec;
}

std::set<std::string> Problems(const PlannerDecision& d) {
  return std::set<std::string>(d.problems.begin(), d.problems.end());
}

// The planner's decision for `job` as the record keeps it (fleet.proto Plan): a plan with its
// actions and what the planner knew, or (no plan) a report.
fleet::v1::Plan PlanRecordOf(const PlannerDecision& decision, const std::string& container,
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
    SetPlanStatus(fleet::v1::PLAN_STATUS_REPORT, &plan);
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
  SetPlanStatus(fleet::v1::PLAN_STATUS_PROPOSED, &plan);
  return plan;
}

std::string CanonicalPipName(std::string name) {
  absl::AsciiStrToLower(&name);
  std::replace(name.begin(), name.end(), '_', '-');
  std::replace(name.begin(), name.end(), '.', '-');
  return name;
}

// What of `plan` the probe `seen` (taken with the plan's env changes) does not show in effect,
// one phrase each (`missing`), and what of it a probe cannot show (`unseen`). Env and argv changes
// are the daemon's (they travel in the spec); pip packages show in the probe; apt packages,
// cleared caches and symlinks cannot be told from it, so a plan with them is run again (they are
// idempotent).
struct Effect {
  std::vector<std::string> missing;
  std::vector<std::string> unseen;
  std::vector<std::string> All() const {
    std::vector<std::string> all = missing;
    all.insert(all.end(), unseen.begin(), unseen.end());
    return all;
  }
};

Effect InEffect(const fleet::v1::Plan& plan, const fleet::v1::ToolchainSnapshot& seen) {
  std::map<std::string, std::string> installed;
  for (const fleet::v1::Package& p : seen.pip_packages()) {
    installed[CanonicalPipName(p.name())] = p.version();
  }
  Effect effect;
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
          effect.missing.push_back(absl::StrCat(r.name(), "==", r.version(), " not installed"));
        }
      }
      continue;
    }
    if (a.has_pip_uninstall()) {
      for (const std::string& name : a.pip_uninstall().packages()) {
        if (installed.count(CanonicalPipName(name)) > 0) {
          effect.missing.push_back(absl::StrCat(name, " still installed"));
        }
      }
      continue;
    }
    effect.unseen.push_back(absl::StrCat(AsAbsl(ActionKind(a)), " cannot be seen by a probe"));
  }
  return effect;
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
          ? InEffect(*plan, *seen).All()
          : std::vector<std::string>{absl::StrCat("the probe failed: ", seen.status().message())};
  if (seen.ok()) *plan->mutable_after() = *seen;
  if (missing.empty()) {
    SetPlanStatus(fleet::v1::PLAN_STATUS_APPLIED, plan);
    plan->set_outcome_reason(absl::StrCat(what, "; ", when, " the probe showed it in effect"));
  } else {
    SetPlanStatus(fleet::v1::PLAN_STATUS_INTERRUPTED, plan);
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

RemediationRunner::RemediationRunner(AgentClientFactory factory, const RemediationPlanner* planner,
                                     PlanRecorder* recorder, Clock* clock, int threads, Done done)
    : factory_(std::move(factory)),
      planner_(planner),
      recorder_(recorder),
      clock_(clock),
      done_(std::move(done)) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

RemediationRunner::~RemediationRunner() { Stop(); }

void RemediationRunner::Stop() {
  {
    // A job in progress finishes (its agent calls have deadlines); queued ones are dropped.
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    jobs_.clear();
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void RemediationRunner::Submit(std::vector<FixJob> jobs) {
  if (jobs.empty()) return;
  if (workers_.empty()) {
    for (FixJob& job : jobs) done_(Run(std::move(job)));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  for (FixJob& job : jobs) jobs_.push_back(std::move(job));
}

void RemediationRunner::Work() {
  while (true) {
    FixJob job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RemediationRunner* r)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->stopping_ || !r->jobs_.empty(); },
          this));
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    done_(Run(std::move(job)));
  }
}

absl::StatusOr<RemediationRunner::Proposal> RemediationRunner::Propose(AgentClient& client,
                                                                       const FixJob& job,
                                                                       bool asked) const {
  absl::StatusOr<fleet::v1::ToolchainSnapshot> snapshot = client.Probe(WithTestCompilePolicy(job));
  if (!snapshot.ok()) {
    return absl::Status(snapshot.status().code(),
                        absl::StrCat("probe: ", snapshot.status().message()));
  }
  PlannerInput input{*snapshot, job.spec, job.policy, HistoryOf(job.history)};
  // Asked for (fleetctl plan), so shown whatever the policy's mode: a plan for `off` is shown,
  // not run.
  if (asked && input.policy.remediation() == fleet::v1::Policy::OFF) {
    input.policy.set_remediation(fleet::v1::Policy::ASK);
  }
  Proposal p;
  p.decision = job.kind == FixJob::kPreflight ? planner_->Preflight(input)
                                              : planner_->Plan(job.diagnosis, input);
  p.plan =
      PlanRecordOf(p.decision, job.container, job.server, job.attempt_id, job.diagnosis, *snapshot);
  p.snapshot = *std::move(snapshot);
  return p;
}

FixDone RemediationRunner::Run(FixJob job) {
  FixDone done;
  // The probes of this job test-compile unless the policy says not to (agent/test_compile.h).
  job.spec = WithTestCompilePolicy(job);
  // The job's outcome is `plan`, once the record holds it.
  auto recorded = [&](fleet::v1::Plan plan) {
    if (absl::Status s = recorder_->Record(&plan, false); !s.ok()) {
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
    SetPlanStatus(fleet::v1::PLAN_STATUS_APPLYING, &plan);
    if (absl::Status s = recorder_->Record(&plan, false); !s.ok()) {
      done.error = std::string(s.message());
    } else {
      Execute(*client, job, before, &plan);
      done.plan = std::move(plan);
    }
    done.job = std::move(job);
    return done;
  }
  absl::StatusOr<Proposal> proposal = Propose(*client, job, /*asked=*/false);
  if (!proposal.ok()) {
    done.error = std::string(proposal.status().message());
    done.job = std::move(job);
    return done;
  }
  const fleet::v1::ToolchainSnapshot& snapshot = proposal->snapshot;
  PlannerDecision& decision = proposal->decision;
  done.failed_remediations = decision.failed_remediations;
  // A new plan: recorded, then proposed (policy ask, or a low-confidence diagnosis: an inference
  // is reported and waits for `fleetctl apply`, never applied on its own) or run now.
  const bool low_confidence = job.kind == FixJob::kDiagnosis && job.diagnosis.confidence() == "low";
  auto proposed_or_run = [&](fleet::v1::Plan plan) {
    const bool ask = job.policy.remediation() == fleet::v1::Policy::ASK || low_confidence;
    if (low_confidence && job.policy.remediation() != fleet::v1::Policy::ASK) {
      plan.set_summary(absl::StrCat(plan.summary(), " (proposed, not applied: the diagnosis ",
                                    job.diagnosis.diagnosis_class(), " is low-confidence)"));
    }
    SetPlanStatus(ask ? fleet::v1::PLAN_STATUS_PROPOSED : fleet::v1::PLAN_STATUS_APPLYING, &plan);
    if (absl::Status st = recorder_->Record(&plan, true); !st.ok()) {
      done.error = absl::StrCat("record: ", st.message());
    } else {
      if (!ask) Execute(*client, job, snapshot, &plan);
      done.plan = std::move(plan);
    }
    done.job = std::move(job);
    return std::move(done);
  };
  if (job.kind == FixJob::kDiagnosis) {
    // A fix applied for this very failure whose server never restarted with it: fleetd stopped
    // after the plan's `applied` was committed and before the turn that restarts the server was
    // (on PostgreSQL a lock on `servers` holds that turn while the plan's own writes go through).
    // The next fleetd plans for the same failure again; it is not the fix's cause coming back
    // (the planner would fail the fix, and with nothing left to change the server would give
    // up): while the probe shows the fix in effect, the fix is the outcome, and the servers that
    // wait for it restart with it.
    for (const fleet::v1::Plan& p : job.history) {
      if (PlanStatusOf(p) != fleet::v1::PLAN_STATUS_APPLIED || p.attempt_id().empty() ||
          p.attempt_id() != job.attempt_id ||
          p.diagnosis_class() != job.diagnosis.diagnosis_class() ||
          !InEffect(p, snapshot).missing.empty()) {
        continue;
      }
      done.failed_remediations.erase(
          std::remove(done.failed_remediations.begin(), done.failed_remediations.end(), p.id()),
          done.failed_remediations.end());
      return recorded(p);
    }
  }
  if (decision.report && job.kind == FixJob::kDiagnosis) {
    // A fix cut short earlier (interrupted: the probe then failed or did not show it) that the
    // probe shows in effect now did its work after all (the agent's pip outlived the agent, say):
    // it is applied, and the servers that wait for it restart with it.
    // One the probe shows only in part (the agent was killed in the middle of its pip
    // install), or that did what a probe cannot see (apt packages, a cleared JIT cache), is run
    // again as a new plan of the same fix: its actions are idempotent, and the planner, which no
    // longer sees the failure's cause, would give the server up with "nothing to change".
    for (auto p = job.history.rbegin(); p != job.history.rend(); ++p) {
      if (PlanStatusOf(*p) != fleet::v1::PLAN_STATUS_INTERRUPTED ||
          p->diagnosis_class() != job.diagnosis.diagnosis_class()) {
        continue;
      }
      const Effect effect = InEffect(*p, snapshot);
      if (effect.missing.empty() && effect.unseen.empty()) {
        fleet::v1::Plan plan = *p;
        SetPlanStatus(fleet::v1::PLAN_STATUS_APPLIED, &plan);
        plan.set_outcome_reason(
            absl::StrCat(p->outcome_reason(), "; a later probe showed it in effect"));
        *plan.mutable_after() = snapshot;
        return recorded(std::move(plan));
      }
      const int64_t interrupted =
          std::count_if(job.history.begin(), job.history.end(), [&](const fleet::v1::Plan& q) {
            return PlanStatusOf(q) == fleet::v1::PLAN_STATUS_INTERRUPTED &&
                   q.fingerprint() == p->fingerprint();
          });
      if (interrupted >= kMaxInterruptions) break;
      fleet::v1::Plan plan = *p;
      plan.clear_id();
      plan.clear_results();
      plan.clear_applied_at();
      plan.clear_after();
      *plan.mutable_before() = snapshot;
      plan.set_outcome_reason(absl::StrCat("run again: plan ", p->id(),
                                           " was cut short and the probe does not show all of it (",
                                           absl::StrJoin(effect.All(), ", "), ")"));
      return proposed_or_run(std::move(plan));
    }
  }
  if (decision.report) {
    done.report = std::move(decision.report);
    done.job = std::move(job);
    return done;
  }
  return proposed_or_run(std::move(proposal->plan));
}

void RemediationRunner::Execute(AgentClient& client, const FixJob& job,
                                const fleet::v1::ToolchainSnapshot& before, fleet::v1::Plan* plan) {
  fleet::v1::ApplyRequest request;
  request.set_remediation_id(absl::StrCat(job.container, "#", plan->id()));
  *request.mutable_spec() = job.spec;
  for (const fleet::v1::PlannedAction& a : plan->actions()) *request.add_actions() = a.action();
  request.set_save_package_set(plan->save_package_set());
  absl::StatusOr<fleet::v1::ApplyResponse> applied = client.Apply(request);
  *plan->mutable_applied_at() = ToProtoTime(clock_->Now());
  if (!applied.ok() && CutShort(applied.status())) {
    ResolveByProbe(client, job.spec,
                   absl::StrCat("the agent's answer broke off while it ran (",
                                applied.status().message(), ")"),
                   "then", plan);
    recorder_->Record(plan, false).IgnoreError();
    return;
  }
  if (!applied.ok()) {
    SetPlanStatus(fleet::v1::PLAN_STATUS_FAILED, plan);
    plan->set_outcome_reason(
        absl::StrCat("the agent did not apply it: ", applied.status().message()));
    recorder_->Record(plan, false).IgnoreError();
    return;
  }
  *plan->mutable_results() = applied->results();
  *plan->mutable_saved_package_set() = applied->saved_package_set();
  *plan->mutable_after() = applied->after();
  for (const fleet::v1::ActionResult& r : applied->results()) {
    if (!r.ok()) {
      SetPlanStatus(fleet::v1::PLAN_STATUS_FAILED, plan);
      plan->set_outcome_reason(
          absl::StrCat(AsAbsl(ActionKind(r.action())), " failed: ", r.message()));
      recorder_->Record(plan, false).IgnoreError();
      return;
    }
  }
  if (applied->results_size() < plan->actions_size()) {
    SetPlanStatus(fleet::v1::PLAN_STATUS_FAILED, plan);
    plan->set_outcome_reason("the agent ran only part of it");
    recorder_->Record(plan, false).IgnoreError();
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
  const std::vector<PastRemediation> history = HistoryOf(job.history);
  const std::set<std::string> was =
      Problems(planner_->Preflight(PlannerInput{before, job.spec, job.policy, history}));
  const std::set<std::string> is =
      Problems(planner_->Preflight(PlannerInput{plan->after(), after_spec, job.policy, history}));
  // What only the test-compile shows after it, when the test-compile could not get that far
  // before, was out of sight, not caused: the next layer, like an env-only plan's below. That is:
  // no nvcc before (nothing to compile with), or the compile failed before at an earlier problem
  // that is gone now (the build got further). A problem the probe's facts show without the
  // test-compile is judged as before.
  const fleet::v1::TestCompile& compiled = plan->after().test_compile();
  const fleet::v1::TestCompile& compiled_before = before.test_compile();
  const std::string& compiled_class = compiled.diagnosis().diagnosis_class();
  const bool got_further = compiled_before.ran() && !compiled_before.ok() &&
                           compiled_before.diagnosis().diagnosis_class() != compiled_class &&
                           !is.count(compiled_before.diagnosis().diagnosis_class());
  const bool newly_visible = compiled.ran() && !compiled.ok() && !compiled_class.empty() &&
                             (before.nvcc().path().empty() || got_further);
  std::set<std::string> without_compile;
  if (newly_visible) {
    fleet::v1::ToolchainSnapshot facts_only = plan->after();
    facts_only.clear_test_compile();
    without_compile =
        Problems(planner_->Preflight(PlannerInput{facts_only, after_spec, job.policy, history}));
  }
  std::vector<std::string> worse, next;
  for (const std::string& p : is) {
    if (!was.count(p) &&
        std::find(plan->causes().begin(), plan->causes().end(), p) == plan->causes().end()) {
      const bool compile_only = newly_visible && p == compiled_class && !without_compile.count(p);
      (compile_only ? next : worse).push_back(p);
    }
  }
  if (worse.empty() && !next.empty()) {
    SetPlanStatus(fleet::v1::PLAN_STATUS_APPLIED, plan);
    plan->set_outcome_reason(
        absl::StrCat("the probe's test-compile, which could not run before it, shows next: ",
                     absl::StrJoin(next, ", ")));
    recorder_->Record(plan, false).IgnoreError();
    return;
  }
  // A plan that only changes the servers' environment changes nothing installed: it points them
  // at another toolchain, and what that one lacks was out of sight before (no nvcc, no headers to
  // compare), not caused by it. Those problems are the next layer: the next preflight round (or
  // the next start's diagnosis) takes them.
  const bool env_only = std::all_of(
      plan->actions().begin(), plan->actions().end(),
      [](const auto& a) { return a.action().has_set_env() || a.action().has_prepend_path(); });
  if (worse.empty() || env_only) {
    SetPlanStatus(fleet::v1::PLAN_STATUS_APPLIED, plan);
    if (!worse.empty()) {
      plan->set_outcome_reason(
          absl::StrCat("the toolchain it points at shows next: ", absl::StrJoin(worse, ", ")));
    }
    recorder_->Record(plan, false).IgnoreError();
    return;
  }
  const std::string why =
      absl::StrCat("made things worse: after it the probe shows ", absl::StrJoin(worse, ", "),
                   ", which it did not show before");
  if (!plan->save_package_set() || plan->saved_package_set().empty()) {
    SetPlanStatus(fleet::v1::PLAN_STATUS_FAILED, plan);
    plan->set_outcome_reason(absl::StrCat(why, " (no package set saved: nothing to roll back)"));
    recorder_->Record(plan, false).IgnoreError();
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
  SetPlanStatus(fleet::v1::PLAN_STATUS_ROLLED_BACK, plan);
  plan->set_outcome_reason(absl::StrCat(
      why, "; rolled back to the package set saved before it",
      ok ? ""
         : absl::StrCat(" (the rollback failed: ",
                        undone.ok() ? "an action failed" : undone.status().message(), ")")));
  recorder_->Record(plan, false).IgnoreError();
}

}  // namespace fleet::daemon
