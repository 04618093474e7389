// FleetService over in-process gRPC: what fleetd answers with, as a client gets it. Plans with a
// secret env value (stored whole in fleet.db: the servers launch with it) are answered with the
// value masked, in `fleetctl remediations` and `fleetctl plan`'s source alike.
#include "daemon/fleet_service.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/fleet.grpc.pb.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A daemon over `store` whose containers have no agent (the record is all it answers from).
absl::StatusOr<std::unique_ptr<Daemon>> DaemonWithoutAgents(std::unique_ptr<FleetStore> store,
                                                            Clock* clock) {
  return Daemon::Create(
      std::move(store),
      [](const std::string&, const fleet::v1::Host&, const fleet::v1::Container&) {
        return std::unique_ptr<AgentClient>();
      },
      clock, DaemonOptions());
}

TEST(FleetService, AStoredPlanIsAnsweredWithItsSecretEnvValuesRedacted) {
  fleet::testing::TempDir dir;
  auto store = FleetStore::Open(dir.Join("fleet.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  fleet::v1::Plan plan;
  plan.set_container("local/200");
  plan.set_server("local/200/gpu0");
  plan.set_status("applied");
  plan.set_trigger("manual");
  auto* set = plan.add_actions()->mutable_action()->mutable_set_env();
  set->set_name("HF_TOKEN");
  set->set_value("hf_supersecret123");
  (*plan.mutable_env_changes())["HF_TOKEN"] = "hf_supersecret123";
  plan.set_summary("set HF_TOKEN=hf_supersecret123");
  auto created = (*store)->CreateRemediation(plan, absl::FromUnixSeconds(1800000000));
  ASSERT_TRUE(created.ok()) << created.status();

  fleet::testing::FakeClock clock;
  auto daemon = DaemonWithoutAgents(*std::move(store), &clock);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  FleetService service(daemon->get(), dir.path());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto stub = fleet::v1::Fleet::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  fleet::v1::ListRemediationsResponse response;
  grpc::Status status = stub->ListRemediations(&context, {}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.plans_size(), 1);
  EXPECT_THAT(response.SerializeAsString(), Not(HasSubstr("hf_supersecret123")));
  EXPECT_EQ(response.plans(0).actions(0).action().set_env().value(), "<redacted>");
  EXPECT_EQ(response.plans(0).env_changes().at("HF_TOKEN"), "<redacted>");
  EXPECT_EQ(response.plans(0).summary(), "set HF_TOKEN=<redacted>");
  server->Shutdown();
}

}  // namespace

// `fleetctl events --since N`: what the record keeps after N, oldest first; a position older than
// the oldest kept (pruned) is said once (resync, with the oldest), then the stream goes on from it.
TEST(FleetService, FleetEventsResumeFromAnIndexAndSayResyncWhenItWasPruned) {
  fleet::testing::TempDir dir;
  auto store = FleetStore::Open(dir.Join("fleet.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<fleet::v1::FleetEvent> events;
  for (int i = 1; i <= 5; ++i) {
    fleet::v1::FleetEvent e;
    e.set_index(i);
    e.set_type("server_state");
    e.set_server(absl::StrCat("local/200/gpu", i));
    e.mutable_at()->set_seconds(1800000000 + i);
    events.push_back(e);
  }
  ASSERT_TRUE((*store)->AppendFleetEvents(events, nullptr, absl::FromUnixSeconds(1800000000)).ok());
  // Retention pruned the first three.
  ASSERT_TRUE((*store)->db().Exec("DELETE FROM fleet_events WHERE idx <= 3").ok());

  fleet::testing::FakeClock clock;
  auto daemon = DaemonWithoutAgents(*std::move(store), &clock);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  FleetService service(daemon->get(), dir.path());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto stub = fleet::v1::Fleet::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  auto read = [&](int64_t since) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    fleet::v1::FleetEventsRequest request;
    request.set_since(since);
    std::vector<fleet::v1::FleetEventsResponse> out;
    auto reader = stub->FleetEvents(&context, request);
    fleet::v1::FleetEventsResponse message;
    while (reader->Read(&message)) out.push_back(message);
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  };
  // From index 1 (the client saw 1): 2 and 3 are gone.
  std::vector<fleet::v1::FleetEventsResponse> got = read(1);
  ASSERT_GE(got.size(), 2u);
  EXPECT_TRUE(got[0].resync());
  EXPECT_EQ(got[0].oldest(), 4);
  std::vector<int64_t> indexes;
  for (const auto& m : got) {
    for (const auto& e : m.events()) indexes.push_back(e.index());
  }
  EXPECT_EQ(indexes, (std::vector<int64_t>{4, 5}));
  // From 4: no resync, only 5; from 0 (all kept): no resync either.
  got = read(4);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].resync());
  ASSERT_EQ(got[0].events_size(), 1);
  EXPECT_EQ(got[0].events(0).index(), 5);
  EXPECT_EQ(got[0].events(0).server(), "local/200/gpu5");
  got = read(0);
  ASSERT_FALSE(got.empty());
  EXPECT_FALSE(got[0].resync());
  server->Shutdown();
}

}  // namespace fleet::daemon

