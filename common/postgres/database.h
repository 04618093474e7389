// A small RAII layer over libpq in the shape of common/sqlite/database.h, the only code that
// includes libpq-fe.h besides the tests' server: a Database (one connection), Statements prepared
// on the server once per connection and run with typed binds and columns, scoped Transactions, and
// migrations recorded in a version table (PostgreSQL has no PRAGMA user_version). SQL is written
// with SQLite's placeholders (`?`, `?N`), turned into `$N` here (placeholders.h), so a statement
// the two dialects share is written once. There is no LastInsertRowId: use RETURNING.
//
// Errors become absl::Status here, once: the connection lost (or not made) → Unavailable; unique
// violation (23505) → AlreadyExists, another integrity constraint (23xxx) → FailedPrecondition;
// serialization failure (40001) or deadlock (40P01) → Aborted (retry the transaction); bad data
// (22xxx, a NUL byte in text) → InvalidArgument; the rest Internal. Messages name the database by
// its redacted connection string (conninfo.h) and never contain its password.
//
// Values: parameters go as text (integers in decimal, the server converts to the column's type)
// except blobs, which go binary (bytea, any bytes). PostgreSQL text cannot hold a NUL byte: binding
// one is InvalidArgument. Results come as text; ColumnBlob decodes a bytea column.
//
// A Database is used by one thread at a time (callers hold their own lock); Statements belong to
// their Database and must not outlive it. A Statement survives Reconnect(): it is prepared again
// on the new connection when it next runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct pg_conn;
struct pg_result;

namespace fleet::postgres {

class Database;

struct ResultFree {
  void operator()(pg_result* result) const;
};
using Result = std::unique_ptr<pg_result, ResultFree>;

class Statement {
 public:
  Statement(Statement&&) noexcept = default;
  Statement& operator=(Statement&&) noexcept = default;
  ~Statement() = default;

  // Binds are 1-based, as in SQL's ?1, ?2, ... An unbound parameter is NULL.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, std::string_view text);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);

  // The first call runs the statement (all its rows are fetched); each call moves to the next
  // row: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Runs to completion, ignoring rows.
  absl::Status Run();
  // Clears bindings and the result, for reuse.
  void Reset();

  int64_t ColumnInt(int index) const;  // 0-based; a boolean column reads 1 or 0
  std::string ColumnText(int index) const;
  std::string ColumnBlob(int index) const;  // a bytea column decoded; others as text
  bool ColumnIsNull(int index) const;
  // Rows the command changed (INSERT/UPDATE/DELETE), once it has run.
  int64_t Changes() const;

 private:
  friend class Database;
  struct Param {
    enum class Kind { kNull, kText, kBinary };
    Kind kind = Kind::kNull;
    std::string value;
  };
  Statement(Database* db, std::string sql, int param_count)
      : db_(db), sql_(std::move(sql)), params_(static_cast<size_t>(param_count)) {}
  Param* ParamAt(int index);
  const char* Value(int index) const;  // nullptr without a current row or column

  Database* db_;
  std::string sql_;  // translated: $1..$N
  std::vector<Param> params_;
  absl::Status bind_status_;
  Result result_;
  int row_ = -1;
};

// A migration brings the schema from version N-1 to N (N = its index + 1).
using Migration = std::function<absl::Status(Database&)>;

class Database {
 public:
  // Connects to `conninfo` (a postgresql:// URI or key=value pairs, as libpq takes them; from a
  // config file or the environment, never argv). A connect_timeout of 10 s applies unless the
  // string sets one. Unavailable when the server cannot be reached, PermissionDenied when it
  // wants a password that was not given.
  static absl::StatusOr<std::unique_ptr<Database>> Connect(std::string_view conninfo);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  absl::Status Exec(std::string_view sql);  // one or more statements, no parameters, no results
  absl::StatusOr<Statement> Prepare(std::string_view sql);

  // Applies the migrations the database has not seen, each in a transaction with the version
  // table's row, under a transaction-level advisory lock so that two processes migrating at once
  // apply each step once. FailedPrecondition when the database is newer than the migrations this
  // binary knows.
  absl::Status Migrate(const std::vector<Migration>& migrations);
  // The version the migrations reached: 0 for a database without the version table.
  absl::StatusOr<int64_t> SchemaVersion();

  // Rows the last command run through this connection changed.
  int64_t Changes() const { return changes_; }

  // True when the connection is lost (the server went away, a network error): every call fails
  // with Unavailable until Reconnect() succeeds.
  bool IsBroken() const;
  // Connects again with the same parameters. A transaction open on the lost connection is gone
  // (the server rolled it back); prepared statements are prepared again when they next run.
  absl::Status Reconnect();

  // COMMIT of the transaction open on this connection (BEGIN run by the caller). FailedPrecondition
  // when a statement of it failed before or the server rolled it back: nothing was committed.
  absl::Status Commit();

  // The connection string with its secrets redacted: what messages and logs name.
  const std::string& target() const { return target_; }

  // The connection's last error (`result` the failed one, or null) as a Status naming the
  // database and `what`.
  absl::Status Error(const pg_result* result, std::string_view what) const;

 private:
  friend class Statement;
  friend class Transaction;
  Database(pg_conn* conn, std::string target, std::vector<std::string> secrets)
      : conn_(conn), target_(std::move(target)), secrets_(std::move(secrets)) {}
  // The name `sql` is prepared under on this connection, preparing it the first time.
  absl::StatusOr<std::string> PreparedName(const std::string& sql);
  // Runs `sql` without parameters, returning its result (ok for COMMAND_OK and TUPLES_OK).
  absl::StatusOr<Result> Query(std::string_view sql, std::string_view what);

  pg_conn* conn_;
  std::string target_;
  std::vector<std::string> secrets_;
  std::unordered_map<std::string, std::string> prepared_;  // translated sql → statement name
  int64_t next_statement_ = 1;
  int64_t changes_ = 0;
};

// BEGIN on construction (READ COMMITTED, or SERIALIZABLE: a conflict then fails a statement or the
// commit with Aborted, and the caller runs the transaction again); ROLLBACK on destruction unless
// Commit() succeeded (skipped on a lost connection, where the server has rolled it back).
class Transaction {
 public:
  enum class Isolation { kReadCommitted, kSerializable };
  static absl::StatusOr<std::unique_ptr<Transaction>> Begin(
      Database& db, Isolation isolation = Isolation::kReadCommitted);
  ~Transaction();
  // FailedPrecondition when a statement of the transaction failed before (PostgreSQL then
  // refuses the rest and turns COMMIT into a rollback): nothing was committed.
  absl::Status Commit();

 private:
  explicit Transaction(Database& db) : db_(db) {}
  Database& db_;
  bool done_ = false;
};

}  // namespace fleet::postgres
