#include "common/base/clock.h"

#include <chrono>
#include <fstream>
#include <utility>

namespace fleet {
namespace {

constexpr absl::Duration kOffsetReread = absl::Milliseconds(100);

}  // namespace

absl::Time SteadyNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

WallClock::WallClock(std::string offset_file) : offset_file_(std::move(offset_file)) {}

absl::Time WallClock::Now() const {
  const absl::Time system = absl::Now();
  if (offset_file_.empty()) return system;
  const absl::Time steady = SteadyNow();
  absl::MutexLock lock(&mu_);
  if (steady - read_at_ >= kOffsetReread) {
    read_at_ = steady;
    std::ifstream in(offset_file_);
    double seconds = 0;
    offset_ = in >> seconds ? absl::Seconds(seconds) : absl::ZeroDuration();
  }
  return system + offset_;
}

RealClock::RealClock(const WallClock* wall, StepListener on_step,
                     std::function<absl::Time()> steady)
    : wall_(wall != nullptr ? wall : &own_),
      on_step_(std::move(on_step)),
      steady_(steady ? std::move(steady) : std::function<absl::Time()>(SteadyNow)) {
  absl::MutexLock lock(&mu_);
  anchor_wall_ = wall_->Now();
  anchor_steady_ = steady_();
}

absl::Time RealClock::Now() const {
  const absl::Time wall = wall_->Now();
  const absl::Time steady = steady_();
  absl::Duration stepped = absl::ZeroDuration();
  absl::Time now;
  {
    absl::MutexLock lock(&mu_);
    now = anchor_wall_ + (steady - anchor_steady_);
    const absl::Duration drift = wall - now;
    if (absl::AbsDuration(drift) <= kFollow) {
      // A correction: followed (the anchor moves with it), never backwards.
      anchor_wall_ += drift;
      now = wall;
      reported_ = absl::ZeroDuration();
    } else if (absl::AbsDuration(drift - reported_) > kFollow) {
      reported_ = drift;
      stepped = drift;
    }
    if (now < last_) now = last_;
    last_ = now;
  }
  if (stepped != absl::ZeroDuration() && on_step_) on_step_(stepped);
  return now;
}

}  // namespace fleet
