// fleetd's log on the real binary: --log-level (a bad one is a usage error; at warn, no info line
// is written), and under journald (JOURNAL_STREAM names its stderr) lines carry their priority and
// no timestamp. The fleet it runs has one container whose agent never answers: "agent unreachable"
// is the warning every run waits for.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using fleet::sim::testing::BackgroundProcess;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kDeadline = std::chrono::seconds(30);
constexpr char kPath[] = "/usr/bin:/bin";

class FleetdLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.WriteFile("fleet.yaml", absl::StrCat(R"(hosts:
  - name: local
    containers:
      - ctid: sim
        channel: {kind: loopback, address: "unix:)",
                                              dir_.Join("no-agent.sock"), R"("}
        gpus: [0]
        template: never-launched
        base_port: 30000
templates:
  - name: never-launched
    model: /m
    argv: [/bin/false, "{port}"]
)"));
  }

  // fleetd with `extra` flags and `env` until it has said the agent is unreachable, then stopped
  // (SIGTERM: it must exit 0, through its one shutdown path); its log.
  std::string RunUntilUnreachable(const std::vector<std::string>& extra, sim::testing::Env env) {
    std::vector<std::string> argv = {testing::BuildPath("daemon/fleetd"), "--state-dir",
                                     dir_.Join("state"), "--config", dir_.Join("fleet.yaml")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    env["PATH"] = kPath;
    auto p = BackgroundProcess::Start(argv, env, log_path());
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    EXPECT_TRUE((*p)->WaitForLog(
                        [](const std::string& s) {
                          const size_t at = s.find("agent unreachable: ");
                          return at != std::string::npos && s.find('\n', at) != std::string::npos;
                        },
                        kDeadline)
                    .ok())
        << (*p)->Log();
    // The stop signal is blocked from before the socket is served: it waits for sigwait.
    absl::StatusOr<sim::testing::ExitInfo> exit = (*p)->Stop(SIGTERM, kDeadline);
    EXPECT_TRUE(exit.ok()) << exit.status();
    if (exit.ok()) {
      EXPECT_TRUE(exit->exited && exit->exit_code == 0) << (*p)->Log();
    }
    return (*p)->Log();
  }

  std::string log_path() const { return dir_.Join("fleetd.log"); }

  testing::TempDir dir_;
};

TEST_F(FleetdLogTest, AnUnknownLevelIsAUsageError) {
  testing::RunOptions options;
  options.env = std::map<std::string, std::string>{{"PATH", kPath}};
  options.output_path = log_path();
  absl::StatusOr<testing::RunResult> r =
      testing::Run({testing::BuildPath("daemon/fleetd"), "--state-dir", dir_.Join("state"),
                    "--log-level", "verbose"},
                   options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->output, HasSubstr("fleetd: --log-level: log level 'verbose' is not one of "
                                   "trace, debug, info, warn, error, off"));
  struct stat st;
  EXPECT_NE(stat(dir_.Join("state").c_str(), &st), 0) << "it started before refusing";
}

TEST_F(FleetdLogTest, AtWarnOnlyWarningsAndErrorsAreWritten) {
  const std::string log = RunUntilUnreachable({"--log-level", "warn"}, {});
  EXPECT_THAT(log, HasSubstr("Z warning links: container=local/sim agent unreachable: "));
  // Serving, the config seeded, stopping: all info.
  EXPECT_THAT(log, Not(HasSubstr("serving on")));
  EXPECT_THAT(log, Not(HasSubstr("stopping")));
  EXPECT_THAT(log, Not(HasSubstr(" info ")));
}

TEST_F(FleetdLogTest, UnderJournaldEachLineHasItsPriorityAndNoTimestamp) {
  // The log file is fleetd's stderr: JOURNAL_STREAM names it as journald's stream would.
  dir_.WriteFile("fleetd.log", "");
  struct stat st;
  ASSERT_EQ(stat(log_path().c_str(), &st), 0);
  const std::string log =
      RunUntilUnreachable({}, {{"JOURNAL_STREAM", absl::StrCat(st.st_dev, ":", st.st_ino)}});
  EXPECT_THAT(log, ContainsRegex("(^|\n)<6>info daemon: fleetd [^ ]+: serving on "));
  EXPECT_THAT(log, HasSubstr("\n<4>warning links: container=local/sim agent unreachable: "));
  EXPECT_THAT(log, HasSubstr("\n<6>info daemon: stopping (the servers keep running)\n"));
  EXPECT_THAT(log, Not(ContainsRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T")));
}

}  // namespace
}  // namespace fleet

namespace fleet {
namespace {

// The signals fleetd's main thread waits for are blocked in every thread, gRPC's included: one
// sent to the process is main's. SIGUSR1 (the elector's word to main, issue 16) killed fleetd
// when it reached a gRPC thread created before the mask; SIGTERM would have skipped the clean
// stop the same way.
TEST_F(FleetdLogTest, SignalsToTheProcessAreMainsEvenWithGrpcThreadsRunning) {
  std::vector<std::string> argv = {testing::BuildPath("daemon/fleetd"), "--state-dir",
                                   dir_.Join("state"), "--config", dir_.Join("fleet.yaml")};
  auto p = BackgroundProcess::Start(argv, {{"PATH", kPath}}, log_path());
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitForLog(
                      [](const std::string& s) {
                        return s.find("agent unreachable: ") != std::string::npos;
                      },
                      kDeadline)
                  .ok())
      << (*p)->Log();
  for (int i = 0; i < 50; ++i) ASSERT_EQ(kill((*p)->pid(), SIGUSR1), 0);
  absl::StatusOr<sim::testing::ExitInfo> exit = (*p)->Stop(SIGTERM, kDeadline);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == 0) << "signal " << exit->signal << "\n"
                                                    << (*p)->Log();
  EXPECT_THAT((*p)->Log(), HasSubstr("stopping (the servers keep running)"));
}

}  // namespace
}  // namespace fleet
