// fleet-agent's logging flags on the real binary: --log-level (a bad one is a usage error),
// --log-file with --detach (the lines, at their level, in a 0600 file; the failure's lines shown
// to whoever ran it).
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPath[] = "/usr/bin:/bin";

testing::RunResult RunAgent(const testing::TempDir& dir, const std::vector<std::string>& flags) {
  // Bounded: an agent that serves where it should have refused is stopped (exit 124).
  std::vector<std::string> argv = {
      "timeout",         "20",       testing::BuildPath("agent/fleet-agent"), "--state-dir",
      dir.Join("state"), "--listen", "unix:" + dir.Join("agent.sock")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::RunOptions options;
  options.env = std::map<std::string, std::string>{{"PATH", kPath}};
  options.output_path = dir.Join("agent.out");
  absl::StatusOr<testing::RunResult> r = testing::Run(argv, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : testing::RunResult{};
}

// Stops the detached agent of `pid_file` (SIGTERM) and waits until it is gone.
void StopDetached(const std::string& pid_file) {
  std::ifstream in(pid_file);
  pid_t pid = 0;
  ASSERT_TRUE(in >> pid) << pid_file;
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 20000), 1) << "the agent did not stop";
  close(fd);
}

TEST(AgentLogFlags, AnUnknownLevelIsAUsageError) {
  testing::TempDir dir;
  const testing::RunResult r = RunAgent(dir, {"--log-level", "verbose"});
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("fleet-agent: --log-level: log level 'verbose' is not one of "
                                  "trace, debug, info, warn, error, off"));
  struct stat st;
  EXPECT_NE(stat(dir.Join("state").c_str(), &st), 0) << "it started before refusing";
}

TEST(AgentLogFlags, DetachedTheLinesGoToAPrivateFileAtTheirLevel) {
  testing::TempDir dir;
  const std::string log = dir.Join("agent.log");
  const testing::RunResult r =
      RunAgent(dir, {"--detach", "--log-file", log, "--pid-file", dir.Join("agent.pid")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  StopDetached(dir.Join("agent.pid"));
  const std::string text = testing::ReadFile(log);
  EXPECT_THAT(text, ContainsRegex("(^|\n)[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z info agent: serving "
                                  "agent.proto on unix:"));
  EXPECT_THAT(r.output, Not(HasSubstr("serving agent.proto")));
  struct stat st;
  ASSERT_EQ(stat(log.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Again at warn: the agent serves (the detach returns 0) and says nothing below a warning.
  testing::TempDir quiet;
  const std::string quiet_log = quiet.Join("agent.log");
  const testing::RunResult q = RunAgent(quiet, {"--detach", "--log-file", quiet_log, "--pid-file",
                                                quiet.Join("agent.pid"), "--log-level", "warn"});
  ASSERT_EQ(q.exit_code, 0) << q.output;
  StopDetached(quiet.Join("agent.pid"));
  EXPECT_THAT(testing::ReadFile(quiet_log), Not(HasSubstr("serving agent.proto")));
}

TEST(AgentLogFlags, ADetachedAgentThatFailsShowsItsLinesToWhoeverRanIt) {
  testing::TempDir dir;
  const std::string log = dir.Join("agent.log");
  const testing::RunResult r =
      RunAgent(dir, {"--detach", "--log-file", log, "--standalone", dir.Join("missing.textproto")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, ContainsRegex("Z error agent: .*missing.textproto"));
  EXPECT_THAT(r.output, HasSubstr("error agent: --detach: the agent exited before serving (log " +
                                  log + ")"));
  EXPECT_THAT(testing::ReadFile(log), ContainsRegex("Z error agent: .*missing.textproto"));
}

}  // namespace
}  // namespace fleet
