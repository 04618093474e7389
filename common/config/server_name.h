// A server's name, `HOST/CTID/gpuN` (`pve1/200/gpu3`, `local/sim/gpu0`), and a container's,
// `HOST/CTID`: what the CLI takes as SERVER and CONTAINER, what the config expands to, what the
// daemon's records and logs say. The one rule for both: host names and CTIDs are config names,
// `[A-Za-z0-9._-]+`, not `.` or `..` (they end up in file names). Pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace fleet::config {

// Whether `name` may name a host, a container, a template or a policy.
bool IsValidConfigName(std::string_view name);

// `host/ctid/gpuN`. Does not validate (ParseServerName does).
std::string ServerName(std::string_view host, std::string_view ctid, int gpu);
std::string ServerName(const fleet::v1::ServerRef& ref);

// InvalidArgument unless `name` is exactly `HOST/CTID/gpuN` with valid names and N a decimal GPU
// index (0..kMaxGpuIndex, no sign, no leading zero): ServerName(ParseServerName(x)) == x.
inline constexpr int kMaxGpuIndex = 65535;
absl::StatusOr<fleet::v1::ServerRef> ParseServerName(std::string_view name);

// A container, `HOST/CTID`.
struct ContainerRef {
  std::string host;
  std::string ctid;
};

// InvalidArgument unless `name` is exactly `HOST/CTID` with valid names (the rule above).
absl::StatusOr<ContainerRef> ParseContainerName(std::string_view name);

}  // namespace fleet::config
