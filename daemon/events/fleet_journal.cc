#include "daemon/events/fleet_journal.h"

#include <utility>

namespace fleet::daemon {

void FleetJournal::SetLastIndex(int64_t index) {
  absl::MutexLock lock(&mu_);
  last_index_ = index;
}

void FleetJournal::Add(fleet::v1::FleetEvent event) {
  absl::MutexLock lock(&mu_);
  event.set_index(0);
  waiting_.push_back(std::move(event));
}

std::vector<fleet::v1::FleetEvent> FleetJournal::Take() {
  absl::MutexLock lock(&mu_);
  std::vector<fleet::v1::FleetEvent> out;
  out.reserve(waiting_.size());
  int64_t index = last_index_;
  for (fleet::v1::FleetEvent& e : waiting_) {
    e.set_index(++index);
    out.push_back(std::move(e));
  }
  waiting_.clear();
  return out;
}

void FleetJournal::Requeue(std::vector<fleet::v1::FleetEvent> events) {
  absl::MutexLock lock(&mu_);
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    it->set_index(0);
    waiting_.push_front(std::move(*it));
  }
}

void FleetJournal::Committed(const std::vector<fleet::v1::FleetEvent>& events) {
  absl::MutexLock lock(&mu_);
  for (const fleet::v1::FleetEvent& e : events) {
    last_index_ = e.index();
    recent_.push_back(e);
  }
  while (recent_.size() > recent_limit_) recent_.pop_front();
}

bool FleetJournal::Recent(int64_t since, size_t limit,
                          std::vector<fleet::v1::FleetEvent>* out) const {
  absl::MutexLock lock(&mu_);
  if (since >= last_index_) return true;
  // Memory holds indexes recent_.front() .. last_index_, one apart.
  if (recent_.empty() || recent_.front().index() > since + 1) return false;
  const size_t first = static_cast<size_t>(since + 1 - recent_.front().index());
  for (size_t i = first; i < recent_.size() && out->size() < limit; ++i) out->push_back(recent_[i]);
  return true;
}

int64_t FleetJournal::LastIndex() const {
  absl::MutexLock lock(&mu_);
  return last_index_;
}

void FleetJournal::AddListener(FleetEventListener* listener) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.insert(listener);
}

void FleetJournal::RemoveListener(FleetEventListener* listener) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.erase(listener);
}

void FleetJournal::Publish(const std::vector<fleet::v1::FleetEvent>& events) {
  if (events.empty()) return;
  absl::MutexLock lock(&listeners_mu_);
  for (FleetEventListener* l : listeners_) l->OnFleetEvents(events);
}

}  // namespace fleet::daemon
