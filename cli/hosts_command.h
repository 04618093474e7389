// The hosts verbs, on fleetd's configured hosts (ListHosts and TrustHost RPCs):
//   `fleetctl hosts [list] [-o table|json]`: the hosts of fleetd's config, how each is reached
//     (local, or ssh: address:port, user, known_hosts file), its container count and the host keys
//     its known_hosts holds (read by fleetd, no connection).
//   `fleetctl hosts trust HOST [--fingerprint FP] [-o text|json]`: the two steps of trusting an
//     ssh host's key. Without --fingerprint fleetd connects and shows the key (type, SHA256
//     fingerprint) and whether it is new, trusted or CHANGED, records nothing, and the command
//     says how to confirm it; exit 0 only when the key is already trusted. With --fingerprint,
//     fleetd records the key only if the host shows that key, in place of the host's old entry.
// Each returns the exit status (docs/cli.md).
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/command_context.h"

namespace fleet::cli {

// `hosts trust` waits at least this long for fleetd, which connects to the host (up to its
// connect timeout per round trip). A longer --timeout wins.
inline constexpr absl::Duration kHostsTrustTimeout = absl::Minutes(1);

// `args` follow the verb: nothing or "list" and its flags, or "trust" and its arguments.
int RunHosts(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
