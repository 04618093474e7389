// fleetctl over the network (issue 16): the real fleetd with --listen 127.0.0.1:0 and mutual TLS
// (certificates from the real `fleetctl certs init`), the real fleetctl with --server.
// - fleetd writes the port it got to STATE_DIR/listen.addr (0600); the unix socket keeps working
//   beside it, the same service on both.
// - A client presents a certificate of the fleet CA or is refused: no certificate, one of another
//   CA, an agent's (server-only) certificate, plaintext.
// - fleetd refuses --listen without its TLS files unless --insecure-listen, which it says loudly.
// - fleetctl tries several addresses in order and uses the first that answers; an error names the
//   address.
// Skipped when `openssl` is not on PATH (certs init runs it).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/fleet.grpc.pb.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/eventually.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using fleet::sim::testing::BackgroundProcess;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kDeadline = std::chrono::seconds(30);
constexpr char kPath[] = "/usr/bin:/bin";
constexpr char kServer[] = "local/sim/gpu0";

// A port of 127.0.0.1 where nothing listens: bound (so nobody else gets it) and never listening,
// so a connection to it is refused at once.
class DeadPort {
 public:
  DeadPort() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~DeadPort() { close(fd_); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_;
  int port_ = 0;
};

class FleetdListenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("PATH");
    if (testing::FindOnPath("openssl", kPath).empty() &&
        testing::FindOnPath("openssl", path == nullptr ? "" : path).empty()) {
      GTEST_SKIP() << "openssl is not installed: fleetctl certs init needs it";
    }
    // Ours: fleetd's listen certificate for 127.0.0.1, a client, an agent. Another CA with the
    // same names.
    for (const std::string& d : {pki_, other_}) {
      const testing::RunResult r =
          Fleetctl({"certs", "init", "--dir", d, "--listen-names", "127.0.0.1,localhost",
                    "--clients", "alice", "--agents", "node1"});
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    // One container whose agent never answers: fleetd has a server to show and nothing to run.
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

  void TearDown() override {
    if (fleetd_ != nullptr) {
      absl::StatusOr<sim::testing::ExitInfo> exit = fleetd_->Stop(SIGTERM, kDeadline);
      ASSERT_TRUE(exit.ok()) << exit.status();
      EXPECT_TRUE(exit->exited && exit->exit_code == 0) << fleetd_->Log();
      // Its address goes with it: a later reader never dials a port nobody serves.
      struct stat st;
      EXPECT_NE(stat(addr_file().c_str(), &st), 0);
    }
  }

  testing::RunResult Fleetctl(const std::vector<std::string>& args,
                              std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {testing::BuildPath("cli/fleetctl")};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::RunOptions options;
    env["PATH"] = kPath;
    options.env = env;
    options.output_path = dir_.Join(absl::StrCat("fleetctl-", ++runs_, ".out"));
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  std::vector<std::string> FleetdArgv(const std::vector<std::string>& extra) const {
    std::vector<std::string> argv = {testing::BuildPath("daemon/fleetd"), "--state-dir", state_,
                                     "--config", dir_.Join("fleet.yaml")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  std::vector<std::string> ListenTls(const std::string& pki) const {
    return {"--listen-cert", pki + "/fleetd-listen.crt",
            "--listen-key",  pki + "/fleetd-listen.key",
            "--listen-ca",   pki + "/ca.crt"};
  }

  // fleetd with `extra` flags, once it has written listen.addr; its address.
  std::string StartFleetd(const std::vector<std::string>& extra) {
    auto p =
        BackgroundProcess::Start(FleetdArgv(extra), {{"PATH", kPath}}, dir_.Join("fleetd.log"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    fleetd_ = *std::move(p);
    EXPECT_TRUE(
        fleetd_
            ->WaitUntil([&] { return absl::EndsWith(testing::ReadFile(addr_file()), "\n"); },
                        kDeadline)
            .ok())
        << fleetd_->Log();
    return std::string(absl::StripTrailingAsciiWhitespace(testing::ReadFile(addr_file())));
  }

  // fleetctl's TLS flags with `client`'s certificate of `pki`, trusting our CA.
  std::vector<std::string> ClientTls(const std::string& pki, const std::string& cert) const {
    return {"--tls-cert", absl::StrCat(pki, "/", cert, ".crt"),
            "--tls-key",  absl::StrCat(pki, "/", cert, ".key"),
            "--tls-ca",   pki_ + "/ca.crt"};
  }

  testing::RunResult StatusOver(const std::string& servers, const std::vector<std::string>& tls) {
    std::vector<std::string> args = {"--server", servers};
    args.insert(args.end(), tls.begin(), tls.end());
    args.insert(args.end(), {"--timeout", "10s", "status", "-o", "name"});
    return Fleetctl(args);
  }

  std::string addr_file() const { return state_ + "/listen.addr"; }

  testing::TempDir dir_;
  const std::string pki_ = dir_.Join("pki");
  const std::string other_ = dir_.Join("other");
  const std::string state_ = dir_.Join("state");
  std::unique_ptr<BackgroundProcess> fleetd_;
  int runs_ = 0;
};

TEST_F(FleetdListenTest, ServesTheSameFleetOverMutualTlsBesideTheSocket) {
  std::vector<std::string> flags = {"--listen", "127.0.0.1:0"};
  for (const std::string& f : ListenTls(pki_)) flags.push_back(f);
  const std::string address = StartFleetd(flags);
  ASSERT_THAT(address, ::testing::MatchesRegex("127\\.0\\.0\\.1:[1-9][0-9]*"));
  struct stat st;
  ASSERT_EQ(stat(addr_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_THAT(fleetd_->Log(), HasSubstr("serving fleet.proto on " + address + " with mutual TLS"));

  const testing::RunResult tls = StatusOver(address, ClientTls(pki_, "client-alice"));
  EXPECT_EQ(tls.exit_code, 0) << tls.output;
  EXPECT_EQ(tls.output, std::string(kServer) + "\n");

  // The same from the environment.
  const testing::RunResult env =
      Fleetctl({"status", "-o", "name"}, {{"FLEET_SERVER", address},
                                          {"FLEET_TLS_CERT", pki_ + "/client-alice.crt"},
                                          {"FLEET_TLS_KEY", pki_ + "/client-alice.key"},
                                          {"FLEET_TLS_CA", pki_ + "/ca.crt"}});
  EXPECT_EQ(env.exit_code, 0) << env.output;
  EXPECT_EQ(env.output, std::string(kServer) + "\n");

  // The unix socket still answers, the same.
  const testing::RunResult local = Fleetctl({"--state-dir", state_, "status", "-o", "name"});
  EXPECT_EQ(local.exit_code, 0) << local.output;
  EXPECT_EQ(local.output, std::string(kServer) + "\n");
}

TEST_F(FleetdListenTest, RefusesClientsWithoutACertificateOfItsCa) {
  std::vector<std::string> flags = {"--listen", "127.0.0.1:0"};
  for (const std::string& f : ListenTls(pki_)) flags.push_back(f);
  const std::string address = StartFleetd(flags);
  ASSERT_FALSE(address.empty());

  // A certificate of another CA (that trusts fleetd's).
  const testing::RunResult stranger = StatusOver(address, ClientTls(other_, "client-alice"));
  EXPECT_EQ(stranger.exit_code, 1) << stranger.output;
  EXPECT_THAT(stranger.output, HasSubstr("fleetctl: cannot reach fleetd at " + address + ": "));
  EXPECT_THAT(stranger.output, Not(HasSubstr(kServer)));

  // An agent's certificate, of our CA but for serving only (serverAuth).
  const testing::RunResult agent = StatusOver(address, ClientTls(pki_, "agent-node1"));
  EXPECT_EQ(agent.exit_code, 1) << agent.output;
  EXPECT_THAT(agent.output, Not(HasSubstr(kServer)));

  // Plaintext.
  const testing::RunResult plaintext = StatusOver(address, {"--insecure"});
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.output;
  EXPECT_THAT(plaintext.output, HasSubstr("fleetctl: cannot reach fleetd at " + address + ": "));

  // TLS that trusts fleetd but presents no certificate (fleetctl never does that: by hand).
  grpc::SslCredentialsOptions no_cert;
  no_cert.pem_root_certs = testing::ReadFile(pki_ + "/ca.crt");
  auto stub = v1::Fleet::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(no_cert)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::FleetStatusResponse response;
  const grpc::Status anonymous = stub->Status(&context, v1::FleetStatusRequest(), &response);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAVAILABLE) << anonymous.error_message();
  EXPECT_EQ(response.servers_size(), 0);

  // And the right one still works.
  const testing::RunResult ours = StatusOver(address, ClientTls(pki_, "client-alice"));
  EXPECT_EQ(ours.exit_code, 0) << ours.output;
}

TEST_F(FleetdListenTest, RefusesToListenWithoutTlsUnlessToldInsecure) {
  const std::string missing = dir_.Join("missing.crt");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refusals = {
      {{"--listen", "127.0.0.1:0"}, "refusing to serve fleet.proto on 127.0.0.1:0 without TLS"},
      {{"--listen", "127.0.0.1:0", "--listen-cert", pki_ + "/fleetd-listen.crt"},
       "--listen-cert, --listen-key and --listen-ca come together"},
      {{"--listen", "127.0.0.1:0", "--listen-cert", missing, "--listen-key",
        pki_ + "/fleetd-listen.key", "--listen-ca", pki_ + "/ca.crt"},
       "--listen-cert " + missing + ": cannot be read"},
      {ListenTls(pki_), "--listen-cert, --listen-key and --listen-ca are for --listen"},
      {{"--listen", "7443"}, "flag --listen '7443': give HOST:PORT"},
      // Where standbys send clients is a leader's business (issue 16): --store-file, and a port.
      {{"--listen", "127.0.0.1:0", "--insecure-listen", "--advertise", "fleetd-a.example:7443"},
       "flag --advertise 'fleetd-a.example:7443': give HOST:PORT, with --store-file and --listen"},
      {{"--advertise", "fleetd-a.example"}, "flag --advertise 'fleetd-a.example'"},
      {{"--lease", "100ms"}, "flag --lease: '100ms' is not a duration of at least 1s"},
  };
  for (const auto& [extra, why] : refusals) {
    testing::RunOptions options;
    options.env = std::map<std::string, std::string>{{"PATH", kPath}};
    options.output_path = dir_.Join(absl::StrCat("refused-", ++runs_, ".log"));
    absl::StatusOr<testing::RunResult> refused = testing::Run(FleetdArgv(extra), options);
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_TRUE(refused->exited);
    EXPECT_EQ(refused->exit_code, 1) << refused->output;
    EXPECT_THAT(refused->output, HasSubstr(why));
    // Refused before anything is opened: no record, no address.
    struct stat st;
    EXPECT_NE(stat(addr_file().c_str(), &st), 0);
    EXPECT_NE(stat((state_ + "/fleet.db").c_str(), &st), 0) << refused->output;
  }

  // Asked for by name: served, and said loudly.
  const std::string address = StartFleetd({"--listen", "127.0.0.1:0", "--insecure-listen"});
  ASSERT_FALSE(address.empty());
  EXPECT_THAT(fleetd_->Log(), HasSubstr("--insecure-listen: serving fleet.proto on " + address +
                                        " in PLAINTEXT WITHOUT AUTHENTICATION"));
  const testing::RunResult plaintext = StatusOver(address, {"--insecure"});
  EXPECT_EQ(plaintext.exit_code, 0) << plaintext.output;
  EXPECT_EQ(plaintext.output, std::string(kServer) + "\n");
  // fleetctl never falls back to plaintext by itself: TLS to a plaintext fleetd fails.
  const testing::RunResult tls = StatusOver(address, ClientTls(pki_, "client-alice"));
  EXPECT_EQ(tls.exit_code, 1) << tls.output;
}

TEST_F(FleetdListenTest, SeveralAddressesReachTheFirstThatAnswers) {
  std::vector<std::string> flags = {"--listen", "127.0.0.1:0"};
  for (const std::string& f : ListenTls(pki_)) flags.push_back(f);
  const std::string address = StartFleetd(flags);
  ASSERT_FALSE(address.empty());
  DeadPort dead1, dead2;

  // The first is dead: the live one answers (a comma list, and --server repeated).
  const testing::RunResult listed =
      StatusOver(dead1.address() + "," + address, ClientTls(pki_, "client-alice"));
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_EQ(listed.output, std::string(kServer) + "\n");
  std::vector<std::string> repeated = {"--server",      dead1.address(), "--server",
                                       dead2.address(), "--server",      address};
  for (const std::string& f : ClientTls(pki_, "client-alice")) repeated.push_back(f);
  repeated.insert(repeated.end(), {"status", "-o", "name"});
  const testing::RunResult again = Fleetctl(repeated);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, std::string(kServer) + "\n");

  // None answers: each is named with its reason.
  const testing::RunResult none =
      StatusOver(dead1.address() + "," + dead2.address(), ClientTls(pki_, "client-alice"));
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_THAT(
      none.output,
      HasSubstr("fleetctl: cannot reach fleetd at any of 2 addresses: " + dead1.address() + ": "));
  EXPECT_THAT(none.output, HasSubstr("; " + dead2.address() + ": "));
  // One address: the message names it, like the socket's.
  const testing::RunResult one = StatusOver(dead1.address(), ClientTls(pki_, "client-alice"));
  EXPECT_EQ(one.exit_code, 1) << one.output;
  EXPECT_THAT(one.output, HasSubstr("fleetctl: cannot reach fleetd at " + dead1.address() + ": "));
}

}  // namespace
}  // namespace fleet
