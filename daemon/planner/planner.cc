// RemediationPlanner (planner.h): the decision around the planning passes: the policy, the
// class's fix kind, the cap per cause and the history (failed and rolled-back plans are never
// proposed again), then PlanBuilder passes (plan_builder.h) until one gives a new plan, else a
// report that says why. Also the outcome names.
#include "daemon/planner/planner.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/string_view.h"
#include "common/config/fleet_config.h"
#include "common/diagnosis/diagnosis_class.h"
#include "daemon/planner/plan_actions.h"
#include "daemon/planner/plan_builder.h"

namespace fleet::daemon {
namespace {

using fleet::diagnosis::FixKind;
using fleet::v1::ServerSpec;

PlannerDecision Reported(PlannerDecision decision, std::string reason, const std::string& cls,
                         const fleet::v1::Diagnosis* diagnosis, bool retry = false) {
  PlannerReport report;
  report.reason = std::move(reason);
  report.diagnosis_class = cls;
  report.retry_with_backoff = retry;
  if (diagnosis != nullptr) {
    report.evidence.assign(diagnosis->evidence().begin(), diagnosis->evidence().end());
  }
  decision.plan.reset();
  decision.report = std::move(report);
  return decision;
}

RemediationPlan MakePlan(const PlanBuilder& b, std::vector<PlannedAction> actions,
                         const std::string& fingerprint, const fleet::v1::Diagnosis* d,
                         const ServerSpec& spec) {
  RemediationPlan plan;
  plan.fingerprint = fingerprint;
  plan.trigger = d == nullptr ? "preflight" : "diagnosis";
  if (d != nullptr) plan.causes.push_back(d->diagnosis_class());
  for (const std::string& c : b.causes()) {
    if (!Contains(plan.causes, c)) plan.causes.push_back(c);
  }
  plan.actions = std::move(actions);
  plan.cuda_release = b.cuda_release();
  plan.affects_jit_build = b.affects_jit_build();
  plan.degraded = b.degraded();
  plan.save_package_set =
      std::any_of(plan.actions.begin(), plan.actions.end(),
                  [](const PlannedAction& p) { return p.action.has_pip_install(); });
  for (const Unresolved& u : b.unresolved()) {
    plan.unresolved.push_back(absl::StrCat(u.cause, ": ", u.why));
  }
  const ServerSpec after = ApplyToSpec(plan, spec);
  for (const auto& [name, value] : after.env()) {
    auto old = spec.env().find(name);
    if (old == spec.env().end() || old->second != value) plan.env_changes[name] = value;
  }
  plan.summary = absl::StrCat(plan.degraded ? "degraded: " : "", plan.actions.size(),
                              " action(s) for ", absl::StrJoin(plan.causes, ", "),
                              plan.cuda_release.empty() ? "" : "; CUDA ", plan.cuda_release);
  return plan;
}

}  // namespace

RemediationPlanner::RemediationPlanner(const CudaReleaseTable* releases, PlannerOptions options)
    : releases_(releases), options_(std::move(options)) {}

PlannerDecision RemediationPlanner::Preflight(const PlannerInput& input) const {
  return Decide(nullptr, input);
}

PlannerDecision RemediationPlanner::Plan(const fleet::v1::Diagnosis& diagnosis,
                                         const PlannerInput& input) const {
  return Decide(&diagnosis, input);
}

PlannerDecision RemediationPlanner::Decide(const fleet::v1::Diagnosis* d,
                                           const PlannerInput& in) const {
  PlannerDecision decision;
  const std::string cls = d != nullptr ? d->diagnosis_class() : "";
  const std::string policy = in.policy.name().empty() ? "default" : in.policy.name();
  if (in.policy.remediation() == fleet::v1::Policy::OFF) {
    return Reported(std::move(decision), absl::StrCat("remediation is off (policy ", policy, ")"),
                    cls, d);
  }

  // A remediation that addressed this class, after which the class came back, failed.
  std::set<std::string> failed;
  for (const PastRemediation& r : in.history) {
    if (r.outcome == RemediationOutcome::kFailed) failed.insert(r.id);
    if (d != nullptr && r.outcome == RemediationOutcome::kApplied && Contains(r.causes, cls)) {
      failed.insert(r.id);
      decision.failed_remediations.push_back(r.id);
    }
  }

  // A class that is reported and retried (a GPU out of memory) whose signature knows a fix (vLLM's
  // startup memory check: a launch flag) is still retried when no plan comes of it.
  bool retry_unplanned = false;
  if (d != nullptr) {
    const diagnosis::DiagnosisClassInfo* info = diagnosis::FindDiagnosisClass(cls);
    if (info == nullptr) {
      return Reported(std::move(decision), absl::StrCat("unknown diagnosis class '", cls, "'"), cls,
                      d);
    }
    FixKind fix = info->fix;
    // The signature that decided may know better than the class (a torch wheel without this
    // arch is unsupported_gpu_arch too, but no toolchain change fixes it).
    if (std::optional<FixKind> k = diagnosis::ParseFixKind(d->fix_kind())) fix = *k;
    retry_unplanned = info->fix == FixKind::kRestart || info->retry == diagnosis::Retry::kYes;
    if (fix != FixKind::kToolchain && fix != FixKind::kEnv && fix != FixKind::kJitCache &&
        fix != FixKind::kLaunchFlags) {
      const std::string what = d->summary().empty() ? std::string(info->summary) : d->summary();
      return Reported(
          std::move(decision),
          absl::StrCat(cls, ": ", what, " (", AsAbsl(diagnosis::FixKindDescription(fix)), ")"), cls,
          d, fix == FixKind::kRestart || info->retry == diagnosis::Retry::kYes);
    }
    const int cap = in.policy.max_fixes_per_cause() > 0 ? in.policy.max_fixes_per_cause()
                                                        : config::kDefaultMaxFixesPerCause;
    std::vector<std::string> tried;
    for (const PastRemediation& r : in.history) {
      if (Contains(r.causes, cls)) tried.push_back(r.id);
    }
    if (static_cast<int>(tried.size()) >= cap) {
      return Reported(std::move(decision),
                      absl::StrCat(cls, ": ", tried.size(), " remediations already (",
                                   absl::StrJoin(tried, ", "), "), the cap of policy ", policy,
                                   " (max_fixes_per_cause ", cap, "); giving up"),
                      cls, d, retry_unplanned);
    }
  }

  // Plans never applied again: one that failed for this cause, or that was rolled back.
  std::map<std::string, std::string> excluded;  // fingerprint → remediation id
  for (const PastRemediation& r : in.history) {
    const bool failed_here = failed.count(r.id) && (d == nullptr || Contains(r.causes, cls));
    if (failed_here || r.outcome == RemediationOutcome::kRolledBack) {
      excluded.emplace(r.fingerprint, r.id);
    }
  }

  // The preferred plan; another choice (pip's ninja, the next release that fits) only when the
  // one before already failed.
  std::vector<std::string> skipped;  // plans passed over, and why
  std::vector<Unresolved> first_unresolved;
  bool first = true;
  bool next_rank = true;
  for (size_t rank = 0; next_rank; ++rank) {
    next_rank = false;
    for (bool ninja_by_pip : {false, true}) {
      PlanBuilder b(*releases_, options_, in, d, {rank, ninja_by_pip});
      b.Run();
      if (first) {
        decision.constraints = b.constraints();
        first_unresolved = b.unresolved();
        decision.problems = b.causes();
        for (const Unresolved& u : first_unresolved) {
          if (!Contains(decision.problems, u.cause)) decision.problems.push_back(u.cause);
        }
        first = false;
      }
      std::vector<PlannedAction> actions = b.TakeActions();
      const bool addressed = d == nullptr ? !actions.empty() : Contains(b.causes(), cls);
      if (!addressed || b.releases_exhausted()) break;
      const std::string fingerprint = Fingerprint(actions);
      auto failed_before = excluded.find(fingerprint);
      if (failed_before == excluded.end()) {
        decision.plan = MakePlan(b, std::move(actions), fingerprint, d, in.spec);
        return decision;
      }
      skipped.push_back(
          absl::StrCat("plan ", fingerprint, " (", failed_before->second, ") already failed"));
      if (b.ninja_choice_used() && !ninja_by_pip) continue;
      next_rank = b.release_choice_used();
      break;
    }
  }

  // No plan: say why, from the first (preferred) pass.
  std::vector<std::string> why;
  for (const Unresolved& u : first_unresolved) {
    if (d != nullptr && u.cause == cls) why.push_back(u.why);
    if (d == nullptr) why.push_back(absl::StrCat(u.cause, ": ", u.why));
  }
  std::string reason;
  if (!skipped.empty()) {
    reason = absl::StrCat(d != nullptr ? cls + ": " : "",
                          "every plan the planner knows was tried: ", absl::StrJoin(skipped, "; "));
  } else if (!why.empty()) {
    reason = absl::StrCat(d != nullptr ? cls + ": " : "", "no change: ", absl::StrJoin(why, "; "));
  } else if (d != nullptr) {
    reason = absl::StrCat(cls, ": the probe shows nothing the planner would change for it");
  } else {
    reason = "the probe shows nothing to fix";
  }
  return Reported(std::move(decision), std::move(reason), cls, d, retry_unplanned);
}

}  // namespace fleet::daemon
