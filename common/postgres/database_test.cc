// Against a real PostgreSQL server per test (tests/testing/postgres_server.h), started in a temp
// dir with a unix socket only. Skipped only when the server's binaries are not installed.
#include "common/postgres/database.h"

#include <cstdint>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/postgres_server.h"

namespace fleet::postgres {
namespace {

using ::fleet::testing::PostgresServer;
using ::testing::HasSubstr;
using ::testing::Not;

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (PostgresServer::FindBinDir().empty()) {
      GTEST_SKIP() << "no PostgreSQL server binaries (initdb) on PATH or in "
                      "/usr/lib/postgresql/*/bin: deploy/install-deps.sh installs them";
    }
    StartServer(ServerOptions());
  }

  virtual PostgresServer::Options ServerOptions() { return {}; }

  void StartServer(const PostgresServer::Options& options) {
    absl::StatusOr<std::unique_ptr<PostgresServer>> server = PostgresServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<Database> Connect() {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Connect(server_->url());
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }

  // The one integer the query returns.
  static int64_t Count(Database& db, std::string_view sql) {
    absl::StatusOr<Statement> st = db.Prepare(sql);
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return -1;
    absl::StatusOr<bool> row = st->Step();
    EXPECT_TRUE(row.ok() && *row) << row.status();
    return row.ok() && *row ? st->ColumnInt(0) : -1;
  }

  std::unique_ptr<PostgresServer> server_;
};

TEST_F(PostgresTest, RoundTripsIntegersTextBlobsAndNull) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (id bigserial PRIMARY KEY, n bigint, s text, b bytea, "
                       "z text)")
                  .ok());
  auto insert = db->Prepare("INSERT INTO t (n, s, b, z) VALUES (?, ?, ?, ?) RETURNING id");
  ASSERT_TRUE(insert.ok()) << insert.status();
  const std::string blob("\0\x01\xff'\\x00\"", 8);
  const std::string text = "it's \"quoted\", back\\slash, ünïcode, $1 and ?";
  std::vector<int64_t> ids;
  for (int64_t n : {std::numeric_limits<int64_t>::min(), int64_t{0}, int64_t{-1},
                    std::numeric_limits<int64_t>::max()}) {
    insert->Reset();
    insert->Bind(1, n).Bind(2, std::string_view(text)).BindBlob(3, blob).BindNull(4);
    absl::StatusOr<bool> row = insert->Step();
    ASSERT_TRUE(row.ok()) << row.status();
    ASSERT_TRUE(*row);  // RETURNING gives the id: PostgreSQL's LastInsertRowId
    ids.push_back(insert->ColumnInt(0));
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3, 4}));

  auto select = db->Prepare("SELECT n, s, b, z, b IS NULL FROM t WHERE id = ?1");
  ASSERT_TRUE(select.ok()) << select.status();
  select->Bind(1, ids[0]);
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->ColumnInt(0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(select->ColumnText(1), text);
  EXPECT_EQ(select->ColumnBlob(2), blob);
  EXPECT_TRUE(select->ColumnIsNull(3));
  EXPECT_FALSE(select->ColumnIsNull(2));
  EXPECT_EQ(select->ColumnInt(4), 0);  // a boolean
  EXPECT_FALSE(*select->Step());
  select->Reset();
  select->Bind(1, ids[3]);
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->ColumnInt(0), std::numeric_limits<int64_t>::max());
}

TEST_F(PostgresTest, RefusesTextWithANulByte) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  auto st = db->Prepare("SELECT ?::text");
  ASSERT_TRUE(st.ok()) << st.status();
  st->Bind(1, std::string_view("a\0b", 3));
  absl::StatusOr<bool> row = st->Step();
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument) << row.status();
  EXPECT_THAT(row.status().message(), HasSubstr("NUL"));
  // The same bytes as a blob are fine.
  st->Reset();
  st->BindBlob(1, std::string_view("a\0b", 3));
  auto blob = db->Prepare("SELECT ?::bytea");
  ASSERT_TRUE(blob.ok());
  blob->BindBlob(1, std::string_view("a\0b", 3));
  ASSERT_TRUE(*blob->Step());
  EXPECT_EQ(blob->ColumnBlob(0), std::string("a\0b", 3));
}

