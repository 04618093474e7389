#include "cli/hosts_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::kPve1Fingerprint;
using ::fleet::cli::testing::kPve1OldFingerprint;
using ::fleet::cli::testing::MakeHosts;
using ::fleet::cli::testing::MakeTrustHost;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

class HostsCommandTest : public ::testing::Test {
 protected:
  FakeFleetEnv env_;
};

// --- hosts [list] ---

TEST_F(HostsCommandTest, ListShowsEachHostsReachAndRecordedKey) {
  env_.service().SetHosts(MakeHosts());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"list"}, {"list", "-o", "table"}}) {
    const auto o = env_.Run(RunHosts, args);
    EXPECT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.out,
              "NAME   REACH  ADDRESS        USER   CONTAINERS  KNOWN_HOSTS                     "
              "HOST_KEY\n"
              "local  local  -              -      1           -                               -\n"
              "pve1   ssh    10.0.0.5:22    root   2           /var/lib/gpu-fleet/known_hosts  "
              "ssh-ed25519 SHA256:n9Hty281FMDdEs1OnD87D59fPq+EK6uzMUSsoXnpnOo\n"
              "pve2   ssh    pve2.lan:2222  admin  1           /etc/gpu-fleet/known_hosts      "
              "none\n");
    EXPECT_EQ(o.err, "fleetctl hosts: no key recorded for pve2: run fleetctl hosts trust pve2\n");
  }
  EXPECT_EQ(env_.service().hosts_requests().size(), 3u);
}

TEST_F(HostsCommandTest, ListAsJson) {
  env_.service().SetHosts(MakeHosts());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-o", "json"}, {"list", "--output=json"}}) {
    const auto o = env_.Run(RunHosts, args);
    EXPECT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.err, "");
    EXPECT_THAT(o.out, StartsWith("{\"hosts\":[{\"name\":\"local\",\"reach\":\"local\",\"address\":"
                                  "\"\",\"port\":0,\"user\":\"\",\"identity_file\":\"\","
                                  "\"known_hosts\":\"\",\"containers\":1,\"host_keys\":[],"
                                  "\"host_keys_error\":\"\"},{\"name\":\"pve1\""));
    EXPECT_THAT(o.out, HasSubstr("\"host_keys\":[{\"key_type\":\"ssh-ed25519\",\"fingerprint\":\"" +
                                 std::string(kPve1Fingerprint) + "\"}]"));
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1);
  }
}

TEST_F(HostsCommandTest, ListSaysWhenKnownHostsCannotBeReadOrThereAreNoHosts) {
  v1::ListHostsResponse hosts = MakeHosts();
  hosts.mutable_hosts(2)->set_host_keys_error(
      "host pve2: ssh known_hosts /etc/gpu-fleet/known_hosts: open: Permission denied");
  env_.service().SetHosts(hosts);
  auto o = env_.Run(RunHosts, {});
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, HasSubstr("/etc/gpu-fleet/known_hosts      ?\n"));
  EXPECT_EQ(o.err,
            "fleetctl hosts: host pve2: ssh known_hosts /etc/gpu-fleet/known_hosts: open: "
            "Permission denied\n");

  env_.service().SetHosts({});
  o = env_.Run(RunHosts, {});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "fleetctl hosts: fleetd's config has no hosts\n");
  o = env_.Run(RunHosts, {"-o", "json"});
  EXPECT_EQ(o.out, "{\"hosts\":[]}\n");
}

