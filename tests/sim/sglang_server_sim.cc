// sglang-server-sim: a simulated SGLang inference server for tests and the demo (no GPU). It takes
// `python -m sglang.launch_server`'s flags, writes the log lines the real server writes, and fails
// exactly as the real stack does for the first broken condition it finds in its container tree
// (tests/sim/README.md). A sim world's venv/bin/python is a link to this binary, so a supervisor
// launches it exactly as it launches the real server:
//
//   WORLD/venv/bin/python -m sglang.launch_server --model-path M --port P ...
//
// Run as `vllm` (a sim world's venv/bin/vllm is a link to it too) it is the simulated vLLM server
// (vllm_server.h):
//
//   WORLD/venv/bin/vllm serve MODEL --port P [--tensor-parallel-size N] [--enforce-eager] ...
//
// Run under another name it takes its venv from $VIRTUAL_ENV. FLEET_SIM_SPEED (default 1) divides
// every duration; FLEET_SIM_FAULT injects a fault (SGLang: oom, nccl, hang_jit, watchdog,
// leftover; vLLM: oom, graph_capture).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/sim/launcher.h"
#include "tests/sim/server_args.h"
#include "tests/sim/sim_os.h"
#include "tests/sim/startup_script.h"
#include "tests/sim/vllm_server.h"

namespace fleet::sim {
namespace {

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The venv of the python this process was started as: the directory above bin/, found the way
// Python finds its prefix (argv[0] as given, else on PATH; links not followed).
std::string VenvOfPython(const std::string& argv0, const Environment& env) {
  std::string path = argv0;
  if (path.find('/') == std::string::npos) path = FindExecutable(path, env.List("PATH"));
  if (path.empty()) return "";
  if (path[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) return "";
    path = absl::StrCat(cwd, "/", path);
  }
  return Dirname(Dirname(path));
}

// FLEET_SIM_SPEED and FLEET_SIM_FAULT, or a message saying what is wrong with them.
absl::StatusOr<std::pair<double, Fault>> SimControls(const Environment& env,
                                                     const std::vector<Fault>& faults) {
  double speed = 1;
  if (env.Has("FLEET_SIM_SPEED") &&
      (!absl::SimpleAtod(env.Get("FLEET_SIM_SPEED"), &speed) || !(speed > 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FLEET_SIM_SPEED must be a positive number, not '", env.Get("FLEET_SIM_SPEED"), "'"));
  }
  absl::StatusOr<Fault> fault = ParseFault(env.Get("FLEET_SIM_FAULT"));
  if (!fault.ok()) return fault.status();
  if (*fault != Fault::kNone && std::find(faults.begin(), faults.end(), *fault) == faults.end()) {
    return absl::InvalidArgumentError(absl::StrCat("FLEET_SIM_FAULT: '", env.Get("FLEET_SIM_FAULT"),
                                                   "' is not simulated by this server"));
  }
  return std::make_pair(speed, *fault);
}

// `WORLD/venv/bin/vllm serve MODEL ...`: the simulated vLLM server.
int VllmMain(const std::string& argv0, std::vector<std::string> args, const Environment& env) {
  if (args.empty() || args[0] != "serve") {
    std::fprintf(stderr, "%s: the vllm of a gpu-fleet sim world only runs `serve`\n",
                 argv0.c_str());
    return kArgparseExitCode;
  }
  args.erase(args.begin());
  absl::StatusOr<ServerArgs> parsed = ParseVllmServeArgs(args);
  if (!parsed.ok()) {
    std::fputs(std::string(parsed.status().message()).c_str(), stderr);
    return kArgparseExitCode;
  }
  if (parsed->help) {
    std::printf("%s\n", VllmUsage().c_str());
    return 0;
  }
  absl::StatusOr<std::pair<double, Fault>> controls =
      SimControls(env, {Fault::kOom, Fault::kGraphCapture});
  if (!controls.ok()) {
    std::fprintf(stderr, "vllm-server-sim: %s\n", std::string(controls.status().message()).c_str());
    return kArgparseExitCode;
  }
  return VllmApiServer({*parsed, controls->second, controls->first, env, VenvOfPython(argv0, env)})
      .Run();
}

int Main(int argc, char** argv) {
  const Environment env = Environment::FromProcess();
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string argv0 = argv[0];
  const std::string program = argv0.substr(argv0.rfind('/') + 1);
  if (program == "vllm") return VllmMain(argv0, std::move(args), env);
  std::string venv;
  if (program.rfind("python", 0) == 0) {
    if (args.size() < 2 || args[0] != "-m" || args[1] != "sglang.launch_server") {
      std::fprintf(stderr,
                   "%s: the python of a gpu-fleet sim world only runs `-m sglang.launch_server`\n",
                   argv0.c_str());
      return kArgparseExitCode;
    }
    args.erase(args.begin(), args.begin() + 2);
    venv = VenvOfPython(argv0, env);
  } else {
    venv = env.Get("VIRTUAL_ENV");
  }
  if (venv.empty()) {
    std::fprintf(stderr,
                 "sglang-server-sim: no venv: run WORLD/venv/bin/python -m sglang.launch_server, "
                 "or set VIRTUAL_ENV\n");
    return kArgparseExitCode;
  }

  absl::StatusOr<ServerArgs> parsed = ParseServerArgs(args);
  if (!parsed.ok()) {
    std::fputs(std::string(parsed.status().message()).c_str(), stderr);
    return kArgparseExitCode;
  }
  if (parsed->help) {
    std::printf("%s\n", Usage().c_str());
    return 0;
  }
  absl::StatusOr<std::pair<double, Fault>> controls = SimControls(
      env, {Fault::kOom, Fault::kNccl, Fault::kHangJit, Fault::kWatchdog, Fault::kLeftover});
  if (!controls.ok()) {
    std::fprintf(stderr, "sglang-server-sim: %s\n",
                 std::string(controls.status().message()).c_str());
    return kArgparseExitCode;
  }
  LauncherConfig config{*parsed, controls->second, controls->first, env,
                        absl::StrCat(venv, "/lib/python3.12/site-packages")};
  return Launcher(std::move(config)).Run();
}

}  // namespace
}  // namespace fleet::sim

int main(int argc, char** argv) { return fleet::sim::Main(argc, argv); }
