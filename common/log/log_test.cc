#include "common/log/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log/log_fields.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::log {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// Each test points the loggers at its own file; they go back to stderr afterwards.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("JOURNAL_STREAM"); }
  void TearDown() override {
    unsetenv("JOURNAL_STREAM");
    ASSERT_TRUE(InitLogging({}).ok());
    if (fd_ >= 0) close(fd_);
  }

  // The loggers write to a fresh file, whose path is returned.
  std::string ToFile(spdlog::level::level_enum level) {
    const std::string path = dir_.Join("stream");
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    EXPECT_GE(fd_, 0);
    LogOptions options;
    options.level = level;
    options.stream_fd = fd_;
    EXPECT_TRUE(InitLogging(options).ok());
    return path;
  }

  void PointJournalStreamAt(int fd) {
    struct stat st;
    ASSERT_EQ(fstat(fd, &st), 0);
    setenv("JOURNAL_STREAM", absl::StrCat(st.st_dev, ":", st.st_ino).c_str(), 1);
  }

  testing::TempDir dir_;
  int fd_ = -1;
};

TEST_F(LogTest, ALineBelowTheLevelIsLeftOut) {
  const std::string path = ToFile(spdlog::level::info);
  Get(Component::kAgent).debug("quiet detail");
  Get(Component::kAgent).info("the event");
  const std::string text = testing::ReadFile(path);
  EXPECT_THAT(text, HasSubstr("info agent: the event\n"));
  EXPECT_THAT(text, Not(HasSubstr("quiet detail")));
}

TEST_F(LogTest, DebugLevelKeepsDebugLinesOfEveryComponent) {
  const std::string path = ToFile(spdlog::level::debug);
  Get(Component::kStore).debug("quiet detail");
  Get(Component::kGpu).trace("finer still");
  const std::string text = testing::ReadFile(path);
  EXPECT_THAT(text, HasSubstr("debug store: quiet detail\n"));
  EXPECT_THAT(text, Not(HasSubstr("finer still")));
}

TEST_F(LogTest, OffSaysNothing) {
  const std::string path = ToFile(spdlog::level::off);
  Get(Component::kAgent).error("not even this");
  EXPECT_EQ(testing::ReadFile(path), "");
}

TEST_F(LogTest, OutsideJournaldEachLineStartsWithAnIsoUtcTimestamp) {
  const std::string path = ToFile(spdlog::level::info);
  Get(Component::kDaemon).warn("one line");
  EXPECT_THAT(testing::ReadFile(path),
              ContainsRegex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                            "warning daemon: one line\n$"));
}

TEST_F(LogTest, UnderJournaldALineHasNoTimestampButItsPriority) {
  const std::string path = dir_.Join("stream");
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd_, 0);
  PointJournalStreamAt(fd_);
  LogOptions options;
  options.stream_fd = fd_;
  ASSERT_TRUE(InitLogging(options).ok());
  Get(Component::kAgent).info("serving");
  Get(Component::kLinks).error("lost");
  EXPECT_EQ(testing::ReadFile(path), "<6>info agent: serving\n<3>error links: lost\n");
}

