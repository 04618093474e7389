// Clock: the time source every timer reads, so tests drive time instead of sleeping.
// RealClock is the system's time for timers; tests use fleet::testing::FakeClock. Thread-safe.
//
// Timers (a backoff, a stall timeout, the next readiness probe, a stop's grace) are absolute
// times compared with Now(), so Now() must not jump: RealClock is the wall clock as it was when
// the clock was made, advanced by the monotonic clock (CLOCK_MONOTONIC). It follows the wall
// clock's small corrections (NTP slewing, within a second) and never goes backwards; a larger
// step of the wall clock (an operator's `date -s`, NTP stepping at boot, a VM restored) moves no
// timer: it is reported once (on_step) and the process's timestamps keep their frame until it
// restarts. SteadyNow() is for code without a Clock that measures a wait or a duration.
//
// WallClock is the seam through which a test steps the wall clock a process sees, never the
// machine's: the system clock plus an offset read from a file (--clock-offset-file of fleetd and
// fleet-agent; the fault matrix's clock-jump row writes ±3600 there while they run).
#pragma once

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fleet {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The monotonic clock as an absl::Time (its epoch is arbitrary: use differences only).
absl::Time SteadyNow();

// The system's wall clock, shifted by the signed number of seconds in `offset_file` (none: 0).
// The file is read again at most every 100 ms; a missing or unreadable file counts as 0.
class WallClock {
 public:
  explicit WallClock(std::string offset_file = "");
  virtual ~WallClock() = default;
  virtual absl::Time Now() const;

 private:
  const std::string offset_file_;
  mutable absl::Mutex mu_;
  mutable absl::Duration offset_ ABSL_GUARDED_BY(mu_);
  mutable absl::Time read_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class RealClock : public Clock {
 public:
  // Told once per step of the wall clock larger than kFollow: by how much it stepped (the wall
  // clock minus this clock). Called with no lock held, from whichever thread read the clock.
  using StepListener = std::function<void(absl::Duration)>;
  // The wall clock's corrections followed without a step report.
  static constexpr absl::Duration kFollow = absl::Seconds(1);

  // `wall` (null: the system's) must outlive the clock; `steady` (null: SteadyNow) is for tests.
  explicit RealClock(const WallClock* wall = nullptr, StepListener on_step = nullptr,
                     std::function<absl::Time()> steady = nullptr);
  absl::Time Now() const override;

 private:
  WallClock own_;
  const WallClock* const wall_;
  const StepListener on_step_;
  const std::function<absl::Time()> steady_;
  mutable absl::Mutex mu_;
  mutable absl::Time anchor_wall_ ABSL_GUARDED_BY(mu_);
  mutable absl::Time anchor_steady_ ABSL_GUARDED_BY(mu_);
  mutable absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  mutable absl::Duration reported_ ABSL_GUARDED_BY(mu_);  // the step last told
};

}  // namespace fleet
