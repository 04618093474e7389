// SpawnProcess: the one posix_spawn setup for every child we start (agent commands and servers,
// fleetd's version probe, the simulator's and the tests' subprocesses). A SpawnSpec says what the
// child gets: argv and environment as vectors (never a shell string), each standard stream
// inherited, /dev/null, one of our descriptors or a file the child opens, a working directory, the
// process group or session it leads, and whether its signal dispositions and mask start clean.
// Every field's default is what a bare posix_spawn does (inherit), so a caller names each choice.
//
// Ownership: nothing here waits; the caller owns the child and reaps it. The caller also owns every
// descriptor it passes in and closes it when it likes (a pipe's write end right after the spawn).
// Our descriptors should be close-on-exec: the child gets one only as the stream a spec names,
// where dup2 clears the flag. Nothing is opened in the parent.
//
// Thread-safe: a spec is only read, and posix_spawn may be called from any thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet {

// What one standard stream of the child is.
struct SpawnStream {
  enum class Kind {
    kInherit,  // ours, as it is
    kNull,     // /dev/null, read-only for stdin, write-only for stdout and stderr
    kFd,       // dup2 of our descriptor `fd`
    kPath,     // `path` opened in the child with `flags` and `mode`
    kStdout,   // stderr only: the same open file as the child's stdout
  };

  static SpawnStream Inherit() { return {}; }
  static SpawnStream Null() { return {Kind::kNull}; }
  static SpawnStream Fd(int fd) { return {Kind::kFd, fd}; }
  // Opened for reading (a stdin).
  static SpawnStream FileToRead(std::string path);
  // Opened for appending, created with `mode` (before the umask) when missing.
  static SpawnStream FileToAppend(std::string path, mode_t mode = 0644);
  static SpawnStream Stdout() { return {Kind::kStdout}; }

  Kind kind = Kind::kInherit;
  int fd = -1;
  std::string path;
  int flags = 0;
  mode_t mode = 0;
};

// Which process group the child is in.
enum class SpawnGroup {
  kInherit,     // ours
  kOwnGroup,    // a new group it leads (setpgid(0, 0)), in our session
  kOwnSession,  // a new session and group it leads (setsid), with no controlling terminal
};

struct SpawnSpec {
  // The file executed; empty: argv[0]. As given unless `search_path`.
  std::string program;
  // A program without a slash is looked for in PATH, as a shell would (posix_spawnp): for tools
  // the user installs (openssl), never for our own binaries, which are named by path.
  bool search_path = false;
  // Every descriptor above stderr closed in the child, whether close-on-exec or not (a socket
  // accepted without SOCK_CLOEXEC, another thread's pipe between pipe() and fcntl()).
  bool close_other_fds = false;
  // argv[0] first; must not be empty.
  std::vector<std::string> argv;
  // The child's whole environment; unset: this process's (environ) at the time of the spawn.
  std::optional<std::map<std::string, std::string>> env;
  // Changed to in the child after its streams are opened (a relative path in a stream is ours);
  // empty: ours.
  std::string cwd;
  SpawnStream in;
  SpawnStream out;
  SpawnStream err;
  SpawnGroup group = SpawnGroup::kInherit;
  // Every signal at its default disposition and none blocked in the child, whatever this process
  // set for itself; false: the mask and ignored signals are inherited (as exec keeps them).
  bool reset_signals = false;
};

// Starts the child and returns its pid. Errors name the program: InvalidArgument for a spec that
// cannot be set up (empty argv, a bad descriptor, Stdout() for stdin or stdout), else posix_spawn's
// errno as "spawn PROGRAM: ..." (NotFound for a missing program, working directory or stream file,
// PermissionDenied, ...).
absl::StatusOr<pid_t> SpawnProcess(const SpawnSpec& spec);

}  // namespace fleet