TEST_F(PostgresTest, QuestionMarksInLiteralsAreNotParameters) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  auto st = db->Prepare("SELECT '?', ?2::text, 'it''s ?', ?1::bigint /* ? */");
  ASSERT_TRUE(st.ok()) << st.status();
  st->Bind(1, int64_t{7}).Bind(2, std::string_view("two"));
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->ColumnText(0), "?");
  EXPECT_EQ(st->ColumnText(1), "two");
  EXPECT_EQ(st->ColumnText(2), "it's ?");
  EXPECT_EQ(st->ColumnInt(3), 7);
  // Binding past the statement's parameters is the caller's mistake.
  st->Reset();
  st->Bind(3, int64_t{1});
  EXPECT_EQ(st->Step().status().code(), absl::StatusCode::kInvalidArgument);
}

std::vector<Migration> Migrations(int* runs) {
  return {
      [runs](Database& db) {
        ++runs[0];
        return db.Exec("CREATE TABLE a (id bigint PRIMARY KEY)");
      },
      [runs](Database& db) {
        ++runs[1];
        return db.Exec("ALTER TABLE a ADD COLUMN v text");
      },
  };
}

TEST_F(PostgresTest, MigratesOnceAndRefusesANewerSchema) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(*db->SchemaVersion(), 0);
  int runs[2] = {0, 0};
  ASSERT_TRUE(db->Migrate(Migrations(runs)).ok());
  EXPECT_EQ(*db->SchemaVersion(), 2);
  // Again, and from a second connection: nothing left to do.
  ASSERT_TRUE(db->Migrate(Migrations(runs)).ok());
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->Migrate(Migrations(runs)).ok());
  EXPECT_EQ(runs[0], 1);
  EXPECT_EQ(runs[1], 1);
  EXPECT_TRUE(db->Exec("INSERT INTO a (id, v) VALUES (1, 'x')").ok());

  // A binary that knows only the first migration must not touch a version-2 database.
  std::vector<Migration> older = Migrations(runs);
  older.pop_back();
  absl::Status s = db->Migrate(older);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("newer"));
  EXPECT_EQ(*db->SchemaVersion(), 2);
}

TEST_F(PostgresTest, AFailedMigrationLeavesTheVersionBefore) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  std::vector<Migration> migrations = {
      [](Database& d) { return d.Exec("CREATE TABLE a (id bigint)"); },
      [](Database& d) {
        absl::Status s = d.Exec("CREATE TABLE b (id bigint)");
        if (!s.ok()) return s;
        return d.Exec("SELECT no_such_column FROM a");
      },
  };
  EXPECT_FALSE(db->Migrate(migrations).ok());
  EXPECT_EQ(*db->SchemaVersion(), 1);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM pg_tables WHERE tablename = 'b'"), 0);
}

TEST_F(PostgresTest, ConstraintViolationsMapToStatusCodes) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE u (name text PRIMARY KEY, v text NOT NULL)").ok());
  auto insert = db->Prepare("INSERT INTO u (name, v) VALUES (?, ?)");
  ASSERT_TRUE(insert.ok());
  insert->Bind(1, std::string_view("a")).Bind(2, std::string_view("x"));
  ASSERT_TRUE(insert->Run().ok());
  EXPECT_EQ(db->Changes(), 1);
  insert->Reset();
  insert->Bind(1, std::string_view("a")).Bind(2, std::string_view("y"));
  absl::Status dup = insert->Run();
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists) << dup;
  EXPECT_THAT(dup.message(), HasSubstr("23505"));
  insert->Reset();
  insert->Bind(1, std::string_view("b"));  // v left NULL
  EXPECT_EQ(insert->Run().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(db->Prepare("SELECT * FROM no_such_table").status().code(),
            absl::StatusCode::kInternal);
  // The connection is still usable after the errors.
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM u"), 1);
}

TEST_F(PostgresTest, ARolledBackTransactionLeavesNothing) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (id bigint PRIMARY KEY)").ok());
  {
    auto tx = Transaction::Begin(*db);
    ASSERT_TRUE(tx.ok()) << tx.status();
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1), (2)").ok());
    // No Commit: rolled back when it goes.
  }
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM t"), 0);
  {
    // A statement that failed inside dooms the transaction: Commit says so, nothing is kept.
    auto tx = Transaction::Begin(*db);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1)").ok());
    EXPECT_EQ(db->Exec("INSERT INTO t VALUES (1)").code(), absl::StatusCode::kAlreadyExists);
    absl::Status commit = (*tx)->Commit();
    EXPECT_EQ(commit.code(), absl::StatusCode::kFailedPrecondition) << commit;
  }
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM t"), 0);
  {
    auto tx = Transaction::Begin(*db);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (3)").ok());
    ASSERT_TRUE((*tx)->Commit().ok());
  }
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM t"), 1);
}

