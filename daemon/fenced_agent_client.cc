#include "daemon/fenced_agent_client.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fleet::daemon {

void LeaderFence::Lead(std::string fleet_id, int64_t term, std::function<bool()> holds) {
  absl::MutexLock lock(&mu_);
  fleet_id_ = std::move(fleet_id);
  term_ = term;
  holds_ = std::move(holds);
}

void LeaderFence::StepDown() {
  absl::MutexLock lock(&mu_);
  term_ = 0;
  holds_ = nullptr;
}

absl::Status LeaderFence::Stamp(fleet::v1::Fence* fence) const {
  std::string fleet_id;
  int64_t term = 0;
  std::function<bool()> holds;
  {
    absl::MutexLock lock(&mu_);
    fleet_id = fleet_id_;
    term = term_;
    holds = holds_;
  }
  // Asked without the lock: `holds` may ask this fence (its term) itself.
  if (term == 0) {
    return absl::FailedPreconditionError("not leading: this fleetd stands by (nothing sent)");
  }
  if (holds && !holds()) {
    return absl::FailedPreconditionError(
        absl::StrCat("not leading: the lease of term ", term, " is no longer held (nothing sent)"));
  }
  fence->set_fleet_id(std::move(fleet_id));
  fence->set_term(term);
  return absl::OkStatus();
}

int64_t LeaderFence::term() const {
  absl::MutexLock lock(&mu_);
  return term_;
}

absl::StatusOr<fleet::v1::LaunchResponse> FencedAgentClient::Launch(
    const fleet::v1::LaunchRequest& r) {
  fleet::v1::LaunchRequest fenced = r;
  if (absl::Status s = fence_->Stamp(fenced.mutable_fence()); !s.ok()) return s;
  return inner_->Launch(fenced);
}

absl::StatusOr<fleet::v1::StopResponse> FencedAgentClient::Stop(const fleet::v1::StopRequest& r) {
  fleet::v1::StopRequest fenced = r;
  if (absl::Status s = fence_->Stamp(fenced.mutable_fence()); !s.ok()) return s;
  return inner_->Stop(fenced);
}

void FencedAgentClient::LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) {
  fleet::v1::LaunchRequest fenced = r;
  if (absl::Status s = fence_->Stamp(fenced.mutable_fence()); !s.ok()) {
    done(s);
    return;
  }
  inner_->LaunchAsync(fenced, std::move(done));
}

void FencedAgentClient::StopAsync(const fleet::v1::StopRequest& r, StopDone done) {
  fleet::v1::StopRequest fenced = r;
  if (absl::Status s = fence_->Stamp(fenced.mutable_fence()); !s.ok()) {
    done(s);
    return;
  }
  inner_->StopAsync(fenced, std::move(done));
}

absl::StatusOr<fleet::v1::ApplyResponse> FencedAgentClient::Apply(
    const fleet::v1::ApplyRequest& r) {
  fleet::v1::ApplyRequest fenced = r;
  if (absl::Status s = fence_->Stamp(fenced.mutable_fence()); !s.ok()) return s;
  return inner_->Apply(fenced);
}

AgentClientFactory FencedFactory(AgentClientFactory factory,
                                 std::shared_ptr<const LeaderFence> fence) {
  return [factory = std::move(factory), fence = std::move(fence)](
             const std::string& container, const fleet::v1::Host& host,
             const fleet::v1::Container& config) -> std::unique_ptr<AgentClient> {
    return std::make_unique<FencedAgentClient>(factory(container, host, config), fence);
  };
}

}  // namespace fleet::daemon
