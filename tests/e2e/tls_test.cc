// Mutual TLS between fleetd's agent client and the real fleet-agent binary, over real gRPC on
// loopback, with certificates made by the real `fleetctl certs init`: the daemon's certificate is
// accepted; no certificate, or one of another CA, is refused by the agent; an agent certificate
// of another CA is refused by the daemon's client; every agent certificate names its own container
// only, and fleetd's channels check that name (a certificate of container A served by container B
// is refused). And the agent refuses to serve TCP without TLS, even on loopback. Skipped when
// `openssl` is not on PATH (certs init runs it).
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/agent_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using fleet::sim::testing::BackgroundProcess;
using ::testing::HasSubstr;

constexpr std::string_view kAnnouncement = "serving agent.proto on port ";
constexpr char kPath[] = "/usr/bin:/bin";

testing::RunResult Fleetctl(const testing::TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {testing::BuildPath("cli/fleetctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::RunOptions options;
  options.env = std::map<std::string, std::string>{{"PATH", kPath}};
  static int run = 0;
  options.output_path = dir.Join(absl::StrCat("fleetctl-", ++run, ".out"));
  absl::StatusOr<testing::RunResult> r = testing::Run(argv, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : testing::RunResult{};
}

// The port of the agent's announcement line ("... on port N, incarnation ...").
bool PortIn(const std::string& log, int* port) {
  const size_t at = log.find(kAnnouncement);
  if (at == std::string::npos) return false;
  const size_t begin = at + kAnnouncement.size();
  const size_t end = log.find(',', begin);
  return end != std::string::npos && absl::SimpleAtoi(log.substr(begin, end - begin), port) &&
         *port > 0;
}

// A fleet-agent serving on `listen` with `extra` flags, its port read from what it announces.
class RunningAgent {
 public:
  RunningAgent(const testing::TempDir& dir, const std::string& name, const std::string& listen,
               const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {testing::BuildPath("agent/fleet-agent"),
                                     "--listen",
                                     listen,
                                     "--state-dir",
                                     dir.Join(name + "-state"),
                                     "--readiness-interval",
                                     "3600"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = BackgroundProcess::Start(argv, {{"PATH", kPath}}, dir.Join(name + ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    process_ = *std::move(p);
    EXPECT_TRUE(process_
                    ->WaitForLog(
                        [](const std::string& s) {
                          int found = 0;
                          return PortIn(s, &found);
                        },
                        std::chrono::seconds(20))
                    .ok())
        << process_->Log();
    EXPECT_TRUE(PortIn(process_->Log(), &port_)) << process_->Log();
  }
  ~RunningAgent() {
    if (process_) process_->Stop(SIGTERM, std::chrono::seconds(10)).IgnoreError();
  }

  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  std::string Log() const { return process_ ? process_->Log() : ""; }

 private:
  std::unique_ptr<BackgroundProcess> process_;
  int port_ = 0;
};

std::vector<std::string> TlsFlags(const std::string& pki, const std::string& agent_pki,
                                  const std::string& agent) {
  return {"--tls-cert", absl::StrCat(agent_pki, "/agent-", agent, ".crt"),
          "--tls-key",  absl::StrCat(agent_pki, "/agent-", agent, ".key"),
          "--tls-ca",   pki + "/ca.crt"};
}

// fleetd's TLS material, expecting the agent's certificate to name `agent`.
daemon::AgentTls ReadTls(const std::string& ca_dir, const std::string& cert_dir,
                         const std::string& agent = "node1") {
  absl::StatusOr<daemon::AgentTls> tls = daemon::ReadAgentTls(
      "local/tls", ca_dir + "/ca.crt", cert_dir + "/fleetd.crt", cert_dir + "/fleetd.key");
  EXPECT_TRUE(tls.ok()) << tls.status();
  if (!tls.ok()) return daemon::AgentTls{};
  tls->target_name_override = agent;
  return *tls;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("PATH");
    if (testing::FindOnPath("openssl", kPath).empty() &&
        testing::FindOnPath("openssl", path == nullptr ? "" : path).empty()) {
      GTEST_SKIP() << "openssl is not installed: fleetctl certs init needs it";
    }
    // Two fleets: ours, and another CA with the same names.
    for (const std::string& d : {pki_, other_}) {
      const testing::RunResult r =
          Fleetctl(dir_, {"certs", "init", "--dir", d, "--agents", "node1,node2"});
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }

  testing::TempDir dir_;
  const std::string pki_ = dir_.Join("pki");
  const std::string other_ = dir_.Join("other");
};

TEST_F(TlsTest, CertsInitMakesTheFilesAndIsIdempotent) {
  for (const char* file :
       {"ca.crt", "ca.key", "fleetd.crt", "fleetd.key", "agent-node1.crt", "agent-node1.key"}) {
    struct stat st;
    ASSERT_EQ(stat((pki_ + "/" + file).c_str(), &st), 0) << file;
    if (std::string_view(file).find(".key") != std::string_view::npos) {
      EXPECT_EQ(st.st_mode & 0777, 0600u) << file;
    }
  }
  const std::string ca = testing::ReadFile(pki_ + "/ca.crt");
  const std::string fleetd = testing::ReadFile(pki_ + "/fleetd.crt");

  // Again, with a new agent: the CA and fleetd's certificate are kept.
  testing::RunResult again =
      Fleetctl(dir_, {"certs", "init", "--dir", pki_, "--agents", "10.0.0.20,node3"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("reused " + pki_ + "/ca.crt"));
  EXPECT_THAT(again.output, HasSubstr("kept " + pki_ + "/fleetd.crt"));
  // Its own names only: no localhost, no 127.0.0.1 (which every agent would then carry).
  EXPECT_THAT(again.output, HasSubstr("agent 10.0.0.20 (DNS:10.0.0.20, IP:10.0.0.20; "));
  EXPECT_THAT(again.output, HasSubstr("agent node3 (DNS:node3; "));
  EXPECT_EQ(testing::ReadFile(pki_ + "/ca.crt"), ca);
  EXPECT_EQ(testing::ReadFile(pki_ + "/fleetd.crt"), fleetd);

  // An existing agent certificate is replaced only with --force.
  const std::string node1 = testing::ReadFile(pki_ + "/agent-node1.crt");
  testing::RunResult refused =
      Fleetctl(dir_, {"certs", "init", "--dir", pki_, "--agents", "node1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.output, HasSubstr(pki_ + "/agent-node1.crt exists: --force replaces it"));
  EXPECT_EQ(testing::ReadFile(pki_ + "/agent-node1.crt"), node1);
  testing::RunResult forced =
      Fleetctl(dir_, {"certs", "init", "--dir", pki_, "--agents", "node1", "--force"});
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_THAT(forced.output, HasSubstr("replaced " + pki_ + "/agent-node1.crt"));
  EXPECT_NE(testing::ReadFile(pki_ + "/agent-node1.crt"), node1);

  // A name that is not a plain host name is refused before anything is made.
  testing::RunResult bad =
      Fleetctl(dir_, {"certs", "init", "--dir", pki_, "--agents", "ok,a/../b"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("agent name 'a/../b' is not made of letters"));
  struct stat st;
  EXPECT_NE(stat((pki_ + "/agent-ok.crt").c_str(), &st), 0);
}

TEST_F(TlsTest, TheDaemonsCertificateIsAccepted) {
  RunningAgent agent(dir_, "agent", "127.0.0.1:0", TlsFlags(pki_, pki_, "node1"));
  EXPECT_THAT(agent.Log(), HasSubstr("mutual TLS"));
  daemon::GrpcAgentClient client("local/tls", agent.target(), ReadTls(pki_, pki_));
  absl::StatusOr<v1::StatusResponse> status = client.Status();
  ASSERT_TRUE(status.ok()) << status.status() << "\n" << agent.Log();
  EXPECT_FALSE(status->incarnation().empty());
}

// An agent that refused the first check (not listening yet; systemd starting it) answers the
// next one: the check waits for the channel to connect. Before, a check failed fast on the
// channel still in TRANSIENT_FAILURE (this test), and in a systemd container no check ever
// reached the agent (LxcSystemdBootstrapTest: the TLS hello went out only every 5 s, gRPC's
// backup poller's interval, and the handshakes timed out).
TEST_F(TlsTest, AnAgentThatRefusedTheFirstCheckAnswersTheNext) {
  absl::StatusOr<int> port = sim::testing::FreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string listen = absl::StrCat("127.0.0.1:", *port);
  daemon::GrpcAgentClient client("local/tls", listen, ReadTls(pki_, pki_));
  const absl::Status refused = client.Answers(absl::Milliseconds(300));
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("Connection refused"));
  RunningAgent agent(dir_, "agent", listen, TlsFlags(pki_, pki_, "node1"));
  const absl::Status answered = client.Answers(absl::Seconds(20));
  EXPECT_TRUE(answered.ok()) << answered << "\n" << agent.Log();
}

TEST_F(TlsTest, AClientWithoutACertificateIsRefused) {
  RunningAgent agent(dir_, "agent", "127.0.0.1:0", TlsFlags(pki_, pki_, "node1"));
  // TLS that trusts the agent, but presents no certificate.
  daemon::AgentTls no_cert;
  no_cert.ca_pem = testing::ReadFile(pki_ + "/ca.crt");
  daemon::GrpcAgentClient anonymous("local/tls", agent.target(), no_cert);
  EXPECT_FALSE(anonymous.Status().ok());
  // No TLS at all.
  daemon::GrpcAgentClient plaintext("local/tls", agent.target());
  EXPECT_FALSE(plaintext.Status().ok());
  // The agent is still there for a client that has one.
  daemon::GrpcAgentClient good("local/tls", agent.target(), ReadTls(pki_, pki_));
  EXPECT_TRUE(good.Status().ok()) << agent.Log();
}

TEST_F(TlsTest, AClientCertificateOfAnotherCaIsRefused) {
  RunningAgent agent(dir_, "agent", "127.0.0.1:0", TlsFlags(pki_, pki_, "node1"));
  // Trusts our CA (so the agent passes), presents the other fleet's fleetd certificate.
  daemon::GrpcAgentClient stranger("local/tls", agent.target(), ReadTls(pki_, other_));
  absl::StatusOr<v1::StatusResponse> status = stranger.Status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.status().message()), HasSubstr("container local/tls"));
  // Ours is taken by the same agent.
  daemon::GrpcAgentClient ours("local/tls", agent.target(), ReadTls(pki_, pki_));
  EXPECT_TRUE(ours.Status().ok()) << agent.Log();
}

TEST_F(TlsTest, AnAgentCertificateOfAnotherCaIsRefusedByTheDaemon) {
  // The agent trusts our CA (so it would take our client) but serves the other fleet's
  // certificate.
  RunningAgent agent(dir_, "impostor", "127.0.0.1:0", TlsFlags(pki_, other_, "node1"));
  daemon::GrpcAgentClient client("local/tls", agent.target(), ReadTls(pki_, pki_));
  EXPECT_FALSE(client.Status().ok());
  // A bootstrap's health check says why: the handshake, not a bare deadline.
  const absl::Status check = client.Answers(absl::Seconds(1));
  EXPECT_FALSE(check.ok());
  EXPECT_THAT(check.message(), ::testing::AnyOf(HasSubstr("andshake"), HasSubstr("ertificate")))
      << check;
  // The same client trusting the other CA takes it: the CA is what was refused.
  daemon::AgentTls trusting_other = ReadTls(pki_, pki_);
  trusting_other.ca_pem = testing::ReadFile(other_ + "/ca.crt");
  daemon::GrpcAgentClient other("local/tls", agent.target(), trusting_other);
  EXPECT_TRUE(other.Status().ok()) << agent.Log();
}

TEST_F(TlsTest, TheAgentsNameMustMatchUnlessOverridden) {
  RunningAgent agent(dir_, "agent", "127.0.0.1:0", TlsFlags(pki_, pki_, "node1"));
  // The certificate names node1 only.
  daemon::AgentTls tls = ReadTls(pki_, pki_);
  tls.target_name_override = "node2";
  EXPECT_FALSE(daemon::GrpcAgentClient("local/tls", agent.target(), tls).Status().ok());
  tls.target_name_override = "node1";
  EXPECT_TRUE(daemon::GrpcAgentClient("local/tls", agent.target(), tls).Status().ok());
}

TEST_F(TlsTest, AnAgentCertificateNamesOnlyItsOwnContainer) {
  // Dialled at 127.0.0.1 with no name to check but the address: no agent certificate carries it,
  // so no agent can pass for another behind a loopback port or an ssh tunnel.
  RunningAgent agent(dir_, "agent", "127.0.0.1:0", TlsFlags(pki_, pki_, "node1"));
  daemon::AgentTls by_address = ReadTls(pki_, pki_);
  by_address.target_name_override.clear();
  absl::StatusOr<v1::StatusResponse> status =
      daemon::GrpcAgentClient("local/tls", agent.target(), by_address).Status();
  EXPECT_FALSE(status.ok()) << "an agent certificate names 127.0.0.1";
  auto x509 = testing::Run(
      {"openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", pki_ + "/agent-node1.crt"},
      [&] {
        testing::RunOptions o;
        o.env = std::map<std::string, std::string>{{"PATH", kPath}};
        o.output_path = dir_.Join("x509.out");
        return o;
      }());
  ASSERT_TRUE(x509.ok() && x509->exit_code == 0) << (x509.ok() ? x509->output : "");
  EXPECT_THAT(x509->output, HasSubstr("DNS:node1"));
  EXPECT_THAT(x509->output, ::testing::Not(HasSubstr("127.0.0.1")));
  EXPECT_THAT(x509->output, ::testing::Not(HasSubstr("localhost")));
}

TEST_F(TlsTest, ACertificateOfAnotherContainerIsRefusedOnTheChannel) {
  // Container node2's channel (what fleetd builds from the config) reaches an agent serving
  // node1's certificate, signed by the same CA: refused. Its own agent is taken.
  RunningAgent impostor(dir_, "impostor", "127.0.0.1:0", TlsFlags(pki_, pki_, "node1"));
  RunningAgent own(dir_, "own", "127.0.0.1:0", TlsFlags(pki_, pki_, "node2"));
  auto channel_to = [&](const RunningAgent& a) {
    v1::Channel ch;
    ch.set_kind(v1::Channel::LOOPBACK);
    ch.set_address("127.0.0.1");
    ch.set_tls_name("node2");
    ch.set_ca_file(pki_ + "/ca.crt");
    ch.set_cert_file(pki_ + "/fleetd.crt");
    ch.set_key_file(pki_ + "/fleetd.key");
    absl::StatusOr<daemon::AgentTls> tls = daemon::ReadChannelTls("local/node2", ch);
    EXPECT_TRUE(tls.ok()) << tls.status();
    EXPECT_EQ(tls->target_name_override, "node2");
    return std::make_unique<daemon::GrpcAgentClient>("local/node2", a.target(), *tls);
  };
  EXPECT_FALSE(channel_to(impostor)->Status().ok());
  EXPECT_TRUE(channel_to(own)->Status().ok()) << own.Log();
  // Without tls_name the name is the channel's address.
  v1::Channel direct;
  direct.set_address("10.0.0.20");
  EXPECT_EQ(daemon::AgentTlsName(direct), "10.0.0.20");
  direct.set_address("[fd00::5]");
  EXPECT_EQ(daemon::AgentTlsName(direct), "fd00::5");
  direct.set_tls_name("ct-200");
  EXPECT_EQ(daemon::AgentTlsName(direct), "ct-200");
}

TEST_F(TlsTest, WithTlsTheAgentMayServeEveryAddress) {
  RunningAgent agent(dir_, "agent", "0.0.0.0:0", TlsFlags(pki_, pki_, "node1"));
  daemon::GrpcAgentClient client("local/tls", agent.target(), ReadTls(pki_, pki_));
  EXPECT_TRUE(client.Status().ok()) << agent.Log();
}

TEST_F(TlsTest, AnUnreadableFileNamesTheContainerAndTheFile) {
  absl::StatusOr<daemon::AgentTls> tls = daemon::ReadAgentTls(
      "pve1/200", pki_ + "/ca.crt", pki_ + "/missing.crt", pki_ + "/fleetd.key");
  ASSERT_FALSE(tls.ok());
  EXPECT_THAT(std::string(tls.status().message()),
              HasSubstr("container pve1/200: channel cert_file '" + pki_ + "/missing.crt'"));
}

// Not a TLS test: no certificates needed.
testing::RunResult RunAgent(const testing::TempDir& dir, const std::vector<std::string>& flags) {
  // Bounded: an agent that serves where it should have refused is stopped (exit 124).
  std::vector<std::string> argv = {"timeout", "20", testing::BuildPath("agent/fleet-agent"),
                                   "--state-dir", dir.Join("state")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::RunOptions options;
  options.env = std::map<std::string, std::string>{{"PATH", kPath}};
  options.output_path = dir.Join("agent.out");
  absl::StatusOr<testing::RunResult> r = testing::Run(argv, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : testing::RunResult{};
}

TEST(AgentListen, RefusesANonLoopbackAddressWithoutTls) {
  testing::TempDir dir;
  const testing::RunResult r = RunAgent(dir, {"--listen", "0.0.0.0:0"});
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error agent: refusing to serve 0.0.0.0:0 without TLS"));
  EXPECT_THAT(r.output, HasSubstr("--insecure-listen"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr(std::string(kAnnouncement))));
}

TEST(AgentListen, RefusesPlaintextTcpEvenOnLoopback) {
  for (const char* listen : {"127.0.0.1:0", "localhost:0", "[::1]:0"}) {
    testing::TempDir dir;
    const testing::RunResult r = RunAgent(dir, {"--listen", listen});
    EXPECT_EQ(r.exit_code, 1) << listen;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("error agent: refusing to serve ", listen,
                                                 " without TLS: every local user can reach a TCP "
                                                 "port (even on loopback)")));
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr(std::string(kAnnouncement))));
  }
}

TEST(AgentListen, InsecureListenIsLoud) {
  testing::TempDir dir;
  RunningAgent agent(dir, "agent", "127.0.0.1:0", {"--insecure-listen"});
  EXPECT_THAT(agent.Log(), HasSubstr("warning agent: --insecure-listen: serving "
                                     "127.0.0.1:0 in plaintext"));
}

TEST(AgentListen, TlsFlagsComeTogether) {
  testing::TempDir dir;
  const testing::RunResult r =
      RunAgent(dir, {"--listen", "127.0.0.1:0", "--tls-cert", dir.Join("a.crt")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--tls-cert, --tls-key and --tls-ca come together"));
}

}  // namespace
}  // namespace fleet
