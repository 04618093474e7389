// The GPUs a server runs on. Header-only: the agent uses it without linking fleet::config (and
// its YAML reader).
#pragma once

#include <vector>

#include "proto/agent.pb.h"

namespace fleet::config {

// spec.gpus, its lead (server.gpu) first; server.gpu alone when spec.gpus is empty (a daemon
// older than the field).
inline std::vector<int> ServerGpus(const fleet::v1::ServerSpec& spec) {
  if (spec.gpus().empty()) return {spec.server().gpu()};
  return {spec.gpus().begin(), spec.gpus().end()};
}

}  // namespace fleet::config
