#include "common/sqlite/database.h"

#include <sys/stat.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::sqlite {
namespace {

using ::testing::HasSubstr;

std::vector<Migration> TwoMigrations() {
  return {
      [](Database& db) { return db.Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"); },
      [](Database& db) { return db.Exec("ALTER TABLE t ADD COLUMN b BLOB"); },
  };
}

TEST(Database, MigratesOnceAndKeepsDataAcrossReopen) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("x.db");
  {
    auto db = Database::Open(path);
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE((*db)->Migrate(TwoMigrations()).ok());
    EXPECT_EQ(*(*db)->UserVersion(), 2);
    auto insert = (*db)->Prepare("INSERT INTO t (v, b) VALUES (?1, ?2)");
    ASSERT_TRUE(insert.ok());
    insert->Bind(1, std::string_view("hello")).BindBlob(2, std::string_view("a\0b", 3));
    ASSERT_TRUE(insert->Run().ok());
  }
  auto db = Database::Open(path);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Migrate(TwoMigrations()).ok());  // nothing left to do
  auto select = (*db)->Prepare("SELECT v, b FROM t");
  ASSERT_TRUE(select.ok());
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->ColumnText(0), "hello");
  EXPECT_EQ(select->ColumnBlob(1), std::string("a\0b", 3));
  EXPECT_FALSE(*select->Step());
}

TEST(Database, RefusesAFileNewerThanItsMigrations) {
  auto db = Database::Open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Migrate(TwoMigrations()).ok());
  absl::Status s = (*db)->Migrate({TwoMigrations()[0]});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("newer than this binary knows"));
}

TEST(Database, TransactionRollsBackUnlessCommitted) {
  auto db = Database::Open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t (id INTEGER PRIMARY KEY)").ok());
  {
    auto tx = Transaction::Begin(**db);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO t VALUES (1)").ok());
  }
  auto count = (*db)->Prepare("SELECT count(*) FROM t");
  ASSERT_TRUE(count.ok() && *count->Step());
  EXPECT_EQ(count->ColumnInt(0), 0);
}

TEST(Database, ErrorsNameTheFileAndMapCodes) {
  auto db = Database::Open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t (id INTEGER PRIMARY KEY)").ok());
  ASSERT_TRUE((*db)->Exec("INSERT INTO t VALUES (1)").ok());
  absl::Status dup = (*db)->Exec("INSERT INTO t VALUES (1)");
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(dup.message()), HasSubstr("database :memory:"));
  EXPECT_EQ((*db)->Prepare("SELEKT 1").status().code(), absl::StatusCode::kInternal);

  fleet::testing::TempDir dir;
  dir.WriteFile("junk.db", std::string(4096, 'x'));
  auto junk = Database::Open(dir.Join("junk.db"));
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kDataLoss) << junk.status();
}

int ModeOf(const std::string& path) {
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

TEST(Database, ANewDatabaseAndItsWalAndShmAreReadableByTheOwnerOnly) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("x.db");
  auto db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE((*db)->Migrate(TwoMigrations()).ok());
  ASSERT_TRUE((*db)->Exec("INSERT INTO t (v) VALUES ('secret')").ok());
  EXPECT_EQ(ModeOf(path), 0600);
  EXPECT_EQ(ModeOf(path + "-wal"), 0600);
  EXPECT_EQ(ModeOf(path + "-shm"), 0600);
}

TEST(Database, AnExistingReadableDatabaseIsMadeOwnerOnlyWhenOpened) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("x.db");
  {
    auto db = Database::Open(path);
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE((*db)->Migrate(TwoMigrations()).ok());
  }
  // As an older fleetd left it, and a -wal left by a crash.
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  dir.WriteFile("x.db-wal", "");
  ASSERT_EQ(chmod((path + "-wal").c_str(), 0644), 0);
  auto db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ(ModeOf(path), 0600);
  EXPECT_EQ(ModeOf(path + "-wal"), 0600);
  EXPECT_EQ(*(*db)->UserVersion(), 2);
}

TEST(Database, SynchronousIsTheOpenersChoice) {
  fleet::testing::TempDir dir;
  auto normal = Database::Open(dir.Join("normal.db"));
  ASSERT_TRUE(normal.ok()) << normal.status();
  EXPECT_EQ(*(*normal)->Synchronous(), 1);  // NORMAL
  OpenOptions full;
  full.synchronous = OpenOptions::Synchronous::kFull;
  auto durable = Database::Open(dir.Join("full.db"), full);
  ASSERT_TRUE(durable.ok()) << durable.status();
  EXPECT_EQ(*(*durable)->Synchronous(), 2);  // FULL
}

}  // namespace
}  // namespace fleet::sqlite
