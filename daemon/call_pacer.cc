#include "daemon/call_pacer.h"

#include <utility>

namespace fleet::daemon {

void CallPacer::Submit(std::vector<AgentCall> calls) {
  if (calls.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    for (AgentCall& c : calls) waiting_.push_back(std::move(c));
  }
  SendWhileRoom();
}

void CallPacer::SendWhileRoom() {
  // An answer that comes at once, inside the loop below, must not start a loop of its own.
  static thread_local bool sending_here = false;
  if (sending_here) return;
  sending_here = true;
  while (true) {
    AgentCall c;
    {
      absl::MutexLock lock(&mu_);
      if (closed_ || waiting_.empty() || in_flight_ >= limit_) break;
      c = std::move(waiting_.front());
      waiting_.pop_front();
      ++in_flight_;
      ++sending_;
    }
    const bool sent = send_(c, [this] { Finished(); });
    absl::MutexLock lock(&mu_);
    --sending_;
    if (!sent) --in_flight_;
  }
  sending_here = false;
}

void CallPacer::Finished() {
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
  SendWhileRoom();
}

void CallPacer::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  waiting_.clear();
  mu_.Await(absl::Condition(
      +[](CallPacer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->sending_ == 0; }, this));
}

size_t CallPacer::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size();
}

int CallPacer::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

}  // namespace fleet::daemon
