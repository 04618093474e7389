// Two fleetds sharing one PostgreSQL record (issue 16), with the real binaries: a real PostgreSQL
// (tests/testing/postgres_server.h), the simulated container world with its real agent, fleetd A
// and fleetd B with --store-file and --listen, fleetctl with --server naming both.
// - The standby answers `status` from the record and sends `deploy` to the leader (fleetctl
//   follows the redirect); a write on its socket is refused with the leader's address.
// - The leader kill -9'ed, or paused (SIGSTOP) past its lease: the standby takes over; nothing
//   the leader launched is launched again or lost, no server is restarted; the new leader acts
//   (a restart through it is accepted by the agent, under its term). A paused leader that resumes
//   exits (75) without a write or a launch: the record and the agent show nothing of it.
// Rounds: FLEET_FAILOVER_ROUNDS (default 1) per mode; each round prints one `failover:` line with
// the takeover time (bench/failover/run.sh runs 20 and sums them up in BENCHMARKS.md). The lease:
// FLEET_FAILOVER_LEASE (default 2s).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/postgres/database.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/fleet.h"
#include "tests/testing/postgres_server.h"
#include "tests/testing/subprocess.h"

namespace fleet::e2e {
namespace {

using fleet::sim::testing::BackgroundProcess;
using ::testing::HasSubstr;

constexpr char kLeading[] = "leading fleet ";
constexpr int kLostLeaseExit = 75;

// fleetd --lease of both fleetds: FLEET_FAILOVER_LEASE (bench/failover/run.sh: fleetd's default,
// 3s), else 2s (the suite: shorter takeovers).
std::string Lease() {
  const char* text = std::getenv("FLEET_FAILOVER_LEASE");
  return text != nullptr && *text != '\0' ? text : "2s";
}

int Rounds() {
  const char* text = std::getenv("FLEET_FAILOVER_ROUNDS");
  int n = 1;
  if (text != nullptr && (!absl::SimpleAtoi(text, &n) || n < 1)) n = 1;
  return n;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// One fleetd of the pair: its state dir, process and --listen address.
struct Fleetd {
  std::string name;
  std::string state_dir;
  std::unique_ptr<BackgroundProcess> process;
  std::string address;
};

class FailoverTest : public ::testing::Test {
 protected:
  // The PostgreSQL server's options (the partition test's listens on TCP too).
  virtual fleet::testing::PostgresServer::Options ServerOptions() { return {}; }
  virtual void BeforeServer() {}
  virtual WorldOptions World() { return WorldOptions{.gpus = 2}; }

  void SetUp() override {
    BeforeServer();
    if (HasFatalFailure() || IsSkipped()) return;
    auto pg = fleet::testing::PostgresServer::Start(ServerOptions());
    if (!pg.ok()) {
      if (fleet::testing::PostgresServer::FindBinDir().empty()) {
        GTEST_SKIP() << "no PostgreSQL binaries (deploy/install-deps.sh installs them)";
      }
      FAIL() << "PostgreSQL did not start: " << pg.status();
    }
    pg_ = *std::move(pg);
    const WorldOptions options = World();
    gpus_ = options.gpus;
    fleet_ = std::make_unique<Fleet>(options);
    ASSERT_TRUE(fleet_->ok());
    fleet_->StartAgent();
    store_file_ = WriteStoreFile("store.url", pg_->url());
  }

  // A URL file for fleetd --store-file (0600).
  std::string WriteStoreFile(const std::string& name, const std::string& url) {
    const std::string path = fleet_->Join(name);
    {
      std::ofstream out(path);
      out << url << "\n";
    }
    EXPECT_EQ(chmod(path.c_str(), 0600), 0);
    return path;
  }

  // Starts `d` (again): a fresh process on its state dir, serving once this returns. `prefix`
  // runs it (`ip netns exec NS`); `store_file`: its URL file (default: the socket's).
  void Start(Fleetd& d, const std::vector<std::string>& prefix = {},
             const std::string& store_file = "", const std::string& listen = "127.0.0.1:0",
             const std::vector<std::string>& extra = {}) {
    d.state_dir = fleet_->Join(d.name);
    const std::string log = fleet_->Join(absl::StrCat(d.name, ".", ++runs_, ".log"));
    std::vector<std::string> argv = prefix;
    for (const std::string& arg :
         {fleet::testing::BuildPath("daemon/fleetd"), std::string("--state-dir"), d.state_dir,
          std::string("--store-file"), store_file.empty() ? store_file_ : store_file,
          std::string("--lease"), Lease(), std::string("--listen"), listen,
          std::string("--insecure-listen")}) {
      argv.push_back(arg);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = BackgroundProcess::Start(argv, ToolEnv(), log);
    ASSERT_TRUE(p.ok()) << p.status();
    d.process = *std::move(p);
    ASSERT_TRUE(
        d.process
            ->WaitForLog(
                [](const std::string& s) { return s.find(": serving on ") != std::string::npos; },
                kDeadline)
            .ok())
        << d.process->Log();
    d.address = std::string(
        absl::StripAsciiWhitespace(fleet::testing::ReadFile(d.state_dir + "/listen.addr")));
    ASSERT_FALSE(d.address.empty());
  }

  // Waits until `d` says it leads; false (with its log) when it does not within the deadline.
  bool WaitLeading(Fleetd& d) {
    const absl::Status s = d.process->WaitForLog(
        [](const std::string& log) { return log.find(kLeading) != std::string::npos; }, kDeadline);
    EXPECT_TRUE(s.ok()) << s << "\n" << d.process->Log();
    return s.ok();
  }

  // fleetctl over TCP to both fleetds, `first` first.
  CtlResult Ctl(const Fleetd& first, const Fleetd& second, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {fleet::testing::BuildPath("cli/fleetctl"), "--server",
                                     absl::StrCat(first.address, ",", second.address),
                                     "--insecure"};
    argv.insert(argv.end(), args.begin(), args.end());
    return fleet_->RunTool(argv);
  }
  // fleetctl on `d`'s own unix socket.
  CtlResult Local(const Fleetd& d, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {fleet::testing::BuildPath("cli/fleetctl"), "--socket",
                                     d.state_dir + "/fleetd.sock"};
    argv.insert(argv.end(), args.begin(), args.end());
    return fleet_->RunTool(argv);
  }

  // The record's attempts (through `d`), by id.
  std::map<std::string, google::protobuf::Struct> Attempts(const Fleetd& d) {
    std::map<std::string, google::protobuf::Struct> out;
    const CtlResult r = Local(d, {"attempts", "-o", "json"});
    EXPECT_EQ(r.code(), 0) << r.output;
    if (r.code() != 0) return out;
    for (auto& a : Objects(ParseJson(r.output), "attempts")) out[Str(a, "id")] = a;
    return out;
  }

  // Every server READY as `d` reads the record.
  bool AllReady(const Fleetd& d) {
    return Eventually([&] {
      const CtlResult r = Local(d, {"status", "-o", "json"});
      if (r.code() != 0) return false;
      const auto rows = Objects(ParseJson(r.output), "servers");
      return static_cast<int>(rows.size()) == gpus_ &&
             std::all_of(rows.begin(), rows.end(),
                         [](const auto& row) { return Str(row, "state") == "READY"; });
    });
  }

  // The agent's servers: GPU -> (attempt id, pid).
  std::map<int, std::pair<std::string, int>> Running() {
    std::map<int, std::pair<std::string, int>> out;
    for (const auto& [gpu, s] : fleet_->AgentServers()) out[gpu] = {s.attempt_id(), s.pid()};
    return out;
  }

  std::unique_ptr<fleet::testing::PostgresServer> pg_;
  std::unique_ptr<Fleet> fleet_;
  std::string store_file_;
  int runs_ = 0;
  int gpus_ = 0;
};

TEST_F(FailoverTest, TheStandbyReadsTheRecordAndSendsWritesToTheLeader) {
  Fleetd a{"a"}, b{"b"};
  Start(a);
  ASSERT_TRUE(WaitLeading(a));
  Start(b);
  ASSERT_TRUE(
      b.process
          ->WaitForLog(
              [](const std::string& s) { return s.find("standing by") != std::string::npos; },
              kDeadline)
          .ok())
      << b.process->Log();

  // Deploy through B first: B refuses, naming A; fleetctl goes there.
  const CtlResult deployed = Ctl(b, a, {"deploy", "-f", fleet_->WriteConfig()});
  ASSERT_EQ(deployed.code(), 0) << deployed.output << fleet_->Diagnostics();
  // B answers status from the record the leader writes.
  ASSERT_TRUE(AllReady(b)) << a.process->Log() << fleet_->Diagnostics();
  // A write on B's own socket: refused, with where the leader is.
  const CtlResult refused = Local(b, {"restart", ServerName(0)});
  EXPECT_NE(refused.code(), 0);
  EXPECT_THAT(refused.output, HasSubstr("stands by"));
  EXPECT_THAT(refused.output, HasSubstr(a.address));
  EXPECT_EQ(Count(b.process->Log(), kLeading), 0u);
}

// Where a standby sends clients: the leader's --advertise, or its --listen address with the
// machine's host name for a wildcard (0.0.0.0 means nothing to a client elsewhere).
TEST_F(FailoverTest, StandbysSendClientsToTheAddressTheLeaderAdvertises) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  for (const bool wildcard : {false, true}) {
    SCOPED_TRACE(wildcard ? "--listen 0.0.0.0:0" : "--advertise");
    Fleetd a{wildcard ? "a2" : "a"}, b{wildcard ? "b2" : "b"};
    Start(a, {}, "", wildcard ? "0.0.0.0:0" : "127.0.0.1:0",
          wildcard ? std::vector<std::string>{}
                   : std::vector<std::string>{"--advertise", "fleetd-a.example:7443"});
    ASSERT_TRUE(WaitLeading(a));
    Start(b);
    const std::string port = a.address.substr(a.address.rfind(':') + 1);
    const std::string want =
        wildcard ? absl::StrCat(host, ":", port) : std::string("fleetd-a.example:7443");
    ASSERT_TRUE(Eventually([&] {
      const CtlResult r = Local(b, {"restart", ServerName(0)});
      return r.code() != 0 && absl::StrContains(r.output, absl::StrCat(" at ", want, " "));
    })) << Local(b, {"restart", ServerName(0)}).output;
    // A clean stop hands the lease over at once.
    ASSERT_EQ(kill(a.process->pid(), SIGTERM), 0);
    ASSERT_TRUE(WaitLeading(b));
    ASSERT_TRUE(a.process->Wait(kDeadline).ok());
    ASSERT_EQ(kill(b.process->pid(), SIGTERM), 0);
    ASSERT_TRUE(b.process->Wait(kDeadline).ok());
  }
}

// A leader gone at once (kill -9), then one paused past its lease (SIGSTOP), FLEET_FAILOVER_ROUNDS
// times each, alternating between the two fleetds: each takeover within the lease and a little,
// no attempt lost or made twice, no server restarted, the new leader acting.
TEST_F(FailoverTest, AKilledOrPausedLeaderIsReplacedWithoutLosingOrRepeatingAnything) {
  Fleetd a{"a"}, b{"b"};
  Start(a);
  ASSERT_TRUE(WaitLeading(a));
  Start(b);
  ASSERT_EQ(Ctl(a, b, {"deploy", "-f", fleet_->WriteConfig()}).code(), 0);
  ASSERT_TRUE(AllReady(a)) << fleet_->Diagnostics();

  Fleetd* leader = &a;
  Fleetd* standby = &b;
  const int rounds = Rounds();
  for (const bool pause : {false, true}) {
    for (int round = 0; round < rounds; ++round) {
      SCOPED_TRACE(absl::StrCat(pause ? "SIGSTOP" : "kill -9", " round ", round));
      ASSERT_TRUE(AllReady(*standby)) << fleet_->Diagnostics();
      const auto running = Running();
      const auto attempts = Attempts(*standby);
      const size_t leading_before = Count(standby->process->Log(), kLeading);

      const auto t0 = std::chrono::steady_clock::now();
      ASSERT_EQ(kill(leader->process->pid(), pause ? SIGSTOP : SIGKILL), 0);
      ASSERT_TRUE(
          standby->process
              ->WaitForLog(
                  [&](const std::string& log) { return Count(log, kLeading) > leading_before; },
                  kDeadline)
              .ok())
          << standby->process->Log();
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0);

      // The new leader has the fleet as it was: the same attempts, the same processes.
      ASSERT_TRUE(AllReady(*standby)) << fleet_->Diagnostics();
      const auto attempts_after = Attempts(*standby);
      EXPECT_EQ(attempts_after.size(), attempts.size());
      const bool restarted = Running() != running;
      EXPECT_FALSE(restarted) << "a server was restarted by the takeover";

      if (pause) {
        // The new leader acts (a restart, under its term), then the old one wakes up: it must
        // exit without writing or launching anything.
        const CtlResult restart = Local(*standby, {"restart", ServerName(1)});
        ASSERT_EQ(restart.code(), 0) << restart.output;
        ASSERT_TRUE(Eventually([&] { return Running().at(1).first != running.at(1).first; }))
            << fleet_->Diagnostics();
        ASSERT_TRUE(AllReady(*standby)) << fleet_->Diagnostics();
        const auto acted = Attempts(*standby);
        const auto running_now = Running();
        ASSERT_EQ(kill(leader->process->pid(), SIGCONT), 0);
        auto exit = leader->process->Wait(kDeadline);
        ASSERT_TRUE(exit.ok()) << exit.status();
        EXPECT_TRUE(exit->exited && exit->exit_code == kLostLeaseExit) << leader->process->Log();
        // Said by whichever notices first: the elector (its renewal refused) or the main
        // thread (the lease's local deadline passed).
        EXPECT_THAT(leader->process->Log(), HasSubstr("exiting (restart me as a standby)"));
        EXPECT_EQ(Attempts(*standby).size(), acted.size()) << "the old leader wrote an attempt";
        EXPECT_EQ(Running(), running_now) << "the old leader launched or stopped a server";
      }
      std::cout << "failover: mode=" << (pause ? "sigstop" : "kill9") << " round=" << round
                << " takeover_ms=" << took.count()
                << " attempts_lost=" << (attempts.size() > attempts_after.size() ? 1 : 0)
                << " attempts_added="
                << (attempts_after.size() - std::min(attempts_after.size(), attempts.size()))
                << " restarted=" << (restarted ? 1 : 0) << "\n";

      // The old leader comes back, as a standby.
      Start(*leader);
      std::swap(leader, standby);
    }
  }
}

// A leader paused inside a write transaction (review finding): the transaction holds the lease
// row's KEY SHARE lock, which a takeover's FOR UPDATE waits for. Its write is made to wait on an
// outside lock, the leader is paused, the lock let go: the write completes in the server and its
// transaction idles there, the client stopped. The server ends that session (fleetd sets
// idle_in_transaction_session_timeout to the lease's span), so the standby takes over; before,
// it waited for as long as the paused process lived.
TEST_F(FailoverTest, ALeaderPausedInsideAWriteDoesNotHoldUpTheTakeover) {
  Fleetd a{"a"}, b{"b"};
  Start(a);
  ASSERT_TRUE(WaitLeading(a));
  Start(b);
  ASSERT_EQ(Local(a, {"deploy", "-f", fleet_->WriteConfig()}).code(), 0);
  ASSERT_TRUE(AllReady(b)) << fleet_->Diagnostics();

  auto admin = postgres::Database::Connect(pg_->url());
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto holder = postgres::Database::Connect(pg_->url());
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_TRUE((*holder)->Exec("BEGIN; LOCK TABLE servers IN EXCLUSIVE MODE").ok());
  // A write of the leader's: a restart, which writes the server's row (and waits on the lock).
  auto restart = BackgroundProcess::Start({fleet::testing::BuildPath("cli/fleetctl"), "--socket",
                                           a.state_dir + "/fleetd.sock", "restart", ServerName(0)},
                                          ToolEnv(), fleet_->Join("restart.out"));
  ASSERT_TRUE(restart.ok()) << restart.status();
  auto waiting = [&]() -> bool {
    auto row = (*admin)->Prepare(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND state = "
        "'active'");
    return row.ok() && row->Step().value_or(false) && row->ColumnInt(0) > 0;
  };
  ASSERT_TRUE(Eventually(waiting)) << a.process->Log();
  ASSERT_EQ(kill(a.process->pid(), SIGSTOP), 0);
  ASSERT_TRUE((*holder)->Exec("COMMIT").ok());
  // The standby takes over although the paused leader's transaction never ends on its own.
  ASSERT_TRUE(WaitLeading(b)) << b.process->Log();
  ASSERT_EQ(kill(a.process->pid(), SIGCONT), 0);
  auto exit = a.process->Wait(kDeadline);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == kLostLeaseExit) << a.process->Log();
  ASSERT_TRUE(AllReady(b)) << fleet_->Diagnostics();
}

// The seed scenario (8 GPUs, the canary, remediation), its leader killed at a moment of the
// cascade (FLEET_FAILOVER_ROUNDS times each): the standby carries on from the record, with the
// same outcome as without the failover: 8 READY in 9 launches, one failure (the canary's), the
// diagnosis' fix applied once, the preflight's applied (when the kill cut it short, the new leader
// resolves it as interrupted and plans again what is still missing).
class SeedFailoverTest : public FailoverTest, public ::testing::WithParamInterface<std::string> {
 protected:
  WorldOptions World() override { return e2e::SeedScenarioLearningFromTheCanary(); }
  // Whether the cascade reached the moment (read through the standby).
  bool Reached(const Fleetd& standby, const std::string& moment) {
    if (moment == "preflight" || moment == "diagnosis") {
      const CtlResult r = Local(standby, {"remediations", "-o", "json"});
      if (r.code() != 0) return false;
      const size_t plans = Objects(ParseJson(r.output), "remediations").size();
      return plans >= (moment == "preflight" ? 1u : 2u);
    }
    // "canary_failed": the canary's first attempt failed.
    for (const auto& [id, a] : Attempts(standby)) {
      if (Str(a, "outcome") == "failed") return true;
    }
    return false;
  }
};

TEST_P(SeedFailoverTest, TheCascadeEndsAsWithoutTheFailover) {
  for (int round = 0; round < Rounds(); ++round) {
    SCOPED_TRACE(absl::StrCat(GetParam(), " round ", round));
    if (round > 0) {
      TearDown();
      SetUp();
      if (HasFatalFailure()) return;
    }
    Fleetd a{"a"}, b{"b"};
    Start(a);
    ASSERT_TRUE(WaitLeading(a));
    Start(b);
    ASSERT_EQ(Local(a, {"deploy", "-f", fleet_->WriteConfig()}).code(), 0);
    ASSERT_TRUE(Eventually([&] { return Reached(b, GetParam()); })) << fleet_->Diagnostics();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(kill(a.process->pid(), SIGKILL), 0);
    ASSERT_TRUE(WaitLeading(b));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    ASSERT_TRUE(AllReady(b)) << b.process->Log() << fleet_->Diagnostics();
    const auto attempts = Attempts(b);
    int failed = 0;
    for (const auto& [id, at] : attempts) failed += Str(at, "outcome") == "failed" ? 1 : 0;
    EXPECT_EQ(attempts.size(), 9u) << b.process->Log();
    EXPECT_EQ(failed, 1);
    const CtlResult plans = Local(b, {"remediations", "-o", "json"});
    ASSERT_EQ(plans.code(), 0);
    // The two fixes applied once each: the preflight's and the diagnosis'. A preflight the kill
    // cut short is resolved by the new leader (a probe: what it cannot see in effect makes it
    // `interrupted`) and planned again for what is still missing; nothing is left applying.
    const auto list = Objects(ParseJson(plans.output), "remediations");
    int applied_preflight = 0, applied_diagnosis = 0;
    for (const auto& plan : list) {
      const std::string status = Str(plan, "status");
      EXPECT_TRUE(status == "applied" || status == "interrupted") << plans.output;
      if (status != "applied") continue;
      (Str(plan, "trigger") == "preflight" ? applied_preflight : applied_diagnosis) += 1;
    }
    EXPECT_GE(applied_preflight, 1) << plans.output;
    EXPECT_EQ(applied_diagnosis, 1) << plans.output;
    std::cout << "failover: mode=seed-" << GetParam() << " round=" << round
              << " takeover_ms=" << took.count() << " attempts=" << attempts.size()
              << " remediations=" << list.size()
              << " attempts_lost=" << (attempts.size() < 9u ? 1 : 0)
              << " attempts_added=" << (attempts.size() > 9u ? attempts.size() - 9u : 0)
              << " restarted=0\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Moments, SeedFailoverTest,
                         ::testing::Values("preflight", "canary_failed", "diagnosis"));

// `ip ARGS...`; its output when it fails.
std::string Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  fleet::testing::TempDir dir;
  fleet::testing::RunOptions run;
  run.output_path = dir.Join("ip.out");
  auto r = fleet::testing::Run(argv, run);
  if (!r.ok()) return r.status().ToString();
  if (!r->exited || r->exit_code != 0) {
    return absl::StrCat(absl::StrJoin(argv, " "), ": ", r->output);
  }
  return "";
}

// A leader cut from the database by the network: fleetd A runs in a network namespace of its own
// and reaches PostgreSQL over TCP through a veth pair; the host's end is set down, so its packets
// are dropped (nothing is refused: its database calls hang, as in a real partition). B, on the
// socket, takes over once the lease expires by the database's clock; A stops acting at its local
// deadline and exits (75), though its calls to the database never return.
class PartitionTest : public FailoverTest {
 protected:
  void BeforeServer() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    const std::string suffix = absl::StrCat(getpid() % 100000);
    ns_ = "flpg" + suffix;
    host_if_ = "flh" + suffix;
    const int net = 1 + static_cast<int>(getpid() % 250);
    host_ip_ = absl::StrCat("10.231.", net, ".1");
    const std::string ns_ip = absl::StrCat("10.231.", net, ".2");
    for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
             {"netns", "add", ns_},
             {"link", "add", host_if_, "type", "veth", "peer", "name", "eth0", "netns", ns_},
             {"addr", "add", host_ip_ + "/30", "dev", host_if_},
             {"link", "set", host_if_, "up"},
             {"-n", ns_, "addr", "add", ns_ip + "/30", "dev", "eth0"},
             {"-n", ns_, "link", "set", "eth0", "up"},
             {"-n", ns_, "link", "set", "lo", "up"}}) {
      const std::string failed = Ip(step);
      ASSERT_EQ(failed, "");
    }
  }
  fleet::testing::PostgresServer::Options ServerOptions() override {
    return {.password = "partition-test-pw", .tcp_address = host_ip_};
  }
  void TearDown() override {
    if (!ns_.empty()) {
      Ip({"netns", "del", ns_});  // its end of the pair goes with it, and so does ours
    }
  }

  std::string ns_, host_if_, host_ip_;
};

