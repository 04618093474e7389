// The file that names fleetd's PostgreSQL record (fleetd --store-file FILE): its content is a
// postgres:// or postgresql:// URL, which may carry a password, so it is read from a file the
// owner alone can read (mode 0600 or stricter) and never passed in argv or written to a log.
//
// A pure function of the file system; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fleet::daemon {

// The URL in `path`, surrounding whitespace trimmed. PermissionDenied when the file is readable
// or writable by its group or others (or is not a regular file, or is a symlink); InvalidArgument
// when it holds no postgres:// or postgresql:// URL (the message never quotes the content);
// NotFound when it does not exist.
absl::StatusOr<std::string> ReadStoreUrlFile(const std::string& path);

}  // namespace fleet::daemon
