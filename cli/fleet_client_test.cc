#include "cli/fleet_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"
#include "tests/testing/subprocess.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(FleetClient, NoSocketIsUnavailableAndSaysWhatToCheck) {
  TempDir dir;
  FleetClient client(dir.Join("fleetd.sock"), absl::Seconds(10));
  absl::StatusOr<v1::FleetStatusResponse> r = client.Status({});
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_EQ(r.status().message(), "cannot reach fleetd at unix:" + dir.Join("fleetd.sock") +
                                      ": no such socket (is fleetd running? --socket, "
                                      "--state-dir or FLEET_SOCKET name another)");
}

TEST(FleetClient, NotASocketIsSaid) {
  TempDir dir;
  dir.WriteFile("fleetd.sock", "");
  FleetClient client(dir.Join("fleetd.sock"), absl::Seconds(10));
  absl::Status s = client.ListAttempts({}).status();
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr(": not a socket"));
}

TEST(FleetClient, SocketWithNobodyListeningIsUnavailable) {
  TempDir dir;
  const std::string path = dir.Join("fleetd.sock");
  // A socket file left behind by a daemon that died: bound, never listening.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  FleetClient client(path, absl::Seconds(10));
  absl::Status s = client.Stop({}).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("cannot reach fleetd at unix:" + path + ": "));
}

TEST(FleetClient, DaemonErrorsKeepTheirCodeAndMessage) {
  FakeFleetEnv env;
  env.service().SetError(absl::FailedPreconditionError("no fleet config deployed"));
  FleetClient client(env.socket_path(), absl::Seconds(10));
  absl::Status s = client.Restart({}).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), "no fleet config deployed");
  EXPECT_EQ(client.target(), "unix:" + env.socket_path());
}

TEST(FleetClient, WatchStoppedByTheCallerIsOk) {
  FakeFleetEnv env;
  v1::FleetStatusResponse m;
  m.add_servers()->set_server("a/1/gpu0");
  env.service().SetWatchScript({m, m, m}, /*hold_open=*/true);
  FleetClient client(env.socket_path(), absl::Seconds(10));
  int seen = 0;
  absl::Status s = client.Watch({}, [&seen](const v1::FleetStatusResponse&) { return ++seen < 2; });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(seen, 2);
}

TEST(FleetClient, WatchWithoutAFirstMessageHitsTheDeadline) {
  FakeFleetEnv env;
  env.service().SetWatchScript({}, /*hold_open=*/true);
  FleetClient client(env.socket_path(), absl::Milliseconds(100));
  absl::Status s = client.Watch({}, [](const v1::FleetStatusResponse&) { return true; });
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_EQ(s.message(), "fleetd at unix:" + env.socket_path() + " did not answer within 100ms");
}

}  // namespace
}  // namespace fleet::cli
