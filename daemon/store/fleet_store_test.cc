// FleetStore on both engines: every test of the fixture runs on a real SQLite file and on a real
// PostgreSQL server (one per test process, a fresh database per test; the Postgres/ instances are
// labelled `postgres` in ctest). Attempt numbering, exactly-once event ingest with the cursor in
// the same transaction, the config as desired state, retention, a reopened record, migrations;
// what only SQLite has (the VFS, synced commits, the file's mode) and what only PostgreSQL has
// (a lost connection) in tests of their own.
#include "daemon/store/fleet_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/postgres/database.h"
#include "common/sqlite/power_loss_vfs.h"
#include "daemon/store/store_url_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/postgres_server.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::fleet::testing::PostgresServer;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

enum class Engine { kSqlite, kPostgres };

int64_t Count(FleetStore& store, const std::string& sql) {
  auto st = store.db().Prepare(sql);
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return -1;
  auto row = st->Step();
  EXPECT_TRUE(row.ok() && *row) << (row.ok() ? absl::OkStatus() : row.status());
  return row.ok() && *row ? st->ColumnInt(0) : -1;
}

int64_t SchemaVersion(FleetStore& store) {
  auto version = store.db().SchemaVersion();
  EXPECT_TRUE(version.ok()) << version.status();
  return version.ok() ? *version : -1;
}

// The record's target for a test: a file in its temp dir, or a fresh database on the process's
// PostgreSQL server (started on first use, stopped when the suite ends).
class StoreTarget {
 public:
  static void StopServer() { server_.reset(); }

  // Fails the test (and returns "") when the engine cannot be had; skips are the caller's.
  static std::string Make(Engine engine, const testing::TempDir& dir) {
    if (engine == Engine::kSqlite) return dir.Join("fleet.db");
    if (server_ == nullptr) {
      auto server = PostgresServer::Start();
      EXPECT_TRUE(server.ok()) << server.status();
      if (!server.ok()) return "";
      server_ = *std::move(server);
    }
    auto admin = postgres::Database::Connect(server_->url());
    EXPECT_TRUE(admin.ok()) << admin.status();
    if (!admin.ok()) return "";
    const std::string name = absl::StrCat("store_", ++databases_);
    absl::Status made = (*admin)->Exec(absl::StrCat("CREATE DATABASE ", name));
    EXPECT_TRUE(made.ok()) << made;
    // postgresql://fleet@/fleet?host=DIR: the same server and user, the new database.
    return absl::StrReplaceAll(server_->url(), {{"@/fleet?", absl::StrCat("@/", name, "?")}});
  }

  static PostgresServer* server() { return server_.get(); }

 private:
  static inline std::unique_ptr<PostgresServer> server_;
  static inline int databases_ = 0;
};

bool PostgresMissing() { return PostgresServer::FindBinDir().empty(); }
constexpr char kNoPostgres[] =
    "no PostgreSQL server binaries (initdb) on PATH or in /usr/lib/postgresql/*/bin: "
    "deploy/install-deps.sh installs them";

class FleetStoreTest : public ::testing::TestWithParam<Engine> {
 protected:
  static void TearDownTestSuite() { StoreTarget::StopServer(); }

  void SetUp() override {
    if (GetParam() == Engine::kPostgres && PostgresMissing()) GTEST_SKIP() << kNoPostgres;
    target_ = StoreTarget::Make(GetParam(), dir_);
    ASSERT_FALSE(target_.empty());
  }

  bool postgres() const { return GetParam() == Engine::kPostgres; }

