// The state directories of fleetd and the agent hold records with secrets in them (env values,
// keys): each is made owner-only (0700), and one found with a wider mode (made by an older
// version, or by hand) is narrowed when the program starts, which says so.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fleet {

// Creates `path` (and missing parents) and gives `path` itself mode 0700. Returns the mode it had
// before when it existed with another one (the caller logs the change), or -1 when it was created
// or already 0700. PermissionDenied/NotFound/... naming the directory when it cannot be done; a
// `path` that exists and is not a directory is FailedPrecondition.
absl::StatusOr<int> MakePrivateDir(const std::string& path);

}  // namespace fleet
