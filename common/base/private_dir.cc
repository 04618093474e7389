#include "common/base/private_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"

namespace fleet {

absl::StatusOr<int> MakePrivateDir(const std::string& path) {
  const std::string what = absl::StrCat("state dir ", path);
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoToStatus(errno, what);
    std::error_code ec;
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) return ErrnoToStatus(ec.value(), absl::StrCat(what, ": parent"));
    // mkdir's mode goes through the umask, which can only narrow 0700; chmod below makes it exact.
    if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoToStatus(errno, what);
    if (chmod(path.c_str(), 0700) != 0) return ErrnoToStatus(errno, what);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": not a directory"));
  }
  const int mode = static_cast<int>(st.st_mode & 07777);
  if (mode == 0700) return -1;
  if (chmod(path.c_str(), 0700) != 0) return ErrnoToStatus(errno, absl::StrCat(what, ": chmod"));
  return mode;
}

}  // namespace fleet
