// The reconciler's decisions, from hand-built state at a given time: no store, no agent, no gRPC.
#include "daemon/reconciler.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kServer[] = "h/100/gpu0";
constexpr char kContainer[] = "h/100";
const absl::Time kNow = absl::FromUnixSeconds(1700000000);

// A wanted server of container h/100 in `state` since an hour ago, with no attempt yet.
TrackedServer MakeServer(v1::ServerState state) {
  TrackedServer s;
  s.record.name = kServer;
  s.record.host = "h";
  s.record.container = "100";
  s.record.gpu = 0;
  s.record.desired_running = true;
  s.record.state = state;
  s.record.state_since = kNow - absl::Hours(1);
  s.record.policy.set_remediation(fleet::v1::Policy::OFF);
  return s;
}

// A server whose attempt `number` failed with `cls`.
TrackedServer Failed(const std::string& cls, int64_t number) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_FAILED);
  s.record.attempt_number = number;
  s.record.attempt_id = absl::StrCat(kServer, "#", number, "-ab");
  s.attempt.id = s.record.attempt_id;
  s.attempt.number = number;
  s.attempt.outcome = v1::ATTEMPT_OUTCOME_FAILED;
  s.attempt.diagnosis_class = cls;
  s.attempt.summary = "it failed";
  return s;
}

class ReconcilerTest : public ::testing::Test {
 protected:
  std::vector<Decision> Step(const TrackedServer& s, absl::Time now = kNow,
                             std::set<std::string> reachable = {kContainer}) {
    const std::map<std::string, TrackedServer> servers = {{s.record.name, s}};
    return reconciler_.Step(now, servers, reachable, random_);
  }

  const Reconciler reconciler_{absl::Minutes(10)};
  absl::BitGen random_;
};

TEST_F(ReconcilerTest, LaunchesAWantedServerAsItsFirstAttempt) {
  const std::vector<Decision> d = Step(MakeServer(v1::SERVER_STATE_PENDING));
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kLaunch);
  EXPECT_EQ(d[0].server, kServer);
  EXPECT_EQ(d[0].trigger, "initial");
  EXPECT_TRUE(d[0].new_attempt);
}

TEST_F(ReconcilerTest, SendsAPendingAttemptAgainInsteadOfMakingANewOne) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_PENDING);
  s.record.attempt_number = 3;
  s.attempt.id = "h/100/gpu0#3-ab";
  s.attempt.outcome = v1::ATTEMPT_OUTCOME_PENDING;
  const std::vector<Decision> d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kLaunch);
  EXPECT_EQ(d[0].trigger, "recovery");
  EXPECT_FALSE(d[0].new_attempt);
}

TEST_F(ReconcilerTest, LaunchesNothingToAnUnreachableContainer) {
  EXPECT_THAT(Step(MakeServer(v1::SERVER_STATE_PENDING), kNow, /*reachable=*/{}), IsEmpty());
  EXPECT_THAT(Step(MakeServer(v1::SERVER_STATE_PENDING), kNow, /*reachable=*/{"h/101"}), IsEmpty());
}

TEST_F(ReconcilerTest, LaunchesNoSecondTimeWhileALaunchIsInFlight) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_PENDING);
  s.launch_in_flight = true;
  EXPECT_THAT(Step(s), IsEmpty());
}

TEST_F(ReconcilerTest, StopsAServerNoLongerWanted) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_READY);
  s.record.desired_running = false;
  const std::vector<Decision> d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kStop);
  EXPECT_EQ(d[0].server, kServer);

  // Removed from the config is the same; a Stop already sent is not sent again.
  s.record.desired_running = true;
  s.record.removed = true;
  EXPECT_THAT(Step(s), SizeIs(1));
  s.stop_sent = true;
  EXPECT_THAT(Step(s), IsEmpty());
}

TEST_F(ReconcilerTest, StopsAtOnceAnUnwantedServerThatNeverLaunched) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_PENDING);
  s.record.desired_running = false;
  const std::vector<Decision> d = Step(s, kNow, /*reachable=*/{});
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kStopUnlaunched);
}

TEST_F(ReconcilerTest, BacksOffAFailureARetryMayFixThenLaunchesWhenTheBackoffEnds) {
  const std::vector<Decision> d = Step(Failed("cuda_out_of_memory", 1));
  ASSERT_THAT(d, SizeIs(1));
  ASSERT_EQ(d[0].kind, Decision::kBackoff);
  EXPECT_EQ(d[0].failures, 1);
  // The policy's default first backoff, 10 s, +-25%.
  EXPECT_GE(d[0].backoff_until, kNow + absl::Seconds(7.5));
  EXPECT_LE(d[0].backoff_until, kNow + absl::Seconds(12.5));

  TrackedServer s = Failed("cuda_out_of_memory", 1);
  s.record.state = v1::SERVER_STATE_RESTARTING;
  s.record.backoff_until = d[0].backoff_until;
  s.failures = d[0].failures;
  EXPECT_THAT(Step(s, d[0].backoff_until - absl::Milliseconds(1)), IsEmpty());
  const std::vector<Decision> after = Step(s, d[0].backoff_until);
  ASSERT_THAT(after, SizeIs(1));
  EXPECT_EQ(after[0].kind, Decision::kLaunch);
  EXPECT_EQ(after[0].trigger, "restart");
  EXPECT_TRUE(after[0].new_attempt);
}

