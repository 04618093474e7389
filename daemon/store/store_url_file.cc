#include "daemon/store/store_url_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/string_view.h"
#include "daemon/store/fleet_store.h"

namespace fleet::daemon {

absl::StatusOr<std::string> ReadStoreUrlFile(const std::string& path) {
  // O_NOFOLLOW: the mode checked is the file's own, not a link's target chosen by someone else.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    const std::string what = absl::StrCat("store file ", path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == ELOOP) return absl::PermissionDeniedError(absl::StrCat(what, " (a symlink)"));
    return absl::PermissionDeniedError(what);
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat("store file ", path, ": not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrFormat("store file %s: mode %04o; it holds the store's URL and password, so it "
                        "must be 0600 or stricter (chmod 600 %s)",
                        path, st.st_mode & 07777, path));
  }
  std::string content;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::PermissionDeniedError(
          absl::StrCat("store file ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    content.append(buf, static_cast<size_t>(n));
    if (content.size() > 64 * 1024) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat("store file ", path, ": too large for a URL"));
    }
  }
  close(fd);
  std::string url(absl::StripAsciiWhitespace(content));
  if (!IsPostgresTarget(url) || url.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store file ", path, ": expected one postgres:// or postgresql:// URL and nothing else"));
  }
  return url;
}

}  // namespace fleet::daemon
