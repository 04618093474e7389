#include "cli/global_flags.h"

#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fleet::cli {

const char kGlobalFlagsHelp[] =
    "global flags (before the verb):\n"
    "  --socket PATH         fleetd's unix socket (default: STATE_DIR/fleetd.sock, or "
    "$FLEET_SOCKET)\n"
    "  --state-dir DIR       fleetd's state directory (default /var/lib/gpu-fleet)\n"
    "  --server HOST:PORT    fleetd over the network (fleetd --listen), mutual TLS; repeat or\n"
    "                        comma-separate to try several in order ($FLEET_SERVER)\n"
    "  --tls-cert FILE       with --server: fleetctl's client certificate ($FLEET_TLS_CERT)\n"
    "  --tls-key FILE        with --server: its key ($FLEET_TLS_KEY)\n"
    "  --tls-ca FILE         with --server: the CA of fleetd's certificate ($FLEET_TLS_CA)\n"
    "  --insecure            with --server: plaintext, no TLS (a fleetd --insecure-listen)\n"
    "  --timeout DURATION    deadline of each call to fleetd (default 10s)\n";

namespace {

const char* NonEmpty(const char* value) {
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

// HOST:PORT with a port number and a host ([v6] in brackets); "" when well-formed, else why not.
std::string CheckAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      address.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return "give HOST:PORT";
  }
  const std::string host = address.substr(0, colon);
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']')) {
    return "an IPv6 address goes in brackets: [ADDR]:PORT";
  }
  return "";
}

}  // namespace

GlobalEnv GlobalEnvFromProcess() {
  GlobalEnv env;
  env.socket = std::getenv("FLEET_SOCKET");
  env.server = std::getenv("FLEET_SERVER");
  env.tls_cert = std::getenv("FLEET_TLS_CERT");
  env.tls_key = std::getenv("FLEET_TLS_KEY");
  env.tls_ca = std::getenv("FLEET_TLS_CA");
  return env;
}

absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args,
                                             const char* env_socket) {
  GlobalEnv env;
  env.socket = env_socket;
  return ParseGlobalFlags(args, env);
}

absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args, const GlobalEnv& env) {
  std::optional<std::string> socket, state_dir, timeout, tls_cert, tls_key, tls_ca;
  std::vector<std::string> server_values;
  std::optional<std::string> server;  // the last --server value, appended to server_values
  bool insecure = false;
  size_t i = 0;
  while (i < args->size()) {
    const std::string& arg = (*args)[i];
    if (arg == "--insecure") {
      insecure = true;
      i += 1;
      continue;
    }
    std::optional<std::string>* target = nullptr;
    std::string name;
    for (auto [flag, slot] : {std::pair{"--socket", &socket}, std::pair{"--state-dir", &state_dir},
                              std::pair{"--timeout", &timeout}, std::pair{"--server", &server},
                              std::pair{"--tls-cert", &tls_cert}, std::pair{"--tls-key", &tls_key},
                              std::pair{"--tls-ca", &tls_ca}}) {
      if (arg == flag || arg.rfind(std::string(flag) + "=", 0) == 0) {
        target = slot;
        name = flag;
      }
    }
    if (target == nullptr) break;
    if (arg.size() > name.size()) {
      *target = arg.substr(name.size() + 1);
      i += 1;
    } else {
      if (i + 1 >= args->size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", name, " needs a value"));
      }
      *target = (*args)[i + 1];
      i += 2;
    }
    if (target->value().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("flag ", name, ": empty value"));
    }
    if (target == &server) server_values.push_back(*server);
  }
  args->erase(args->begin(), args->begin() + static_cast<std::ptrdiff_t>(i));

  GlobalFlags flags;
  if (!server_values.empty() && (socket || state_dir)) {
    return absl::InvalidArgumentError(
        "flag --server goes without --socket and --state-dir: fleetd over the network, or its "
        "unix socket");
  }
  if (server_values.empty() && !socket && !state_dir && NonEmpty(env.server) != nullptr) {
    server_values.push_back(env.server);
  }
  const std::string from =
      !server_values.empty() && server == std::nullopt ? "$FLEET_SERVER" : "flag --server";
  for (const std::string& value : server_values) {
    for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      const std::string address(absl::StripAsciiWhitespace(part));
      if (std::string why = CheckAddress(address); !why.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(from, ": '", address, "': ", why));
      }
      flags.servers.addresses.push_back(address);
    }
  }
  if (!server_values.empty() && flags.servers.addresses.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": no address"));
  }

  if (flags.servers.addresses.empty()) {
    if (tls_cert || tls_key || tls_ca || insecure) {
      return absl::InvalidArgumentError(
          "flags --tls-cert, --tls-key, --tls-ca and --insecure are for --server (fleetd over "
          "the network; the unix socket needs none)");
    }
  } else if (insecure) {
    if (tls_cert || tls_key || tls_ca) {
      return absl::InvalidArgumentError(
          "flag --insecure (plaintext) goes without --tls-cert, --tls-key and --tls-ca");
    }
    flags.servers.insecure = true;
  } else {
    const auto pick = [](const std::optional<std::string>& flag, const char* env_value) {
      if (flag) return *flag;
      return std::string(NonEmpty(env_value) != nullptr ? env_value : "");
    };
    flags.servers.tls.cert_file = pick(tls_cert, env.tls_cert);
    flags.servers.tls.key_file = pick(tls_key, env.tls_key);
    flags.servers.tls.ca_file = pick(tls_ca, env.tls_ca);
    if (flags.servers.tls.given() != 3) {
      return absl::InvalidArgumentError(
          "fleetd over the network is mutual TLS: give --tls-cert, --tls-key and --tls-ca "
          "($FLEET_TLS_CERT, $FLEET_TLS_KEY, $FLEET_TLS_CA; fleetctl certs init --clients makes "
          "them), or --insecure for a fleetd that listens in plaintext");
    }
  }

  if (socket) {
    flags.socket_path = *socket;
  } else if (state_dir) {
    flags.socket_path = absl::StrCat(*state_dir, "/", kSocketName);
  } else if (NonEmpty(env.socket) != nullptr) {
    flags.socket_path = env.socket;
  } else {
    flags.socket_path = absl::StrCat(kDefaultStateDir, "/", kSocketName);
  }
  if (timeout) {
    absl::Duration d;
    if (!absl::ParseDuration(*timeout, &d) || d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --timeout: '", *timeout, "' is not a positive duration (e.g. 5s)"));
    }
    flags.timeout = d;
  }
  return flags;
}

}  // namespace fleet::cli
