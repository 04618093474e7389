// Translates errno into absl::Status once, at the edge: the code says what the caller should do
// (NotFound, PermissionDenied, Unavailable for transient conditions, ...), the message names the
// object and the operation: "log /x/y.log: open: No such file or directory".
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace fleet {

absl::Status ErrnoToStatus(int err, std::string_view what);

}  // namespace fleet
