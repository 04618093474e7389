#include "cli/command_errors.h"

#include <algorithm>
#include <ostream>

#include "absl/strings/str_join.h"
#include "common/config/server_name.h"

namespace fleet::cli {

int ReportError(std::string_view verb, const absl::Status& status, std::ostream& err) {
  const bool connectivity = absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
  if (connectivity) {
    err << "fleetctl: " << status.message() << "\n";
  } else {
    err << "fleetctl " << verb << ": " << status.message() << "\n";
  }
  return kExitError;
}

bool CheckServerNames(std::string_view verb, const std::vector<std::string>& names,
                      std::ostream& err) {
  for (const std::string& name : names) {
    if (absl::StatusOr<v1::ServerRef> ref = config::ParseServerName(name); !ref.ok()) {
      ReportError(verb, ref.status(), err);
      return false;
    }
  }
  return true;
}

bool CheckOutput(std::string_view verb, const std::string& output,
                 const std::vector<std::string>& allowed, std::ostream& err) {
  if (std::find(allowed.begin(), allowed.end(), output) != allowed.end()) return true;
  err << "fleetctl " << verb << ": flag -o/--output: '" << output << "' is not one of "
      << absl::StrJoin(allowed, ", ") << "\n";
  return false;
}

}  // namespace fleet::cli
