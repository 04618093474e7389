#include "cli/server_name.h"

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

}  // namespace

absl::Status ValidateServerName(std::string_view name) {
  if (name.empty()) return Bad(name, "it is empty");
  const std::vector<std::string> parts = absl::StrSplit(AsAbsl(name), '/');
  if (parts.size() != 3) {
    return Bad(name, absl::StrCat("it has ", parts.size(), " part", parts.size() == 1 ? "" : "s",
                                  ", not 3"));
  }
  const std::string& host = parts[0];
  const std::string& ctid = parts[1];
  const std::string& gpu = parts[2];
  if (host.empty() || host.size() > 253 || !AllOf(host, ".-") || !IsAlnum(host.front())) {
    return Bad(name, "the host must be a host name (letters, digits, '.', '-') or 'local'");
  }
  if (ctid.empty() || ctid.size() > 64 || !AllOf(ctid, "._-") || !IsAlnum(ctid.front())) {
    return Bad(name, "the container must be a container id such as 200, or a local name");
  }
  if (gpu.size() < 4 || gpu.size() > 7 || gpu.compare(0, 3, "gpu") != 0 ||
      gpu.find_first_not_of("0123456789", 3) != std::string::npos) {
    return Bad(name, "the GPU must be gpuN with N a GPU index, e.g. gpu3");
  }
  return absl::OkStatus();
}

}  // namespace fleet::cli
