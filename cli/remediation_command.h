// The remediation verbs, on fleetd's planner (Plan, ApplyPlan and ListRemediations RPCs):
//   `fleetctl plan SERVER [-o text|json]`: the plan fleetd has for the server: a proposed one
//     waiting for approval, or one computed now (status `proposed` with an id to apply, or
//     `report` with why nothing would be changed).
//   `fleetctl apply PLAN_ID [-o table|json]`: runs a proposed plan and waits for it; exit 0 only
//     when it ends `applied`, 1 when it failed or was rolled back (the reason on standard error).
//   `fleetctl remediations [SERVER|CONTAINER] [-o table|wide|json]`: the recorded remediations
//     (preflight, diagnosis, manual), oldest first.
// Each returns the exit status (docs/cli.md).
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/command_context.h"

namespace fleet::cli {

// `plan` waits at least this long for fleetd: computing a plan probes the container through its
// agent (seconds; more over SSH). A longer --timeout wins.
inline constexpr absl::Duration kPlanTimeout = absl::Minutes(1);
// `apply` waits at least this long for fleetd (a pip install of a CUDA toolkit takes minutes);
// a longer --timeout wins.
inline constexpr absl::Duration kApplyTimeout = absl::Minutes(15);

int RunPlan(const std::vector<std::string>& args, const CommandContext& ctx);
int RunApply(const std::vector<std::string>& args, const CommandContext& ctx);
int RunRemediations(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
