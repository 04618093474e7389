#include "cli/server_name.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/string_view.h"

namespace fleet::cli {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool AllOf(std::string_view s, std::string_view extra) {
  for (char c : s) {
    if (!IsAlnum(c) && extra.find(c) == std::string_view::npos) return false;
  }
  return true;
}

absl::Status Bad(std::string_view name, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("'", AsAbsl(name),
                                                 "' is not a server name: ", AsAbsl(why),
                                                 " (want host/ctid/gpuN, e.g. pve1/200/gpu3)"));
}

absl::Status BadContainer(std::string_view name, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("'", AsAbsl(name), "' is not a container name: ",
                                                 AsAbsl(why), " (want host/ctid, e.g. pve1/200)"));
}

std::string PartCount(size_t n, int want) {
  return absl::StrCat("it has ", n, " part", n == 1 ? "" : "s", ", not ", want);
}

// The host and ctid parts; "" when well-formed, else why not.
std::string HostCtidProblem(const std::string& host, const std::string& ctid) {
  if (host.empty() || host.size() > 253 || !AllOf(host, ".-") || !IsAlnum(host.front())) {
    return "the host must be a host name (letters, digits, '.', '-') or 'local'";
  }
  if (ctid.empty() || ctid.size() > 64 || !AllOf(ctid, "._-") || !IsAlnum(ctid.front())) {
    return "the container must be a container id such as 200, or a local name";
  }
  return "";
}

}  // namespace

absl::Status ValidateServerName(std::string_view name) {
  if (name.empty()) return Bad(name, "it is empty");
  const std::vector<std::string> parts = absl::StrSplit(AsAbsl(name), '/');
  if (parts.size() != 3) return Bad(name, PartCount(parts.size(), 3));
  const std::string& gpu = parts[2];
  if (std::string why = HostCtidProblem(parts[0], parts[1]); !why.empty()) return Bad(name, why);
  if (gpu.size() < 4 || gpu.size() > 7 || gpu.compare(0, 3, "gpu") != 0 ||
      gpu.find_first_not_of("0123456789", 3) != std::string::npos) {
    return Bad(name, "the GPU must be gpuN with N a GPU index, e.g. gpu3");
  }
  return absl::OkStatus();
}

absl::Status ValidateContainerName(std::string_view name) {
  if (name.empty()) return BadContainer(name, "it is empty");
  const std::vector<std::string> parts = absl::StrSplit(AsAbsl(name), '/');
  if (parts.size() != 2) return BadContainer(name, PartCount(parts.size(), 2));
  if (std::string why = HostCtidProblem(parts[0], parts[1]); !why.empty()) {
    return BadContainer(name, why);
  }
  return absl::OkStatus();
}

absl::Status ValidateServerOrContainerName(std::string_view name) {
  const size_t slashes = static_cast<size_t>(std::count(name.begin(), name.end(), '/'));
  if (slashes == 1) return ValidateContainerName(name);
  if (slashes == 2) return ValidateServerName(name);
  return absl::InvalidArgumentError(
      absl::StrCat("'", AsAbsl(name), "' is not a server or container name: it has ", slashes + 1,
                   " part", slashes == 0 ? "" : "s",
                   " (want host/ctid/gpuN or host/ctid, e.g. pve1/200/gpu3 or pve1/200)"));
}

}  // namespace fleet::cli
