// fleetd migrate-store's copy (migrate_store.h): a SQLite record made through FleetStore's own
// writes, copied into a real PostgreSQL server (one per test process, a fresh database per test),
// then read back through FleetStore on PostgreSQL. Also: a target with rows refused and left as it
// was; a source of another schema version, or with a table the copy does not know, refused; the
// copy of a record a writer keeps writing to is one snapshot; a server lost in the middle of the
// copy leaves the target empty; fleetd's next inserts after a copy get new ids.
#include "daemon/store/migrate_store.h"

#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/string_view.h"
#include "common/postgres/database.h"
#include "common/sql/postgres_connection.h"
#include "common/sql/sqlite_connection.h"
#include "daemon/store/fleet_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/postgres_server.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::fleet::testing::PostgresServer;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

ServerRecord Server(const std::string& container, int gpu) {
  ServerRecord r;
  r.name = absl::StrCat("local/", container, "/gpu", gpu);
  r.host = "local";
  r.container = container;
  r.gpu = gpu;
  r.spec.set_engine("sglang");
  r.spec.add_argv("python3");
  r.spec.add_argv(absl::StrCat("--port=", 30000 + gpu));
  (*r.spec.mutable_env())["CUDA_VISIBLE_DEVICES"] = absl::StrCat(gpu);
  r.policy.set_name("default");
  r.policy.set_max_attempts(8);
  r.state = fleet::v1::SERVER_STATE_READY;
  r.phase_detail = "ready";
  r.state_since = kNow;
  r.last_class = "ptx_version_unsupported";
  r.last_summary = "ptxas accepts 9.0";
  return r;
}

fleet::v1::AgentEvent Event(const std::string& container, const std::string& incarnation,
                            uint64_t sequence) {
  fleet::v1::AgentEvent e;
  e.set_incarnation(incarnation);
  e.set_sequence(sequence);
  e.mutable_server()->set_host("local");
  e.mutable_server()->set_container(container);
  e.mutable_phase()->set_state("LOADING");
  return e;
}