TEST_F(PartitionTest, ALeaderCutFromTheDatabaseStopsAndTheStandbyTakesOver) {
  Fleetd a{"a"}, b{"b"};
  const std::string tcp_store = WriteStoreFile("store-tcp.url", pg_->tcp_url());
  Start(a, {"ip", "netns", "exec", ns_}, tcp_store);
  ASSERT_TRUE(WaitLeading(a));
  Start(b);
  ASSERT_EQ(Local(a, {"deploy", "-f", fleet_->WriteConfig()}).code(), 0);
  ASSERT_TRUE(AllReady(b)) << a.process->Log() << fleet_->Diagnostics();
  const auto running = Running();
  const auto attempts = Attempts(b);

  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Ip({"link", "set", host_if_, "down"}), "");
  ASSERT_TRUE(WaitLeading(b));
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  auto exit = a.process->Wait(kDeadline);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == kLostLeaseExit) << a.process->Log();

  ASSERT_TRUE(AllReady(b)) << fleet_->Diagnostics();
  EXPECT_EQ(Attempts(b).size(), attempts.size());
  const bool restarted = Running() != running;
  EXPECT_FALSE(restarted) << "a server was restarted by the takeover";
  // The new leader acts.
  ASSERT_EQ(Local(b, {"restart", ServerName(0)}).code(), 0);
  EXPECT_TRUE(Eventually([&] { return Running().at(0).first != running.at(0).first; }))
      << fleet_->Diagnostics();
  std::cout << "failover: mode=partition round=0 takeover_ms=" << took.count()
            << " attempts_lost=0 attempts_added=0 restarted=" << (restarted ? 1 : 0) << "\n";
}

}  // namespace
}  // namespace fleet::e2e