TEST_F(PostgresTest, ASerializationConflictIsAborted) {
  auto a = Connect();
  auto b = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(
      a->Exec("CREATE TABLE t (k int, v bigint); INSERT INTO t VALUES (1, 1), (2, 1)").ok());
  // Write skew: each reads the other's row and writes its own.
  auto ta = Transaction::Begin(*a, Transaction::Isolation::kSerializable);
  auto tb = Transaction::Begin(*b, Transaction::Isolation::kSerializable);
  ASSERT_TRUE(ta.ok() && tb.ok());
  EXPECT_EQ(Count(*a, "SELECT v FROM t WHERE k = 2"), 1);
  EXPECT_EQ(Count(*b, "SELECT v FROM t WHERE k = 1"), 1);
  ASSERT_TRUE(a->Exec("UPDATE t SET v = 0 WHERE k = 1").ok());
  ASSERT_TRUE(b->Exec("UPDATE t SET v = 0 WHERE k = 2").ok());
  ASSERT_TRUE((*ta)->Commit().ok());
  absl::Status s = (*tb)->Commit();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("40001"));
}

TEST_F(PostgresTest, ALostServerIsUnavailableUntilReconnectAfterRestart) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (id bigint)").ok());
  auto insert = db->Prepare("INSERT INTO t VALUES (?)");
  ASSERT_TRUE(insert.ok());
  insert->Bind(1, int64_t{1});
  ASSERT_TRUE(insert->Run().ok());
  EXPECT_FALSE(db->IsBroken());

  ASSERT_TRUE(server_->Kill().ok());
  insert->Reset();
  insert->Bind(1, int64_t{2});
  absl::Status lost = insert->Run();
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_TRUE(db->IsBroken());
  EXPECT_EQ(db->Exec("SELECT 1").code(), absl::StatusCode::kUnavailable);
  // Nothing to reconnect to yet.
  EXPECT_EQ(db->Reconnect().code(), absl::StatusCode::kUnavailable);

  ASSERT_TRUE(server_->Restart().ok()) << server_->Log();
  ASSERT_TRUE(db->Reconnect().ok());
  EXPECT_FALSE(db->IsBroken());
  // The statement made before is prepared again on the new connection; the committed row
  // survived the crash (fsync on).
  insert->Reset();
  insert->Bind(1, int64_t{3});
  ASSERT_TRUE(insert->Run().ok());
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM t"), 2);
  EXPECT_EQ(Count(*db, "SELECT sum(id) FROM t"), 4);
}

TEST_F(PostgresTest, AStoppedServerRestartsWithItsData) {
  auto db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (id bigint); INSERT INTO t VALUES (5)").ok());
  ASSERT_TRUE(server_->Stop().ok());
  EXPECT_EQ(db->Exec("SELECT 1").code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(server_->Restart().ok()) << server_->Log();
  ASSERT_TRUE(db->Reconnect().ok());
  EXPECT_EQ(Count(*db, "SELECT id FROM t"), 5);
}

// A server whose superuser has a password, which every connection must give.
class PostgresPasswordTest : public PostgresTest {
 protected:
  PostgresServer::Options ServerOptions() override { return {.password = password_}; }

  std::mt19937_64 random_{std::random_device{}()};
  const std::string password_ = absl::StrCat("pw-", random_(), "-x");
};

TEST_F(PostgresPasswordTest, ThePasswordNeverAppearsInErrors) {
  const std::string& password = password_;
  ASSERT_NE(server_, nullptr);
  ASSERT_THAT(server_->url(), HasSubstr(password));

  auto db = Database::Connect(server_->url());
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_THAT((*db)->target(), Not(HasSubstr(password)));
  EXPECT_THAT((*db)->target(), HasSubstr("password=****"));
  absl::Status bad = (*db)->Exec(absl::StrCat("SELECT nonsense_", password));
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), Not(HasSubstr(password))) << bad;

  // A wrong password: refused, and neither password is in the message.
  const std::string wrong = absl::StrCat("wrong-", random_());
  absl::StatusOr<std::unique_ptr<Database>> refused =
      Database::Connect(absl::StrReplaceAll(server_->url(), {{password, wrong}}));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), AllOf(Not(HasSubstr(wrong)), Not(HasSubstr(password))))
      << refused.status();
  // None at all: the server wants one.
  absl::StatusOr<std::unique_ptr<Database>> none =
      Database::Connect(absl::StrReplaceAll(server_->url(), {{":" + password, ""}}));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied) << none.status();
}

}  // namespace
}  // namespace fleet::postgres