// Something in every table, through FleetStore's writes: two configs, three servers in two
// containers, attempts (one failed with its diagnosis, one ready), a remediation with actions and
// linked attempts, events and cursors (and a gap), fleet events with deliveries.
void Populate(FleetStore& store, int events = 5) {
  fleet::v1::FleetConfig config;
  config.add_hosts()->set_name("local");
  ASSERT_TRUE(store.SaveConfig(config, "a.yaml", "hosts: [local]\n", kNow).ok());
  config.add_policies()->set_name("default");
  ASSERT_TRUE(store.SaveConfig(config, "b.yaml", "hosts: [local]\npolicies: []\n", kNow).ok());
  for (const auto& [container, gpu] :
       std::vector<std::pair<std::string, int>>{{"200", 0}, {"200", 1}, {"201", 0}}) {
    ASSERT_TRUE(store.PutServer(Server(container, gpu)).ok());
  }
  auto first = store.CreateAttempt("local/200/gpu0", "initial", Server("200", 0).spec, kNow);
  ASSERT_TRUE(first.ok()) << first.status();
  first->outcome = fleet::v1::ATTEMPT_OUTCOME_FAILED;
  first->launched_at = kNow + absl::Seconds(1);
  first->ended_at = kNow + absl::Seconds(90);
  first->exit.set_exited(true);
  first->exit.set_exit_code(255);
  first->diagnosis_class = "ptx_version_unsupported";
  first->summary = "ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2";
  first->diagnosis.set_diagnosis_class("ptx_version_unsupported");
  first->diagnosis.set_summary(first->summary);
  ASSERT_TRUE(store.PutAttempt(*first).ok());
  fleet::v1::Plan plan;
  plan.set_container("local/200");
  plan.set_server("local/200/gpu0");
  plan.set_status("applying");
  plan.set_trigger("diagnosis");
  plan.set_diagnosis_class("ptx_version_unsupported");
  plan.set_attempt_id(first->id);
  plan.set_summary("install CUDA 13.2");
  plan.add_actions()->mutable_action()->mutable_set_env()->set_name("CUDA_HOME");
  plan.add_actions()->mutable_action()->mutable_set_env()->set_name("PATH");
  auto remediation = store.CreateRemediation(plan, kNow + absl::Seconds(91));
  ASSERT_TRUE(remediation.ok()) << remediation.status();
  remediation->set_status("applied");
  ASSERT_TRUE(store.UpdateRemediation(*remediation).ok());
  auto second =
      store.CreateAttempt("local/200/gpu0", absl::StrCat("remediation:", remediation->id()),
                          Server("200", 0).spec, kNow + absl::Seconds(120));
  ASSERT_TRUE(second.ok()) << second.status();
  second->outcome = fleet::v1::ATTEMPT_OUTCOME_READY;
  second->time_to_ready_ms = 42000;
  ASSERT_TRUE(store.PutAttempt(*second).ok());
  ASSERT_TRUE(store.LinkRemediationAttempt(remediation->id(), second->id).ok());
  ASSERT_TRUE(store.CreateAttempt("local/201/gpu0", "initial", {}, kNow).ok());

  std::vector<fleet::v1::AgentEvent> batch;
  for (int i = 1; i <= events; ++i) batch.push_back(Event("200", "inc-1", i));
  ASSERT_TRUE(
      store.IngestBatch("local/200", batch, {}, {}, {"inc-1", uint64_t(events)}, kNow).ok());
  ASSERT_TRUE(
      store.IngestBatch("local/201", {Event("201", "inc-9", 1)}, {}, {}, {"inc-9", 1}, kNow).ok());
  ASSERT_TRUE(store.RecordGap("local/201", {"inc-9", 1}, {"inc-10", 0}, kNow).ok());

  std::vector<fleet::v1::FleetEvent> fleet_events;
  for (int i = 1; i <= 3; ++i) {
    fleet::v1::FleetEvent e;
    e.set_index(i);
    e.set_type(i == 3 ? "gave_up" : "server_state");
    e.set_server("local/200/gpu0");
    e.mutable_at()->set_seconds(1800000000 + i);
    fleet_events.push_back(e);
  }
  std::vector<DeliveryRecord> deliveries(2);
  for (int i = 0; i < 2; ++i) {
    deliveries[i].event_index = 3;
    deliveries[i].notify = i == 0 ? "oncall" : "chat";
    deliveries[i].event_type = "gave_up";
    deliveries[i].server = "local/200/gpu0";
    deliveries[i].body = "{\"event\":\"gave_up\"}";
    deliveries[i].next_at = kNow;
  }
  ASSERT_TRUE(store.AppendFleetEvents(fleet_events, &deliveries, kNow).ok());
  deliveries[0].status = "delivered";
  deliveries[0].attempts = 1;
  deliveries[0].http_status = 200;
  deliveries[0].finished_at = kNow + absl::Seconds(1);
  ASSERT_TRUE(store.UpdateDelivery(deliveries[0]).ok());
}

std::string Time(absl::Time t) { return absl::FormatTime(t); }

