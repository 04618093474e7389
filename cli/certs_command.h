// `fleetctl certs init`: the fleet's mutual-TLS material, made with the `openssl` binary (run by
// argv, never through a shell): a CA (ca.key, ca.crt), fleetd's client certificate (fleetd.crt,
// fleetd.key) and one server certificate per agent (agent-NAME.crt, agent-NAME.key), all signed
// by the CA; for `fleetd --listen` (fleetctl over the network), fleetd's server certificate
// (fleetd-listen.crt, .key: every --listen-names NAME in one) and a client certificate per
// --clients NAME (client-NAME.crt, .key). Keys are 0600. An existing CA is reused; an existing
// fleetd certificate is kept when the CA signed it; an existing agent, listen or client
// certificate is replaced only with --force. No daemon.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

inline constexpr char kDefaultCertsDir[] = "/var/lib/gpu-fleet/pki";

// `args` follow the verb: "init" and its flags.
int RunCerts(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
