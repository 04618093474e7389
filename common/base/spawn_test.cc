#include "common/base/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/base/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Tool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string found =
      fleet::testing::FindOnPath(name, path != nullptr && *path ? path : "/usr/bin:/bin");
  EXPECT_FALSE(found.empty()) << name << " is not on the PATH";
  return found;
}

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe MakePipe() {
  int fds[2];
  EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0) << std::strerror(errno);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string ReadToEof(int fd) {
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

// The child's exit code; -1 when a signal ended it.
int WaitExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      ADD_FAILURE() << "waitpid " << pid << ": " << std::strerror(errno);
      return -1;
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Ran {
  std::string output;
  int exit_code = -1;
};

// Runs `spec` to its end with stdout on a pipe of ours (stderr too, unless the spec says where),
// and returns what came through it.
Ran RunCapturing(SpawnSpec spec) {
  Pipe pipe = MakePipe();
  spec.out = SpawnStream::Fd(pipe.write.get());
  if (spec.err.kind == SpawnStream::Kind::kInherit) spec.err = SpawnStream::Fd(pipe.write.get());
  absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  pipe.write.Reset();
  if (!pid.ok()) {
    ADD_FAILURE() << pid.status();
    return {};
  }
  Ran ran;
  ran.output = ReadToEof(pipe.read.get());
  ran.exit_code = WaitExit(*pid);
  return ran;
}

// What `cat` read from the stdin given.
Ran Cat(SpawnStream in) {
  SpawnSpec spec;
  spec.argv = {Tool("cat")};
  spec.in = std::move(in);
  return RunCapturing(spec);
}

// A bit of a /proc/PID/status signal set line ("SigBlk:\t0000000000000200").
bool HasSignal(const std::string& status_lines, const std::string& key, int sig) {
  const size_t at = status_lines.find(key + ":\t");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << status_lines;
    return false;
  }
  const size_t start = at + key.size() + 2;
  uint64_t mask = 0;
  if (!absl::SimpleHexAtoi(status_lines.substr(start, status_lines.find('\n', start) - start),
                           &mask)) {
    ADD_FAILURE() << "bad " << key << " in " << status_lines;
    return false;
  }
  return (mask >> (sig - 1)) & 1;
}

TEST(SpawnProcess, NullStdinIsDevNullEvenWhenOursIsAPipe) {
  // Our stdin becomes a pipe for the test (ctest may already give us /dev/null), so that an
  // inherited stdin and /dev/null tell apart.
  Pipe ours = MakePipe();
  UniqueFd saved(dup(STDIN_FILENO));
  ASSERT_TRUE(saved.valid());
  ASSERT_EQ(dup2(ours.read.get(), STDIN_FILENO), STDIN_FILENO);
  absl::Cleanup restore = [&] { dup2(saved.get(), STDIN_FILENO); };

  SpawnSpec spec;
  spec.argv = {Tool("readlink"), "/proc/self/fd/0"};
  spec.in = SpawnStream::Null();
  EXPECT_EQ(RunCapturing(spec).output, "/dev/null\n");
  spec.in = SpawnStream::Inherit();
  EXPECT_THAT(RunCapturing(spec).output, StartsWith("pipe:"));

  // And it reads end of file at once, not what waits in our stdin.
  ASSERT_EQ(write(ours.write.get(), "ours\n", 5), 5);
  ours.write.Reset();
  const Ran ran = Cat(SpawnStream::Null());
  EXPECT_EQ(ran.exit_code, 0);
  EXPECT_EQ(ran.output, "");
}

TEST(SpawnProcess, StdinReadsTheFileGiven) {
  fleet::testing::TempDir dir;
  dir.WriteFile("input", "line one\nline two\n");
  const Ran ran = Cat(SpawnStream::FileToRead(dir.Join("input")));
  EXPECT_EQ(ran.exit_code, 0);
  EXPECT_EQ(ran.output, "line one\nline two\n");
}

TEST(SpawnProcess, StdoutAndStderrReachTheDescriptorGiven) {
  SpawnSpec spec;
  spec.argv = {Tool("sh"), "-c", "echo out; echo err >&2; exit 3"};
  const Ran ran = RunCapturing(spec);
  EXPECT_EQ(ran.exit_code, 3);
  EXPECT_EQ(ran.output, "out\nerr\n");
}

