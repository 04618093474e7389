// ActionRunner: the only way the agent changes anything: typed, whitelisted remediation actions
// (agent.proto `Action`), each validated against a strict grammar, run with argv vectors (never a
// shell string), reporting exit status, output tail and duration.
//
// Env and argument actions (SetEnv, PrependPath, AddServerArgs, RemoveServerArgs) change no file:
// the daemon records them and sends them with every Launch; here they are validated and answered.
// PipInstall runs the server's own pip, AptInstall the configured apt-get (a simulated container
// points both at its shims), ClearJitCache removes a directory only below a configured cache
// root, Symlink creates a link only below the toolkit/venv tree.
//
// Thread-safe when its CommandRunner is.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/command_runner.h"
#include "proto/agent.pb.h"

namespace fleet::agent {

struct ActionContext {
  std::map<std::string, std::string> env;    // the server's environment (pip and apt run in it)
  std::vector<std::string> pip;              // argv prefix; empty: <venv>/bin/python -m pip
  std::string venv;                          // the server's venv root
  std::vector<std::string> pip_options;      // from the config (e.g. an index URL), validated
  std::vector<std::string> apt_get;          // argv prefix; empty: apt-get
  std::vector<std::string> jit_cache_roots;  // ClearJitCache only strictly below these
  std::vector<std::string> toolkit_roots;    // Symlink only below these (venv, CUDA toolkit)
  absl::Duration timeout = absl::Minutes(20);
};

class ActionRunner {
 public:
  // `runner` must outlive this.
  explicit ActionRunner(CommandRunner* runner) : runner_(runner) {}
  // Validates and runs one action. A rejected or failed action is a result with ok=false and a
  // message naming what was wrong; nothing is run for a rejected one.
  fleet::v1::ActionResult Apply(const fleet::v1::Action& action,
                                const ActionContext& context) const;

 private:
  CommandRunner* runner_;
};

// The grammars, for the daemon's planner and the CLI too. InvalidArgument names the value.
absl::Status ValidatePipRequirement(std::string_view name, std::string_view version);
absl::Status ValidateAptPackage(std::string_view name);
absl::Status ValidateEnvName(std::string_view name);
absl::Status ValidateEnvValue(std::string_view value);
absl::Status ValidateServerArg(std::string_view arg);

}  // namespace fleet::agent
