// The fault matrix's checker: a consistent record passes, and each kind of broken record is
// named. The records are made by the real stores (fleetd's FleetStore for the schema, the
// agent's AgentStore for its event log), then edited with SQL the way a fault would leave them.
#include "tests/faults/fault_invariants.h"

#include <memory>
#include <string>
#include <vector>

#include "agent/agent_store.h"
#include "common/sqlite/database.h"
#include "daemon/store/fleet_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/agent.pb.h"
#include "tests/testing/subprocess.h"

namespace fleet::faults {
namespace {

using ::testing::AllOf;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

class FaultInvariantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_db_ = dir_.Join("fleet.db");
    {
      auto store = daemon::FleetStore::Open(fleet_db_);
      ASSERT_TRUE(store.ok()) << store.status();
    }
    auto db = sqlite::Database::Open(fleet_db_);
    ASSERT_TRUE(db.ok()) << db.status();
    fleet_ = *std::move(db);
    ASSERT_TRUE(fleet_
                    ->Exec("INSERT INTO hosts (id, name) VALUES (1, 'local');"
                           "INSERT INTO containers (id, host_id, ctid, name) "
                           "VALUES (1, 1, '200', 'local/200');"
                           "INSERT INTO servers (id, name, container_id, gpu, desired, state, "
                           "spec, policy) VALUES (1, 'local/200/gpu0', 1, 0, 'running', 'READY', "
                           "x'', x'')")
                    .ok());
    auto agent = agent::AgentStore::Open(dir_.Join("agent"), 1000);
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    input_.fleet_db = fleet_db_;
    input_.container = "local/200";
    input_.agent_db = dir_.Join("agent/agent.db");
  }

  // The agent launches attempt `id` on GPU 0 and says it is ready; returns the events.
  std::vector<fleet::v1::AgentEvent> Launch(const std::string& id) {
    std::vector<fleet::v1::AgentEvent> out;
    fleet::v1::AgentEvent start;
    start.mutable_server()->set_gpu(0);
    start.set_attempt_id(id);
    start.mutable_phase()->set_state("STARTING");
    EXPECT_TRUE(agent_->Append(&start).ok());
    out.push_back(start);
    fleet::v1::AgentEvent ready;
    ready.mutable_server()->set_gpu(0);
    ready.set_attempt_id(id);
    ready.mutable_ready()->set_http_status(200);
    EXPECT_TRUE(agent_->Append(&ready).ok());
    out.push_back(ready);
    return out;
  }

  void Store(const fleet::v1::AgentEvent& e) {
    auto insert = fleet_->Prepare(
        "INSERT INTO events (container_id, incarnation, sequence, received_at, kind, event) "
        "VALUES (1, ?1, ?2, 'now', 'phase', ?3)");
    ASSERT_TRUE(insert.ok());
    insert->Bind(1, std::string_view(e.incarnation()))
        .Bind(2, static_cast<int64_t>(e.sequence()))
        .BindBlob(3, e.SerializeAsString());
    ASSERT_TRUE(insert->Run().ok());
  }

  void AttemptRow(const std::string& id, int number, bool launched = true,
                  const std::string& outcome = "ready") {
    auto insert = fleet_->Prepare(
        "INSERT INTO attempts (id, server_id, number, trigger, created_at, launched_at, outcome, "
        "spec) VALUES (?1, 1, ?2, 'initial', 'now', ?3, ?4, x'')");
    ASSERT_TRUE(insert.ok());
    insert->Bind(1, std::string_view(id)).Bind(2, static_cast<int64_t>(number));
    if (launched) {
      insert->Bind(3, std::string_view("now"));
    } else {
      insert->BindNull(3);
    }
    insert->Bind(4, std::string_view(outcome));
    ASSERT_TRUE(insert->Run().ok());
  }

  void Ledger(const std::string& lines) {
    dir_.WriteFile("launches", lines);
    input_.launch_ledger = dir_.Join("launches");
  }

  std::vector<Violation> Check() {
    agent_.reset();  // quiescent, as after the harness stopped the agent
    auto v = CheckInvariants(input_);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<Violation>{};
  }

  testing::TempDir dir_;
  std::string fleet_db_;
  std::unique_ptr<sqlite::Database> fleet_;
  std::unique_ptr<agent::AgentStore> agent_;
  CheckInput input_;
};

auto Is(const std::string& invariant, const std::string& detail) {
  return AllOf(Field(&Violation::invariant, invariant),
               Field(&Violation::detail, HasSubstr(detail)));
}

TEST_F(FaultInvariantsTest, ConsistentRecordHoldsEveryInvariant) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  Ledger("0 101 1.0\n");
  EXPECT_THAT(Check(), IsEmpty());
}

