// Renderers of fleetd's remediation plans (fleet.v1.Plan) for `fleetctl plan`, `apply` and
// `remediations`: one action in one line, the human report of a plan, the results of an apply,
// and the `remediation` JSON object of docs/cli.md (snake_case, every field always present,
// built as common/base/json_text.h's Json, never protobuf's JSON printer). Pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/base/json_text.h"
#include "google/protobuf/duration.pb.h"
#include "proto/agent.pb.h"
#include "proto/fleet.pb.h"

namespace fleet::cli {

// The oneof case's name: "set_env", "prepend_path", "pip_install", "pip_uninstall",
// "apt_install", "add_server_args", "remove_server_args", "clear_jit_cache", "symlink"; "none"
// when unset.
std::string ActionKindName(const v1::Action& action);

// One action in one line, its kind first: "pip_install nvidia-cuda-nvcc==13.2.78",
// "prepend_path PATH /x/bin", "symlink LINK -> TARGET", "set_env NAME=VALUE",
// "add_server_args --disable-cuda-graph". A value that is empty or holds a space or a quote is
// single-quoted as a shell would need it.
std::string DescribeAction(const v1::Action& action);

// A plan's results set against its actions. fleetd stores the results of the actions it ran, in
// order, and a rollback's results after them: the leading results whose action is the planned
// one at that position belong to the actions; the rest are the rollback.
struct MatchedResults {
  std::vector<const v1::ActionResult*> per_action;  // one per action; null: not run
  std::vector<const v1::ActionResult*> rollback;
};
MatchedResults MatchResults(const v1::Plan& plan);

// "12.3s", "40ms", "2m3.5s" (to the millisecond); "-" when unset.
std::string FormatTook(const google::protobuf::Duration& took);

// The human report of `fleetctl plan`: a header (id, status, trigger, server, container, class),
// the summary, the actions numbered with their reasons, constraints, unresolved problems, and
// `run: fleetctl apply ID` for a proposed plan. Ends in '\n'.
std::string FormatPlan(const v1::Plan& plan);

// The results table of `fleetctl apply`: every action (run or not) with ok/failed, how long it
// took and its message, the rollback's actions after them, then the output tail of each failed
// action. Ends in '\n'.
std::string FormatApplyResults(const v1::Plan& plan, bool color);

// A plan as the `remediation` object of docs/cli.md.
Json RemediationJson(const v1::Plan& plan);

// `fleetctl remediations -o wide`'s TEST-COMPILE cell: what the test-compile of the probe the
// plan was made from took, and of the probe after it ("1.8s failed, after 1.7s"); "-" for one
// that did not run, "-" alone when neither did.
std::string TestCompileCell(const v1::Plan& plan);

}  // namespace fleet::cli
