#include "common/state/states.h"

#include <cctype>
#include <string>

#include "gtest/gtest.h"
#include "proto/agent.pb.h"
#include "proto/fleet.pb.h"

namespace fleet {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Every value of the enum but UNSPECIFIED has the spelling its proto name gives (less the
// prefix, in the contract's case), and the spelling reads back as the value.
template <typename Enum, typename NameFn, typename ParseFn>
void ExpectEveryValueRoundTrips(const google::protobuf::EnumDescriptor* d,
                                const std::string& prefix, bool lower, NameFn name, ParseFn parse) {
  ASSERT_GT(d->value_count(), 1);
  for (int i = 0; i < d->value_count(); ++i) {
    const auto* v = d->value(i);
    const Enum value = static_cast<Enum>(v->number());
    SCOPED_TRACE(v->name());
    if (v->number() == 0) {
      EXPECT_EQ(name(value), "");
      continue;
    }
    ASSERT_EQ(v->name().rfind(prefix, 0), 0u);
    std::string expected = v->name().substr(prefix.size());
    if (lower) expected = Lower(expected);
    EXPECT_EQ(name(value), expected);
    EXPECT_EQ(parse(expected), value);
  }
  EXPECT_EQ(parse(""), std::nullopt);
  EXPECT_EQ(parse("NOT_A_VALUE"), std::nullopt);
}

TEST(States, EveryServerStateHasItsContractSpelling) {
  ExpectEveryValueRoundTrips<v1::ServerState>(
      v1::ServerState_descriptor(), "SERVER_STATE_", false,
      [](v1::ServerState s) { return StateName(s); }, ParseServerState);
  EXPECT_EQ(StateName(v1::SERVER_STATE_GAVE_UP), "GAVE_UP");
  EXPECT_EQ(ParseServerState("ready"), std::nullopt) << "the spellings are case-sensitive";
}

TEST(States, EveryOutcomeAndPlanStatusHasItsContractSpelling) {
  ExpectEveryValueRoundTrips<v1::AttemptOutcome>(
      v1::AttemptOutcome_descriptor(), "ATTEMPT_OUTCOME_", true,
      [](v1::AttemptOutcome o) { return OutcomeName(o); }, ParseAttemptOutcome);
  ExpectEveryValueRoundTrips<v1::PlanStatus>(
      v1::PlanStatus_descriptor(), "PLAN_STATUS_", true,
      [](v1::PlanStatus s) { return PlanStatusName(s); }, ParsePlanStatus);
  EXPECT_EQ(PlanStatusName(v1::PLAN_STATUS_ROLLED_BACK), "rolled_back");
}

TEST(States, AProcessRunsFromStartingUntilStopping) {
  for (v1::ServerState s :
       {v1::SERVER_STATE_STARTING, v1::SERVER_STATE_LOADING, v1::SERVER_STATE_JIT_COMPILING,
        v1::SERVER_STATE_CAPTURING_GRAPHS, v1::SERVER_STATE_READY, v1::SERVER_STATE_STOPPING}) {
    EXPECT_TRUE(HasProcess(s)) << StateName(s);
  }
  for (v1::ServerState s :
       {v1::SERVER_STATE_UNSPECIFIED, v1::SERVER_STATE_PENDING, v1::SERVER_STATE_FAILED,
        v1::SERVER_STATE_STOPPED, v1::SERVER_STATE_RESTARTING, v1::SERVER_STATE_REMEDIATING,
        v1::SERVER_STATE_GAVE_UP}) {
    EXPECT_FALSE(HasProcess(s)) << StateName(s);
  }
  EXPECT_TRUE(IsStartPhase(v1::SERVER_STATE_JIT_COMPILING));
  EXPECT_FALSE(IsStartPhase(v1::SERVER_STATE_READY));
}

TEST(States, AMessageIsWrittenBothWaysAndReadFromTheEnumFirst) {
  v1::ServerRow row;
  SetServerState(v1::SERVER_STATE_JIT_COMPILING, &row);
  EXPECT_EQ(row.server_state(), v1::SERVER_STATE_JIT_COMPILING);
  EXPECT_EQ(row.state(), "JIT_COMPILING");
  EXPECT_EQ(ServerStateOf(row), v1::SERVER_STATE_JIT_COMPILING);

  // The enum wins where both are set and disagree.
  row.set_state("READY");
  EXPECT_EQ(ServerStateOf(row), v1::SERVER_STATE_JIT_COMPILING);

  v1::Attempt attempt;
  SetAttemptOutcome(v1::ATTEMPT_OUTCOME_LOST, &attempt);
  EXPECT_EQ(attempt.outcome(), "lost");
  EXPECT_EQ(AttemptOutcomeOf(attempt), v1::ATTEMPT_OUTCOME_LOST);

  v1::Plan plan;
  SetPlanStatus(v1::PLAN_STATUS_SUPERSEDED, &plan);
  EXPECT_EQ(plan.status(), "superseded");
  EXPECT_EQ(PlanStatusOf(plan), v1::PLAN_STATUS_SUPERSEDED);
}

TEST(States, AMessageFromTheReleaseBeforeIsReadFromItsString) {
  // An older agent writes only the string.
  v1::ServerStatus status;
  status.set_state("CAPTURING_GRAPHS");
  EXPECT_EQ(ServerStateOf(status), v1::SERVER_STATE_CAPTURING_GRAPHS);
  v1::PhaseChanged phase;
  phase.set_state("LOADING");
  EXPECT_EQ(ServerStateOf(phase), v1::SERVER_STATE_LOADING);
  v1::Attempt attempt;
  attempt.set_outcome("ready");
  EXPECT_EQ(AttemptOutcomeOf(attempt), v1::ATTEMPT_OUTCOME_READY);
  v1::Plan plan;
  plan.set_status("applying");
  EXPECT_EQ(PlanStatusOf(plan), v1::PLAN_STATUS_APPLYING);
  // Neither set, or a spelling this build does not know.
  EXPECT_EQ(ServerStateOf(v1::ServerRow()), v1::SERVER_STATE_UNSPECIFIED);
  status.set_state("HIBERNATING");
  EXPECT_EQ(ServerStateOf(status), v1::SERVER_STATE_UNSPECIFIED);
}

TEST(States, AValueFromANewerPeerIsReadFromItsSpelling) {
  // proto3 keeps an enum number this build has no name for; the string beside it decides.
  v1::ServerRow row;
  row.set_server_state(static_cast<v1::ServerState>(99));
  row.set_state("READY");
  EXPECT_EQ(ServerStateOf(row), v1::SERVER_STATE_READY);
  row.set_state("DRAINING");
  EXPECT_EQ(ServerStateOf(row), v1::SERVER_STATE_UNSPECIFIED);
  EXPECT_EQ(ServerStateText(row), "DRAINING");
  v1::Attempt attempt;
  attempt.set_attempt_outcome(static_cast<v1::AttemptOutcome>(42));
  attempt.set_outcome("lost");
  EXPECT_EQ(AttemptOutcomeOf(attempt), v1::ATTEMPT_OUTCOME_LOST);
  v1::Plan plan;
  plan.set_plan_status(static_cast<v1::PlanStatus>(42));
  plan.set_status("applied");
  EXPECT_EQ(PlanStatusOf(plan), v1::PLAN_STATUS_APPLIED);
}

TEST(States, TheTextIsTheEnumsSpellingElseTheStringAsSent) {
  v1::ServerRow row;
  row.set_state("HIBERNATING");  // a newer fleetd's state this build does not know
  EXPECT_EQ(ServerStateText(row), "HIBERNATING");
  SetServerState(v1::SERVER_STATE_READY, &row);
  row.set_state("STALE");
  EXPECT_EQ(ServerStateText(row), "READY");
  v1::Attempt attempt;
  attempt.set_outcome("ready");
  EXPECT_EQ(AttemptOutcomeText(attempt), "ready");
  v1::Plan plan;
  plan.set_status("archived");
  EXPECT_EQ(PlanStatusText(plan), "archived");
  SetPlanStatus(v1::PLAN_STATUS_APPLIED, &plan);
  EXPECT_EQ(PlanStatusText(plan), "applied");
}

}  // namespace
}  // namespace fleet
