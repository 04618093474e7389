// Reconciler: each server's next move in a turn (launch, stop, restart, back off, give up, plan a
// fix), decided from fleetd's in-memory state alone. Step(now, ...) reads the servers, which
// containers' agents are followed, and the policy; it returns the decisions, in the order of the
// servers' names. It does no I/O (no store, no agent), reads no clock (the turn's `now` is
// given), and has no lock of its own: the Daemon calls it under its state lock and applies the
// decisions in order (apply_decisions.cc): the attempt rows, the calls, the rows to write.
//
// What depends on the whole container, not the server alone, stays with the Daemon's apply step:
// the gate (Daemon::Gate: the container's preflight, a running fix, a plan waiting for approval,
// the canary), which may queue a remediation job, and the remediation job a failure gets
// (Daemon::Remediate). Their answers change as the servers before are applied (a preflight queued
// for one server holds its neighbours; the first launch of a cold JIT cache makes it the canary),
// so a decision that needs them says so (Decision::new_attempt, Decision::launch) and the Daemon
// asks them at the point the walk reaches it.
//
// Thread-safety: a Reconciler is immutable after construction; Step is const and may run on any
// thread, given state no one writes meanwhile (the Daemon holds its mu_).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"
#include "daemon/server_state.h"
#include "proto/config.pb.h"
#include "proto/diagnosis.pb.h"

namespace fleet::daemon {

// One move for one server. The Daemon applies it to the server named.
struct Decision {
  enum Kind {
    // Send Stop (the server's stop_sent is set until it answers).
    kStop,
    // Not wanted and never launched (it waited for the preflight or the canary): STOPPED now,
    // its wait and reason cleared.
    kStopUnlaunched,
    // READY for backoff_reset: the backoff's exponent (TrackedServer::failures) starts again.
    kResetFailures,
    // A restart request taken (the process is gone): when `launch`, only if the gate lets it
    // (else the request waits for a later turn); its flags (restart_requested, stop_sent,
    // stalled) cleared, backoff_until set to `backoff_until`; then, when `launch`, launched as
    // kLaunch says with `trigger` and `new_attempt`.
    kRestart,
    // Send Launch, with `trigger`. `new_attempt`: the gate is asked first and a new attempt row
    // made (the server PENDING); else the pending attempt is sent again (same id).
    kLaunch,
    // A failure a change in the container may fix: the Daemon plans the fix (Daemon::Remediate:
    // a diagnosis job, or a wait for the container's running one); REMEDIATING.
    kRemediate,
    // GAVE_UP with `reason`.
    kGiveUp,
    // RESTARTING until `backoff_until`, with `failures` the new failure count.
    kBackoff,
  };
  Kind kind = kStop;
  std::string server;
  std::string trigger;                              // kLaunch, kRestart
  bool new_attempt = false;                         // kLaunch, kRestart
  bool launch = false;                              // kRestart: reachable and no Launch in flight
  absl::Time backoff_until = absl::InfinitePast();  // kRestart, kBackoff
  int failures = 0;                                 // kBackoff
  std::string reason;                               // kGiveUp
  // kRemediate, kGiveUp, kBackoff (a FAILED server's move) also clear stop_sent and stalled.
};

class Reconciler {
 public:
  // `backoff_reset`: after this long READY a server's failure count starts again.
  explicit Reconciler(absl::Duration backoff_reset) : backoff_reset_(backoff_reset) {}

  // Each server's next move at `now`. `reachable`: the containers (host/ctid) whose agent is
  // followed; nothing is sent to another. `random` draws the backoffs' jitter (one draw per
  // kBackoff, in order).
  std::vector<Decision> Step(absl::Time now, const std::map<std::string, TrackedServer>& servers,
                             const std::set<std::string>& reachable, absl::BitGenRef random) const;

 private:
  const absl::Duration backoff_reset_;
};

// The policy's attempt budget per deploy (max_attempts; 8 when unset).
int32_t MaxAttempts(const fleet::v1::Policy& policy);

// When a server that has now failed `failures` times is launched again: the policy's
// backoff_initial (10 s) doubling up to backoff_max (5 min), with +-25% jitter drawn from
// `random` (servers that failed together do not all come back in the same instant).
absl::Time BackoffUntil(const fleet::v1::Policy& policy, int failures, absl::Time now,
                        absl::BitGenRef random);

// Whether a change in the container may fix this failure (the planner's fix kinds: toolchain,
// env, JIT cache, launch flags); the other classes are retried with backoff or given up, never
// planned for.
bool MayRemediate(const fleet::v1::Diagnosis& diagnosis);
bool MayRemediateClass(const std::string& diagnosis_class);

}  // namespace fleet::daemon