TEST(SpawnProcess, StderrFollowsStdoutIntoAnAppendedFile) {
  fleet::testing::TempDir dir;
  dir.WriteFile("log", "before\n");
  SpawnSpec spec;
  spec.argv = {Tool("sh"), "-c", "echo out; echo err >&2"};
  spec.in = SpawnStream::Null();
  spec.out = SpawnStream::FileToAppend(dir.Join("log"));
  spec.err = SpawnStream::Stdout();
  absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(WaitExit(*pid), 0);
  EXPECT_EQ(fleet::testing::ReadFile(dir.Join("log")), "before\nout\nerr\n");

  // A missing file is created.
  spec.out = SpawnStream::FileToAppend(dir.Join("new.log"));
  pid = SpawnProcess(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(WaitExit(*pid), 0);
  EXPECT_EQ(fleet::testing::ReadFile(dir.Join("new.log")), "out\nerr\n");
}

TEST(SpawnProcess, WorkingDirectoryIsApplied) {
  fleet::testing::TempDir dir;
  SpawnSpec spec;
  spec.argv = {Tool("readlink"), "/proc/self/cwd"};
  spec.cwd = dir.path();
  EXPECT_EQ(RunCapturing(spec).output, std::filesystem::canonical(dir.path()).string() + "\n");

  spec.cwd = dir.Join("missing");
  absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound) << pid.status();
}

TEST(SpawnProcess, ProgramIsExecutedUnderTheArgv0Given) {
  SpawnSpec spec;
  spec.program = Tool("sh");
  spec.argv = {"a-name-of-its-own", "-c", "echo \"$0\""};
  EXPECT_EQ(RunCapturing(spec).output, "a-name-of-its-own\n");
}

TEST(SpawnProcess, EnvironmentIsTheOneGivenOrOurs) {
  SpawnSpec spec;
  spec.argv = {Tool("env")};
  spec.env = std::map<std::string, std::string>{{"FLEET_SPAWN_A", "1"}, {"FLEET_SPAWN_B", "x y"}};
  EXPECT_EQ(RunCapturing(spec).output, "FLEET_SPAWN_A=1\nFLEET_SPAWN_B=x y\n");

  ASSERT_EQ(setenv("FLEET_SPAWN_INHERITED", "yes", 1), 0);
  absl::Cleanup unset = [] { unsetenv("FLEET_SPAWN_INHERITED"); };
  spec.env.reset();
  EXPECT_THAT(RunCapturing(spec).output, HasSubstr("\nFLEET_SPAWN_INHERITED=yes\n"));
}

// The child blocks reading a pipe of ours while its group and session are read, then ends when
// the pipe is closed.
struct Ids {
  pid_t pid = 0;
  pid_t pgid = -1;
  pid_t sid = -1;
};

Ids IdsOfChildIn(SpawnGroup group) {
  Pipe hold = MakePipe();
  SpawnSpec spec;
  spec.argv = {Tool("cat")};
  spec.in = SpawnStream::Fd(hold.read.get());
  spec.out = SpawnStream::Null();
  spec.group = group;
  absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  if (!pid.ok()) {
    ADD_FAILURE() << pid.status();
    return {};
  }
  Ids ids{*pid, getpgid(*pid), getsid(*pid)};
  hold.write.Reset();
  EXPECT_EQ(WaitExit(*pid), 0);
  return ids;
}

TEST(SpawnProcess, OwnGroupLeadsANewGroupInOurSession) {
  const Ids ids = IdsOfChildIn(SpawnGroup::kOwnGroup);
  EXPECT_EQ(ids.pgid, ids.pid);
  EXPECT_EQ(ids.sid, getsid(0));
}

TEST(SpawnProcess, OwnSessionLeadsANewSession) {
  const Ids ids = IdsOfChildIn(SpawnGroup::kOwnSession);
  EXPECT_EQ(ids.sid, ids.pid);
  EXPECT_EQ(ids.pgid, ids.pid);
}

