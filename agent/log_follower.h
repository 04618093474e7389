// LogFollower: follows one log file by its path, from an offset, and hands every byte to a sink
// once, in order: appends, partial lines, rotation (the path renamed away and a new file created:
// the rest of the old file is read first), truncation in place (copytruncate: reading restarts at
// 0), deletion and re-creation, and a file that does not exist yet. inotify (on the file and on its
// directory) only says when to look: every Poll() re-checks the path with stat and reads what is
// there, so a coalesced or missed event, or an inotify queue overflow, loses nothing. Reads in
// fixed chunks: memory is bounded whatever the file or line size.
//
// Not thread-safe: one thread calls Poll() when fd() is readable (and may call it at any other
// time too: it is idempotent when nothing changed).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fleet::agent {

class LogFollower {
 public:
  enum class RestartReason {
    kRotated,    // the path now names another file; the old one was read to its end first
    kTruncated,  // the file shrank below what was read; reading restarts at 0
    kRecreated,  // the file was deleted and a new one appeared at the path
  };

  class Sink {
   public:
    virtual ~Sink() = default;
    // Bytes in file order; each byte of each file exactly once.
    virtual void OnData(std::string_view bytes) = 0;
    // The next OnData bytes come from the start of another (or a truncated) file.
    // `lost_bytes`: bytes that were never read because a truncation dropped them (0 otherwise).
    virtual void OnRestart(RestartReason reason, int64_t lost_bytes) {}
  };

  struct Options {
    size_t chunk_bytes = 64 << 10;
  };

  // Follows `path` from `offset` of the file there now (0: from its start). The file and even its
  // directory may not exist yet. `sink` must outlive the follower.
  static absl::StatusOr<std::unique_ptr<LogFollower>> Create(std::string path, int64_t offset,
                                                             Sink* sink, Options options);
  ~LogFollower();
  LogFollower(const LogFollower&) = delete;
  LogFollower& operator=(const LogFollower&) = delete;

  // The inotify descriptor (non-blocking, close-on-exec) to wait on for POLLIN.
  int fd() const;
  // Drains pending inotify events, re-checks the path, and delivers every byte available now.
  // Errors are I/O errors reading the file (the follower stays usable).
  absl::Status Poll();

  const std::string& path() const;
  // Bytes consumed of the file being read.
  int64_t offset() const;
  // Total bytes delivered to the sink since Create().
  int64_t delivered() const;

 private:
  class Impl;
  explicit LogFollower(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fleet::agent