// Everything FleetStore reads back, as text: two records that give the same dump are the same
// to fleetd.
std::string Dump(FleetStore& store) {
  std::string out;
  auto servers = store.Servers();
  EXPECT_TRUE(servers.ok()) << servers.status();
  for (const ServerRecord& s : servers.ok() ? *servers : std::vector<ServerRecord>{}) {
    absl::StrAppend(&out, "server ", s.name, " ", s.host, " ", s.container, " ", s.gpu, " [",
                    s.spec.ShortDebugString(), "] [", s.policy.ShortDebugString(), "] ",
                    s.desired_running, s.removed, " ", s.state, " ", s.phase_detail, " ",
                    s.progress_step, "/", s.progress_total, " ", Time(s.state_since), " ",
                    s.attempt_id, " ", s.attempt_number, " ", s.last_class, " ", s.last_summary,
                    " ", s.reason, " ", Time(s.backoff_until), " ", s.degraded, "\n");
  }
  auto attempts = store.Attempts("");
  EXPECT_TRUE(attempts.ok()) << attempts.status();
  for (const AttemptRecord& a : attempts.ok() ? *attempts : std::vector<AttemptRecord>{}) {
    absl::StrAppend(&out, "attempt ", a.id, " ", a.server, " ", a.number, " ", a.trigger, " [",
                    a.spec.ShortDebugString(), "] ", Time(a.created_at), " ", Time(a.launched_at),
                    " ", Time(a.ended_at), " ", a.outcome, " [", a.exit.ShortDebugString(), "] ",
                    a.diagnosis_class, " ", a.summary, " [", a.diagnosis.ShortDebugString(), "] ",
                    a.time_to_ready_ms, "\n");
  }
  auto plans = store.Remediations("");
  EXPECT_TRUE(plans.ok()) << plans.status();
  for (const fleet::v1::Plan& p : plans.ok() ? *plans : std::vector<fleet::v1::Plan>{}) {
    absl::StrAppend(&out, "plan ", p.ShortDebugString(), "\n");
  }
  for (const char* container : {"local/200", "local/201"}) {
    auto cursor = store.Cursor(container);
    EXPECT_TRUE(cursor.ok()) << cursor.status();
    if (cursor.ok()) {
      absl::StrAppend(&out, "cursor ", container, " ", cursor->incarnation, " ", cursor->sequence,
                      "\n");
    }
  }
  auto config = store.LatestConfig();
  EXPECT_TRUE(config.ok()) << config.status();
  if (config.ok() && *config) absl::StrAppend(&out, "config ", (*config)->ShortDebugString(), "\n");
  for (const char* source : {"a.yaml", "b.yaml"}) {
    auto info = store.LastConfigFrom(source);
    EXPECT_TRUE(info.ok()) << info.status();
    if (info.ok() && *info) {
      absl::StrAppend(&out, "config from ", source, ": ", (*info)->version, " ", (*info)->digest,
                      "\n");
    }
  }
  auto fleet_events = store.FleetEvents(0, 1000);
  EXPECT_TRUE(fleet_events.ok()) << fleet_events.status();
  for (const auto& e : fleet_events.ok() ? *fleet_events : std::vector<fleet::v1::FleetEvent>{}) {
    absl::StrAppend(&out, "fleet event ", e.ShortDebugString(), "\n");
  }
  auto deliveries = store.Deliveries(1000);
  EXPECT_TRUE(deliveries.ok()) << deliveries.status();
  for (const DeliveryRecord& d : deliveries.ok() ? *deliveries : std::vector<DeliveryRecord>{}) {
    absl::StrAppend(&out, "delivery ", d.id, " ", d.event_index, " ", d.notify, " ", d.event_type,
                    " ", d.server, " ", d.status, " ", d.attempts, " ", d.http_status, " ", d.error,
                    " ", Time(d.created_at), " ", Time(d.next_at), " ", Time(d.finished_at), " ",
                    d.body, "\n");
  }
  auto events = store.EventCount();
  EXPECT_TRUE(events.ok()) << events.status();
  absl::StrAppend(&out, "events ", events.ok() ? *events : -1, "\n");
  return out;
}

int64_t Count(sql::Connection& db, const std::string& table) {
  auto st = db.Prepare(absl::StrCat("SELECT count(*) FROM ", table));
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return -1;
  auto row = st->Step();
  EXPECT_TRUE(row.ok() && *row);
  return row.ok() && *row ? st->ColumnInt(0) : -1;
}

bool PostgresMissing() { return PostgresServer::FindBinDir().empty(); }

class MigrateStoreTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { server_.reset(); }

  void SetUp() override {
    if (PostgresMissing()) GTEST_SKIP() << "no PostgreSQL binaries: deploy/install-deps.sh";
    if (server_ == nullptr) {
      auto server = PostgresServer::Start();
      ASSERT_TRUE(server.ok()) << server.status();
      server_ = *std::move(server);
    }
    auto admin = postgres::Database::Connect(server_->url());
    ASSERT_TRUE(admin.ok()) << admin.status();
    const std::string name = absl::StrCat("migrate_", ++databases_);
    ASSERT_TRUE((*admin)->Exec(absl::StrCat("CREATE DATABASE ", name)).ok());
    url_ = absl::StrReplaceAll(server_->url(), {{"@/fleet?", absl::StrCat("@/", name, "?")}});
    ASSERT_NE(url_, server_->url());
  }

  std::unique_ptr<FleetStore> OpenSource() {
    auto store = FleetStore::Open(source_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  std::unique_ptr<FleetStore> OpenTarget() {
    auto store = FleetStore::Open(url_, FleetStoreOptions{});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  absl::StatusOr<MigrateResult> Migrate(const MigrateOptions& options = {}) {
    auto source = sql::SqliteConnection::Open(source_);
    if (!source.ok()) return source.status();
    auto target = sql::PostgresConnection::Connect(url_);
    if (!target.ok()) return target.status();
    return MigrateStore(**source, **target, options);
  }

  // Rows in each of the record's tables of the target (-1: no such table).
  std::map<std::string, int64_t> TargetCounts() {
    std::map<std::string, int64_t> out;
    auto db = sql::PostgresConnection::Connect(url_);
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return out;
    for (const std::string& table : RecordTables()) {
      auto st = (*db)->Prepare("SELECT to_regclass(?1) IS NOT NULL");
      EXPECT_TRUE(st.ok());
      st->Bind(1, std::string_view(table));
      auto row = st->Step();
      EXPECT_TRUE(row.ok() && *row);
      out[table] = st->ColumnInt(0) ? Count(**db, table) : -1;
    }
    return out;
  }

  static inline std::unique_ptr<PostgresServer> server_;
  static inline int databases_ = 0;
  testing::TempDir dir_;
  const std::string source_ = dir_.Join("fleet.db");
  std::string url_;
};

TEST_F(MigrateStoreTest, CopiesEveryTableAndFleetdReadsTheSameRecordBack) {
  auto source = OpenSource();
  ASSERT_NE(source, nullptr);
  ASSERT_NO_FATAL_FAILURE(Populate(*source));
  const std::string before = Dump(*source);

  std::vector<std::string> told;
  MigrateOptions options;
  options.progress_every = 2;
  options.progress = [&](const MigrateProgress& p) {
    told.push_back(absl::StrCat(AsAbsl(p.table), p.done ? " done " : " ", p.rows));
  };
  auto result = Migrate(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->schema_version, *source->db().SchemaVersion());

  std::vector<std::string> tables;
  std::map<std::string, int64_t> counted;
  for (const TableCount& t : result->tables) {
    tables.push_back(t.table);
    EXPECT_EQ(t.source, t.target) << t.table;
    counted[t.table] = t.source;
  }
  EXPECT_THAT(tables, ElementsAreArray(RecordTables()));
  const std::map<std::string, int64_t> want = {
      {"hosts", 1},          {"containers", 2},   {"configs", 2},    {"servers", 3},
      {"attempts", 3},       {"remediations", 1}, {"actions", 2},    {"remediation_attempts", 2},
      {"events", 7},         {"fleet_events", 3}, {"deliveries", 2}, {"agent_cursors", 2},
      {"fleet_identity", 1},
  };
  EXPECT_EQ(counted, want);
  EXPECT_EQ(TargetCounts(), want);
  EXPECT_THAT(told, ::testing::Contains("events 2"));
  EXPECT_THAT(told, ::testing::Contains("events done 7"));

  // fleetd on the target reads what it read on the source; the source is as it was.
  auto target = OpenTarget();
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(Dump(*target), before);
  EXPECT_EQ(Dump(*source), before);
  // The record keeps its fleet id (the target's migrations made one of their own: replaced).
  auto source_id = source->FleetId();
  ASSERT_TRUE(source_id.ok()) << source_id.status();
  EXPECT_EQ(*target->FleetId(), *source_id);
  EXPECT_THAT(before, HasSubstr("server local/201/gpu0"));
  EXPECT_THAT(before, HasSubstr("cursor local/201 inc-9 1"));
}

// Rows came with their ids: fleetd's next inserts into the target (a config, a host, container
// and server, an attempt, a remediation with actions, events, a fleet event and a delivery) get
// new ones instead of colliding.
TEST_F(MigrateStoreTest, FleetdWritesNewRowsAfterTheCopy) {
  {
    auto source = OpenSource();
    ASSERT_NE(source, nullptr);
    ASSERT_NO_FATAL_FAILURE(Populate(*source));
  }
  auto result = Migrate();
  ASSERT_TRUE(result.ok()) << result.status();

  auto target = OpenTarget();
  ASSERT_NE(target, nullptr);
  auto version = target->SaveConfig(fleet::v1::FleetConfig(), "c.yaml", "hosts: []\n", kNow);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 3);
  ServerRecord remote = Server("300", 0);
  remote.name = "pve9/300/gpu0";
  remote.host = "pve9";
  ASSERT_TRUE(target->PutServer(remote).ok());
  ASSERT_TRUE(target->PutServer(Server("200", 2)).ok());
  auto attempt = target->CreateAttempt("local/200/gpu0", "restart", {}, kNow);
  ASSERT_TRUE(attempt.ok()) << attempt.status();
  EXPECT_EQ(attempt->number, 3);
  fleet::v1::Plan plan;
  plan.set_container("pve9/300");
  plan.set_status("proposed");
  plan.set_trigger("manual");
  plan.add_actions()->mutable_action()->mutable_set_env()->set_name("CUDA_HOME");
  auto remediation = target->CreateRemediation(plan, kNow);
  ASSERT_TRUE(remediation.ok()) << remediation.status();
  EXPECT_EQ(remediation->id(), "2");
  ASSERT_TRUE(target->LinkRemediationAttempt(remediation->id(), attempt->id).ok());
  ASSERT_TRUE(
      target->IngestBatch("pve9/300", {Event("300", "inc-1", 1)}, {}, {}, {"inc-1", 1}, kNow).ok());
  ASSERT_TRUE(target
                  ->IngestBatch("local/200", {Event("200", "inc-1", 6), Event("200", "inc-1", 7)},
                                {}, {}, {"inc-1", 7}, kNow)
                  .ok());
  fleet::v1::FleetEvent e;
  e.set_index(4);
  e.set_type("server_state");
  std::vector<DeliveryRecord> deliveries(1);
  deliveries[0].event_index = 4;
  deliveries[0].notify = "oncall";
  deliveries[0].event_type = "server_state";
  deliveries[0].body = "{}";
  ASSERT_TRUE(target->AppendFleetEvents({e}, &deliveries, kNow).ok());
  EXPECT_EQ(deliveries[0].id, 3);

  auto counts = TargetCounts();
  EXPECT_EQ(counts["hosts"], 2);
  EXPECT_EQ(counts["containers"], 3);
  EXPECT_EQ(counts["servers"], 5);
  EXPECT_EQ(counts["attempts"], 4);
  EXPECT_EQ(counts["actions"], 3);
  EXPECT_EQ(counts["events"], 10);
  EXPECT_EQ(counts["deliveries"], 3);
  auto servers = target->Servers();
  ASSERT_TRUE(servers.ok());
  EXPECT_EQ(servers->size(), 5u);
}

// A target whose tables hold a row (any table) is refused, named, and left as it was: its rows,
// and a database with no tables gets none.
TEST_F(MigrateStoreTest, RefusesATargetWithRowsAndLeavesItAsItWas) {
  {
    auto source = OpenSource();
    ASSERT_NE(source, nullptr);
    ASSERT_NO_FATAL_FAILURE(Populate(*source));
  }
  {
    auto target = OpenTarget();
    ASSERT_NE(target, nullptr);
    // One row in one table: fleet events, late in the copy's order.
    fleet::v1::FleetEvent e;
    e.set_index(7);
    e.set_type("agent_lost");
    ASSERT_TRUE(target->AppendFleetEvents({e}, nullptr, kNow).ok());
  }
  const std::map<std::string, int64_t> before = TargetCounts();
  auto refused = Migrate();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("table fleet_events already holds rows"));
  EXPECT_EQ(TargetCounts(), before);
  EXPECT_EQ(before.at("fleet_events"), 1);
  EXPECT_EQ(before.at("servers"), 0);

  // And a record with servers: named by its first table with rows.
  {
    auto target = OpenTarget();
    ASSERT_NE(target, nullptr);
    ASSERT_TRUE(target->PutServer(Server("200", 0)).ok());
  }
  refused = Migrate();
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("table hosts already holds rows"));
  EXPECT_EQ(TargetCounts().at("servers"), 1);
}

