// The flags fleetctl takes before its verb (`fleetctl --socket PATH status`): where fleetd
// listens and how long to wait for it. Kept out of main.cc so the precedence is tested.
//
// Socket precedence: --socket PATH, then --state-dir DIR (DIR/fleetd.sock), then $FLEET_SOCKET,
// then /var/lib/gpu-fleet/fleetd.sock. A flag on the command line beats the environment.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fleet::cli {

struct GlobalFlags {
  std::string socket_path;
  absl::Duration timeout = absl::Seconds(10);
};

// Removes the leading global flags from `*args` (`--socket PATH`, `--socket=PATH`, `--state-dir`,
// `--timeout DURATION` such as 5s or 500ms) and returns them resolved. `env_socket` is
// $FLEET_SOCKET, or nullptr when unset. InvalidArgument for a flag without its value or a bad
// duration. Parsing stops at the first argument that is not one of these flags (the verb, or
// --help/--version).
absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args,
                                             const char* env_socket);

// The usage lines of the global flags, for `fleetctl --help`.
extern const char kGlobalFlagsHelp[];

}  // namespace fleet::cli
