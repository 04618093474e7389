// The fields a log line about one server (or one container) carries, in one fixed form so that
// every call site writes them alike and a reader (grep, a script) finds them:
//   fleet::log::Get(Component::kAgent).info("{} launched (pid {})", LogFields{name, attempt}, pid);
//   -> "server=pve1/200/gpu0 attempt=ab12 launched (pid 4242)"
//   Get(Component::kLinks).warn("{} agent unreachable", LogFields{.container = "pve1/200"});
//   -> "container=pve1/200 agent unreachable"
// An empty field is left out; a value holding a space or a control character, '"', '=' or '\'
// is written quoted, with '"' and '\' escaped.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace fleet::log {

struct LogFields {
  absl::string_view server;
  absl::string_view attempt;
  // A line about a container rather than one of its servers (a server's name holds its
  // container's already).
  absl::string_view container;
};

// "container=... server=... attempt=..." (without a trailing space; "" when all are empty).
std::string FormatFields(const LogFields& fields);

}  // namespace fleet::log

template <>
struct fmt::formatter<fleet::log::LogFields> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const fleet::log::LogFields& fields, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(fleet::log::FormatFields(fields), ctx);
  }
};
