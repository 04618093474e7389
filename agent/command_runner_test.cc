#include "agent/command_runner.h"

#include <sys/prctl.h>
#include <sys/stat.h>

#include <cstdlib>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/proc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> BaseEnv() { return {{"PATH", "/usr/bin:/bin"}}; }

TEST(PosixCommandRunner, RunsArgvWithTheGivenEnvironmentOnly) {
  PosixCommandRunner runner;
  auto env = BaseEnv();
  env["FLEET_PROBE_VALUE"] = "a b;$(id)";
  auto r = runner.Run(
      {.argv = {"sh", "-c", "printf '%s|%s' \"$FLEET_PROBE_VALUE\" \"$HOME\""}, .env = env});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  // The value arrives verbatim, and nothing of the agent's own environment leaks in.
  EXPECT_EQ(r->output, "a b;$(id)|");
}

TEST(PosixCommandRunner, ReportsExitCodeSignalAndMissingProgram) {
  PosixCommandRunner runner;
  auto failed = runner.Run({.argv = {"sh", "-c", "echo oops >&2; exit 3"}, .env = BaseEnv()});
  ASSERT_TRUE(failed.ok());
  EXPECT_TRUE(failed->exited);
  EXPECT_EQ(failed->exit_code, 3);
  EXPECT_EQ(failed->output, "oops\n");

  auto killed = runner.Run({.argv = {"sh", "-c", "kill -9 $$"}, .env = BaseEnv()});
  ASSERT_TRUE(killed.ok());
  EXPECT_FALSE(killed->exited);
  EXPECT_EQ(killed->signal, 9);

  auto missing = runner.Run({.argv = {"no-such-tool-here"}, .env = BaseEnv()});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(PosixCommandRunner, KeepsOnlyTheTailOfLongOutput) {
  PosixCommandRunner runner(/*max_output=*/1024);
  auto r = runner.Run(
      {.argv = {"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done"},
       .env = BaseEnv()});
  ASSERT_TRUE(r.ok());
  EXPECT_LE(r->output.size(), 1024u);
  EXPECT_GT(r->output_bytes, 10000);
  EXPECT_THAT(r->output, HasSubstr("line1999\n"));
  EXPECT_EQ(r->output.find("line0\n"), std::string::npos);
}

TEST(PosixCommandRunner, TimeoutKillsTheWholeGroup) {
  PosixCommandRunner runner;
  fleet::testing::TempDir dir;
  // The child starts a grandchild that would outlive it; both must be gone after the timeout.
  auto r = runner.Run({.argv = {"sh", "-c", "sleep 30 & echo $! > grandchild; wait"},
                       .env = BaseEnv(),
                       .cwd = dir.path(),
                       // Long enough for a loaded machine's shell to write the pid file first.
                       .timeout = absl::Seconds(2)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->ok());
  const std::string pid = fleet::testing::ReadFile(dir.Join("grandchild"));
  ASSERT_FALSE(pid.empty());
  // kill(pid, 0) fails once the grandchild is gone (it was killed with the group and reaped by
  // init; a zombie would still answer, so check its /proc state instead).
  // A SIGKILLed process still runs its exit path for a moment: wait (bounded) for it to be gone.
  const std::string proc_stat = "/proc/" + pid.substr(0, pid.size() - 1) + "/stat";
  std::string stat = fleet::testing::ReadFile(proc_stat);
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       !stat.empty() && stat.find(") Z ") == std::string::npos && absl::Now() < deadline;
       stat = fleet::testing::ReadFile(proc_stat)) {
    absl::SleepFor(absl::Milliseconds(5));  // a poll interval, bounded by the deadline
  }
  EXPECT_TRUE(stat.empty() || stat.find(") Z ") != std::string::npos) << stat;
}

TEST(PosixCommandRunner, WhatIsLeftOfTheGroupIsKilledAndReapedWithTheProgram) {
  // As in the agent: orphans of the group become this process's children, its to reap.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  PosixCommandRunner runner;
  auto r =
      runner.Run({.argv = {"sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"}, .env = BaseEnv()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  const pid_t grandchild = static_cast<pid_t>(std::atoi(r->output.c_str()));
  ASSERT_GT(grandchild, 0);
  // Killed with the group and reaped before Run returned: no process, not even a zombie.
  EXPECT_FALSE(ReadProcStat(grandchild).has_value()) << "grandchild " << grandchild;
}

TEST(PosixCommandRunner, RunsInTheGivenDirectory) {
  PosixCommandRunner runner;
  fleet::testing::TempDir dir;
  auto r = runner.Run({.argv = {"pwd"}, .env = BaseEnv(), .cwd = dir.path()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->output, dir.path() + "\n");
}

TEST(FindExecutable, SearchesThePathInOrderAndSkipsDirectories) {
  fleet::testing::TempDir dir;
  dir.WriteFile("a/tool/.keep", "");  // a directory named like the tool
  dir.WriteFile("b/tool", "#!/bin/sh\n");
  chmod(dir.Join("b/tool").c_str(), 0755);
  EXPECT_EQ(FindExecutable("tool", dir.Join("a") + ":" + dir.Join("b")), dir.Join("b/tool"));
  EXPECT_EQ(FindExecutable("tool", dir.Join("a")), "");
}

}  // namespace
}  // namespace fleet::agent
