// The fault matrix's checker: a consistent record passes, and each kind of broken record is
// named. The records are made by the real stores (fleetd's FleetStore for the schema, the
// agent's AgentStore for its event log), then edited with SQL the way a fault would leave them.
// fleetd's record is fleet.db or a PostgreSQL database (a real server per test process, the
// instances labelled `postgres`): every test runs on both.
#include "tests/faults/fault_invariants.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "agent/agent_store.h"
#include "common/sql/postgres_connection.h"
#include "common/sql/sqlite_connection.h"
#include "daemon/store/fleet_store.h"
#include "daemon/store/fleet_store_schema.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/agent.pb.h"
#include "tests/testing/postgres_server.h"
#include "tests/testing/subprocess.h"

namespace fleet::faults {
namespace {

using ::testing::AllOf;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

enum class Engine { kSqlite, kPostgres };

// One PostgreSQL server for the test process (started on first use, stopped when the suite
// ends), a fresh database per test.
class PostgresRecord {
 public:
  static void StopServer() { server_.reset(); }
  static bool Missing() { return testing::PostgresServer::FindBinDir().empty(); }

  // A new database's URL; "" (the test failed) when there is none.
  static std::string Make() {
    if (server_ == nullptr) {
      auto server = testing::PostgresServer::Start();
      EXPECT_TRUE(server.ok()) << server.status();
      if (!server.ok()) return "";
      server_ = *std::move(server);
    }
    auto admin = sql::PostgresConnection::Connect(server_->url());
    EXPECT_TRUE(admin.ok()) << admin.status();
    if (!admin.ok()) return "";
    const std::string name = absl::StrCat("record_", ++databases_);
    absl::Status made = (*admin)->Exec(absl::StrCat("CREATE DATABASE ", name));
    EXPECT_TRUE(made.ok()) << made;
    return absl::StrReplaceAll(server_->url(), {{"@/fleet?", absl::StrCat("@/", name, "?")}});
  }

 private:
  static inline std::unique_ptr<testing::PostgresServer> server_;
  static inline int databases_ = 0;
};

class FaultInvariantsTest : public ::testing::TestWithParam<Engine> {
 protected:
  static void TearDownTestSuite() { PostgresRecord::StopServer(); }

  void SetUp() override {
    std::string target = dir_.Join("fleet.db");
    if (GetParam() == Engine::kPostgres) {
      if (PostgresRecord::Missing()) GTEST_SKIP() << "no PostgreSQL server binaries (initdb)";
      target = PostgresRecord::Make();
      ASSERT_FALSE(target.empty());
      input_.fleet_store_url = target;
    } else {
      input_.fleet_db = target;
    }
    {
      auto store = daemon::FleetStore::Open(target);
      ASSERT_TRUE(store.ok()) << store.status();
    }
    if (GetParam() == Engine::kPostgres) {
      auto db = sql::PostgresConnection::Connect(target);
      ASSERT_TRUE(db.ok()) << db.status();
      fleet_ = *std::move(db);
    } else {
      auto db = sql::SqliteConnection::Open(target);
      ASSERT_TRUE(db.ok()) << db.status();
      fleet_ = *std::move(db);
    }
    ASSERT_TRUE(fleet_->Exec("INSERT INTO hosts (id, name) VALUES (1, 'local')").ok());
    ASSERT_TRUE(fleet_
                    ->Exec(absl::StrCat("INSERT INTO containers (id, host_id, ",
                                        daemon::ContainerIdColumn(fleet_->dialect()),
                                        ", name) VALUES (1, 1, '200', 'local/200')"))
                    .ok());
    ASSERT_TRUE(fleet_
                    ->Exec("INSERT INTO servers (id, name, container_id, gpu, desired, state, "
                           "spec, policy) VALUES (1, 'local/200/gpu0', 1, 0, 'running', 'READY', "
                           "'', '')")
                    .ok());
    auto agent = agent::AgentStore::Open(dir_.Join("agent"), 1000);
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
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
        "spec) VALUES (?1, 1, ?2, 'initial', 'now', ?3, ?4, '')");
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
  std::unique_ptr<sql::Connection> fleet_;
  std::unique_ptr<agent::AgentStore> agent_;
  CheckInput input_;
};

auto Is(const std::string& invariant, const std::string& detail) {
  return AllOf(Field(&Violation::invariant, invariant),
               Field(&Violation::detail, HasSubstr(detail)));
}

TEST_P(FaultInvariantsTest, ConsistentRecordHoldsEveryInvariant) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  Ledger("0 101 1.0\n");
  EXPECT_THAT(Check(), IsEmpty());
}

TEST_P(FaultInvariantsTest, EventNeverStoredInFleetDbIsNamed) {
  std::vector<fleet::v1::AgentEvent> events = Launch("a1");
  Store(events[0]);
  AttemptRow("a1", 1);
  EXPECT_THAT(Check(),
              UnorderedElementsAre(Is("events_once", "never stored in fleet.db: #2 (ready, a1)")));
}

TEST_P(FaultInvariantsTest, SequenceReusedWithOtherContentIsNamed) {
  std::vector<fleet::v1::AgentEvent> events = Launch("a1");
  Store(events[0]);
  fleet::v1::AgentEvent other = events[1];
  other.set_attempt_id("a0");
  Store(other);
  AttemptRow("a1", 1);
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("events_once", "differ from the agent's")));
}

