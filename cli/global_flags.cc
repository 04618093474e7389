#include "cli/global_flags.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "cli/command_context.h"

namespace fleet::cli {

const char kGlobalFlagsHelp[] =
    "global flags (before the verb):\n"
    "  --socket PATH         fleetd's unix socket (default: STATE_DIR/fleetd.sock, or "
    "$FLEET_SOCKET)\n"
    "  --state-dir DIR       fleetd's state directory (default /var/lib/gpu-fleet)\n"
    "  --timeout DURATION    deadline of each call to fleetd (default 10s)\n";

absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args,
                                             const char* env_socket) {
  std::optional<std::string> socket, state_dir, timeout;
  size_t i = 0;
  while (i < args->size()) {
    const std::string& arg = (*args)[i];
    std::optional<std::string>* target = nullptr;
    std::string name;
    for (auto [flag, slot] : {std::pair{"--socket", &socket}, std::pair{"--state-dir", &state_dir},
                              std::pair{"--timeout", &timeout}}) {
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
  }
  args->erase(args->begin(), args->begin() + static_cast<std::ptrdiff_t>(i));

  GlobalFlags flags;
  if (socket) {
    flags.socket_path = *socket;
  } else if (state_dir) {
    flags.socket_path = absl::StrCat(*state_dir, "/", kSocketName);
  } else if (env_socket != nullptr && env_socket[0] != '\0') {
    flags.socket_path = env_socket;
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
