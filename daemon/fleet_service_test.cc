// FleetService over in-process gRPC: what fleetd answers with, as a client gets it. Plans with a
// secret env value (stored whole in fleet.db: the servers launch with it) are answered with the
// value masked, in `fleetctl remediations` and `fleetctl plan`'s source alike.
#include "daemon/fleet_service.h"

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
  auto daemon = Daemon::Create(
      *std::move(store),
      [](const std::string&, const fleet::v1::Host&, const fleet::v1::Container&) {
        return std::unique_ptr<AgentClient>();
      },
      &clock, DaemonOptions());
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
}  // namespace fleet::daemon
