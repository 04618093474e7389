#include "common/config/server_name.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/string_view.h"

namespace fleet::config {

bool IsValidConfigName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

std::string ServerName(std::string_view host, std::string_view ctid, int gpu) {
  return absl::StrCat(AsAbsl(host), "/", AsAbsl(ctid), "/gpu", gpu);
}

std::string ServerName(const fleet::v1::ServerRef& ref) {
  return ServerName(ref.host(), ref.container(), ref.gpu());
}

namespace {

// Why `part` is not a valid config name, for the error message.
std::string NameProblem(std::string_view what, absl::string_view part) {
  return absl::StrCat("invalid ", AsAbsl(what), " '", absl::CHexEscape(part),
                      "': use letters, digits, '.', '_', '-'");
}

absl::Status BadName(std::string_view kind, std::string_view name, std::string_view why,
                     std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(AsAbsl(kind), " name '",
                                                 absl::CHexEscape(AsAbsl(name)), "': ", AsAbsl(why),
                                                 " (expected ", AsAbsl(expected), ")"));
}

}  // namespace

absl::StatusOr<fleet::v1::ServerRef> ParseServerName(std::string_view name) {
  const auto bad = [&](std::string_view why) {
    return BadName("server", name, why, "HOST/CTID/gpuN, e.g. pve1/200/gpu3");
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(AsAbsl(name), '/');
  if (parts.size() != 3) return bad("not three parts separated by '/'");
  if (!IsValidConfigName(AsStd(parts[0]))) return bad(NameProblem("host name", parts[0]));
  if (!IsValidConfigName(AsStd(parts[1]))) return bad(NameProblem("container id", parts[1]));
  absl::string_view gpu = parts[2];
  if (!absl::ConsumePrefix(&gpu, "gpu")) return bad("the last part must be gpuN");
  const bool digits = !gpu.empty() && std::all_of(gpu.begin(), gpu.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
  if (!digits) return bad("the GPU index must be a decimal number");
  if (gpu.size() > 1 && gpu[0] == '0') return bad("the GPU index has a leading zero");
  int index = 0;
  if (gpu.size() > 5 || !absl::SimpleAtoi(gpu, &index) || index > kMaxGpuIndex) {
    return bad("the GPU index is out of range");
  }
  fleet::v1::ServerRef ref;
  ref.set_host(std::string(parts[0]));
  ref.set_container(std::string(parts[1]));
  ref.set_gpu(index);
  return ref;
}

absl::StatusOr<ContainerRef> ParseContainerName(std::string_view name) {
  const auto bad = [&](std::string_view why) {
    return BadName("container", name, why, "HOST/CTID, e.g. pve1/200");
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(AsAbsl(name), '/');
  if (parts.size() != 2) return bad("not two parts separated by '/'");
  if (!IsValidConfigName(AsStd(parts[0]))) return bad(NameProblem("host name", parts[0]));
  if (!IsValidConfigName(AsStd(parts[1]))) return bad(NameProblem("container id", parts[1]));
  return ContainerRef{std::string(parts[0]), std::string(parts[1])};
}

}  // namespace fleet::config