// The source's schema must be this build's: older (start this fleetd on it first), newer, or none
// at all. A table the copy does not know is refused rather than left behind. The target is not
// touched: no tables made.
TEST_F(MigrateStoreTest, RefusesASourceOfAnotherSchemaOrWithAnUnknownTable) {
  int64_t current = 0;
  {
    auto source = OpenSource();
    ASSERT_NE(source, nullptr);
    ASSERT_NO_FATAL_FAILURE(Populate(*source));
    current = *source->db().SchemaVersion();
  }
  auto set_version = [&](int64_t v) {
    auto db = sqlite::Database::Open(source_);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec(absl::StrCat("PRAGMA user_version = ", v)).ok());
  };
  ASSERT_NO_FATAL_FAILURE(set_version(current - 1));
  auto older = Migrate();
  EXPECT_EQ(older.status().code(), absl::StatusCode::kFailedPrecondition) << older.status();
  EXPECT_THAT(older.status().message(),
              HasSubstr(absl::StrCat("schema version ", current - 1, ", this fleetd's is ", current,
                                     ": start this fleetd once on it")));
  ASSERT_NO_FATAL_FAILURE(set_version(current + 1));
  auto newer = Migrate();
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition) << newer.status();
  EXPECT_THAT(newer.status().message(), HasSubstr("newer than this fleetd's"));
  ASSERT_NO_FATAL_FAILURE(set_version(current));
  {
    auto db = sqlite::Database::Open(source_);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("CREATE TABLE my_notes (server TEXT)").ok());
  }
  auto unknown = Migrate();
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition) << unknown.status();
  EXPECT_THAT(unknown.status().message(), HasSubstr("table my_notes is not one the copy knows"));

  const std::string empty_file = dir_.Join("empty.db");
  auto empty = sql::SqliteConnection::Open(empty_file);
  ASSERT_TRUE(empty.ok());
  auto target = sql::PostgresConnection::Connect(url_);
  ASSERT_TRUE(target.ok());
  auto none = MigrateStore(**empty, **target);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("not a fleet record"));

  for (const auto& [table, rows] : TargetCounts()) EXPECT_EQ(rows, -1) << table;
  EXPECT_EQ(*(*target)->SchemaVersion(), 0);
}

