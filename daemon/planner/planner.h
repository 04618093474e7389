// RemediationPlanner: decides what to change in a container so that a server can start, from what
// is known: the diagnosis of a failed start (or none, before the first launch: Preflight), the
// toolchain the agent's probe saw, this container's past remediations, the server's spec and the
// policy. It answers with either a plan of typed agent actions (agent.proto `Action`, one reason
// each) or a report of why it will not touch anything; never both (docs/design.md "Remediation:
// a small solver").
//
// It is a solver, not a lookup table: every constraint it knows (ptxas accepts the PTX wanted;
// nvcc major.minor = the headers' CUDART_VERSION; nvcc, crt, nvvm, runtime, nvrtc, cupti of one
// release; that release <= the driver's and >= what the GPU needs; libnvrtc loadable; nvcc and
// ninja on the server's PATH; the pip cu13 link layout; ...) is checked at once, and one CUDA
// release that satisfies all of them is installed whole. So the catch-22 of the seed scenario
// (compiler = headers, and ptxas >= PTX 9.2) is one remediation, not a seesaw. Release facts are
// data (CudaReleaseTable).
//
// Pure logic: no processes, no RPC, no store. Const and thread-safe; the table must outlive it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/planner/cuda_releases.h"
#include "proto/agent.pb.h"
#include "proto/config.pb.h"
#include "proto/diagnosis.pb.h"
#include "proto/fleet.pb.h"

namespace fleet::daemon {

// What became of a past remediation (the store's `outcome`).
enum class RemediationOutcome {
  kApplied,     // its actions ran; not known to have failed
  kFailed,      // an action failed, or a cause it addressed came back after it
  kRolledBack,  // it made things worse and was undone: never tried again
};

// One past remediation of this container, oldest first in PlannerInput::history.
struct PastRemediation {
  std::string id;
  std::vector<std::string> causes;  // the diagnosis classes it addressed (RemediationPlan::causes)
  std::string fingerprint;
  std::vector<fleet::v1::Action> actions;
  RemediationOutcome outcome = RemediationOutcome::kApplied;
  // Facts of the diagnosis that triggered it (empty for preflight): what was learnt then (the PTX
  // a ptxas failure asked for) stays a constraint, whatever the toolchain looks like now.
  std::vector<fleet::v1::Fact> trigger_facts;
  std::string trigger_class;
};

struct PlannerInput {
  fleet::v1::ToolchainSnapshot snapshot;  // the probe, with this server's env
  fleet::v1::ServerSpec spec;             // argv and env as launched (applied fixes included)
  fleet::v1::Policy policy;
  std::vector<PastRemediation> history;
};

struct PlannedAction {
  fleet::v1::Action action;
  std::string reason;  // one line: which constraint it satisfies
};

struct RemediationPlan {
  // Of the actions only (hex): the same actions planned twice have the same fingerprint.
  std::string fingerprint;
  std::string trigger;                 // "preflight" | "diagnosis"
  std::vector<std::string> causes;     // diagnosis classes it addresses; the trigger's first
  std::vector<PlannedAction> actions;  // in the order to apply them
  // Variables of spec.env whose value the plan changes, with their new value: what the daemon
  // records into the spec and sends with every Launch (ApplyToSpec gives the whole new spec).
  std::map<std::string, std::string> env_changes;
  std::string cuda_release;        // "13.2" when it installs toolkit pieces
  bool affects_jit_build = false;  // the canary rule: one GPU first after this fix
  bool degraded = false;           // a fallback that trades speed for a start
  bool save_package_set = false;   // it runs pip: save the venv's package set for rollback
  // Problems seen that this plan leaves, each with why (the policy forbids the action, no
  // release fits, ...): shown with the plan, never silently dropped.
  std::vector<std::string> unresolved;
  std::string summary;  // one line for people
};

struct PlannerReport {
  std::string reason;           // one line: why nothing is changed
  std::string diagnosis_class;  // "" for preflight
  // Nothing in the container is wrong that a change would fix, but a relaunch after backoff may
  // work (transient: OOM from another process, port in use, NCCL, watchdog, unknown).
  bool retry_with_backoff = false;
  std::vector<fleet::v1::EvidenceLine> evidence;  // of the diagnosis
};

struct PlannerDecision {
  // Exactly one of these is set.
  std::optional<RemediationPlan> plan;
  std::optional<PlannerReport> report;
  // Past remediations (ids) this diagnosis shows failed: they addressed its class and it came
  // back. The daemon records them as failed.
  std::vector<std::string> failed_remediations;
  // Every constraint the planner checked that was violated or learnt, one line each, for
  // `fleetctl plan` and the remediation row.
  std::vector<std::string> constraints;
  // The classes of every problem the snapshot shows, fixable or not (the plan's causes and what
  // it leaves): a fix after which this set gains a class made things worse.
  std::vector<std::string> problems;
};

struct PlannerOptions {
  // The driver's libcuda.so.1 as the container sees it: the target of the libcuda.so stub link
  // flashinfer's `-lcuda` needs. The probe does not report it yet; "" leaves the stub unresolved.
  std::string driver_libcuda = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
  int first_max_jobs = 4;  // MAX_JOBS after a first OOM-killed JIT step; halved after each next
  // SGLang attention backends to fall back to, first one not in use wins.
  std::vector<std::string> fallback_attention_backends = {"triton", "flashinfer", "torch_native"};
  // vLLM's, in VLLM_ATTENTION_BACKEND: tried in this order, skipping the one that failed.
  std::vector<std::string> fallback_vllm_attention_backends = {"FLASHINFER", "TRITON_ATTN",
                                                               "FLEX_ATTENTION"};
};

class RemediationPlanner {
 public:
  explicit RemediationPlanner(const CudaReleaseTable* releases = &CudaReleaseTable::Builtin(),
                              PlannerOptions options = {});

