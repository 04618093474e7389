#include "cli/fleet_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
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

// A fleetd on 127.0.0.1:0 (plaintext: the client's --insecure) whose Status answers with one row
// named `name`, or, when `leader` is set, "not the leader; the leader is at LEADER".
class TcpFleet final : public v1::Fleet::Service {
 public:
  TcpFleet(std::string name, std::string leader = "")
      : name_(std::move(name)), leader_(std::move(leader)) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    EXPECT_GT(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~TcpFleet() override { server_->Shutdown(std::chrono::system_clock::now()); }

  grpc::Status Status(grpc::ServerContext* context, const v1::FleetStatusRequest*,
                      v1::FleetStatusResponse* response) override {
    ++calls_;
    if (!leader_.empty()) {
      context->AddTrailingMetadata(kLeaderMetadataKey, leader_);
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "not the leader");
    }
    response->add_servers()->set_server(name_);
    return grpc::Status::OK;
  }

  const std::string& address() const { return address_; }
  int calls() const { return calls_; }

 private:
  const std::string name_, leader_;
  std::string address_;
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

ServerOptions Insecure(std::vector<std::string> addresses) {
  ServerOptions options;
  options.addresses = std::move(addresses);
  options.insecure = true;
  return options;
}

TEST(FleetClient, OverTcpTheFirstAddressThatAnswersIsUsed) {
  TcpFleet live("live");
  // A port nobody serves: a server started and gone.
  std::string dead;
  { dead = TcpFleet("gone").address(); }
  FleetClient client(Insecure({dead, live.address()}), absl::Seconds(10));
  absl::StatusOr<v1::FleetStatusResponse> r = client.Status({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->servers(0).server(), "live");
  EXPECT_EQ(client.target(), live.address());

  FleetClient alone(Insecure({dead}), absl::Seconds(10));
  absl::Status s = alone.Status({}).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("cannot reach fleetd at " + dead + ": "));
}

TEST(FleetClient, NotTheLeaderRedirectsToTheLeader) {
  TcpFleet leader("from-leader");
  TcpFleet standby("from-standby", leader.address());
  FleetClient client(Insecure({standby.address()}), absl::Seconds(10));
  absl::StatusOr<v1::FleetStatusResponse> r = client.Status({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->servers(0).server(), "from-leader");
  EXPECT_EQ(client.target(), leader.address());
  // Kept: the next call goes to the leader directly.
  ASSERT_TRUE(client.Status({}).ok());
  EXPECT_EQ(standby.calls(), 1);
  EXPECT_EQ(leader.calls(), 2);

  // A leader named that cannot be reached: the error names it.
  TcpFleet lost("lost", "127.0.0.1:1");
  FleetClient redirected(Insecure({lost.address()}), absl::Seconds(10));
  absl::Status s = redirected.Status({}).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("cannot reach fleetd at 127.0.0.1:1: "));
}

}  // namespace
}  // namespace fleet::cli
