// The reconciler's decisions (reconciler.h). The order of the checks is the order of priority:
// an unwanted server is stopped whatever else holds; a stalled one is stopped before anything
// else is done with it; a restart request comes before the state's own next move.
#include "daemon/reconciler.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "common/base/proto_time.h"
#include "common/diagnosis/diagnosis_class.h"
#include "daemon/planner/planner.h"

namespace fleet::daemon {

int32_t MaxAttempts(const fleet::v1::Policy& policy) {
  return policy.max_attempts() > 0 ? policy.max_attempts() : 8;
}

absl::Time BackoffUntil(const fleet::v1::Policy& policy, int failures, absl::Time now,
                        absl::BitGenRef random) {
  const absl::Duration initial = ProtoDurationOr(policy.backoff_initial(), absl::Seconds(10));
  const absl::Duration max = ProtoDurationOr(policy.backoff_max(), absl::Minutes(5));
  const int n = std::min(std::max(failures, 1), 16);
  const double jitter = absl::Uniform(random, 0.75, 1.25);
  return now + std::min(max, initial * (1 << (n - 1))) * jitter;
}

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

std::vector<Decision> Reconciler::Step(absl::Time now,
                                       const std::map<std::string, TrackedServer>& servers,
                                       const std::set<std::string>& reachable_containers,
                                       absl::BitGenRef random) const {
  std::vector<Decision> out;
  for (const auto& entry : servers) {
    // Named, not bound: the lambdas below capture them (clang 14 cannot capture bindings).
    const std::string& name = entry.first;
    const TrackedServer& s = entry.second;
    const ServerRecord& r = s.record;
    const bool reachable = reachable_containers.count(ContainerOf(r)) > 0;
    const bool wanted = r.desired_running && !r.removed;
    const bool alive = Alive(r.state);
    // The current attempt was made and waits for its Launch: it is sent again (same id), never
    // replaced by a new one.
    const bool pending = !s.attempt.id.empty() && s.attempt.outcome == v1::ATTEMPT_OUTCOME_PENDING;

    auto stop = [&]() {
      if (s.stop_sent || !reachable) return;
      out.push_back({.kind = Decision::kStop, .server = name});
    };
    auto launch = [&](std::string trigger) {
      if (!reachable || s.launch_in_flight) return;
      out.push_back({.kind = Decision::kLaunch,
                     .server = name,
                     .trigger = std::move(trigger),
                     .new_attempt = !pending});
    };

    if (!wanted) {
      if (alive && r.state != v1::SERVER_STATE_STOPPING) stop();
      // A server that never launched (waiting for the preflight or the canary) stops at once.
      if (!alive && r.state != v1::SERVER_STATE_STOPPED && r.state != v1::SERVER_STATE_GAVE_UP &&
          r.state != v1::SERVER_STATE_FAILED && !pending) {
        out.push_back({.kind = Decision::kStopUnlaunched, .server = name});
      }
      continue;
    }
    if (s.stalled && alive && r.state != v1::SERVER_STATE_STOPPING) {
      stop();
      continue;
    }
    if (r.state == v1::SERVER_STATE_READY && s.failures > 0 &&
        now - r.state_since >= backoff_reset_) {
      out.push_back({.kind = Decision::kResetFailures, .server = name});
    }
    if (s.restart_requested) {
      if (alive) {
        stop();
        continue;
      }
      const bool launch_now = reachable && !s.launch_in_flight;
      out.push_back({.kind = Decision::kRestart,
                     .server = name,
                     .trigger = s.next_trigger.empty() ? "restart" : s.next_trigger,
                     .new_attempt = !pending,
                     .launch = launch_now,
                     .backoff_until = s.restart_now ? absl::InfinitePast() : now});
      continue;
    }
    if (r.state == v1::SERVER_STATE_PENDING) {
      launch(!s.next_trigger.empty() ? s.next_trigger
             : r.attempt_number == 0 ? "initial"
                                     : "recovery");
      continue;
    }
    if ((r.state == v1::SERVER_STATE_FAILED || (r.state == v1::SERVER_STATE_STOPPED &&
                                                s.attempt.outcome == v1::ATTEMPT_OUTCOME_FAILED)) &&
        s.waiting != "approval") {
      const int32_t max_attempts = MaxAttempts(r.policy);
      const bool budget_left = s.AttemptsThisDeploy() < max_attempts;
      if (budget_left && r.policy.remediation() != fleet::v1::Policy::OFF &&
          (MayRemediate(s.attempt.diagnosis) || MayRemediateClass(s.attempt.diagnosis_class))) {
        // A change may fix it: planned (once for the container), then restarted at once.
        out.push_back({.kind = Decision::kRemediate, .server = name});
      } else if (!diagnosis::RetryMayHelp(s.attempt.diagnosis_class)) {
        out.push_back({.kind = Decision::kGiveUp,
                       .server = name,
                       .reason = absl::StrCat(s.attempt.diagnosis_class, ": ", s.attempt.summary,
                                              " (a restart would meet the same failure",
                                              r.policy.remediation() == fleet::v1::Policy::OFF
                                                  ? absl::StrCat("; remediation is off in policy ",
                                                                 r.policy.name(), ")")
                                                  : "; no change in the container fixes it)")});
      } else if (!budget_left) {
        out.push_back({.kind = Decision::kGiveUp,
                       .server = name,
                       .reason = absl::StrCat("attempt budget spent (", max_attempts, "); last: ",
                                              s.attempt.diagnosis_class, ": ", s.attempt.summary)});
      } else {
        const int failures = std::max(s.failures, 0) + 1;
        out.push_back({.kind = Decision::kBackoff,
                       .server = name,
                       .backoff_until = BackoffUntil(r.policy, failures, now, random),
                       .failures = failures});
      }
      continue;
    }
    if (r.state == v1::SERVER_STATE_RESTARTING && now >= r.backoff_until) {
      launch(s.next_trigger.empty() ? "restart" : s.next_trigger);
      continue;
    }
  }
  return out;
}

}  // namespace fleet::daemon
