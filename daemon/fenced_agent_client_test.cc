// FencedAgentClient: the leader's term on every Launch, Stop and Apply; nothing sent at all while
// the fleetd does not lead or may no longer act on its lease. What changes nothing goes as it is.
#include "daemon/fenced_agent_client.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::daemon {
namespace {

// Records what reaches the agent.
class RecordingClient final : public AgentClient {
 public:
  std::vector<fleet::v1::Fence> fences;
  int status_calls = 0;
  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override {
    fences.push_back(r.fence());
    return fleet::v1::LaunchResponse();
  }
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override {
    fences.push_back(r.fence());
    return fleet::v1::StopResponse();
  }
  absl::StatusOr<fleet::v1::StatusResponse> Status() override {
    ++status_calls;
    return fleet::v1::StatusResponse();
  }
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec&) override {
    return fleet::v1::ToolchainSnapshot();
  }
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override {
    fences.push_back(r.fence());
    return fleet::v1::ApplyResponse();
  }
  absl::Status Logs(const fleet::v1::LogsRequest&,
                    const std::function<bool(const fleet::v1::LogChunk&)>&, CallCancel*) override {
    return absl::OkStatus();
  }
  void Follow(const std::string&, uint64_t, EventSink*) override {}
  void CancelFollow() override {}
};

TEST(FencedAgentClient, EveryChangingRequestCarriesTheTermAndNoneLeavesWithoutTheLease) {
  auto fence = std::make_shared<LeaderFence>();
  auto inner = std::make_unique<RecordingClient>();
  RecordingClient* agent = inner.get();
  FencedAgentClient client(std::move(inner), fence);

  // Standing by: nothing is sent; reads are.
  auto refused = client.Launch({});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client.Status().ok());
  EXPECT_EQ(agent->status_calls, 1);
  EXPECT_TRUE(agent->fences.empty());

  std::atomic<bool> holds{true};
  fence->Lead("fleet-1", 7, [&holds] { return holds.load(); });
  EXPECT_TRUE(client.Launch({}).ok());
  EXPECT_TRUE(client.Stop({}).ok());
  EXPECT_TRUE(client.Apply({}).ok());
  absl::Status async_launch = absl::UnknownError("not called");
  client.LaunchAsync(
      {}, [&](absl::StatusOr<fleet::v1::LaunchResponse> r) { async_launch = r.status(); });
  absl::Status async_stop = absl::UnknownError("not called");
  client.StopAsync({}, [&](absl::StatusOr<fleet::v1::StopResponse> r) { async_stop = r.status(); });
  EXPECT_TRUE(async_launch.ok()) << async_launch;
  EXPECT_TRUE(async_stop.ok()) << async_stop;
  ASSERT_EQ(agent->fences.size(), 5u);
  for (const fleet::v1::Fence& f : agent->fences) {
    EXPECT_EQ(f.fleet_id(), "fleet-1");
    EXPECT_EQ(f.term(), 7);
  }

  // The lease lapsed (a pause, a partition): refused here, before any agent could be asked.
  holds = false;
  EXPECT_EQ(client.Stop({}).status().code(), absl::StatusCode::kFailedPrecondition);
  client.LaunchAsync(
      {}, [&](absl::StatusOr<fleet::v1::LaunchResponse> r) { async_launch = r.status(); });
  EXPECT_EQ(async_launch.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(async_launch.message(), ::testing::HasSubstr("no longer held"));
  holds = true;
  fence->StepDown();
  EXPECT_EQ(client.Apply({}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(agent->fences.size(), 5u);
}

// The factory's every client is fenced.
TEST(FencedAgentClient, TheFencedFactoryWrapsEachClient) {
  auto fence = std::make_shared<LeaderFence>();
  int made = 0;
  AgentClientFactory factory = FencedFactory(
      [&made](const std::string&, const fleet::v1::Host&, const fleet::v1::Container&) {
        ++made;
        return std::unique_ptr<AgentClient>(new RecordingClient());
      },
      fence);
  auto client = factory("local/200", {}, {});
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(made, 1);
  EXPECT_NE(dynamic_cast<FencedAgentClient*>(client.get()), nullptr);
  EXPECT_FALSE(client->Launch({}).ok());
}

}  // namespace
}  // namespace fleet::daemon

namespace fleet::daemon {
namespace {

// fleetd's `holds` asks the fence's own term (main.cc, Leadership::HoldsNow): Stamp must not hold
// its lock while asking (it deadlocked before).
TEST(FencedAgentClient, HoldsMayAskTheFenceItself) {
  auto fence = std::make_shared<LeaderFence>();
  fence->Lead("fleet-1", 3, [f = fence.get()] { return f->term() > 0; });
  fleet::v1::Fence stamped;
  ASSERT_TRUE(fence->Stamp(&stamped).ok());
  EXPECT_EQ(stamped.term(), 3);
}

}  // namespace
}  // namespace fleet::daemon
