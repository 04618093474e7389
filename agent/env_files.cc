#include "agent/env_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"
#include "common/base/unique_fd.h"

namespace fleet::agent {
namespace {

absl::StatusOr<std::string> ReadValue(const std::string& name, const std::string& path) {
  const std::string what = absl::StrCat("env_from_file ", name, ": ", path);
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not an absolute path"));
  }
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return ErrnoToStatus(errno, what);
  struct stat st = {};
  if (fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, what);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": not a regular file"));
  }
  std::string value;
  char buf[4096];
  while (true) {
    const ssize_t got = read(fd.get(), buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, what);
    }
    if (got == 0) break;
    value.append(buf, static_cast<size_t>(got));
    if (value.size() > kMaxEnvFileBytes) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": larger than ", kMaxEnvFileBytes, " bytes"));
    }
  }
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (!value.empty() && value.back() == '\r') value.pop_back();
  if (value.find('\0') != std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": holds a NUL byte"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadEnvFiles(const fleet::v1::ServerSpec& spec) {
  std::map<std::string, std::string> out;
  for (const auto& [name, path] : spec.env_from_file()) {
    absl::StatusOr<std::string> value = ReadValue(name, path);
    if (!value.ok()) return value.status();
    out[name] = *std::move(value);
  }
  return out;
}

std::map<std::string, std::string> ServerEnv(const fleet::v1::ServerSpec& spec) {
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());
  if (!spec.env_from_file().empty()) {
    absl::StatusOr<std::map<std::string, std::string>> files = ReadEnvFiles(spec);
    if (files.ok()) {
      for (auto& [name, value] : *files) env[name] = std::move(value);
    }
  }
  return env;
}

}  // namespace fleet::agent
