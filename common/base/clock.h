// Clock: the time source every timer reads, so tests drive time instead of sleeping.
// RealClock is the system clock; tests use fleet::testing::FakeClock. Thread-safe.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fleet {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace fleet
