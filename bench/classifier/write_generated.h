// WriteGenerated: writes a generated benchmark log (gen_startup_log, gen_stems_log) to a file or
// standard output, a block at a time, in chunks of about 1 MiB.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"
#include "common/base/json_text.h"

namespace fleet::bench {

inline absl::Status WriteAllTo(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("output ", path, ": write"));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Appends `generator`'s blocks (AppendBlock(std::string*), bytes()) until it has made `target`
// bytes, and writes them to `output` ("-": standard output), created 0644 or truncated.
template <typename Generator>
absl::Status WriteGenerated(Generator& generator, int64_t target, const std::string& output) {
  constexpr size_t kWriteBytes = 1 << 20;
  int fd = STDOUT_FILENO;
  if (output != "-") {
    fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("output ", output, ": open"));
  }
  std::string buffer;
  buffer.reserve(2 * kWriteBytes);
  absl::Status status;
  while (status.ok() && generator.bytes() < target) {
    generator.AppendBlock(&buffer);
    if (buffer.size() >= kWriteBytes || generator.bytes() >= target) {
      status = WriteAllTo(fd, buffer, output);
      buffer.clear();
    }
  }
  if (fd != STDOUT_FILENO && close(fd) != 0 && status.ok()) {
    status = ErrnoToStatus(errno, absl::StrCat("output ", output, ": close"));
  }
  return status;
}

// The manifest's "first_failure": {kind, class, root_cause_line}, or null.
template <typename OptionalFailure>
Json FirstFailureJson(const OptionalFailure& f) {
  if (!f) return Json(nullptr);
  Json j = Json::object();
  j["kind"] = f->kind;
  j["class"] = f->diagnosis_class;
  j["root_cause_line"] = f->root_cause_line;
  return j;
}

}  // namespace fleet::bench