TEST_P(FaultInvariantsTest, EventTheAgentNeverWroteIsNamed) {
  std::vector<fleet::v1::AgentEvent> events = Launch("a1");
  for (const auto& e : events) Store(e);
  fleet::v1::AgentEvent extra = events[1];
  extra.set_sequence(9);
  Store(extra);
  AttemptRow("a1", 1);
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("events_once", "the agent never wrote: #9")));
}

TEST_P(FaultInvariantsTest, HoleInAttemptNumbersIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  AttemptRow("a3", 3, /*launched=*/false, "lost");
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("attempts_contiguous", "numbers 1,3 are not 1..2")));
}

TEST_P(FaultInvariantsTest, LaunchWithoutAttemptRowIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  EXPECT_THAT(Check(),
              UnorderedElementsAre(Is("launch_recorded", "no attempt row in fleet.db: a1")));
}

TEST_P(FaultInvariantsTest, RowMarkedLaunchedThatNoAgentLaunchedIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  AttemptRow("a2", 2, /*launched=*/true, "running");
  EXPECT_THAT(Check(),
              UnorderedElementsAre(Is("launch_recorded", "no agent launched: local/200/gpu0 #2")));
}

TEST_P(FaultInvariantsTest, AttemptLaunchedByTwoIncarnationsIsNamed) {
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

TEST_P(FaultInvariantsTest, ProcessStartedWithoutAnAgentLaunchIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  Ledger("0 101 1.0\n0 140 2.0\n");
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("launches_match",
                                               "gpu 0: the container started 2 server processes, "
                                               "the agents recorded 1 launches")));
}

TEST_P(FaultInvariantsTest, ServerNotReadyAfterTheFaultIsNamed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  ASSERT_TRUE(
      fleet_->Exec("UPDATE servers SET state = 'GAVE_UP', reason = 'remediation 3 failed'").ok());
  ASSERT_TRUE(fleet_
                  ->Exec("INSERT INTO remediations (id, container_id, trigger, status, created_at, "
                         "plan) VALUES (3, 1, 'diagnosis', 'applying', 'now', '')")
                  .ok());
  EXPECT_THAT(Check(), UnorderedElementsAre(Is("settled", "gpu0 is GAVE_UP: remediation 3 failed"),
                                            Is("settled", "remediations still applying: 3")));
}

TEST_P(FaultInvariantsTest, GaveUpWithAReasonIsSettledWhenAllowed) {
  for (const auto& e : Launch("a1")) Store(e);
  AttemptRow("a1", 1);
  ASSERT_TRUE(fleet_->Exec("UPDATE servers SET state = 'GAVE_UP', reason = 'budget spent'").ok());
  input_.allow_gave_up = true;
  EXPECT_THAT(Check(), IsEmpty());
}

TEST_P(FaultInvariantsTest, TheHarnessQueriesReadTheCursorAndTheRemediationsApplying) {
  auto cursor = QueryRecord(input_, "cursor");
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_EQ(*cursor, "");
  ASSERT_TRUE(fleet_
                  ->Exec("INSERT INTO agent_cursors (container_id, incarnation, sequence, "
                         "updated_at) VALUES (1, 'inc9', 42, 'now')")
                  .ok());
  ASSERT_TRUE(fleet_
                  ->Exec("INSERT INTO remediations (id, container_id, trigger, status, created_at, "
                         "plan) VALUES (3, 1, 'diagnosis', 'applying', 'now', '')")
                  .ok());
  cursor = QueryRecord(input_, "cursor");
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_EQ(*cursor, "inc9#42");
  auto applying = QueryRecord(input_, "applying");
  ASSERT_TRUE(applying.ok()) << applying.status();
  EXPECT_EQ(*applying, "1");
  auto dump = QueryRecord(input_, "dump");
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_THAT(*dump, HasSubstr("local/200/gpu0|running|READY|"));
  EXPECT_THAT(*dump, HasSubstr("3|diagnosis||applying|"));
  EXPECT_EQ(QueryRecord(input_, "nothing").status().code(), absl::StatusCode::kInvalidArgument);
}

std::string EngineName(const ::testing::TestParamInfo<Engine>& info) {
  return info.param == Engine::kPostgres ? "postgres" : "sqlite";
}
INSTANTIATE_TEST_SUITE_P(Sqlite, FaultInvariantsTest, ::testing::Values(Engine::kSqlite),
                         EngineName);
INSTANTIATE_TEST_SUITE_P(Postgres, FaultInvariantsTest, ::testing::Values(Engine::kPostgres),
                         EngineName);

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
