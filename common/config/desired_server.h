// What a fleet config asks for, server by server: one DesiredServer per GPU of each container's
// `gpus` and per entry of its `servers` (a tensor-parallel server on several GPUs),
// its launch spec fully expanded (argv placeholders, port, log path, environment, readiness,
// timeouts, tool commands) and the policy that governs it. The daemon reconciles against these;
// `fleetctl deploy --dry-run` compares them.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"
#include "proto/config.pb.h"

namespace fleet::config {

struct DesiredServer {
  std::string name;            // ServerName: host/ctid/gpuN, e.g. local/sim/gpu3
  fleet::v1::ServerSpec spec;  // what the agent's Launch gets (before applied env fixes)
  fleet::v1::Policy policy;    // the container's policy, defaults filled in
};

// The servers `config` describes, sorted by name (byte order: gpu10 sorts before gpu2). For each
// server of a container using template T and policy P, on GPUs G (the lead n first; G = {n} for
// an entry of `gpus`), named host/ctid/gpuN:
//   gpus      G when it has several (spec.gpus; empty for one: spec.server.gpu = n says it)
//   port      base_port + n
//   log_path  T.log_path with {gpu} {port} {model} {gpus} {gpu_count} expanded (default per
//             engine, docs/config.md)
//   argv      T.argv with those and {log} expanded ({log} is the expanded log_path)
//   env       T.env, then the container's env (it wins), then CUDA_VISIBLE_DEVICES=G ("0,1")
//   readiness T.readiness (default per engine); stall_timeout, startup_deadline from P
//   tools     the container's
// `config` may be a parsed (effective) config or one built in code: defaults are applied to a
// copy, and it is checked as ValidateFleetConfig does (InvalidArgument listing the errors).
absl::StatusOr<std::vector<DesiredServer>> ExpandServers(const fleet::v1::FleetConfig& config);

}  // namespace fleet::config
