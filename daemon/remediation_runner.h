// RemediationRunner: runs the daemon's remediation jobs, the part of a remediation that talks to
// the agent: probe the container's toolchain, ask the planner (planner/planner.h), record the
// plan, run it through the agent's Apply, check the toolchain after it, and roll it back when it
// made things worse, recording every step through the PlanRecorder. Which job runs when (one per
// container at a time, the preflight before a first launch, the canary after a change to the JIT
// build) is the daemon's to decide (remediation.cc); the runner only runs what it is given.
//
// Jobs run on `threads` threads of the runner's own (0: inside Submit, on the caller's thread,
// as the daemon's tests want), each result handed to `done` on the thread that ran it. No daemon
// lock is held here: a job may take minutes (a pip install) and delays its own container only.
//
// Thread-safe. Locks: mu_ (the queue) only, never held while a job runs or `done` is called.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "daemon/agent_client.h"
#include "daemon/planner/planner.h"
#include "proto/config.pb.h"
#include "proto/fleet.pb.h"

namespace fleet::daemon {

// One remediation job: what to do for which container, with what the daemon knew when it
// decided (copied: the job runs without the daemon's lock).
struct FixJob {
  enum Kind {
    kPreflight,  // the container's toolchain before its first launch
    kDiagnosis,  // a failed start whose diagnosis a change may fix
    kManual,     // a proposed plan `fleetctl apply` runs (`manual`)
    kResolve,    // a plan a fleetd that stopped left "applying" (`manual`): applied or not?
  } kind = kPreflight;
  std::string container;  // host/ctid
  fleet::v1::Host host;
  fleet::v1::Container config;
  std::string server;
  std::string attempt_id;
  fleet::v1::Diagnosis diagnosis;
  fleet::v1::ServerSpec spec;
  fleet::v1::Policy policy;
  std::vector<fleet::v1::Plan> history;  // the container's plans, oldest first
  fleet::v1::Plan manual;
};

struct FixDone {
  FixJob job;
  std::optional<fleet::v1::Plan> plan;  // as recorded: proposed, applied, failed, rolled_back
  std::optional<PlannerReport> report;  // the planner would change nothing: why
  std::vector<std::string> failed_remediations;  // applied plans whose cause came back
  std::string error;                             // the agent could not be asked
};

// Where plans are kept (the daemon's record).
class PlanRecorder {
 public:
  virtual ~PlanRecorder() = default;
  // `create`: a new plan, its id and times filled in. Else the plan's newest state; a failed
  // update is kept and written again later (never lost), and its error returned.
  virtual absl::Status Record(fleet::v1::Plan* plan, bool create) = 0;
};

class RemediationRunner {
 public:
  using Done = std::function<void(FixDone)>;

  RemediationRunner(AgentClientFactory factory, const RemediationPlanner* planner,
                    PlanRecorder* recorder, Clock* clock, int threads, Done done);
  // Stop().
  ~RemediationRunner();
  RemediationRunner(const RemediationRunner&) = delete;
  RemediationRunner& operator=(const RemediationRunner&) = delete;

  // Queues `jobs` (runs them now, in order, when the runner has no threads).
  void Submit(std::vector<FixJob> jobs) ABSL_LOCKS_EXCLUDED(mu_);
  // The jobs in progress finish (their agent calls have deadlines); queued ones are dropped, and
  // so is every later Submit. Returns once no thread of the runner is left.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One job, on the caller's thread.
  FixDone Run(FixJob job) ABSL_LOCKS_EXCLUDED(mu_);

  // The planner's view of `job` now: the agent's probe, the planner's decision on it (a
  // preflight, or a plan for the job's diagnosis), and that decision as the record keeps it
  // (status "proposed"; "report" when there is no plan). `asked` (fleetctl plan): planned
  // whatever the policy's mode, so a plan for `off` is shown. The only path from probe to plan.
  struct Proposal {
    fleet::v1::ToolchainSnapshot snapshot;
    PlannerDecision decision;
    fleet::v1::Plan plan;
  };
  absl::StatusOr<Proposal> Propose(AgentClient& client, const FixJob& job, bool asked) const;

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the plan's actions through the agent, checks the toolchain after it, rolls it back when
  // it made things worse; records every step.
  void Execute(AgentClient& client, const FixJob& job, const fleet::v1::ToolchainSnapshot& before,
               fleet::v1::Plan* plan);

  // Constant after construction.
  AgentClientFactory factory_;
  const RemediationPlanner* const planner_;
  PlanRecorder* const recorder_;
  Clock* const clock_;
  const Done done_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  std::deque<FixJob> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fleet::daemon
