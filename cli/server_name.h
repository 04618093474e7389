// SERVER names as the CLI accepts them: `host/ctid/gpuN` (docs/design.md "CLI surface"), e.g.
// `pve1/200/gpu3` or `local/sim/gpu0`. Checked before any call to fleetd so a typo gets a precise
// message instead of the daemon's "unknown server". Only the shape is checked here; whether the
// server exists is the daemon's answer.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace fleet::cli {

// OK for a well-formed name; InvalidArgument naming the name and the part that is wrong.
//   host: letters, digits, '.', '-' (a host name, or `local`)
//   ctid: letters, digits, '.', '_', '-' (a Proxmox container id such as 200, or a local name)
//   gpuN: `gpu` and a GPU index (0-9999)
absl::Status ValidateServerName(std::string_view name);

// A container, `host/ctid` (`pve1/200`), with the same rules for its two parts.
absl::Status ValidateContainerName(std::string_view name);

// A server or a container (`remediations [SERVER|CONTAINER]`): the form is told by the number of
// parts; a name with neither 2 nor 3 parts is refused naming both forms.
absl::Status ValidateServerOrContainerName(std::string_view name);

}  // namespace fleet::cli
