// env_from_file: the variables a ServerSpec gives by file (name -> absolute path in the
// container), read by the agent at each launch, so that a secret (HF_TOKEN) never travels in a
// Launch or sits in fleet.db or agent.db: only the path does. A file is read whole (at most
// kMaxEnvFileBytes), one trailing newline dropped; a missing, unreadable, oversized file, or one
// holding a NUL byte, fails the launch with the variable and the path named (never the value).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace fleet::agent {

inline constexpr size_t kMaxEnvFileBytes = 64 << 10;

// name -> value for each of spec.env_from_file().
absl::StatusOr<std::map<std::string, std::string>> ReadEnvFiles(const fleet::v1::ServerSpec& spec);

// The server's environment: the spec's env and, read now, its env_from_file values (best effort:
// a file that cannot be read fails the Launch, which reads them itself). The values read are in
// it so that they are masked wherever the server's text leaves the agent.
std::map<std::string, std::string> ServerEnv(const fleet::v1::ServerSpec& spec);

}  // namespace fleet::agent