TEST(SpawnProcess, InheritedGroupIsOurs) {
  const Ids ids = IdsOfChildIn(SpawnGroup::kInherit);
  EXPECT_EQ(ids.pgid, getpgrp());
  EXPECT_EQ(ids.sid, getsid(0));
}

TEST(SpawnProcess, ResetSignalsUnblocksAndUnignoresWhatWeSet) {
  sigset_t usr1, old_mask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &old_mask), 0);
  struct sigaction ignore = {}, old_action = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGUSR2, &ignore, &old_action), 0);
  absl::Cleanup restore = [&] {
    sigaction(SIGUSR2, &old_action, nullptr);
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  };

  SpawnSpec spec;
  spec.argv = {Tool("grep"), "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  spec.reset_signals = true;
  const std::string reset = RunCapturing(spec).output;
  EXPECT_FALSE(HasSignal(reset, "SigBlk", SIGUSR1)) << reset;
  EXPECT_FALSE(HasSignal(reset, "SigIgn", SIGUSR2)) << reset;

  // Without the reset the child keeps both (so the lines above do show them).
  spec.reset_signals = false;
  const std::string kept = RunCapturing(spec).output;
  EXPECT_TRUE(HasSignal(kept, "SigBlk", SIGUSR1)) << kept;
  EXPECT_TRUE(HasSignal(kept, "SigIgn", SIGUSR2)) << kept;
}

TEST(SpawnProcess, ABareNameIsLookedForInPathOnlyWhenAsked) {
  SpawnSpec spec;
  spec.argv = {"true"};
  spec.cwd = "/";
  // As given: "true" is a file in the working directory, and there is none.
  EXPECT_EQ(SpawnProcess(spec).status().code(), absl::StatusCode::kNotFound);
  spec.search_path = true;
  absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(WaitExit(*pid), 0);
  spec.argv = {"fleet-spawn-no-such-program-on-path"};
  EXPECT_EQ(SpawnProcess(spec).status().code(), absl::StatusCode::kNotFound);
}

TEST(SpawnProcess, CloseOtherFdsLeavesTheChildOnlyItsStreams) {
  // A descriptor of ours that is not close-on-exec (dup2 clears the flag), as an accepted socket
  // may be; high enough that the child's own descriptors are not taken for it.
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  ASSERT_EQ(dup2(write_end.get(), 200), 200);
  UniqueFd leaked(200);
  SpawnSpec spec;
  spec.argv = {Tool("ls"), "/proc/self/fd"};
  Ran inherited = RunCapturing(spec);
  EXPECT_THAT(inherited.output, HasSubstr("\n200\n"));
  spec.close_other_fds = true;
  Ran closed = RunCapturing(spec);
  EXPECT_EQ(closed.exit_code, 0);
  EXPECT_THAT(closed.output, StartsWith("0\n1\n2\n"));
  EXPECT_THAT(closed.output, ::testing::Not(HasSubstr("200")));
}

TEST(SpawnProcess, MissingProgramIsNotFoundAndNamed) {
  SpawnSpec spec;
  spec.argv = {"/nonexistent/fleet-spawn-no-such-program", "--version"};
  absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound) << pid.status();
  EXPECT_THAT(std::string(pid.status().message()),
              HasSubstr("spawn /nonexistent/fleet-spawn-no-such-program"));

  // A missing stdin file fails the spawn the same way, naming the program.
  spec.argv = {Tool("cat")};
  spec.in = SpawnStream::FileToRead("/nonexistent/fleet-spawn-input");
  pid = SpawnProcess(spec);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound) << pid.status();
  EXPECT_THAT(std::string(pid.status().message()), HasSubstr("spawn " + Tool("cat")));
}

TEST(SpawnProcess, SpecsThatCannotBeSetUpAreInvalid) {
  SpawnSpec empty;
  EXPECT_EQ(SpawnProcess(empty).status().code(), absl::StatusCode::kInvalidArgument);

  SpawnSpec spec;
  spec.argv = {Tool("cat")};
  spec.in = SpawnStream::Fd(-1);
  EXPECT_EQ(SpawnProcess(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.in = SpawnStream::Null();
  spec.out = SpawnStream::Stdout();
  EXPECT_EQ(SpawnProcess(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fleet
