// The agent actions a remediation plan is made of (agent.proto `Action`): how the planner builds
// them, the order a plan applies them in, what each does to a server's spec, and a plan's
// fingerprint. ActionKind, DescribeAction, ApplyToSpec and ApplyActionsToSpec are public
// (planner.h); the rest is internal to fleet::planner. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "daemon/planner/planner.h"
#include "proto/agent.pb.h"

namespace fleet::daemon {

// The order a plan applies its actions in: packages first (symlink targets and PATH entries come
// from them), then the environment, then the files that point into the installed tree.
int KindRank(const fleet::v1::Action& a);

fleet::v1::Action SetEnvAction(const std::string& name, const std::string& value);
fleet::v1::Action PrependPathAction(const std::string& variable, const std::string& directory);
fleet::v1::Action SymlinkAction(const std::string& target, const std::string& link);
fleet::v1::Action PipAction(const fleet::v1::Requirement& requirement);
// AddServerArgs (`add`) or RemoveServerArgs of `args`.
fleet::v1::Action ServerArgsAction(bool add, std::vector<std::string> args);

// What the action does to the spec: env and argv actions change it, the others leave it as is.
void ApplyAction(const fleet::v1::Action& a, fleet::v1::ServerSpec* spec);

// FNV-1a 64 of the actions' descriptions: stable across builds and processes (unlike std::hash),
// so a fingerprint in the store still matches after a daemon upgrade.
std::string Fingerprint(const std::vector<PlannedAction>& actions);

}  // namespace fleet::daemon