TEST_F(FaultInvariantsTest, EventNeverStoredInFleetDbIsNamed) {
  std::vector<fleet::v1::AgentEvent> events = Launch("a1");
  Store(events[0]);
  AttemptRow("a1", 1);
  EXPECT_THAT(Check(),
              UnorderedElementsAre(Is("events_once", "never stored in fleet.db: #2 (ready, a1)")));
}

TEST_F(FaultInvariantsTest, SequenceReusedWithOtherContentIsNamed) {
  std::vector<fleet::v1::AgentEvent> events = Launch("a1");
  Store(events[0]);
  fleet::v1::AgentEvent other = events[1];
  other.set_attempt_id("a0");
  Store(other);
  AttemptRow("a1", 1);
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("events_once", "differ from the agent's")));
}

TEST_F(FaultInvariantsTest, EventTheAgentNeverWroteIsNamed) {
  std::vector<fleet::v1::AgentEvent> events = Launch("a1");
  for (const auto& e : events) Store(e);
  fleet::v1::AgentEvent extra = events[1];
  extra.set_sequence(9);
  Store(extra);
  AttemptRow("a1", 1);
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("events_once", "the agent never wrote: #9")));
}

TEST_F(FaultInvariantsTest, HoleInAttemptNumbersIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  AttemptRow("a3", 3, /*launched=*/false, "lost");
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("attempts_contiguous", "numbers 1,3 are not 1..2")));
}

TEST_F(FaultInvariantsTest, LaunchWithoutAttemptRowIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  EXPECT_THAT(Check(),
              UnorderedElementsAre(Is("launch_recorded", "no attempt row in fleet.db: a1")));
}

TEST_F(FaultInvariantsTest, RowMarkedLaunchedThatNoAgentLaunchedIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  AttemptRow("a2", 2, /*launched=*/true, "running");
  EXPECT_THAT(Check(),
              UnorderedElementsAre(Is("launch_recorded", "no agent launched: local/200/gpu0 #2")));
}

TEST_F(FaultInvariantsTest, AttemptLaunchedByTwoIncarnationsIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  // The state dir of the first incarnation is kept aside; a new one launches a1 again.
  agent_.reset();
  ASSERT_EQ(std::rename(dir_.Join("agent").c_str(), dir_.Join("old").c_str()), 0);
  auto fresh = agent::AgentStore::Open(dir_.Join("agent"), 1000);
  ASSERT_TRUE(fresh.ok());
  agent_ = *std::move(fresh);
  for (const auto& e : Launch("a1")) Store(e);
  input_.old_agent_dbs = {dir_.Join("old/agent.db")};
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("launched_once", "a1 (2 times)")));
}

TEST_F(FaultInvariantsTest, ProcessStartedWithoutAnAgentLaunchIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  Ledger("0 101 1.0\n0 140 2.0\n");
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("launches_match",
                                               "gpu 0: the container started 2 server processes, "
                                               "the agents recorded 1 launches")));
}

TEST_F(FaultInvariantsTest, ServerNotReadyAfterTheFaultIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  ASSERT_TRUE(fleet_
                  ->Exec("UPDATE servers SET state = 'GAVE_UP', reason = 'remediation 3 failed'; "
                         "INSERT INTO remediations (id, container_id, trigger, status, created_at, "
                         "plan) VALUES (3, 1, 'diagnosis', 'applying', 'now', x'')")
                  .ok());
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("settled", "gpu0 is GAVE_UP: remediation 3 failed"),
                                            Is("settled", "remediations still applying: 3")));
}

TEST_F(FaultInvariantsTest, GaveUpWithAReasonIsSettledWhenAllowed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  ASSERT_TRUE(fleet_->Exec("UPDATE servers SET state = 'GAVE_UP', reason = 'budget spent'").ok());
  input_.allow_gave_up = true;
  EXPECT_THAT(Check(), IsEmpty());
}

TEST(FaultInvariants, RecordedProcessesAreTheAgentsServers) {
  testing::TempDir dir;
  {
    auto store = agent::AgentStore::Open(dir.path(), 1000);
    ASSERT_TRUE(store.ok());
    fleet::v1::ServerRecord record;
    record.set_pid(4242);
    record.set_start_ticks(77);
    record.set_attempt_id("a9");
    ASSERT_TRUE((*store)->PutServer(3, record).ok());
  }
  auto processes = RecordedProcesses(dir.Join("agent.db"));
  ASSERT_TRUE(processes.ok()) << processes.status();
  ASSERT_EQ(processes->size(), 1u);
  EXPECT_EQ((*processes)[0].gpu, 3);
  EXPECT_EQ((*processes)[0].pid, 4242);
  EXPECT_EQ((*processes)[0].start_ticks, 77u);
}

}  // namespace
}  // namespace fleet::faults
