#include "common/base/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace fleet {

absl::Status ErrnoToStatus(int err, std::string_view what) {
  const std::string message = absl::StrCat(std::string(what), ": ", std::strerror(err));
  switch (err) {
    case 0:
      return absl::OkStatus();
    case ENOENT:
    case ENOTDIR:
    case ESRCH:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EINVAL:
    case ENAMETOOLONG:
    case EISDIR:
    case ELOOP:
      return absl::InvalidArgumentError(message);
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
      return absl::UnavailableError(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace fleet