TEST_F(LogTest, AJournalStreamOfAnotherFileIsNotOurs) {
  // A child of a journald service inherits JOURNAL_STREAM even when its stderr goes elsewhere.
  const std::string other = dir_.Join("other");
  const int other_fd = open(other.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(other_fd, 0);
  PointJournalStreamAt(other_fd);
  close(other_fd);
  const std::string path = ToFile(spdlog::level::info);
  Get(Component::kAgent).info("serving");
  EXPECT_THAT(testing::ReadFile(path), ContainsRegex("^[0-9]{4}-.*Z info agent: serving\n$"));
}

TEST_F(LogTest, TheFileRotatesAtItsSizeKeepsItsCopiesAndIsPrivate) {
  const mode_t old_umask = umask(0);  // what fopen alone would make 0666
  const std::string path = dir_.Join("logs/agent.log");
  std::filesystem::create_directories(dir_.Join("logs"));
  LogOptions options;
  options.file = path;
  options.max_file_bytes = 1000;
  options.max_files = 2;
  const absl::Status s = InitLogging(options);
  umask(old_umask);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 100; ++i)
    Get(Component::kAgent).info("line {:03} {}", i, std::string(40, 'x'));

  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.Join("logs"))) {
    names.push_back(entry.path().filename());
    struct stat st;
    ASSERT_EQ(stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << entry.path();
    EXPECT_LE(st.st_size, 1000) << entry.path();
    // A copy was full when it rotated: another line would have taken it past the size.
    if (entry.path() != path) {
      EXPECT_GT(st.st_size, 1000 - 100) << entry.path();
    }
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("agent.log", "agent.1.log", "agent.2.log"));
  const std::string current = testing::ReadFile(path);
  EXPECT_THAT(current, HasSubstr("info agent: line 099 "));
  EXPECT_THAT(current, ContainsRegex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z info agent: line"));
  EXPECT_THAT(testing::ReadFile(dir_.Join("logs/agent.1.log")), Not(HasSubstr("line 099 ")));
  // The oldest lines are gone with the copy that fell off the end.
  for (const std::string& name : names) {
    EXPECT_THAT(testing::ReadFile(dir_.Join("logs/" + name)), Not(HasSubstr("line 000 ")));
  }
}

TEST_F(LogTest, AnExistingWiderFileIsNarrowed) {
  const std::string path = dir_.Join("agent.log");
  dir_.WriteFile("agent.log", "an older line\n");
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  LogOptions options;
  options.file = path;
  ASSERT_TRUE(InitLogging(options).ok());
  Get(Component::kAgent).info("appended");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_THAT(testing::ReadFile(path), ContainsRegex("^an older line\n.*info agent: appended\n$"));
}

TEST_F(LogTest, CapturedStdioFollowsTheFileAcrossARotation) {
  const std::string path = dir_.Join("agent.log");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LogOptions options;
    options.file = path;
    options.max_file_bytes = 400;
    options.max_files = 1;
    options.capture_stdio = true;
    if (!InitLogging(options).ok()) _exit(3);
    if (write(STDERR_FILENO, "stray before\n", 13) != 13) _exit(4);
    for (int i = 0; i < 10; ++i) Get(Component::kAgent).info("filler {}", std::string(50, 'y'));
    if (write(STDERR_FILENO, "stray after\n", 12) != 12) _exit(4);
    Get(Component::kAgent).info("last");
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_THAT(testing::ReadFile(path), ContainsRegex("stray after\n.*info agent: last\n$"));
  EXPECT_THAT(testing::ReadFile(path), Not(HasSubstr("stray before")));
}

TEST_F(LogTest, AFileThatCannotBeMadeIsRefusedAndTheLoggersStayAsTheyWere) {
  const std::string path = ToFile(spdlog::level::info);
  dir_.WriteFile("plain", "a file, not a folder\n");
  LogOptions options;
  options.file = dir_.Join("plain/agent.log");
  const absl::Status s = InitLogging(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(options.file));
  Get(Component::kAgent).info("still here");
  EXPECT_THAT(testing::ReadFile(path), HasSubstr("info agent: still here\n"));
}

TEST_F(LogTest, BadRotationOptionsAreRefused) {
  LogOptions options;
  options.file = dir_.Join("agent.log");
  options.max_file_bytes = 0;
  EXPECT_EQ(InitLogging(options).code(), absl::StatusCode::kInvalidArgument);
  options.max_file_bytes = 1000;
  options.max_files = -1;
  EXPECT_EQ(InitLogging(options).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseLevel, KnowsTheSixNamesAndNothingElse) {
  EXPECT_EQ(*ParseLevel("trace"), spdlog::level::trace);
  EXPECT_EQ(*ParseLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(*ParseLevel("info"), spdlog::level::info);
  EXPECT_EQ(*ParseLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(*ParseLevel("error"), spdlog::level::err);
  EXPECT_EQ(*ParseLevel("off"), spdlog::level::off);
  for (const char* bad : {"", "verbose", "INFO", "warning", "critical", "info "}) {
    const auto level = ParseLevel(bad);
    EXPECT_EQ(level.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseLevel("verbose").status().message()),
              HasSubstr("'verbose' is not one of trace, debug, info, warn, error, off"));
}

TEST(LogFields, ServerThenAttemptInOneForm) {
  EXPECT_EQ(fmt::format("{} launched", LogFields{"pve1/200/gpu0", "ab12"}),
            "server=pve1/200/gpu0 attempt=ab12 launched");
  EXPECT_EQ(FormatFields({"pve1/200/gpu0", ""}), "server=pve1/200/gpu0");
  EXPECT_EQ(FormatFields({"", "ab12"}), "attempt=ab12");
  EXPECT_EQ(FormatFields({}), "");
}

TEST(LogFields, AContainerComesFirstAndAloneWhenTheLineIsAboutNoServer) {
  EXPECT_EQ(fmt::format("{} agent unreachable", LogFields{.container = "pve1/200"}),
            "container=pve1/200 agent unreachable");
  EXPECT_EQ(FormatFields({.server = "pve1/200/gpu0", .attempt = "ab12", .container = "pve1/200"}),
            "container=pve1/200 server=pve1/200/gpu0 attempt=ab12");
  EXPECT_EQ(FormatFields({.container = "my host/1"}), "container=\"my host/1\"");
}

TEST(LogFields, AValueThatWouldSplitTheFieldIsQuoted) {
  EXPECT_EQ(FormatFields({"my host/1/gpu0", "a\"b"}),
            "server=\"my host/1/gpu0\" attempt=\"a\\\"b\"");
  EXPECT_EQ(FormatFields({"x=y", ""}), "server=\"x=y\"");
}

TEST(Loggers, EachComponentHasItsNamedLoggerInSpdlogsRegistry) {
  for (Component c :
       {Component::kAgent, Component::kStore, Component::kGpu, Component::kDaemon,
        Component::kLinks, Component::kRemediation, Component::kSsh, Component::kDiagnosis}) {
    spdlog::logger& logger = Get(c);
    EXPECT_EQ(logger.name(), ComponentName(c));
    EXPECT_EQ(spdlog::get(ComponentName(c)).get(), &logger);
  }
}

}  // namespace
}  // namespace fleet::log
