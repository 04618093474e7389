#include "cli/applying_plans_poller.h"

#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace fleet::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::Plan PlanOf(const std::string& id, const std::string& container, v1::PlanStatus status) {
  v1::Plan plan;
  plan.set_id(id);
  plan.set_container(container);
  plan.set_server(container + "/gpu0");
  SetPlanStatus(status, &plan);
  return plan;
}

class ApplyingPlansPollerTest : public ::testing::Test {
 protected:
  ApplyingPlansPollerTest()
      : poller_(
            [this](const std::string& container) -> absl::StatusOr<v1::ListRemediationsResponse> {
              absl::MutexLock lock(&mu_);
              asked_.push_back(container);
              if (!error_.ok()) return error_;
              v1::ListRemediationsResponse response;
              // The history: an applied plan, then the one being applied.
              *response.add_plans() = PlanOf("6", container, v1::PLAN_STATUS_APPLIED);
              *response.add_plans() = PlanOf("7", container, v1::PLAN_STATUS_APPLYING);
              return response;
            },
            &clock_, absl::Seconds(5)) {}

  std::vector<std::string> TakeAsked() {
    absl::MutexLock lock(&mu_);
    return std::exchange(asked_, {});
  }

  fleet::testing::FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  ApplyingPlansPoller poller_;
};

TEST_F(ApplyingPlansPollerTest, FetchesWantedContainersAtMostOncePerInterval) {
  poller_.Step();
  EXPECT_THAT(TakeAsked(), IsEmpty());  // nothing wanted: nothing asked
  poller_.Want({"pve1/200"});
  poller_.Step();
  EXPECT_THAT(TakeAsked(), ElementsAre("pve1/200"));
  ApplyingPlans plans = poller_.Snapshot();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans["pve1/200"].id(), "7");  // the applying one, not the history

  clock_.Advance(absl::Seconds(4));
  poller_.Step();
  EXPECT_THAT(TakeAsked(), IsEmpty());
  clock_.Advance(absl::Seconds(1));
  poller_.Step();
  EXPECT_THAT(TakeAsked(), ElementsAre("pve1/200"));

  // A failed call keeps what was known.
  {
    absl::MutexLock lock(&mu_);
    error_ = absl::UnavailableError("fleetd restarts");
  }
  clock_.Advance(absl::Seconds(5));
  poller_.Step();
  EXPECT_THAT(TakeAsked(), ElementsAre("pve1/200"));
  EXPECT_EQ(poller_.Snapshot().size(), 1u);

  // A container no longer wanted is forgotten.
  poller_.Want({});
  EXPECT_THAT(poller_.Snapshot(), IsEmpty());
}

TEST_F(ApplyingPlansPollerTest, AsksAtMostABoundedNumberPerRoundOldestFirst) {
  std::set<std::string> many;
  for (size_t i = 0; i < ApplyingPlansPoller::kMaxPerRound + 2; ++i) {
    many.insert("pve1/" + std::to_string(200 + i));
  }
  poller_.Want(many);
  poller_.Step();
  EXPECT_EQ(TakeAsked().size(), ApplyingPlansPoller::kMaxPerRound);
  poller_.Step();  // the two left, never fetched, go first
  EXPECT_EQ(TakeAsked().size(), 2u);
}

TEST_F(ApplyingPlansPollerTest, ThreadFetchesANewContainerWithoutWaitingTheInterval) {
  poller_.Start();
  poller_.Want({"pve1/200"});
  // The thread's first round may have run before Want; a new container wakes it. A deadline, not
  // a sleep: the snapshot is polled until it has the plan.
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (poller_.Snapshot().empty() && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(poller_.Snapshot().size(), 1u);
}

}  // namespace
}  // namespace fleet::cli