TEST_F(ReconcilerTest, DoublesTheBackoffWithEachFailureUpToThePolicysLongest) {
  TrackedServer s = Failed("cuda_out_of_memory", 3);
  s.failures = 2;
  std::vector<Decision> d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  ASSERT_EQ(d[0].kind, Decision::kBackoff);
  EXPECT_EQ(d[0].failures, 3);
  EXPECT_GE(d[0].backoff_until, kNow + absl::Seconds(30));  // 40 s -25%
  EXPECT_LE(d[0].backoff_until, kNow + absl::Seconds(50));

  s.failures = 10;  // 10 s * 2^10 is past the 5 min cap
  d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_LE(d[0].backoff_until, kNow + absl::Minutes(5) * 1.25);
}

TEST_F(ReconcilerTest, GivesUpWhenTheAttemptBudgetIsSpent) {
  // The default budget is 8 attempts per deploy.
  const std::vector<Decision> d = Step(Failed("cuda_out_of_memory", 8));
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kGiveUp);
  EXPECT_THAT(d[0].reason, HasSubstr("attempt budget spent (8)"));
  EXPECT_THAT(d[0].reason, HasSubstr("cuda_out_of_memory: it failed"));

  // One left: backed off. A deploy since (budget_base) gives it the whole budget again.
  EXPECT_EQ(Step(Failed("cuda_out_of_memory", 7))[0].kind, Decision::kBackoff);
  TrackedServer redeployed = Failed("cuda_out_of_memory", 8);
  redeployed.budget_base = 6;
  EXPECT_EQ(Step(redeployed)[0].kind, Decision::kBackoff);

  TrackedServer small = Failed("cuda_out_of_memory", 2);
  small.record.policy.set_max_attempts(2);
  EXPECT_EQ(Step(small)[0].kind, Decision::kGiveUp);
}

TEST_F(ReconcilerTest, GivesUpAtOnceWhenARetryWouldMeetTheSameFailure) {
  const std::vector<Decision> d = Step(Failed("model_not_found", 1));
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kGiveUp);
  EXPECT_THAT(d[0].reason, HasSubstr("a restart would meet the same failure"));
}

TEST_F(ReconcilerTest, PlansAFixForAFailureAChangeMayFix) {
  TrackedServer s = Failed("missing_shared_library", 1);
  s.record.policy.set_remediation(fleet::v1::Policy::AUTO);
  std::vector<Decision> d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kRemediate);

  // Remediation off: nothing a restart can do either.
  s.record.policy.set_remediation(fleet::v1::Policy::OFF);
  d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kGiveUp);
  EXPECT_THAT(d[0].reason, HasSubstr("remediation is off"));
}

TEST_F(ReconcilerTest, StopsARunningServerFirstWhenARestartIsRequested) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_READY);
  s.restart_requested = true;
  std::vector<Decision> d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kStop);

  // Once it is gone: restarted with no backoff, through the gate.
  s.record.state = v1::SERVER_STATE_STOPPED;
  s.restart_now = true;
  d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kRestart);
  EXPECT_TRUE(d[0].launch);
  EXPECT_EQ(d[0].trigger, "restart");
  EXPECT_EQ(d[0].backoff_until, absl::InfinitePast());

  // Its agent away: the request is taken, nothing launched.
  d = Step(s, kNow, /*reachable=*/{});
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kRestart);
  EXPECT_FALSE(d[0].launch);
}

TEST_F(ReconcilerTest, StartsTheBackoffCountAgainAfterLongEnoughReady) {
  TrackedServer s = MakeServer(v1::SERVER_STATE_READY);
  s.failures = 3;
  s.record.state_since = kNow - absl::Minutes(9);
  EXPECT_THAT(Step(s), IsEmpty());
  s.record.state_since = kNow - absl::Minutes(10);
  const std::vector<Decision> d = Step(s);
  ASSERT_THAT(d, SizeIs(1));
  EXPECT_EQ(d[0].kind, Decision::kResetFailures);
}

TEST_F(ReconcilerTest, DecidesInTheOrderOfTheServersNames) {
  TrackedServer a = MakeServer(v1::SERVER_STATE_PENDING);
  TrackedServer b = MakeServer(v1::SERVER_STATE_PENDING);
  b.record.name = "h/100/gpu1";
  b.record.gpu = 1;
  const std::map<std::string, TrackedServer> servers = {{b.record.name, b}, {a.record.name, a}};
  const std::vector<Decision> d = reconciler_.Step(kNow, servers, {kContainer}, random_);
  ASSERT_THAT(d, SizeIs(2));
  EXPECT_EQ(d[0].server, "h/100/gpu0");
  EXPECT_EQ(d[1].server, "h/100/gpu1");
}

}  // namespace
}  // namespace fleet::daemon
