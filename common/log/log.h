// The logging layer of fleetd and fleet-agent: one named spdlog logger per component ("agent",
// "store", "gpu", "daemon", "links", "remediation", "ssh", "diagnosis"), all writing one line per
// event through one sink:
//   stderr, not under journald:  2026-12-02T03:40:10.123Z info agent: serving agent.proto on ...
//   stderr, under journald:      <6>info agent: serving agent.proto on ...
//   --log-file (size-rotated):   2026-12-02T03:40:10.123Z info agent: serving agent.proto on ...
// Under journald (JOURNAL_STREAM names the stream's device:inode, as systemd sets it for a
// service's stderr) journald stamps each line itself, so the line carries no timestamp; its
// "<N>" prefix is the syslog priority, which journald takes and strips. Timestamps are ISO-8601
// UTC. Lines about one server carry its name and attempt as fields (log_fields.h).
//
// spdlog and fmt are used header-only everywhere (fleet::spdlog, top CMakeLists.txt): the static
// agent can link no shared library, and one binary must not mix the two forms.
//
// Thread safety: Get() and the loggers are safe from any thread. InitLogging() replaces the
// loggers' sink and level: call it from main() before any other thread logs.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/formatters.h"
#include "common/log/log_fields.h"
#include "spdlog/spdlog.h"

namespace fleet::log {

enum class Component { kAgent, kStore, kGpu, kDaemon, kLinks, kRemediation, kSsh, kDiagnosis };

// The logger of `component`, also in spdlog's registry under its name. Before InitLogging it
// writes to stderr at level info.
spdlog::logger& Get(Component component);

// The logger's name: "agent", "store", ...
const char* ComponentName(Component component);

struct LogOptions {
  spdlog::level::level_enum level = spdlog::level::info;
  // Where the lines go: this file, rotated by size; empty: `stream_fd`.
  std::string file;
  // The file is rotated when a line would take it past this many bytes: FILE becomes FILE's
  // first rotated copy (spdlog's names: agent.log -> agent.1.log -> agent.2.log ...).
  int64_t max_file_bytes = int64_t{10} << 20;
  // Rotated copies kept besides the current file (the oldest is removed).
  int64_t max_files = 3;
  // With `file`: the process's stdout and stderr are pointed at the current file too, again after
  // each rotation, so that what others write there (gRPC, an abort message) lands beside the log
  // lines (fleet-agent --detach).
  bool capture_stdio = false;
  // Without `file`: the stream the lines are written to, one write(2) per line.
  int stream_fd = STDERR_FILENO;
};

// trace|debug|info|warn|error|off (--log-level); InvalidArgument naming the choices otherwise.
absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view text);

// Whether `fd` is the stream journald reads: $JOURNAL_STREAM is "DEVICE:INODE" of it.
bool IsJournalStream(int fd);

// Points every component's logger at the sink `options` names, at its level. Files (the log and
// its rotated copies) are 0600. InvalidArgument for bad options or a file that cannot be opened;
// the loggers are unchanged then.
absl::Status InitLogging(const LogOptions& options);

}  // namespace fleet::log
