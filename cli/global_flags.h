// The flags fleetctl takes before its verb (`fleetctl --socket PATH status`): where fleetd
// listens and how long to wait for it. Kept out of main.cc so the precedence is tested.
//
// Where fleetd is, first match wins: --socket PATH, --state-dir DIR (DIR/fleetd.sock) or --server
// ADDR on the command line (--server with either of the others is a usage error); then
// $FLEET_SERVER; then $FLEET_SOCKET; then /var/lib/gpu-fleet/fleetd.sock. A flag on the command
// line beats the environment.
//
// Over TCP (--server, $FLEET_SERVER: one or more HOST:PORT, repeated or comma-separated, tried in
// order) the connection is mutual TLS: --tls-cert, --tls-key and --tls-ca (each else
// $FLEET_TLS_CERT, $FLEET_TLS_KEY, $FLEET_TLS_CA) are required, unless --insecure asks for
// plaintext by name. The TLS flags and --insecure without a server are a usage error.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/command_context.h"

namespace fleet::cli {

struct GlobalFlags {
  std::string socket_path;
  // Addresses set: fleetd over TCP (socket_path is then unused).
  ServerOptions servers;
  absl::Duration timeout = absl::Seconds(10);
};

// The environment variables the global flags fall back on; nullptr: unset.
struct GlobalEnv {
  const char* socket = nullptr;    // FLEET_SOCKET
  const char* server = nullptr;    // FLEET_SERVER
  const char* tls_cert = nullptr;  // FLEET_TLS_CERT
  const char* tls_key = nullptr;   // FLEET_TLS_KEY
  const char* tls_ca = nullptr;    // FLEET_TLS_CA
};

// This process's environment.
GlobalEnv GlobalEnvFromProcess();

// Removes the leading global flags from `*args` (`--socket PATH`, `--socket=PATH`, `--state-dir`,
// `--server`, `--tls-cert`, `--tls-key`, `--tls-ca`, `--insecure`, `--timeout DURATION` such as
// 5s or 500ms) and returns them resolved. InvalidArgument for a flag without its value, a bad
// duration or address, or flags that do not go together (above). Parsing stops at the first
// argument that is not one of these flags (the verb, or --help/--version).
absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args, const GlobalEnv& env);
// The same with only $FLEET_SOCKET (`env_socket`) in the environment.
absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args,
                                             const char* env_socket);

// The usage lines of the global flags, for `fleetctl --help`.
extern const char kGlobalFlagsHelp[];

}  // namespace fleet::cli