  std::unique_ptr<FleetStore> Open() {
    auto store = FleetStore::Open(target_, FleetStoreOptions{});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  testing::TempDir dir_;
  std::string target_;
};

std::string EngineName(const ::testing::TestParamInfo<Engine>& info) {
  return info.param == Engine::kPostgres ? "postgres" : "sqlite";
}
INSTANTIATE_TEST_SUITE_P(Sqlite, FleetStoreTest, ::testing::Values(Engine::kSqlite), EngineName);
INSTANTIATE_TEST_SUITE_P(Postgres, FleetStoreTest, ::testing::Values(Engine::kPostgres),
                         EngineName);

ServerRecord Server(const std::string& gpu) {
  ServerRecord r;
  r.name = "local/200/gpu" + gpu;
  r.host = "local";
  r.container = "200";
  r.gpu = std::stoi(gpu);
  return r;
}

fleet::v1::AgentEvent Event(const std::string& incarnation, uint64_t sequence) {
  fleet::v1::AgentEvent e;
  e.set_incarnation(incarnation);
  e.set_sequence(sequence);
  e.mutable_server()->set_host("local");
  e.mutable_server()->set_container("200");
  e.mutable_phase()->set_state("LOADING");
  return e;
}

TEST_P(FleetStoreTest, AnAttemptWhoseRowACommitLostIsWrittenWholeAndAMissingServerIsAnError) {
  auto store = Open();
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  AttemptRecord a;
  {
    // Created in a batch whose commit is lost (rolled back): the daemon still holds the record.
    FleetStore::Batch batch(store.get());
    auto created = store->CreateAttempt("local/200/gpu0", "initial", {}, kNow);
    ASSERT_TRUE(created.ok()) << created.status();
    a = *created;
    ASSERT_TRUE(store->db().Exec("ROLLBACK").ok());
  }
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts"), 0);
  a.outcome = v1::ATTEMPT_OUTCOME_RUNNING;
  a.launched_at = kNow + absl::Seconds(1);
  ASSERT_TRUE(store->PutAttempt(a).ok());
  auto stored = store->Attempt("local/200/gpu0", 1);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->id, a.id);
  EXPECT_EQ((*stored)->trigger, "initial");
  EXPECT_EQ((*stored)->outcome, v1::ATTEMPT_OUTCOME_RUNNING);
  // Written again: the same row, updated.
  a.outcome = v1::ATTEMPT_OUTCOME_READY;
  ASSERT_TRUE(store->PutAttempt(a).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts WHERE outcome = 'ready'"), 1);
  // An attempt of a server that has no row is not silently dropped.
  AttemptRecord orphan = a;
  orphan.id = "local/200/gpu7#1-00";
  orphan.server = "local/200/gpu7";
  EXPECT_FALSE(store->PutAttempt(orphan).ok());
  // Nor is one whose number another attempt of its server holds.
  AttemptRecord twin = a;
  twin.id = "local/200/gpu0#1-ff";
  EXPECT_FALSE(store->PutAttempt(twin).ok());
}

// fleetd --db-vfs: the store opens fleet.db with the VFS named (the power-loss VFS keeps its
// record of unsynced writes beside the file; the default one does not).
TEST(FleetStoreSqlite, OpensWithTheVfsNamed) {
  fleet::testing::TempDir dir;
  auto plain = FleetStore::Open(dir.Join("plain.db"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(std::filesystem::exists(dir.Join("plain.db-unsynced")));
  auto store = FleetStore::Open(dir.Join("fleet.db"), sqlite::OpenOptions::Synchronous::kFull,
                                sqlite::kPowerLossVfs);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(std::filesystem::exists(dir.Join("fleet.db-unsynced")));
}

TEST_P(FleetStoreTest, AttemptsAreNumberedPerServerWithUniqueIds) {
  auto store = Open();
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  ASSERT_TRUE(store->PutServer(Server("1")).ok());
  std::set<std::string> ids;
  for (int i = 1; i <= 3; ++i) {
    auto a = store->CreateAttempt("local/200/gpu0", "initial", {}, kNow);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->number, i);
    EXPECT_EQ(a->outcome, v1::ATTEMPT_OUTCOME_PENDING);
    ids.insert(a->id);
  }
  auto other = store->CreateAttempt("local/200/gpu1", "initial", {}, kNow);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->number, 1);
  ids.insert(other->id);
  EXPECT_EQ(ids.size(), 4u);
  // Closed and read back.
  AttemptRecord closed = *other;
  closed.outcome = v1::ATTEMPT_OUTCOME_FAILED;
  closed.diagnosis_class = "link_error";
  closed.ended_at = kNow + absl::Seconds(9);
  ASSERT_TRUE(store->PutAttempt(closed).ok());
  auto back = store->Attempt("local/200/gpu1", 0);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->outcome, v1::ATTEMPT_OUTCOME_FAILED);
  EXPECT_EQ((*back)->diagnosis_class, "link_error");
  auto all = store->Attempts("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
}

TEST_P(FleetStoreTest, AnAttemptKeepsItsDiagnosisConfidenceAndAnOldRowReadsHigh) {
  auto store = Open();
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  auto a = store->CreateAttempt("local/200/gpu0", "initial", {}, kNow);
  ASSERT_TRUE(a.ok()) << a.status();
  a->outcome = v1::ATTEMPT_OUTCOME_FAILED;
  a->diagnosis_class = "ninja_not_found";
  a->diagnosis.set_diagnosis_class("ninja_not_found");
  a->diagnosis.set_confidence("low");
  ASSERT_TRUE(store->PutAttempt(*a).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts WHERE confidence = 'low'"), 1);
  auto back = store->Attempt("local/200/gpu0", 0);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->diagnosis.confidence(), "low");
  // A diagnosis of an older agent (no confidence) is stored, and read back, as high.
  a->diagnosis.clear_confidence();
  ASSERT_TRUE(store->PutAttempt(*a).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts WHERE confidence = 'high'"), 1);
  back = store->Attempt("local/200/gpu0", 0);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->diagnosis.confidence(), "high");
}

TEST_P(FleetStoreTest, AnEventDeliveredTwiceIsStoredOnceAndTheCursorMovesWithIt) {
  auto store = Open();
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  std::vector<fleet::v1::AgentEvent> batch = {Event("inc-1", 1), Event("inc-1", 2)};
  ASSERT_TRUE(store->IngestBatch("local/200", batch, {}, {}, {"inc-1", 2}, kNow).ok());
  // The same events again (a replay after a reconnect), and one new.
  batch.push_back(Event("inc-1", 3));
  ASSERT_TRUE(store->IngestBatch("local/200", batch, {}, {}, {"inc-1", 3}, kNow).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 3);
  EXPECT_EQ(Count(*store, "SELECT count(DISTINCT sequence) FROM events"), 3);
  auto cursor = store->Cursor("local/200");
  ASSERT_TRUE(cursor.ok());
  EXPECT_EQ(cursor->incarnation, "inc-1");
  EXPECT_EQ(cursor->sequence, 3u);
  // A new incarnation starts its own numbering; a gap is recorded apart from real events.
  ASSERT_TRUE(store->RecordGap("local/200", {"inc-1", 3}, {"inc-2", 0}, kNow).ok());
  ASSERT_TRUE(
      store->IngestBatch("local/200", {Event("inc-2", 1)}, {}, {}, {"inc-2", 1}, kNow).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events WHERE kind = 'gap'"), 1);
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events WHERE incarnation = 'inc-2'"), 2);
  // A bad container name is refused, and nothing of its batch is written.
  EXPECT_FALSE(store->IngestBatch("nocontainer", {Event("x", 1)}, {}, {}, {"x", 1}, kNow).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 5);
}

// A batch longer than one INSERT's rows (IngestBatch writes 32 events a statement), replayed in
// part with new ones among the old (a reconnect mid-batch): each event once, in every statement.
TEST_P(FleetStoreTest, ALongBatchIsStoredOnceAcrossItsStatements) {
  auto store = Open();
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  std::vector<fleet::v1::AgentEvent> batch;
  for (int i = 1; i <= 70; ++i) batch.push_back(Event("inc-1", i));
  ASSERT_TRUE(store->IngestBatch("local/200", batch, {}, {}, {"inc-1", 70}, kNow).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 70);
  std::vector<fleet::v1::AgentEvent> replay;
  for (int i = 40; i <= 110; ++i) replay.push_back(Event("inc-1", i));
  ASSERT_TRUE(store->IngestBatch("local/200", replay, {}, {}, {"inc-1", 110}, kNow).ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 110);
  EXPECT_EQ(Count(*store, "SELECT count(DISTINCT sequence) FROM events"), 110);
  EXPECT_EQ(Count(*store, "SELECT max(sequence) FROM events"), 110);
  EXPECT_EQ(store->Cursor("local/200")->sequence, 110u);
}

TEST_P(FleetStoreTest, TheConfigSurvivesAReopenAndTheFileIsSound) {
  {
    auto store = Open();
    fleet::v1::FleetConfig config;
    config.add_hosts()->set_name("local");
    auto v1 = store->SaveConfig(config, "a.yaml", "hosts: ...", kNow);
    config.add_hosts()->set_name("pve1");
    auto v2 = store->SaveConfig(config, "b.yaml", "hosts: ...", kNow);
    ASSERT_TRUE(v1.ok() && v2.ok());
    EXPECT_LT(*v1, *v2);
    ASSERT_TRUE(store->PutServer(Server("3")).ok());
  }
  auto store = Open();  // migrations again: idempotent
  auto config = store->LatestConfig();
  ASSERT_TRUE(config.ok() && config->has_value());
  ASSERT_EQ((*config)->hosts_size(), 2);
  EXPECT_EQ((*config)->hosts(1).name(), "pve1");
  auto servers = store->Servers();
  ASSERT_TRUE(servers.ok());
  ASSERT_EQ(servers->size(), 1u);
  EXPECT_EQ((*servers)[0].name, "local/200/gpu3");
  EXPECT_EQ(SchemaVersion(*store), 5);
  if (!postgres()) {
    auto check = store->db().Prepare("PRAGMA integrity_check");
    ASSERT_TRUE(check.ok());
    ASSERT_TRUE(*check->Step());
    EXPECT_EQ(check->ColumnText(0), "ok");
  }
}

TEST_P(FleetStoreTest, RetentionPrunesEventsByAgeAndCountButKeepsAttempts) {
  auto store = Open();
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  ASSERT_TRUE(store->CreateAttempt("local/200/gpu0", "initial", {}, kNow).ok());
  std::vector<fleet::v1::AgentEvent> old_events;
  for (uint64_t i = 1; i <= 10; ++i) old_events.push_back(Event("inc-1", i));
  ASSERT_TRUE(store->IngestBatch("local/200", old_events, {}, {}, {"inc-1", 10}, kNow).ok());
  std::vector<fleet::v1::AgentEvent> new_events;
  for (uint64_t i = 11; i <= 30; ++i) new_events.push_back(Event("inc-1", i));
  ASSERT_TRUE(
      store->IngestBatch("local/200", new_events, {}, {}, {"inc-1", 30}, kNow + absl::Hours(48))
          .ok());
  // Older than a day: the first ten go.
  ASSERT_TRUE(store->PruneEvents(kNow + absl::Hours(24), 1000).ok());
  EXPECT_EQ(*store->EventCount(), 20);
  EXPECT_EQ(Count(*store, "SELECT min(sequence) FROM events"), 11);
  // At most 5: the newest 5 stay.
  ASSERT_TRUE(store->PruneEvents(kNow, 5).ok());
  EXPECT_EQ(*store->EventCount(), 5);
  EXPECT_EQ(Count(*store, "SELECT min(sequence) FROM events"), 26);
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts"), 1);
}

TEST_P(FleetStoreTest, ConfigsKeepTheDigestOfTheirTextAndAVersionOneFileGainsTheColumn) {
  {
    auto store = Open();
    fleet::v1::FleetConfig config;
    ASSERT_TRUE(store->SaveConfig(config, "/etc/fleet.yaml", "hosts: []\n", kNow).ok());
    ASSERT_TRUE(store->SaveConfig(config, "(the stored config)", "", kNow).ok());
    auto from = store->LastConfigFrom("/etc/fleet.yaml");
    ASSERT_TRUE(from.ok() && from->has_value());
    EXPECT_EQ((*from)->version, 1);
    EXPECT_EQ((*from)->digest, ConfigDigest("hosts: []\n"));
    EXPECT_TRUE(absl::StartsWith((*from)->digest, "sha256:"));
    auto latest = store->LatestConfigInfo();
    ASSERT_TRUE(latest.ok() && latest->has_value());
    EXPECT_EQ((*latest)->version, 2);
    EXPECT_EQ((*latest)->digest, "");  // deployed without text
    auto none = store->LastConfigFrom("/elsewhere.yaml");
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    // Back to what a fleetd of schema version 1 wrote: no digest column.
    ASSERT_TRUE(
        store->db()
            .Exec(absl::StrCat(
                "DROP TABLE fleet_events; DROP TABLE deliveries; "
                "DROP INDEX configs_source; ALTER TABLE configs DROP COLUMN digest; "
                "ALTER TABLE attempts DROP COLUMN confidence; DROP TABLE fleet_identity; ",
                postgres() ? "UPDATE schema_version SET version = 1" : "PRAGMA user_version = 1"))
            .ok());
  }
  auto store = Open();  // migrated to version 2, 3, 4, then 5
  EXPECT_EQ(SchemaVersion(*store), 5);
  // Version 5 gave the older record a fleet id.
  auto fleet_id = store->FleetId();
  ASSERT_TRUE(fleet_id.ok()) << fleet_id.status();
  EXPECT_EQ(fleet_id->size(), 32u);
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM configs WHERE digest IS NULL"), 2);
  // An old row's digest is computed from its stored text.
  auto from = store->LastConfigFrom("/etc/fleet.yaml");
  ASSERT_TRUE(from.ok() && from->has_value());
  EXPECT_EQ((*from)->digest, ConfigDigest("hosts: []\n"));
}

TEST(FleetStoreSqlite, EveryCommitIsSyncedAndTheFileIsOwnerOnly) {
  testing::TempDir dir;
  auto opened = FleetStore::Open(dir.Join("fleet.db"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto& store = *opened;
  ASSERT_NE(store->sqlite(), nullptr);
  // synchronous=FULL: a row written before a launch survives a power loss, not only a crash.
  EXPECT_EQ(*store->sqlite()->Synchronous(), 2);
  fleet::v1::FleetConfig config;
  ASSERT_TRUE(store->SaveConfig(config, "fleet.yaml", "env: {HF_TOKEN: x}", kNow).ok());
  struct stat st = {};
  ASSERT_EQ(stat(dir.Join("fleet.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.Join("fleet.db-wal").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// The fleet's events: kept by index, read back after one, pruned by age and count; a delivery is
// written with its event and its tries recorded.
TEST_P(FleetStoreTest, FleetEventsAndTheirDeliveriesAreKeptReadAndPruned) {
  auto store = Open();
  const absl::Time t0 = absl::FromUnixSeconds(1800000000);
  std::vector<fleet::v1::FleetEvent> events;
  for (int i = 1; i <= 4; ++i) {
    fleet::v1::FleetEvent e;
    e.set_index(i);
    e.set_type(i == 4 ? "gave_up" : "server_state");
    e.set_server("local/200/gpu0");
    e.set_host("local");
    e.set_ctid("200");
    e.mutable_at()->set_seconds(1800000000 + i * 3600);
    events.push_back(e);
  }
  std::vector<DeliveryRecord> deliveries(1);
  deliveries[0].event_index = 4;
  deliveries[0].notify = "oncall";
  deliveries[0].event_type = "gave_up";
  deliveries[0].server = "local/200/gpu0";
  deliveries[0].body = "{\"event\":\"gave_up\"}";
  deliveries[0].next_at = t0;
  ASSERT_TRUE(store->AppendFleetEvents(events, &deliveries, t0).ok());
  EXPECT_GT(deliveries[0].id, 0);
  // An index stored already is refused (never two events under one index), and nothing of that
  // write stays.
  EXPECT_FALSE(store->AppendFleetEvents({events[0]}, nullptr, t0).ok());
  auto range = store->FleetEventRange();
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(*range, std::make_pair(int64_t{1}, int64_t{4}));
  auto after = store->FleetEvents(2, 10);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 2u);
  EXPECT_EQ((*after)[0].index(), 3);
  EXPECT_EQ((*after)[1].type(), "gave_up");

  auto pending = store->PendingDeliveries(10);
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].body, deliveries[0].body);
  DeliveryRecord tried = (*pending)[0];
  tried.attempts = 2;
  tried.http_status = 200;
  tried.status = "delivered";
  tried.finished_at = t0 + absl::Seconds(3);
  ASSERT_TRUE(store->UpdateDelivery(tried).ok());
  pending = store->PendingDeliveries(10);
  ASSERT_TRUE(pending.ok());
  EXPECT_TRUE(pending->empty());
  auto all = store->Deliveries(10);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].status, "delivered");
  EXPECT_EQ((*all)[0].attempts, 2);
  EXPECT_EQ((*all)[0].http_status, 200);

  // Older than 2.5 h after t0: events 1 and 2 go; beyond the newest 1: event 3 goes too.
  ASSERT_TRUE(store->PruneEvents(t0 + absl::Minutes(150), 1).ok());
  range = store->FleetEventRange();
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(*range, std::make_pair(int64_t{4}, int64_t{4}));
}

// What only PostgreSQL has: a connection that can be lost.
class FleetStorePostgres : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { StoreTarget::StopServer(); }

  void SetUp() override {
    if (PostgresMissing()) GTEST_SKIP() << kNoPostgres;
    target_ = StoreTarget::Make(Engine::kPostgres, dir_);
    ASSERT_FALSE(target_.empty());
  }

  std::unique_ptr<FleetStore> Open() {
    FleetStoreOptions options;
    options.clock = [this] { return now_; };
    options.reconnect_backoff = absl::Milliseconds(100);
    options.max_reconnect_backoff = absl::Milliseconds(300);
    auto store = FleetStore::Open(target_, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  testing::TempDir dir_;
  std::string target_;
  absl::Time now_ = kNow;
};

// Issue 16: the server dies in the middle of a turn. Nothing of the turn stays (the attempt row,
// the events, the cursor: one transaction), the rest of the turn fails at once, the store
// reconnects on the next call once the server is back (after its backoff while it is not), and
// replayed events are still stored exactly once.
TEST_F(FleetStorePostgres, ALostConnectionLosesTheWholeTurnAndTheStoreReconnects) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  ASSERT_TRUE(store
                  ->IngestBatch("local/200", {Event("inc-1", 1), Event("inc-1", 2)}, {}, {},
                                {"inc-1", 2}, kNow)
                  .ok());
  {
    FleetStore::Batch batch(store.get());
    ASSERT_TRUE(store->CreateAttempt("local/200/gpu0", "initial", {}, kNow).ok());
    ASSERT_TRUE(store
                    ->IngestBatch("local/200", {Event("inc-1", 3), Event("inc-1", 4)}, {}, {},
                                  {"inc-1", 4}, kNow)
                    .ok());
    ASSERT_TRUE(StoreTarget::server()->Kill().ok());
    absl::Status rest =
        store->IngestBatch("local/200", {Event("inc-1", 5)}, {}, {}, {"inc-1", 5}, kNow);
    EXPECT_EQ(rest.code(), absl::StatusCode::kUnavailable) << rest;
    // Not on a new connection either, while the batch is open: it would be half a turn.
    absl::Status inside = store->PutServer(Server("1"));
    EXPECT_EQ(inside.code(), absl::StatusCode::kUnavailable) << inside;
    absl::Status commit = batch.Commit();
    EXPECT_EQ(commit.code(), absl::StatusCode::kUnavailable) << commit;
  }
  // The server is down: a reconnect is tried and fails; the next call within the backoff fails
  // without trying; after it, a try again, and the backoff doubles.
  EXPECT_EQ(store->Cursor("local/200").status().code(), absl::StatusCode::kUnavailable);
  absl::Status waiting = store->Cursor("local/200").status();
  EXPECT_EQ(waiting.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(waiting.message(), HasSubstr("next reconnect in 100ms"));
  now_ += absl::Milliseconds(100);
  EXPECT_EQ(store->Cursor("local/200").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store->Cursor("local/200").status().message(), HasSubstr("next reconnect in 200ms"));

  ASSERT_TRUE(StoreTarget::server()->Restart().ok());
  // Still within the backoff: not tried yet.
  EXPECT_EQ(store->Cursor("local/200").status().code(), absl::StatusCode::kUnavailable);
  now_ += absl::Milliseconds(200);
  auto cursor = store->Cursor("local/200");
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_EQ(cursor->sequence, 2u);  // the lost turn's cursor is not there
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 2);
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts"), 0);
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM servers"), 1);

  // The agent replays from the cursor it is told: each event is stored once, twice over.
  std::vector<fleet::v1::AgentEvent> replay;
  for (uint64_t i = 1; i <= 5; ++i) replay.push_back(Event("inc-1", i));
  for (int i = 0; i < 2; ++i) {
    FleetStore::Batch batch(store.get());
    ASSERT_TRUE(store->IngestBatch("local/200", replay, {}, {}, {"inc-1", 5}, kNow).ok());
    ASSERT_TRUE(batch.Commit().ok());
  }
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 5);
  EXPECT_EQ(Count(*store, "SELECT count(DISTINCT sequence) FROM events"), 5);
  cursor = store->Cursor("local/200");
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_EQ(cursor->sequence, 5u);
  // And the attempt row is written before a launch again, numbered from 1.
  auto attempt = store->CreateAttempt("local/200/gpu0", "initial", {}, kNow);
  ASSERT_TRUE(attempt.ok()) << attempt.status();
  EXPECT_EQ(attempt->number, 1);
}

// A statement that fails inside a batch undoes only its own part, as on SQLite: PostgreSQL would
// otherwise refuse the rest of the transaction.
TEST_F(FleetStorePostgres, AFailedWriteInABatchLeavesTheRestOfTheTurn) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutServer(Server("0")).ok());
  FleetStore::Batch batch(store.get());
  auto a = store->CreateAttempt("local/200/gpu0", "initial", {}, kNow);
  ASSERT_TRUE(a.ok()) << a.status();
  AttemptRecord orphan = *a;
  orphan.id = "local/200/gpu7#1-00";
  orphan.server = "local/200/gpu7";
  EXPECT_FALSE(store->PutAttempt(orphan).ok());
  ASSERT_TRUE(
      store->IngestBatch("local/200", {Event("inc-1", 1)}, {}, {}, {"inc-1", 1}, kNow).ok());
  ASSERT_TRUE(batch.Commit().ok());
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM attempts"), 1);
  EXPECT_EQ(Count(*store, "SELECT count(*) FROM events"), 1);
}

