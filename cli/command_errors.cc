#include "cli/command_errors.h"

#include <ostream>

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

}  // namespace fleet::cli
