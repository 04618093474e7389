// Commands for a remote host, as the SSH layer sends them. An SSH server does not take an argv: it
// takes one string and hands it to the remote user's login shell (`$SHELL -c STRING`). RemoteQuote
// is the one place that turns an argv into that string, quoting each argument so that it reaches
// the program verbatim, whatever it holds (spaces, quotes, `;`, `$(...)`, backticks, newlines,
// globs, a leading `-`). It assumes a POSIX shell at the other end (Proxmox's root has bash);
// csh-family login shells are not supported.
//
// PctExecArgv and PctPushArgv build the Proxmox `pct` command lines that reach into a container
// (validated CTID, options before `--`), to be quoted by RemoteQuote like any other argv.
//
// CommandRunner is the seam the daemon holds: SshSession is the real one, tests use fakes.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fleet::daemon {

// `arg` as one word of a POSIX shell command line: unchanged when it is made only of characters
// that no shell treats specially (letters, digits, `_@+:,./-`), else wrapped in single quotes,
// each `'` inside written as `'\''`; the empty string is `''`. InvalidArgument for a NUL byte,
// which no argv element can hold.
absl::StatusOr<std::string> ShellQuote(std::string_view arg);

// The argv as one command string for the remote shell: the ShellQuote of each element, joined by
// spaces. InvalidArgument for an empty argv or an element with a NUL byte.
absl::StatusOr<std::string> RemoteQuote(const std::vector<std::string>& argv);

// OK when `ctid` is a Proxmox container id: decimal digits, no leading zero, 100..999999999
// (what `pct` accepts). InvalidArgument naming the value otherwise.
absl::Status ValidateCtid(std::string_view ctid);

// {"pct", "exec", CTID, "--keep-env", "0"|"1", "--", argv...}. `--keep-env` is always explicit:
// its default changes with Proxmox VE 9 (from 1 to 0), and the agent must not depend on which
// release the host runs. pct passes the words after `--` to the container's program as they are
// (no shell inside the container). InvalidArgument for a bad CTID or an empty argv.
absl::StatusOr<std::vector<std::string>> PctExecArgv(std::string_view ctid,
                                                     const std::vector<std::string>& argv,
                                                     bool keep_env);

// {"pct", "push", CTID, SRC, DST[, "--perms", MODE]}: copies the host's file SRC to DST inside
// the container, with the octal MODE when given. Both paths must be absolute (pct parses its
// options anywhere on the line, so a path that starts with `-` could be taken for one; an
// absolute path never does). InvalidArgument otherwise, or for a MODE that is not octal.
absl::StatusOr<std::vector<std::string>> PctPushArgv(std::string_view ctid, std::string_view src,
                                                     std::string_view dst,
                                                     std::string_view perms = "");

// What a remote command did. Output is captured up to a bound per stream: the last bytes are
// kept (the end of a log says why it failed), and the flags say that the start was dropped.
struct CommandResult {
  int exit_status = -1;     // -1 when it was killed by a signal (exit_signal names it)
  std::string exit_signal;  // "KILL", "SEGV", ... (no "SIG"); empty when it exited
  std::string out;          // stdout (its last bytes when out_truncated)
  std::string err;          // stderr (its last bytes when err_truncated)
  bool out_truncated = false;
  bool err_truncated = false;
};

// Runs argv on one host. Implementations say whether they are thread-safe.
class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs argv to completion with `stdin_data` on its stdin (then EOF). A non-zero exit is a
  // result, not an error; errors are about getting there: Unavailable (connection lost),
  // DeadlineExceeded (still running after `timeout`; it is sent SIGKILL), InvalidArgument (argv).
  virtual absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                                            std::string_view stdin_data,
                                            absl::Duration timeout) = 0;
};

}  // namespace fleet::daemon
