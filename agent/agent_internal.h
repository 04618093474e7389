// Helpers the Agent's own source files share (agent.cc, agent_gpu_wait.cc): not an API.
#pragma once

#include <string>

#include "agent/agent.h"
#include "agent/gpu_guard.h"
#include "proto/agent.pb.h"

namespace fleet::agent::internal {

// What the GPU check of `request` needs besides the previous server: the server's GPUs, the
// attempt, and the container's nvidia-smi with the server's environment.
void FillGpuRequest(const fleet::v1::LaunchRequest& request, const std::string& owner,
                    const AgentOptions& options, GpuRequest* out);

// A check that did something, found someone, or could not look is said in the agent's log: a
// warning when the GPU is held, a leftover would not die or something could not be looked at.
void LogGpuCheck(const GpuRequest& request, const GpuCheck& check, bool busy);

// The spec as the agent runs it (agent.cc: the GPU pins, the host and container filled in).
fleet::v1::ServerSpec EffectiveSpec(const fleet::v1::ServerSpec& spec, const AgentOptions& options,
                                    const std::string& request_attempt);

}  // namespace fleet::agent::internal