// The source is live: a writer commits a turn after another (an attempt, an event and the
// agent's cursor, in one transaction) while the copy runs, and goes on after the copy began. The
// target holds one snapshot: as many events as attempts, its cursor at the last of them, and
// fewer of each than the source had when the writer stopped.
TEST_F(MigrateStoreTest, CopiesALiveRecordAsOneSnapshot) {
  {
    auto source = OpenSource();
    ASSERT_NE(source, nullptr);
    ASSERT_TRUE(source->PutServer(Server("200", 0)).ok());
  }
  absl::Mutex mu;
  int64_t committed = 0;  // guarded by mu
  bool stop = false;      // guarded by mu
  absl::Status writer_status;
  std::thread writer([&] {
    auto store = FleetStore::Open(source_);
    if (!store.ok()) {
      absl::MutexLock lock(&mu);
      writer_status = store.status();
      stop = true;
      return;
    }
    for (uint64_t i = 1;; ++i) {
      {
        absl::MutexLock lock(&mu);
        if (stop) return;
      }
      FleetStore::Batch batch(store->get());
      absl::Status s = (*store)->CreateAttempt("local/200/gpu0", "restart", {}, kNow).status();
      if (s.ok()) {
        s = (*store)->IngestBatch("local/200", {Event("200", "inc-1", i)}, {}, {}, {"inc-1", i},
                                  kNow);
      }
      if (s.ok()) s = batch.Commit();
      absl::MutexLock lock(&mu);
      if (!s.ok()) {
        writer_status = s;
        stop = true;
        return;
      }
      committed = static_cast<int64_t>(i);
    }
  });
  // Some turns before the copy, and (from inside the copy, once its snapshot is taken) 20 more.
  auto reached = [&](int64_t n) {
    absl::MutexLock lock(&mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return committed >= n || stop; };
    mu.Await(absl::Condition(&done));
    return committed;
  };
  ASSERT_GE(reached(10), 10) << writer_status;
  int64_t at_snapshot = -1;
  MigrateOptions options;
  options.progress = [&](const MigrateProgress& p) {
    if (p.table == "hosts" && p.done) {
      absl::MutexLock lock(&mu);
      at_snapshot = committed;
    }
    if (p.table == "servers" && p.done) reached(at_snapshot + 20);
  };
  auto result = Migrate(options);
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  writer.join();
  ASSERT_TRUE(writer_status.ok()) << writer_status;
  ASSERT_TRUE(result.ok()) << result.status();
  for (const TableCount& t : result->tables) EXPECT_EQ(t.source, t.target) << t.table;

  auto target = OpenTarget();
  ASSERT_NE(target, nullptr);
  const int64_t attempts = Count(target->db(), "attempts");
  EXPECT_EQ(Count(target->db(), "events"), attempts);
  auto cursor = target->Cursor("local/200");
  ASSERT_TRUE(cursor.ok());
  EXPECT_EQ(static_cast<int64_t>(cursor->sequence), attempts);
  auto last = target->Attempt("local/200/gpu0", 0);
  ASSERT_TRUE(last.ok() && *last);
  EXPECT_EQ((*last)->number, attempts);
  // The snapshot began before the progress call that saw `at_snapshot` turns (one more may have
  // committed and not been counted yet).
  EXPECT_GE(attempts, 10);
  EXPECT_LE(attempts, at_snapshot + 1);
  auto source = OpenSource();
  ASSERT_NE(source, nullptr);
  EXPECT_GE(Count(source->db(), "attempts"), at_snapshot + 20);
}

