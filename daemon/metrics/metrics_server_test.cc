// MetricsServer over real HTTP (curl, as a scraper): /metrics and /metrics/targets on loopback,
// a non-loopback address refused without TLS, and mutual TLS with the fleet's certificates
// (`fleetctl certs init`): a scraper without a client certificate the CA signed gets nothing.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "daemon/metrics/fleet_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    auto d = Daemon::Create(
        *std::move(store),
        [](const std::string&, const fleet::v1::Host&, const fleet::v1::Container&) {
          return std::unique_ptr<AgentClient>();
        },
        &clock_, DaemonOptions());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    metrics_ = std::make_unique<FleetMetrics>(daemon_.get());
  }

  // curl's output (the body) and exit code.
  std::pair<int, std::string> Get(const std::string& url, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"curl",           "-sS", "-f", "--max-time", "10", "-o",
                                     dir_.Join("body")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    std::remove(dir_.Join("body").c_str());
    auto r = testing::Run(argv);
    EXPECT_TRUE(r.ok()) << r.status();
    std::ifstream in(dir_.Join("body"));
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {r.ok() ? r->exit_code : -1, body};
  }

  testing::TempDir dir_;
  testing::FakeClock clock_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<FleetMetrics> metrics_;
};

TEST_F(MetricsServerTest, ServesMetricsAndTargetsOnLoopbackOnThePortTheKernelGave) {
  MetricsServerOptions o;
  o.listen = "127.0.0.1:0";
  auto server = MetricsServer::Start(metrics_.get(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_FALSE((*server)->tls());
  const std::string base = absl::StrCat("http://127.0.0.1:", (*server)->port());
  auto [rc, body] = Get(base + "/metrics");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(body, HasSubstr("fleet_build_info{"));
  EXPECT_THAT(body, HasSubstr("# TYPE fleet_phase_duration_seconds histogram"));
  EXPECT_THAT(body, HasSubstr("fleet_stalls_total 0"));
  auto [rc2, targets] = Get(base + "/metrics/targets");
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(targets, "[]");  // no server READY
}

TEST_F(MetricsServerTest, ANonLoopbackAddressNeedsTlsOrInsecureListen) {
  MetricsServerOptions o;
  o.listen = "0.0.0.0:0";
  auto refused = MetricsServer::Start(metrics_.get(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--insecure-listen"));
  o.insecure = true;
  auto served = MetricsServer::Start(metrics_.get(), o);
  ASSERT_TRUE(served.ok()) << served.status();
  served->reset();
  o.listen = "no-port";
  EXPECT_FALSE(MetricsServer::Start(metrics_.get(), o).ok());
}

TEST_F(MetricsServerTest, WithTlsAScraperNeedsACertificateTheFleetCaSigned) {
  const std::string pki = dir_.Join("pki");
  auto made = testing::Run(
      {testing::BuildPath("cli/fleetctl"), "certs", "init", "--dir", pki, "--agents", "127.0.0.1"});
  ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->output : "");
  MetricsServerOptions o;
  o.listen = "127.0.0.1:0";
  o.cert_file = pki + "/agent-127.0.0.1.crt";
  o.key_file = pki + "/agent-127.0.0.1.key";
  o.ca_file = pki + "/ca.crt";
  auto server = MetricsServer::Start(metrics_.get(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->tls());
  const std::string url = absl::StrCat("https://127.0.0.1:", (*server)->port(), "/metrics");
  auto [rc, body] = Get(
      url, {"--cacert", o.ca_file, "--cert", pki + "/fleetd.crt", "--key", pki + "/fleetd.key"});
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(body, HasSubstr("fleet_build_info{"));
  auto [anonymous, nothing] = Get(url, {"--cacert", o.ca_file});
  EXPECT_NE(anonymous, 0);
  EXPECT_THAT(nothing, Not(HasSubstr("fleet_")));
  auto [plain, none] = Get(absl::StrCat("http://127.0.0.1:", (*server)->port(), "/metrics"));
  EXPECT_NE(plain, 0);
}

}  // namespace
}  // namespace fleet::daemon

namespace fleet::daemon {
namespace {

// Fleetds sharing a record (issue 16): the leader exports the fleet and fleet_leader 1 with its
// term; a standby only who it is (its copy of the fleet is the leader's).
TEST_F(MetricsServerTest, AStandbyExportsOnlyThatItStandsBy) {
  {
    // A server in the record (as a leader wrote it), read again.
    auto writer = FleetStore::Open(dir_.Join("fleet.db"));
    ASSERT_TRUE(writer.ok()) << writer.status();
    ServerRecord row;
    row.name = "local/200/gpu0";
    row.host = "local";
    row.container = "200";
    ASSERT_TRUE((*writer)->PutServer(row).ok());
  }
  ASSERT_TRUE(daemon_->Reload().ok());
  LeaderView view{.self = true, .term = 7};
  FleetMetrics leader(daemon_.get(), [&] { return view; });
  const std::string leading = leader.Text();
  EXPECT_THAT(leading, HasSubstr("fleet_leader 1"));
  EXPECT_THAT(leading, HasSubstr("fleet_leader_term 7"));
  EXPECT_THAT(leading, HasSubstr("fleet_server_state{"));
  view = LeaderView{.self = false, .holder = "fleetd-b", .address = "10.0.0.2:7443"};
  const std::string standing_by = leader.Text();
  EXPECT_THAT(standing_by, HasSubstr("fleet_leader 0"));
  EXPECT_THAT(standing_by, HasSubstr("fleet_leader_term 0"));
  EXPECT_THAT(standing_by, HasSubstr("fleet_build_info{"));
  EXPECT_THAT(standing_by, Not(HasSubstr("fleet_server_state{")));
  // A fleetd alone leads.
  EXPECT_THAT(metrics_->Text(), HasSubstr("fleet_leader 1"));
}

}  // namespace
}  // namespace fleet::daemon
