// `fleetd migrate-store` on the real binaries (issue 16): a fleetd runs on its fleet.db while the
// record is copied into a real PostgreSQL server (a password on it, the URL in a 0600 file);
// then a fleetd on that database (--store-file) shows the same servers through fleetctl.
// - The copy prints each table's rows in both and exits 0; a second copy into the same database
//   is refused (it holds rows), and so is a --to URL with a password, which no output repeats.
// - A source that is not there is refused and not created.
// Skipped without PostgreSQL's server binaries (deploy/install-deps.sh installs them).
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/postgres_server.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using fleet::sim::testing::BackgroundProcess;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kDeadline = std::chrono::seconds(30);
constexpr char kPath[] = "/usr/bin:/bin";
constexpr char kPassword[] = "e2e-Secret-pw-7f3a";

class FleetdMigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::PostgresServer::FindBinDir().empty()) {
      GTEST_SKIP() << "no PostgreSQL server binaries: deploy/install-deps.sh installs them";
    }
    auto server = testing::PostgresServer::Start({.password = kPassword});
    ASSERT_TRUE(server.ok()) << server.status();
    postgres_ = *std::move(server);
    ASSERT_THAT(postgres_->url(), HasSubstr(kPassword));
    dir_.WriteFile("store.url", postgres_->url() + "\n");
    ASSERT_EQ(chmod(url_file().c_str(), 0600), 0);
    // Two servers of a container whose agent never answers: fleetd has rows to keep and nothing
    // to run.
    dir_.WriteFile("fleet.yaml", absl::StrCat(R"(hosts:
  - name: local
    containers:
      - ctid: sim
        channel: {kind: loopback, address: "unix:)",
                                              dir_.Join("no-agent.sock"), R"("}
        gpus: [0, 1]
        template: never-launched
        base_port: 30000
templates:
  - name: never-launched
    model: /m
    argv: [/bin/false, "{port}"]
)"));
  }

  void TearDown() override {
    if (fleetd_ != nullptr) StopFleetd();
  }

  testing::RunResult Run(const std::string& binary, const std::vector<std::string>& args,
                         std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {testing::BuildPath(binary)};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::RunOptions options;
    env["PATH"] = kPath;
    options.env = env;
    options.output_path = dir_.Join(absl::StrCat("run-", ++runs_, ".out"));
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }
  testing::RunResult Migrate(const std::vector<std::string>& args,
                             std::map<std::string, std::string> env = {}) {
    std::vector<std::string> all = {"migrate-store"};
    all.insert(all.end(), args.begin(), args.end());
    return Run("daemon/fleetd", all, std::move(env));
  }
  testing::RunResult Status(const std::string& state) {
    return Run("cli/fleetctl", {"--state-dir", state, "status", "-o", "name"});
  }

  // fleetd with `flags`, once fleetctl status shows its two servers.
  void StartFleetd(const std::string& state, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {testing::BuildPath("daemon/fleetd"), "--state-dir", state};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto p = BackgroundProcess::Start(argv, {{"PATH", kPath}}, dir_.Join("fleetd.log"));
    ASSERT_TRUE(p.ok()) << p.status();
    fleetd_ = *std::move(p);
    ASSERT_TRUE(fleetd_
                    ->WaitUntil([&] { return Status(state).output == kServers; }, kDeadline,
                                std::chrono::milliseconds(100))
                    .ok())
        << fleetd_->Log();
  }
  void StopFleetd() {
    absl::StatusOr<sim::testing::ExitInfo> exit = fleetd_->Stop(SIGTERM, kDeadline);
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(exit->exited && exit->exit_code == 0) << fleetd_->Log();
    EXPECT_THAT(fleetd_->Log(), Not(HasSubstr(kPassword)));
    fleetd_.reset();
  }

  std::string url_file() const { return dir_.Join("store.url"); }

  static constexpr char kServers[] = "local/sim/gpu0\nlocal/sim/gpu1\n";
  testing::TempDir dir_;
  std::unique_ptr<testing::PostgresServer> postgres_;
  std::unique_ptr<BackgroundProcess> fleetd_;
  int runs_ = 0;
};

