// RealClock against a wall clock a test steps (the WallClock seam) and a monotonic clock it
// advances: timers must not jump when the wall clock does.
#include "common/base/clock.h"

#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

// A wall clock and a monotonic clock the test moves.
class Clocks {
 public:
  class Wall : public WallClock {
   public:
    explicit Wall(const Clocks* c) : c_(c) {}
    absl::Time Now() const override { return c_->wall; }

   private:
    const Clocks* c_;
  };

  absl::Time wall = absl::FromUnixSeconds(1'800'000'000);
  absl::Time steady = absl::FromUnixSeconds(1000);
  Wall wall_clock{this};
  std::vector<absl::Duration> steps;

  RealClock Make() {
    return RealClock(
        &wall_clock, [this](absl::Duration d) { steps.push_back(d); }, [this] { return steady; });
  }
  void Advance(absl::Duration d) {
    wall += d;
    steady += d;
  }
};

TEST(RealClock, AStepOfTheWallClockMovesNoTimerAndIsReportedOnce) {
  Clocks c;
  const RealClock clock = c.Make();
  const absl::Time start = clock.Now();
  EXPECT_EQ(start, c.wall);
  c.Advance(absl::Seconds(10));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(10));

  // An hour back: a backoff due in 10 s must still be due in 10 s.
  const absl::Time due = clock.Now() + absl::Seconds(10);
  c.wall -= absl::Hours(1);
  EXPECT_EQ(due - clock.Now(), absl::Seconds(10));
  c.Advance(absl::Seconds(10));
  EXPECT_GE(clock.Now(), due);
  ASSERT_EQ(c.steps.size(), 1u);
  EXPECT_EQ(c.steps[0], -absl::Hours(1));

  // An hour forward from there: a stall timeout of 10 minutes does not expire.
  const absl::Time quiet_since = clock.Now();
  c.wall += absl::Hours(2);
  EXPECT_LT(clock.Now() - quiet_since, absl::Minutes(10));
  EXPECT_EQ(c.steps.size(), 2u);
  EXPECT_EQ(c.steps[1], absl::Hours(1));
  // Reading it again reports nothing new.
  clock.Now();
  EXPECT_EQ(c.steps.size(), 2u);
}

TEST(RealClock, FollowsSmallCorrectionsAndNeverGoesBackwards) {
  Clocks c;
  const RealClock clock = c.Make();
  c.Advance(absl::Seconds(5));
  c.wall += absl::Milliseconds(300);  // NTP slews it a little forward: followed
  EXPECT_EQ(clock.Now(), c.wall);
  const absl::Time before = clock.Now();
  c.wall -= absl::Milliseconds(500);  // and back: followed, but time does not run backwards
  EXPECT_GE(clock.Now(), before);
  c.Advance(absl::Seconds(1));
  EXPECT_EQ(clock.Now(), c.wall);
  EXPECT_TRUE(c.steps.empty());
}

TEST(WallClock, AddsTheOffsetInItsFileAndSeesItChange) {
  fleet::testing::TempDir dir;
  const std::string file = dir.Join("offset");
  const WallClock none;
  const WallClock missing(file);
  EXPECT_LT(absl::AbsDuration(missing.Now() - none.Now()), absl::Seconds(5));
  dir.WriteFile("offset", "-3600\n");
  const WallClock stepped(file);
  EXPECT_LT(absl::AbsDuration(stepped.Now() - none.Now() + absl::Hours(1)), absl::Seconds(5));
}

}  // namespace
}  // namespace fleet
