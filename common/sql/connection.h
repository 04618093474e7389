// A dialect-neutral connection to a SQL database, for code that keeps one set of SQL text for
// SQLite and PostgreSQL (FleetStore): a Connection (Exec, Prepare, write transactions, migrations,
// a reconnect for engines that can lose their connection) and a Statement with typed binds and
// columns. The adapters (sqlite_connection.h, postgres_connection.h) are thin: errors are those of
// fleet::sqlite and fleet::postgres, already absl::Status there.
//
// SQL is written with SQLite's placeholders (`?`, `?N`); the PostgreSQL adapter turns them into
// `$N`. What the dialects share: RETURNING (no last-insert-rowid), ON CONFLICT ... DO NOTHING /
// DO UPDATE, SAVEPOINT / RELEASE / ROLLBACK TO, a subquery in FROM with an alias. What differs is
// asked of the Connection: dialect() for DDL, Begin() for a write transaction.
//
// A Connection is used by one thread at a time (callers hold their own lock); Statements belong
// to their Connection and must not outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fleet::sql {

enum class Dialect { kSqlite, kPostgres };

// What an adapter implements for its engine's statement (statement_adapter.h).
class StatementImpl {
 public:
  virtual ~StatementImpl() = default;
  virtual void Bind(int index, int64_t value) = 0;
  virtual void Bind(int index, std::string_view text) = 0;
  virtual void BindBlob(int index, std::string_view bytes) = 0;
  virtual void BindNull(int index) = 0;
  virtual absl::StatusOr<bool> Step() = 0;
  virtual absl::Status Run() = 0;
  virtual void Reset() = 0;
  virtual int64_t ColumnInt(int index) const = 0;
  virtual std::string ColumnText(int index) const = 0;
  virtual std::string ColumnBlob(int index) const = 0;
  virtual bool ColumnIsNull(int index) const = 0;
};

// A prepared statement, by value (moves only).
class Statement {
 public:
  explicit Statement(std::unique_ptr<StatementImpl> impl) : impl_(std::move(impl)) {}
  Statement(Statement&&) noexcept = default;
  Statement& operator=(Statement&&) noexcept = default;

  // Binds are 1-based, as in SQL's ?1, ?2, ...
  Statement& Bind(int index, int64_t value) {
    impl_->Bind(index, value);
    return *this;
  }
  Statement& Bind(int index, std::string_view text) {
    impl_->Bind(index, text);
    return *this;
  }
  Statement& BindBlob(int index, std::string_view bytes) {
    impl_->BindBlob(index, bytes);
    return *this;
  }
  Statement& BindNull(int index) {
    impl_->BindNull(index);
    return *this;
  }

  // Each call moves to the next row: true when a row is available, false when done.
  absl::StatusOr<bool> Step() { return impl_->Step(); }
  // Runs to completion, ignoring rows.
  absl::Status Run() { return impl_->Run(); }
  // Clears bindings and the result, for reuse.
  void Reset() { impl_->Reset(); }

  int64_t ColumnInt(int index) const { return impl_->ColumnInt(index); }  // 0-based
  std::string ColumnText(int index) const { return impl_->ColumnText(index); }
  std::string ColumnBlob(int index) const { return impl_->ColumnBlob(index); }
  bool ColumnIsNull(int index) const { return impl_->ColumnIsNull(index); }

 private:
  std::unique_ptr<StatementImpl> impl_;
};

class Connection;

// A migration brings the schema from version N-1 to N (N = its index + 1); it runs inside the
// transaction that records N.
using Migration = std::function<absl::Status(Connection&)>;

class Connection {
 public:
  virtual ~Connection() = default;

  virtual Dialect dialect() const = 0;
  // What messages and logs name: the file's path, or the redacted connection string.
  virtual const std::string& name() const = 0;

  virtual absl::Status Exec(std::string_view sql) = 0;  // no parameters, no results
  virtual absl::StatusOr<Statement> Prepare(std::string_view sql) = 0;
  // Rows the last statement run through this connection changed.
  virtual int64_t Changes() const = 0;

  // A write transaction: SQLite's BEGIN IMMEDIATE (the write lock taken at once, so that a busy
  // database fails here, not half-way), PostgreSQL's BEGIN (READ COMMITTED). Commit fails, and
  // leaves nothing committed, when the transaction could not commit; Rollback is a no-op on a lost
  // connection (the server rolled it back).
  virtual absl::Status Begin() = 0;
  virtual absl::Status Commit() = 0;
  virtual absl::Status Rollback() = 0;

  // Applies the migrations the database has not seen, each in its own transaction with the new
  // version (SQLite: PRAGMA user_version; PostgreSQL: a version table). FailedPrecondition when
  // the database is newer than `migrations`.
  virtual absl::Status Migrate(const std::vector<Migration>& migrations) = 0;
  virtual absl::StatusOr<int64_t> SchemaVersion() = 0;

  // True when the connection is lost (PostgreSQL's server went away): every call fails with
  // Unavailable until Reconnect() succeeds. A SQLite file is never lost.
  virtual bool IsBroken() const = 0;
  virtual absl::Status Reconnect() = 0;
};

}  // namespace fleet::sql
