// The fleet config: a YAML file (docs/config.md) read into fleet.v1.FleetConfig
// (proto/config.proto), checked, and returned as the *effective* config: every default written in,
// so what the daemon stores as desired state says what is in force.
//
// Errors are InvalidArgument, one per line, each `FILE:LINE: <field path>: <what>`:
//   fleet.yaml:12: hosts[0].containers[1].gpus[2]: expected an integer, got 'x'
//   fleet.yaml:9: hosts[0].containers[0]: unknown field 'gpu' (did you mean 'gpus'?); Container
//     has: ctid, channel, gpus, template, policy, base_port, env, tools
// Schema errors (unknown keys, wrong kinds, bad values, malformed YAML) are reported first; only a
// config free of them gets the semantic checks (unique names, references, ports, TLS, templates).
//
// Policies: a container without `policy` uses the policy named "default". When the config defines
// none, a built-in one (BuiltinDefaultPolicy) is added to the effective config; a config that
// defines "default" gets the built-in values only for the fields it leaves out.
//
// Pure functions (LoadFleetConfig reads one file); thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"

namespace fleet::config {

// Defaults, as docs/config.md lists them.
inline constexpr char kDefaultPolicyName[] = "default";
inline constexpr int kDefaultSshPort = 22;
inline constexpr char kDefaultSshUser[] = "root";
inline constexpr int kDefaultAgentPort = 50151;  // the agent's port on a TCP channel
// A loopback channel's default address: fleet-agent's default --listen under
// deploy/fleet-agent.service (a unix socket; TCP needs mutual TLS, even on loopback).
inline constexpr char kDefaultAgentSocket[] = "unix:/var/lib/gpu-fleet-agent/agent.sock";
inline constexpr char kDefaultEngine[] = "sglang";
inline constexpr char kSglangDefaultLogPath[] = "/workspace/sglang_logs/sglang_gpu{gpu}.log";
inline constexpr char kVllmDefaultLogPath[] = "/workspace/vllm_logs/vllm_gpu{gpu}.log";
inline constexpr char kSglangReadinessPath[] = "/health_generate";
inline constexpr char kVllmReadinessPath[] = "/health";
inline constexpr absl::Duration kDefaultStallTimeout = absl::Minutes(10);
inline constexpr absl::Duration kDefaultStartupDeadline = absl::Minutes(90);
inline constexpr int kDefaultMaxAttempts = 8;
inline constexpr absl::Duration kDefaultBackoffInitial = absl::Seconds(10);
inline constexpr absl::Duration kDefaultBackoffMax = absl::Minutes(5);
inline constexpr int kDefaultMaxFixesPerCause = 3;

// The policy used when the config defines no "default": the values above, remediation auto,
// every action allowed, canary on, fallbacks off.
fleet::v1::Policy BuiltinDefaultPolicy();

// The action kinds a policy's allowed_actions may name.
inline constexpr std::string_view kActionKinds[] = {
    "set_env",         "prepend_path",       "pip_install",     "apt_install",
    "add_server_args", "remove_server_args", "clear_jit_cache", "symlink"};

// Parses, checks and completes a fleet config. `origin` names the text in errors (a file name).
absl::StatusOr<fleet::v1::FleetConfig> ParseFleetConfig(std::string_view yaml,
                                                        std::string_view origin);

// ParseFleetConfig of the file at `path` (errors name it as given). NotFound when it does not
// exist, another errno-based code when it cannot be read.
absl::StatusOr<fleet::v1::FleetConfig> LoadFleetConfig(const std::string& path);

// Writes the defaults into the zero-valued fields of `config` (a config built in code or read
// back from storage). Idempotent. Unlike ParseFleetConfig it cannot tell a `false` that was
// written from one that was left out, so booleans whose default is true (Policy.canary,
// vLLM's Readiness.completion_check when readiness was given) are left as they are.
void ApplyConfigDefaults(fleet::v1::FleetConfig* config);

// The semantic checks of ParseFleetConfig on a config from elsewhere (defaults applied to a copy
// first). Errors are `<field path>: <what>`, without lines.
absl::Status ValidateFleetConfig(const fleet::v1::FleetConfig& config);

// The servers of `container`, each as its GPUs with the lead first: one per entry of `gpus`, then
// one per entry of `servers`, in config order (not checked: ValidateFleetConfig does that).
std::vector<std::vector<int>> ContainerServerGpus(const fleet::v1::Container& container);

// How many GPUs a server's argv (placeholders expanded) asks for: its tensor-parallel size times
// its pipeline-parallel size, from the engine's flags (vLLM `--tensor-parallel-size`/`-tp`,
// `--pipeline-parallel-size`/`-pp`; SGLang `--tp-size`/`--tp`/`--tensor-parallel-size`,
// `--pp-size`/`--pipeline-parallel-size`), `--flag N` or `--flag=N`, the last one winning as with
// argparse; vLLM's underscore spellings (`--tensor_parallel_size`) too. vLLM's data-parallel size
// (`--data-parallel-size`/`-dp`) multiplies it, unless `--data-parallel-size-local` spreads the
// ranks over nodes; SGLang's (`--dp-size`, ...) is only noted: with `--enable-dp-attention` it
// runs inside the tensor-parallel ranks.
struct ParallelSize {
  int64_t gpus = 1;
  std::string how;  // the flags that set it ("--tensor-parallel-size 2"); empty when none did
  bool data_parallel = false;
};
ParallelSize ParallelSizeOf(std::string_view engine, const std::vector<std::string>& argv);

}  // namespace fleet::config