  // After a failed start: the diagnosis adds its constraint to those the snapshot shows, and the
  // plan (if any) addresses the diagnosis' class. A class that no change fixes (OOM, port, model,
  // NCCL, driver, ABI, ...) or whose signature says "report" is a report, never an action.
  // History rules: a past remediation that addressed this class, applied, is failed now (listed in
  // failed_remediations); a plan whose fingerprint failed for this class, or was ever rolled back,
  // is never proposed again: the next alternative is (pip's ninja for apt's, the next release that
  // fits), else a report; max_fixes_per_cause (default 3) remediations for the class end in a
  // report. Policy: remediation off → report; allowed_actions filters every action kind.
  PlannerDecision Plan(const fleet::v1::Diagnosis& diagnosis, const PlannerInput& input) const;

  // Before any launch: a plan for what the probe already shows broken, else a report.
  PlannerDecision Preflight(const PlannerInput& input) const;

 private:
  PlannerDecision Decide(const fleet::v1::Diagnosis* diagnosis, const PlannerInput& input) const;

  const CudaReleaseTable* releases_;
  PlannerOptions options_;
};

// The policy's name of an action kind ("pip_install", ...; config.proto allowed_actions).
std::string_view ActionKind(const fleet::v1::Action& action);
// One line: "pip_install nvidia-cuda-nvcc==13.2.78", "prepend_path PATH /x/bin", ...
std::string DescribeAction(const fleet::v1::Action& action);
// The spec after the plan's env and argv actions (SetEnv, PrependPath, Add/RemoveServerArgs).
fleet::v1::ServerSpec ApplyToSpec(const RemediationPlan& plan, fleet::v1::ServerSpec spec);
// The same for a stored plan's actions (fleet.proto Plan), in place: how the daemon keeps the
// fixes of applied remediations in every spec it launches, after a redeploy too.
void ApplyActionsToSpec(const google::protobuf::RepeatedPtrField<fleet::v1::PlannedAction>& actions,
                        fleet::v1::ServerSpec* spec);

}  // namespace fleet::daemon