TEST_F(HostsCommandTest, UsageErrors) {
  auto o = env_.Run(RunHosts, {"untrust", "pve1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err,
            "fleetctl hosts: unknown sub-verb 'untrust' (list or trust; see fleetctl hosts "
            "--help)\n");
  o = env_.Run(RunHosts, {"list", "pve1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl hosts: unexpected argument 'pve1'"));
  o = env_.Run(RunHosts, {"-o", "wide"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl hosts: flag -o/--output: 'wide' is not one of table, json\n");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"trust"}, {"trust", "pve1", "pve2"}, {"trust", ""}}) {
    o = env_.Run(RunHosts, args);
    EXPECT_EQ(o.code, 1);
    EXPECT_EQ(o.err, "fleetctl hosts trust: give one HOST (see --help)\n");
  }
  o = env_.Run(RunHosts, {"trust", "pve1", "-o", "table"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl hosts trust: flag -o/--output: 'table' is not one of text, json\n");
  o = env_.Run(RunHosts, {"trust", "pve1", "--fingerprint"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl hosts trust: "));
  // Nothing reached fleetd.
  EXPECT_THAT(env_.service().trust_requests(), IsEmpty());
  EXPECT_THAT(env_.service().hosts_requests(), IsEmpty());
}

TEST_F(HostsCommandTest, HelpForEachLevel) {
  auto o = env_.Run(RunHosts, {"--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, StartsWith("usage: fleetctl hosts [list] [-o table|json]\n"
                                "       fleetctl hosts trust HOST [--fingerprint SHA256:...]"));
  o = env_.Run(RunHosts, {"trust", "--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, HasSubstr("--fingerprint SHA256:..."));
  o = env_.Run(RunHosts, {"list", "-h"});
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, HasSubstr("--output"));
}

// --- hosts trust HOST: step one, shown and not recorded ---

TEST_F(HostsCommandTest, TrustWithoutFingerprintShowsANewKeyAndHowToConfirmIt) {
  env_.service().SetTrustHost(MakeTrustHost("new", /*recorded=*/false));
  const auto o = env_.Run(RunHosts, {"trust", "pve1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "host pve1 (10.0.0.5:22) shows ssh-ed25519 key " +
                       std::string(kPve1Fingerprint) +
                       "\n"
                       "new: /var/lib/gpu-fleet/known_hosts has no key for pve1\n"
                       "check the fingerprint on pve1 itself (ssh-keygen -lf "
                       "/etc/ssh/ssh_host_ed25519_key.pub), then run: fleetctl hosts trust pve1 "
                       "--fingerprint " +
                       kPve1Fingerprint + "\n");
  EXPECT_EQ(o.err,
            "fleetctl hosts trust: nothing recorded: confirm pve1's key with --fingerprint " +
                std::string(kPve1Fingerprint) + "\n");
  const auto requests = env_.service().trust_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].host(), "pve1");
  EXPECT_EQ(requests[0].fingerprint(), "");
  // fleetd connects to the host: the call may take longer than the usual 10s.
  EXPECT_GT(env_.service().trust_time_left(), absl::Seconds(50));
}

TEST_F(HostsCommandTest, TrustWithoutFingerprintShowsAChangedKeyAndTheRecordedOne) {
  env_.service().SetTrustHost(MakeTrustHost("changed", /*recorded=*/false));
  const auto o = env_.Run(RunHosts, {"trust", "pve1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.out, HasSubstr("CHANGED: /var/lib/gpu-fleet/known_hosts has ssh-ed25519 " +
                               std::string(kPve1OldFingerprint) +
                               " for pve1, and fleetd refuses to connect\n"
                               "if pve1 was reinstalled that is expected; otherwise someone may be "
                               "intercepting the connection\n"));
  EXPECT_THAT(o.out, HasSubstr("then run: fleetctl hosts trust pve1 --fingerprint " +
                               std::string(kPve1Fingerprint) + "\n"));
  EXPECT_THAT(o.err, StartsWith("fleetctl hosts trust: nothing recorded"));
}

TEST_F(HostsCommandTest, TrustWithoutFingerprintOfATrustedKeyExitsZero) {
  env_.service().SetTrustHost(MakeTrustHost("trusted", /*recorded=*/false));
  const auto o = env_.Run(RunHosts, {"trust", "pve1"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "host pve1 (10.0.0.5:22) shows ssh-ed25519 key " +
                       std::string(kPve1Fingerprint) +
                       "\n"
                       "trusted: /var/lib/gpu-fleet/known_hosts has this key for pve1; nothing to "
                       "do\n");
  EXPECT_EQ(o.err, "");
}

// --- step two: recorded ---

TEST_F(HostsCommandTest, TrustWithFingerprintRecordsAndSaysWhere) {
  env_.service().SetTrustHost(MakeTrustHost("new", /*recorded=*/true));
  auto o = env_.Run(RunHosts, {"trust", "pve1", "--fingerprint", kPve1Fingerprint});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "recorded ssh-ed25519 key " + std::string(kPve1Fingerprint) +
                       " of pve1 (10.0.0.5:22) in /var/lib/gpu-fleet/known_hosts\n");
  EXPECT_EQ(o.err, "");
  const auto requests = env_.service().trust_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].host(), "pve1");
  EXPECT_EQ(requests[0].fingerprint(), kPve1Fingerprint);

  env_.service().SetTrustHost(MakeTrustHost("changed", /*recorded=*/true));
  o = env_.Run(RunHosts, {"trust", "--fingerprint=" + std::string(kPve1Fingerprint), "pve1"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out,
              HasSubstr("\nreplaced ssh-ed25519 " + std::string(kPve1OldFingerprint) + "\n"));

  env_.service().SetTrustHost(MakeTrustHost("trusted", /*recorded=*/true));
  o = env_.Run(RunHosts, {"trust", "pve1", "--fingerprint", kPve1Fingerprint});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("(it was trusted already)\n"));
  EXPECT_THAT(o.out, Not(HasSubstr("replaced")));
}

TEST_F(HostsCommandTest, TrustAsJson) {
  env_.service().SetTrustHost(MakeTrustHost("changed", /*recorded=*/false));
  const auto o = env_.Run(RunHosts, {"trust", "pve1", "-o", "json"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out,
            "{\"host\":\"pve1\",\"address\":\"10.0.0.5:22\",\"key_type\":\"ssh-ed25519\","
            "\"fingerprint\":\"" +
                std::string(kPve1Fingerprint) +
                "\",\"key_state\":\"changed\",\"recorded\":false,\"known_hosts\":\"/var/"
                "lib/gpu-fleet/known_hosts\",\"previous_keys\":[{\"key_type\":\"ssh-"
                "ed25519\",\"fingerprint\":\"" +
                kPve1OldFingerprint + "\"}]}\n");
  EXPECT_THAT(o.err, StartsWith("fleetctl hosts trust: nothing recorded"));
}

TEST_F(HostsCommandTest, TrustErrorsAreFleetdsWords) {
  env_.service().SetError(
      absl::NotFoundError("host pve9: not in fleetd's config (its hosts: "
                          "local, pve1)"));
  auto o = env_.Run(RunHosts, {"trust", "pve9"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err,
            "fleetctl hosts trust: host pve9: not in fleetd's config (its hosts: local, pve1)\n");
  env_.service().SetError(absl::FailedPreconditionError(
      "host pve1: ssh host key is SHA256:a, not the expected SHA256:b; not trusted"));
  o = env_.Run(RunHosts, {"trust", "pve1", "--fingerprint", "SHA256:b"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err,
            "fleetctl hosts trust: host pve1: ssh host key is SHA256:a, not the expected "
            "SHA256:b; not trusted\n");
  // An ssh host that cannot be reached is, like fleetd itself, `fleetctl: MESSAGE`.
  env_.service().SetError(
      absl::UnavailableError("host pve1: ssh connect: 10.0.0.5:22: Connection refused"));
  o = env_.Run(RunHosts, {"trust", "pve1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl: host pve1: ssh connect: 10.0.0.5:22: Connection refused\n");
  o = env_.Run(RunHosts, {"list"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl: host pve1"));
}

}  // namespace
}  // namespace fleet::cli
