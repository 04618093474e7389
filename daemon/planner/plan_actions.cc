// The actions of a plan (plan_actions.h): building, ordering, describing and applying them.
#include "daemon/planner/plan_actions.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fleet::daemon {

using fleet::v1::Action;
using fleet::v1::ServerSpec;

int KindRank(const Action& a) {
  switch (a.kind_case()) {
    case Action::kPipInstall:
      return 0;
    case Action::kPipUninstall:
      return 1;
    case Action::kAptInstall:
      return 1;
    case Action::kSetEnv:
      return 2;
    case Action::kPrependPath:
      return 3;
    case Action::kSymlink:
      return 4;
    case Action::kClearJitCache:
      return 5;
    case Action::kRemoveServerArgs:
      return 6;
    case Action::kAddServerArgs:
      return 7;
    case Action::KIND_NOT_SET:
      break;
  }
  return 8;
}

Action SetEnvAction(const std::string& name, const std::string& value) {
  Action a;
  a.mutable_set_env()->set_name(name);
  a.mutable_set_env()->set_value(value);
  return a;
}

Action PrependPathAction(const std::string& variable, const std::string& directory) {
  Action a;
  a.mutable_prepend_path()->set_variable(variable);
  a.mutable_prepend_path()->set_directory(directory);
  return a;
}

Action SymlinkAction(const std::string& target, const std::string& link) {
  Action a;
  a.mutable_symlink()->set_target(target);
  a.mutable_symlink()->set_link(link);
  return a;
}

Action PipAction(const fleet::v1::Requirement& requirement) {
  Action a;
  *a.mutable_pip_install()->add_requirements() = requirement;
  return a;
}

Action ServerArgsAction(bool add, std::vector<std::string> args) {
  Action a;
  fleet::v1::ServerArgs* target =
      add ? a.mutable_add_server_args() : a.mutable_remove_server_args();
  for (std::string& arg : args) target->add_args(std::move(arg));
  return a;
}

void ApplyAction(const Action& a, ServerSpec* spec) {
  auto& env = *spec->mutable_env();
  switch (a.kind_case()) {
    case Action::kSetEnv:
      env[a.set_env().name()] = a.set_env().value();
      break;
    case Action::kPrependPath: {
      std::string& value = env[a.prepend_path().variable()];
      value = value.empty() ? a.prepend_path().directory()
                            : absl::StrCat(a.prepend_path().directory(), ":", value);
      break;
    }
    case Action::kRemoveServerArgs: {
      // The first run of argv equal to the args (a flag and its value) goes.
      auto& argv = *spec->mutable_argv();
      const auto& args = a.remove_server_args().args();
      auto at = std::search(argv.begin(), argv.end(), args.begin(), args.end());
      if (!args.empty() && at != argv.end()) argv.erase(at, at + args.size());
      break;
    }
    case Action::kAddServerArgs:
      for (const std::string& arg : a.add_server_args().args()) spec->add_argv(arg);
      break;
    default:
      break;
  }
}

// FNV-1a 64 of the actions' descriptions: stable across builds and processes (unlike std::hash),
// so a fingerprint in the store still matches after a daemon upgrade.
std::string Fingerprint(const std::vector<PlannedAction>& actions) {
  uint64_t h = 1469598103934665603ull;
  for (const PlannedAction& p : actions) {
    for (char c : absl::StrCat(DescribeAction(p.action), "\n")) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

std::string_view ActionKind(const Action& action) {
  switch (action.kind_case()) {
    case Action::kSetEnv:
      return "set_env";
    case Action::kPrependPath:
      return "prepend_path";
    case Action::kPipInstall:
      return "pip_install";
    case Action::kPipUninstall:
      return "pip_uninstall";
    case Action::kAptInstall:
      return "apt_install";
    case Action::kAddServerArgs:
      return "add_server_args";
    case Action::kRemoveServerArgs:
      return "remove_server_args";
    case Action::kClearJitCache:
      return "clear_jit_cache";
    case Action::kSymlink:
      return "symlink";
    case Action::KIND_NOT_SET:
      break;
  }
  return "none";
}

std::string DescribeAction(const Action& a) {
  const std::string kind(ActionKind(a));
  switch (a.kind_case()) {
    case Action::kSetEnv:
      return absl::StrCat(kind, " ", a.set_env().name(), "=", a.set_env().value());
    case Action::kPrependPath:
      return absl::StrCat(kind, " ", a.prepend_path().variable(), " ",
                          a.prepend_path().directory());
    case Action::kPipInstall: {
      std::vector<std::string> reqs;
      for (const fleet::v1::Requirement& r : a.pip_install().requirements()) {
        reqs.push_back(absl::StrCat(r.name(), "==", r.version()));
      }
      return absl::StrCat(kind, " ", absl::StrJoin(reqs, " "));
    }
    case Action::kPipUninstall:
      return absl::StrCat(kind, " ", absl::StrJoin(a.pip_uninstall().packages(), " "));
    case Action::kAptInstall:
      return absl::StrCat(kind, " ", absl::StrJoin(a.apt_install().packages(), " "));
    case Action::kAddServerArgs:
      return absl::StrCat(kind, " ", absl::StrJoin(a.add_server_args().args(), " "));
    case Action::kRemoveServerArgs:
      return absl::StrCat(kind, " ", absl::StrJoin(a.remove_server_args().args(), " "));
    case Action::kClearJitCache:
      return absl::StrCat(kind, " ", a.clear_jit_cache().directory());
    case Action::kSymlink:
      return absl::StrCat(kind, " ", a.symlink().link(), " -> ", a.symlink().target());
    case Action::KIND_NOT_SET:
      break;
  }
  return kind;
}

ServerSpec ApplyToSpec(const RemediationPlan& plan, ServerSpec spec) {
  for (const PlannedAction& p : plan.actions) ApplyAction(p.action, &spec);
  return spec;
}

void ApplyActionsToSpec(const google::protobuf::RepeatedPtrField<fleet::v1::PlannedAction>& actions,
                        ServerSpec* spec) {
  for (const fleet::v1::PlannedAction& p : actions) ApplyAction(p.action(), spec);
}

}  // namespace fleet::daemon
