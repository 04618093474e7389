#include "daemon/ssh/remote_command.h"

#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Arguments that a naive `join with spaces` would let the shell rewrite or act on.
std::vector<std::string> HostileArguments(const std::string& marker_dir) {
  return {"plain",
          "",
          "two words",
          "  leading and trailing  ",
          "it's",
          "''",
          "\"double\"",
          "back\\slash\\",
          "a; touch " + marker_dir + "/semicolon",
          "$(touch " + marker_dir + "/dollar)",
          "`touch " + marker_dir + "/backtick`",
          "&& touch " + marker_dir + "/and",
          "| touch " + marker_dir + "/pipe",
          "line one\nline two\n",
          "tab\there",
          "*",
          "/*",
          "?",
          "[a-z]",
          "~",
          "~root",
          "-rf",
          "--",
          "-",
          "A=b",
          "$HOME",
          "${HOME}",
          "!event",
          "#comment",
          "{a,b}",
          "> " + marker_dir + "/redirect",
          "\x01\x7f\xff",
          "caf\xc3\xa9"};
}

// Runs `printf '%s\0' ARGS` through `shell -c` the way sshd would, and splits what it printed.
std::vector<std::string> EchoThroughShell(const std::string& shell,
                                          const std::vector<std::string>& args,
                                          const fleet::testing::TempDir& dir) {
  std::vector<std::string> argv = {"printf", "%s\\0"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::string> command = RemoteQuote(argv);
  EXPECT_TRUE(command.ok()) << command.status();
  const std::string output_path = dir.Join("output");
  unlink(output_path.c_str());
  fleet::testing::RunOptions options;
  options.output_path = output_path;
  options.cwd = dir.path();
  absl::StatusOr<fleet::testing::RunResult> result =
      fleet::testing::Run({shell, "-c", *command}, options);
  EXPECT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->exited && result->exit_code == 0) << result->output;
  std::vector<std::string> printed = absl::StrSplit(result->output, '\0');
  EXPECT_EQ(printed.back(), "");  // after the last terminator
  printed.pop_back();
  return printed;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(ShellQuote, LeavesPlainWordsAlone) {
  EXPECT_EQ(*ShellQuote("pct"), "pct");
  EXPECT_EQ(*ShellQuote("--keep-env"), "--keep-env");
  EXPECT_EQ(*ShellQuote("/usr/local/bin/fleet-agent"), "/usr/local/bin/fleet-agent");
  EXPECT_EQ(*ShellQuote("user@host:1,2.3+4_5"), "user@host:1,2.3+4_5");
}

TEST(ShellQuote, WrapsEverythingElseInSingleQuotes) {
  EXPECT_EQ(*ShellQuote(""), "''");
  EXPECT_EQ(*ShellQuote("two words"), "'two words'");
  EXPECT_EQ(*ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(*ShellQuote("'"), "''\\'''");
  EXPECT_EQ(*ShellQuote("A=b"), "'A=b'");
  EXPECT_EQ(*ShellQuote("~"), "'~'");
  EXPECT_EQ(*ShellQuote("$(x)"), "'$(x)'");
  EXPECT_EQ(*ShellQuote("a\nb"), "'a\nb'");
}

TEST(ShellQuote, RefusesNulBytes) {
  absl::StatusOr<std::string> quoted = ShellQuote(std::string("a\0b", 3));
  ASSERT_FALSE(quoted.ok());
  EXPECT_EQ(quoted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(quoted.status().message()), HasSubstr("NUL"));
}

TEST(RemoteQuote, JoinsQuotedWords) {
  EXPECT_EQ(*RemoteQuote({"pct", "exec", "200", "--", "sh", "-c", "echo $HOME"}),
            "pct exec 200 -- sh -c 'echo $HOME'");
}

TEST(RemoteQuote, RefusesEmptyArgvAndNulBytes) {
  EXPECT_EQ(RemoteQuote({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RemoteQuote({"echo", std::string("\0", 1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The property that matters: through a real POSIX shell (sshd runs `$SHELL -c COMMAND`), every
// argument arrives as it was, and nothing in one is executed.
TEST(RemoteQuote, HostileArgumentsSurviveRealShellsVerbatim) {
  for (const std::string shell : {"/bin/sh", "/bin/bash", "/bin/dash"}) {
    if (!Exists(shell)) continue;
    SCOPED_TRACE(shell);
    fleet::testing::TempDir dir;
    const std::vector<std::string> args = HostileArguments(dir.path());
    EXPECT_EQ(EchoThroughShell(shell, args, dir), args);
    for (const char* marker : {"semicolon", "dollar", "backtick", "and", "pipe", "redirect"}) {
      EXPECT_FALSE(Exists(dir.Join(marker))) << marker << " was created";
    }
  }
}

TEST(ValidateCtid, AcceptsProxmoxRange) {
  EXPECT_TRUE(ValidateCtid("100").ok());
  EXPECT_TRUE(ValidateCtid("200").ok());
  EXPECT_TRUE(ValidateCtid("999999999").ok());
}

TEST(ValidateCtid, RefusesEverythingElse) {
  for (const char* bad : {"", "99", "0", "0100", "1000000000", "99999999999999999999", "12a",
                          "-100", "+100", " 100", "100 ", "sim", "100;reboot"}) {
    absl::Status status = ValidateCtid(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
  }
  EXPECT_THAT(std::string(ValidateCtid("12a").message()), HasSubstr("\"12a\""));
}

TEST(PctExecArgv, PutsOptionsBeforeTheSeparator) {
  EXPECT_THAT(
      *PctExecArgv("200", {"fleet-agent", "--version"}, false),
      ElementsAre("pct", "exec", "200", "--keep-env", "0", "--", "fleet-agent", "--version"));
  EXPECT_THAT(*PctExecArgv("200", {"env"}, true),
              ElementsAre("pct", "exec", "200", "--keep-env", "1", "--", "env"));
}

TEST(PctExecArgv, RefusesBadCtidAndEmptyArgv) {
  EXPECT_EQ(PctExecArgv("20", {"true"}, false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PctExecArgv("200", {}, false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PctExecArgv, QuotesAsOneRemoteCommand) {
  absl::StatusOr<std::vector<std::string>> argv =
      PctExecArgv("200", {"sh", "-c", "echo 'hi'; exit 3"}, false);
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(*RemoteQuote(*argv), "pct exec 200 --keep-env 0 -- sh -c 'echo '\\''hi'\\''; exit 3'");
}

TEST(PctPushArgv, BuildsCommand) {
  EXPECT_THAT(
      *PctPushArgv("300", "/var/lib/fleet/agent", "/usr/local/bin/fleet-agent"),
      ElementsAre("pct", "push", "300", "/var/lib/fleet/agent", "/usr/local/bin/fleet-agent"));
}

TEST(PctPushArgv, PassesAnOctalModeAndRefusesAnyOther) {
  EXPECT_THAT(*PctPushArgv("300", "/a", "/b", "0600"),
              ElementsAre("pct", "push", "300", "/a", "/b", "--perms", "0600"));
  EXPECT_EQ(PctPushArgv("300", "/a", "/b", "0x1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PctPushArgv("300", "/a", "/b", "07777").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PctPushArgv, RefusesRelativePathsAndBadCtid) {
  EXPECT_EQ(PctPushArgv("300", "agent", "/x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PctPushArgv("300", "/x", "-rf").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PctPushArgv("300", "/x", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PctPushArgv("abc", "/x", "/y").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fleet::daemon