TEST_F(FleetdMigrateTest, CopiesARunningFleetsRecordAndFleetdServesItFromPostgres) {
  const std::string sqlite_state = dir_.Join("state-sqlite");
  ASSERT_NO_FATAL_FAILURE(StartFleetd(sqlite_state, {"--config", dir_.Join("fleet.yaml")}));
  const std::string from = absl::StrCat("sqlite:", sqlite_state, "/fleet.db");

  // While that fleetd runs on it.
  const testing::RunResult copied = Migrate({"--from", from, "--to-file", url_file()});
  EXPECT_EQ(copied.exit_code, 0) << copied.output;
  EXPECT_THAT(copied.output, ContainsRegex("servers +2 +2\n"));
  EXPECT_THAT(copied.output, ContainsRegex("hosts +1 +1\n"));
  EXPECT_THAT(copied.output, ContainsRegex("configs +1 +1\n"));
  EXPECT_THAT(copied.output, HasSubstr("the counts match"));
  EXPECT_THAT(copied.output, HasSubstr("password=****"));
  EXPECT_THAT(copied.output, Not(HasSubstr(kPassword)));

  // Again: the database holds rows now.
  const testing::RunResult again = Migrate({"--from", from, "--to-file", url_file()});
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_THAT(again.output, HasSubstr("table hosts already holds rows"));
  EXPECT_THAT(again.output, Not(HasSubstr(kPassword)));

  // The URL in argv, password included: refused, and not repeated.
  const testing::RunResult in_argv = Migrate({"--from", from, "--to", postgres_->url()});
  EXPECT_EQ(in_argv.exit_code, 1) << in_argv.output;
  EXPECT_THAT(in_argv.output, HasSubstr("--to-file FILE"));
  EXPECT_THAT(in_argv.output, Not(HasSubstr(kPassword)));

  const std::string status_on_sqlite = Status(sqlite_state).output;
  ASSERT_NO_FATAL_FAILURE(StopFleetd());

  // fleetd on the PostgreSQL record, without --config: the stored desired state and servers.
  const std::string pg_state = dir_.Join("state-pg");
  ASSERT_NO_FATAL_FAILURE(StartFleetd(pg_state, {"--store-file", url_file()}));
  EXPECT_EQ(Status(pg_state).output, status_on_sqlite);
  const testing::RunResult attempts = Run("cli/fleetctl", {"--state-dir", pg_state, "attempts"});
  EXPECT_EQ(attempts.exit_code, 0) << attempts.output;
}

// --to with a URL that has no password: taken, the password coming from libpq's environment (or
// ~/.pgpass), never argv. From a stopped fleetd's record.
TEST_F(FleetdMigrateTest, TakesAUrlWithoutAPasswordInArgv) {
  const std::string state = dir_.Join("state");
  ASSERT_NO_FATAL_FAILURE(StartFleetd(state, {"--config", dir_.Join("fleet.yaml")}));
  ASSERT_NO_FATAL_FAILURE(StopFleetd());
  const std::string url =
      absl::StrReplaceAll(postgres_->url(), {{absl::StrCat(":", kPassword), ""}});
  ASSERT_THAT(url, Not(HasSubstr(kPassword)));

  const std::vector<std::string> args = {"--from", absl::StrCat("sqlite:", state, "/fleet.db"),
                                         "--to", url};
  const testing::RunResult no_password = Migrate(args);
  EXPECT_EQ(no_password.exit_code, 1) << no_password.output;
  const testing::RunResult copied = Migrate(args, {{"PGPASSWORD", kPassword}});
  EXPECT_EQ(copied.exit_code, 0) << copied.output;
  EXPECT_THAT(copied.output, ContainsRegex("servers +2 +2\n"));
  EXPECT_THAT(copied.output, Not(HasSubstr(kPassword)));
}

TEST_F(FleetdMigrateTest, RefusesAMissingSourceAndBadFlags) {
  const std::string missing = dir_.Join("nowhere/fleet.db");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refusals = {
      {{"--from", "sqlite:" + missing, "--to-file", url_file()}, "source " + missing + ": "},
      {{"--from", missing, "--to-file", url_file()}, "give --from sqlite:PATH"},
      {{"--from", "sqlite:" + missing}, "give one of --to-file FILE and --to URL"},
      {{"--from", "sqlite:" + missing, "--to-file", url_file(), "--to", "postgres://x/y"},
       "give one of --to-file FILE and --to URL"},
      {{"--from", "sqlite:" + missing, "--to-file", dir_.Join("fleet.yaml")},
       "must be 0600 or stricter"},
  };
  ASSERT_EQ(chmod(dir_.Join("fleet.yaml").c_str(), 0644), 0);
  for (const auto& [args, why] : refusals) {
    const testing::RunResult r = Migrate(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr(why));
    EXPECT_THAT(r.output, Not(HasSubstr(kPassword)));
  }
  struct stat st;
  EXPECT_NE(stat(missing.c_str(), &st), 0);
  const testing::RunResult help = Migrate({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--to-file"));
}

}  // namespace
}  // namespace fleet