// The URL's password is in no message: a database that does not exist is named redacted.
TEST_F(FleetStorePostgres, AnErrorNamesTheDatabaseWithoutItsPassword) {
  const std::string url = absl::StrReplaceAll(
      target_, {{"postgresql://fleet@/store_", "postgresql://fleet:hunter2-secret@/nosuch_"}});
  ASSERT_NE(url, target_);
  auto store = FleetStore::Open(url, FleetStoreOptions{});
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("nosuch_"));
  EXPECT_THAT(store.status().message(), Not(HasSubstr("hunter2")));
}

// fleetd --store-file: the URL (and its password) comes from an owner-only file, never argv.
TEST(FleetStoreTarget, TheStoreFileMustBeOwnerOnlyAndHoldOneUrl) {
  testing::TempDir dir;
  const std::string path = dir.Join("store-url");
  auto write = [&](const std::string& text, mode_t mode) {
    std::ofstream(path, std::ios::trunc) << text;
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
  };
  EXPECT_EQ(ReadStoreUrlFile(path).status().code(), absl::StatusCode::kNotFound);
  write("postgresql://fleet:hunter2@db.example/fleet\n", 0600);
  auto url = ReadStoreUrlFile(path);
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(*url, "postgresql://fleet:hunter2@db.example/fleet");
  ASSERT_EQ(chmod(path.c_str(), 0400), 0);
  EXPECT_TRUE(ReadStoreUrlFile(path).ok());
  // Readable by the group, or by anyone: refused, and the password is not in the message.
  for (mode_t mode : {0640, 0604, 0660}) {
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    auto refused = ReadStoreUrlFile(path);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << mode;
    EXPECT_THAT(refused.status().message(), HasSubstr("0600 or stricter"));
    EXPECT_THAT(refused.status().message(), Not(HasSubstr("hunter2")));
  }
  // A symlink to an owner-only file is refused too: the mode checked is the link's own file's.
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(symlink(path.c_str(), dir.Join("link").c_str()), 0);
  EXPECT_EQ(ReadStoreUrlFile(dir.Join("link")).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Not a URL (a path, two lines): refused without quoting the content.
  write("/var/lib/gpu-fleet/fleet.db hunter2", 0600);
  auto not_url = ReadStoreUrlFile(path);
  EXPECT_EQ(not_url.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_url.status().message(), Not(HasSubstr("hunter2")));
  write("postgres://a/b\npostgres://c/d", 0600);
  EXPECT_EQ(ReadStoreUrlFile(path).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FleetStoreTarget, APostgresUrlIsNotAFile) {
  EXPECT_TRUE(IsPostgresTarget("postgres://db.example/fleet"));
  EXPECT_TRUE(IsPostgresTarget("postgresql://fleet@/fleet?host=/run/postgresql"));
  EXPECT_FALSE(IsPostgresTarget("/var/lib/gpu-fleet/fleet.db"));
  EXPECT_FALSE(IsPostgresTarget("postgres.db"));
}

}  // namespace
}  // namespace fleet::daemon
