#include "common/diagnosis/log_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"

namespace fleet::diagnosis {

absl::StatusOr<Diagnosis> ClassifyFd(int fd, std::string_view name, const SignatureMatcher& matcher,
                                     const ClassifierOptions& options) {
  Classifier classifier(&matcher, options);
  auto buffer = std::make_unique<char[]>(kReadChunkBytes);
  while (true) {
    const ssize_t n = read(fd, buffer.get(), kReadChunkBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("log ", std::string(name), ": read"));
    }
    if (n == 0) break;
    classifier.AddBytes(std::string_view(buffer.get(), static_cast<size_t>(n)));
  }
  return classifier.Finish();
}

absl::StatusOr<Diagnosis> ClassifyFile(const std::string& path, const SignatureMatcher& matcher,
                                       const ClassifierOptions& options) {
  if (path == "-") return ClassifyFd(STDIN_FILENO, "(standard input)", matcher, options);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("log ", path, ": open"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("log ", path, ": is a directory"));
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return ClassifyFd(fd, path, matcher, options);
}

}  // namespace fleet::diagnosis