// The server dies half-way through the events: nothing was committed, every table of the target
// is empty (its schema stays, made before the copy), and a second run copies everything.
TEST_F(MigrateStoreTest, AServerLostMidCopyLeavesTheTargetEmpty) {
  {
    auto source = OpenSource();
    ASSERT_NE(source, nullptr);
    ASSERT_NO_FATAL_FAILURE(Populate(*source, /*events=*/1000));
  }
  MigrateOptions options;
  options.progress_every = 500;
  bool killed = false;
  options.progress = [&](const MigrateProgress& p) {
    if (p.table == "events" && !p.done && !killed) {
      killed = true;
      EXPECT_TRUE(server_->Kill().ok());
    }
  };
  auto lost = Migrate(options);
  ASSERT_TRUE(killed);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable) << lost.status();
  ASSERT_TRUE(server_->Restart().ok()) << server_->Log();

  for (const auto& [table, rows] : TargetCounts()) {
    // The fleet id is the target's migrations' own (made before the copy's transaction).
    EXPECT_EQ(rows, table == "fleet_identity" ? 1 : 0) << table;
  }
  auto again = Migrate();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(TargetCounts().at("events"), 1002);
}

// --to URL: a password in it would be in argv (ps shows it to every user).
TEST(MigrateStoreUrl, APasswordInTheUrlIsRefusedWithoutQuotingIt) {
  for (const char* url : {"postgresql://fleet:hunter2@db.example/fleet",
                          "postgres://fleet@db.example/fleet?password=hunter2&sslmode=require"}) {
    absl::Status s = CheckUrlWithoutPassword(url);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(s.message(), HasSubstr("--to-file FILE"));
    EXPECT_THAT(s.message(), Not(HasSubstr("hunter2")));
  }
  EXPECT_TRUE(CheckUrlWithoutPassword("postgresql://fleet@db.example/fleet?sslmode=require").ok());
  EXPECT_TRUE(CheckUrlWithoutPassword("postgresql://fleet@/fleet?host=/run/postgresql").ok());
  EXPECT_EQ(CheckUrlWithoutPassword("sqlite:/var/lib/gpu-fleet/fleet.db").code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fleet::daemon