namespace fleet::daemon {
namespace {

// A standby (issue 16): reads answered from the record, read again when older than a second (a
// remediation the leader committed meanwhile shows up); writes and streams refused with the
// leader's address in `fleet-leader`, or UNAVAILABLE while nobody leads.
TEST(FleetService, AStandbyAnswersReadsFromTheRecordAndSendsTheRestToTheLeader) {
  fleet::testing::TempDir dir;
  auto store = FleetStore::Open(dir.Join("fleet.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  // The leader's writes, through a connection of their own.
  auto leader_store = FleetStore::Open(dir.Join("fleet.db"));
  ASSERT_TRUE(leader_store.ok()) << leader_store.status();

  fleet::testing::FakeClock clock;
  auto daemon = DaemonWithoutAgents(*std::move(store), &clock);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  LeaderView view{.self = false, .holder = "fleetd-b/42/0a0b0c0d", .address = "10.0.0.2:7443"};
  absl::Mutex view_mu;
  FleetService service(daemon->get(), dir.path(), [&] {
    absl::MutexLock lock(&view_mu);
    return view;
  });
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto stub = fleet::v1::Fleet::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  const auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(10); };

  const auto status_rows = [&] {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    fleet::v1::FleetStatusResponse response;
    EXPECT_TRUE(stub->Status(&context, {}, &response).ok());
    return response.servers_size();
  };
  EXPECT_EQ(status_rows(), 0);
  ServerRecord row;
  row.name = "local/200/gpu0";
  row.host = "local";
  row.container = "200";
  ASSERT_TRUE((*leader_store)->PutServer(row).ok());
  EXPECT_EQ(status_rows(), 0);      // the copy is less than a second old: not read again
  clock.Advance(absl::Seconds(2));  // now it is
  EXPECT_EQ(status_rows(), 1);

  // Once this fleetd took over and started, a read that still took it for a standby (it asked
  // just before) reads the live state: nothing is read again over it.
  (*daemon)->Start();
  row.name = "local/200/gpu1";
  ASSERT_TRUE((*leader_store)->PutServer(row).ok());
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(status_rows(), 1);

  {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    fleet::v1::ServersResponse response;
    const grpc::Status status = stub->Restart(&context, {}, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("stands by"));
    const auto& trailers = context.GetServerTrailingMetadata();
    const auto it = trailers.find(kLeaderMetadataKey);
    ASSERT_NE(it, trailers.end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), "10.0.0.2:7443");
  }
  {
    // A stream too: the leader serves it.
    grpc::ClientContext context;
    context.set_deadline(deadline());
    auto reader = stub->Watch(&context, {});
    fleet::v1::FleetStatusResponse message;
    EXPECT_FALSE(reader->Read(&message));
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(context.GetServerTrailingMetadata().count(kLeaderMetadataKey), 1u);
  }
  {
    absl::MutexLock lock(&view_mu);
    view = LeaderView{.self = false};  // a takeover in progress: nobody leads
  }
  {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    fleet::v1::DeployResponse response;
    const grpc::Status status = stub->Deploy(&context, {}, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(status.error_message(), HasSubstr("no fleetd leads"));
    EXPECT_EQ(context.GetServerTrailingMetadata().count(kLeaderMetadataKey), 0u);
  }
  server->Shutdown();
}

}  // namespace
}  // namespace fleet::daemon
