#include "cli/global_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GlobalFlags, DefaultSocketIsInTheDefaultStateDir) {
  std::vector<std::string> args = {"status"};
  auto flags = ParseGlobalFlags(&args, nullptr);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->socket_path, "/var/lib/gpu-fleet/fleetd.sock");
  EXPECT_EQ(flags->timeout, absl::Seconds(10));
  EXPECT_THAT(args, ElementsAre("status"));
}

TEST(GlobalFlags, SocketBeatsStateDirBeatsEnvironment) {
  {
    std::vector<std::string> args = {"--state-dir", "/s", "--socket=/x.sock",
                                     "status",      "-o", "json"};
    auto flags = ParseGlobalFlags(&args, "/env.sock");
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->socket_path, "/x.sock");
    EXPECT_THAT(args, ElementsAre("status", "-o", "json"));
  }
  {
    std::vector<std::string> args = {"--state-dir=/s", "status"};
    auto flags = ParseGlobalFlags(&args, "/env.sock");
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->socket_path, "/s/fleetd.sock");
  }
  {
    std::vector<std::string> args = {"status"};
    auto flags = ParseGlobalFlags(&args, "/env.sock");
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->socket_path, "/env.sock");
  }
}

TEST(GlobalFlags, StopsAtTheVerbAndLeavesVerbFlagsAlone) {
  std::vector<std::string> args = {"--timeout", "500ms", "logs", "--socket", "x"};
  auto flags = ParseGlobalFlags(&args, nullptr);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->timeout, absl::Milliseconds(500));
  EXPECT_THAT(args, ElementsAre("logs", "--socket", "x"));
}

TEST(GlobalFlags, RejectsMissingValuesAndBadDurations) {
  std::vector<std::string> a = {"--socket"};
  EXPECT_THAT(std::string(ParseGlobalFlags(&a, nullptr).status().message()),
              HasSubstr("needs a value"));
  std::vector<std::string> b = {"--timeout", "soon", "status"};
  EXPECT_THAT(std::string(ParseGlobalFlags(&b, nullptr).status().message()),
              HasSubstr("'soon' is not a positive duration"));
  std::vector<std::string> c = {"--state-dir=", "status"};
  EXPECT_THAT(std::string(ParseGlobalFlags(&c, nullptr).status().message()),
              HasSubstr("empty value"));
}

TEST(GlobalFlags, ServerIsRepeatableOrACommaListWithMutualTls) {
  std::vector<std::string> args = {"--server",
                                   "10.0.0.5:7443,10.0.0.6:7443",
                                   "--server=[::1]:7443",
                                   "--tls-cert",
                                   "c.crt",
                                   "--tls-key=c.key",
                                   "--tls-ca",
                                   "ca.crt",
                                   "status"};
  auto flags = ParseGlobalFlags(&args, GlobalEnv{});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_THAT(flags->servers.addresses,
              ElementsAre("10.0.0.5:7443", "10.0.0.6:7443", "[::1]:7443"));
  EXPECT_EQ(flags->servers.tls.cert_file, "c.crt");
  EXPECT_EQ(flags->servers.tls.key_file, "c.key");
  EXPECT_EQ(flags->servers.tls.ca_file, "ca.crt");
  EXPECT_FALSE(flags->servers.insecure);
  EXPECT_THAT(args, ElementsAre("status"));
}

TEST(GlobalFlags, ServerAndTlsFromTheEnvironmentFlagsWin) {
  GlobalEnv env;
  env.server = "a:1, b:2";
  env.tls_cert = "env.crt";
  env.tls_key = "env.key";
  env.tls_ca = "env-ca.crt";
  env.socket = "/env.sock";
  {
    std::vector<std::string> args = {"status"};
    auto flags = ParseGlobalFlags(&args, env);
    ASSERT_TRUE(flags.ok()) << flags.status();
    EXPECT_THAT(flags->servers.addresses, ElementsAre("a:1", "b:2"));  // beats FLEET_SOCKET
    EXPECT_EQ(flags->servers.tls.cert_file, "env.crt");
  }
  {
    std::vector<std::string> args = {"--server", "c:3", "--tls-ca", "flag-ca.crt", "status"};
    auto flags = ParseGlobalFlags(&args, env);
    ASSERT_TRUE(flags.ok()) << flags.status();
    EXPECT_THAT(flags->servers.addresses, ElementsAre("c:3"));
    EXPECT_EQ(flags->servers.tls.ca_file, "flag-ca.crt");
    EXPECT_EQ(flags->servers.tls.key_file, "env.key");
  }
  {
    // A socket on the command line beats a server from the environment.
    std::vector<std::string> args = {"--socket", "/x.sock", "status"};
    auto flags = ParseGlobalFlags(&args, env);
    ASSERT_TRUE(flags.ok()) << flags.status();
    EXPECT_TRUE(flags->servers.addresses.empty());
    EXPECT_EQ(flags->socket_path, "/x.sock");
  }
}

TEST(GlobalFlags, ServerNeedsTlsOrInsecureByName) {
  const auto message = [](std::vector<std::string> args) {
    return std::string(ParseGlobalFlags(&args, GlobalEnv{}).status().message());
  };
  EXPECT_THAT(message({"--server", "a:1", "status"}), HasSubstr("is mutual TLS: give --tls-cert"));
  EXPECT_THAT(message({"--server", "a:1", "--tls-cert", "c", "--tls-key", "k", "status"}),
              HasSubstr("is mutual TLS"));
  EXPECT_THAT(message({"--server", "a:1", "--insecure", "--tls-ca", "ca", "status"}),
              HasSubstr("--insecure (plaintext) goes without"));
  EXPECT_THAT(message({"--tls-ca", "ca", "status"}), HasSubstr("are for --server"));
  EXPECT_THAT(message({"--insecure", "status"}), HasSubstr("are for --server"));
  EXPECT_THAT(message({"--server", "a:1", "--socket", "/s", "--insecure", "status"}),
              HasSubstr("goes without --socket and --state-dir"));
  EXPECT_THAT(message({"--server", "nohost", "--insecure", "status"}), HasSubstr("give HOST:PORT"));
  EXPECT_THAT(message({"--server", "::1:7443", "--insecure", "status"}), HasSubstr("brackets"));
  std::vector<std::string> ok = {"--server", "a:1", "--insecure", "status"};
  auto flags = ParseGlobalFlags(&ok, GlobalEnv{});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->servers.insecure);
}

}  // namespace
}  // namespace fleet::cli
