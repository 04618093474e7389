// The leader's side of agent fencing (issue 16). A fleetd that shares its record with standbys
// leads with a term (daemon/leader/elector.h); every agent request that changes something
// (Launch, Stop, Apply) carries that term in its Fence, and an agent refuses a term lower than the
// highest it has seen for the fleet. LeaderFence holds what is stamped; FencedAgentClient stamps
// it on every such request of the client it wraps, and refuses to send one at all
// (FailedPrecondition "not leading") while the fleetd does not lead, or no longer may act on its
// lease (its local deadline passed: a leader paused past it, or cut from the database). So no
// request leaves a fleetd that lost its lease, whatever its agents know; and one that left just
// before is refused by every agent that has seen the successor's term.
//
// A fleetd alone (SQLite) has no LeaderFence: its clients are not wrapped and send no fence.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/agent_client.h"
#include "proto/agent.pb.h"

namespace fleet::daemon {

class LeaderFence {
 public:
  // Leads `fleet_id` with `term` from now on, as long as `holds` (asked before each request)
  // says it still may act.
  void Lead(std::string fleet_id, int64_t term, std::function<bool()> holds)
      ABSL_LOCKS_EXCLUDED(mu_);
  // No longer leading: every later request is refused.
  void StepDown() ABSL_LOCKS_EXCLUDED(mu_);
  // Fills `fence`; FailedPrecondition when not leading now.
  absl::Status Stamp(fleet::v1::Fence* fence) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t term() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::string fleet_id_ ABSL_GUARDED_BY(mu_);
  int64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<bool()> holds_ ABSL_GUARDED_BY(mu_);
};

class FencedAgentClient final : public AgentClient {
 public:
  FencedAgentClient(std::unique_ptr<AgentClient> inner, std::shared_ptr<const LeaderFence> fence)
      : inner_(std::move(inner)), fence_(std::move(fence)) {}

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override;
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override;
  void LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) override;
  void StopAsync(const fleet::v1::StopRequest& r, StopDone done) override;
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override;
  // What changes nothing goes as it is.
  void StatusAsync(StatusDone done) override { inner_->StatusAsync(std::move(done)); }
  absl::StatusOr<fleet::v1::StatusResponse> Status() override { return inner_->Status(); }
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) override {
    return inner_->Probe(s);
  }
  absl::Status Logs(const fleet::v1::LogsRequest& r,
                    const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                    CallCancel* cancel) override {
    return inner_->Logs(r, on_chunk, cancel);
  }
  void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) override {
    inner_->Follow(incarnation, after, sink);
  }
  void CancelFollow() override { inner_->CancelFollow(); }

 private:
  const std::unique_ptr<AgentClient> inner_;
  const std::shared_ptr<const LeaderFence> fence_;
};

// `factory`'s clients, each wrapped in a FencedAgentClient of `fence`.
AgentClientFactory FencedFactory(AgentClientFactory factory,
                                 std::shared_ptr<const LeaderFence> fence);

}  // namespace fleet::daemon
