#include "cli/applying_plans_poller.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/state/states.h"

namespace fleet::cli {

ApplyingPlansPoller::ApplyingPlansPoller(Fetch fetch, const Clock* clock, absl::Duration interval)
    : fetch_(std::move(fetch)), clock_(clock), interval_(interval) {}

ApplyingPlansPoller::~ApplyingPlansPoller() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ApplyingPlansPoller::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ApplyingPlansPoller::Run() {
  while (true) {
    Step();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &ApplyingPlansPoller::Woken), interval_);
    if (stop_) return;
    woken_ = false;
  }
}

void ApplyingPlansPoller::Want(std::set<std::string> containers) {
  absl::MutexLock lock(&mu_);
  if (containers == wanted_) return;
  for (const std::string& c : containers) {
    if (!fetched_at_.count(c)) woken_ = true;  // a new one: fetched now, not in `interval`
  }
  for (auto it = plans_.begin(); it != plans_.end();) {
    it = containers.count(it->first) ? std::next(it) : plans_.erase(it);
  }
  for (auto it = fetched_at_.begin(); it != fetched_at_.end();) {
    it = containers.count(it->first) ? std::next(it) : fetched_at_.erase(it);
  }
  wanted_ = std::move(containers);
}

ApplyingPlans ApplyingPlansPoller::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return plans_;
}

void ApplyingPlansPoller::Step() {
  std::vector<std::pair<absl::Time, std::string>> due;  // (last fetched, container)
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (const std::string& c : wanted_) {
      auto it = fetched_at_.find(c);
      const absl::Time last = it == fetched_at_.end() ? absl::InfinitePast() : it->second;
      if (now - last >= interval_) due.emplace_back(last, c);
    }
  }
  std::sort(due.begin(), due.end());
  if (due.size() > kMaxPerRound) due.resize(kMaxPerRound);
  for (const auto& [last, container] : due) {
    // No lock held during the call: the drawer's Want and Snapshot go on meanwhile.
    absl::StatusOr<v1::ListRemediationsResponse> response = fetch_(container);
    absl::MutexLock lock(&mu_);
    if (!wanted_.count(container)) continue;  // no longer shown
    fetched_at_[container] = clock_->Now();
    if (!response.ok()) continue;  // keep what was known; tried again after `interval`
    plans_.erase(container);
    for (const v1::Plan& plan : response->plans()) {
      if (PlanStatusOf(plan) == v1::PLAN_STATUS_APPLYING) plans_[container] = plan;
    }
  }
}

}  // namespace fleet::cli
