// A small RAII layer over SQLite, the only code that includes sqlite3.h: a Database (one
// connection, WAL, foreign keys, a busy timeout), prepared Statements with typed binds and
// columns, scoped Transactions, and PRAGMA user_version migrations. SQLite errors become
// absl::Status here, once: busy/locked → Unavailable, constraint →
// AlreadyExists/FailedPrecondition, corrupt/not a database → DataLoss, the rest Internal; messages
// name the database file.
//
// A Database is used by one thread at a time (callers hold their own lock); Statements belong to
// their Database and must not outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fleet::sqlite {

class Database;

class Statement {
 public:
  Statement(Statement&&) noexcept;
  Statement& operator=(Statement&&) noexcept;
  ~Statement();

  // Binds are 1-based, as in SQL's ?1, ?2, ...
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, std::string_view text);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);

  // Runs one step: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Runs to completion, ignoring rows.
  absl::Status Run();
  // Clears bindings and rewinds, for reuse.
  void Reset();

  int64_t ColumnInt(int index) const;  // 0-based
  std::string ColumnText(int index) const;
  std::string ColumnBlob(int index) const;
  bool ColumnIsNull(int index) const;

 private:
  friend class Database;
  Statement(Database* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  absl::Status BindStatus() const { return bind_status_; }

  Database* db_;
  sqlite3_stmt* stmt_;
  absl::Status bind_status_;
};

// How a Database is opened. The durability of a commit is a choice of the record's owner:
// fleet.db (rows written before a launch) syncs every commit; agent.db may trade the last
// commits before a power loss for speed only where its owner detects the lost tail.
struct OpenOptions {
  enum class Synchronous { kNormal, kFull };
  // kFull: a commit is on disk when Commit() returns (the WAL is fsynced at each commit).
  // kNormal: a commit survives a crash of the process, not of the machine (the WAL is fsynced
  // only at checkpoints).
  Synchronous synchronous = Synchronous::kNormal;
  // The file's mode, given to the database file before SQLite opens it (created with it when
  // new, changed to it when it exists) and to a -wal/-shm file already there; SQLite creates its
  // -wal and -shm files with the database file's mode.
  int mode = 0600;
  // The SQLite VFS to open it with; empty: SQLite's default. kPowerLossVfs (power_loss_vfs.h) is
  // registered on first use: the fault matrix's power-loss row, never production.
  std::string vfs;
};

// A migration brings the schema from version N-1 to N (N = its index + 1).
using Migration = std::function<absl::Status(Database&)>;

class Database {
 public:
  // Opens (creating) the database file; WAL journal, synchronous as `options` says, foreign
  // keys on, a busy timeout. ":memory:" for an in-memory database.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        const OpenOptions& options = {});
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  absl::Status Exec(std::string_view sql);  // one or more statements, no results
  absl::StatusOr<Statement> Prepare(std::string_view sql);

  // Applies the migrations the file has not seen (PRAGMA user_version), each in a transaction.
  // FailedPrecondition when the file is newer than the migrations this binary knows.
  absl::Status Migrate(const std::vector<Migration>& migrations);
  absl::StatusOr<int64_t> UserVersion();
  // PRAGMA synchronous as SQLite reports it: 1 NORMAL, 2 FULL.
  absl::StatusOr<int64_t> Synchronous();

  int64_t LastInsertRowId() const;
  int Changes() const;
  const std::string& path() const { return path_; }

  // Translates the connection's last error (`rc` the SQLite result code) into a Status naming
  // the file and `what`.
  absl::Status Error(int rc, std::string_view what) const;

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless Commit() succeeded.
class Transaction {
 public:
  static absl::StatusOr<std::unique_ptr<Transaction>> Begin(Database& db);
  ~Transaction();
  absl::Status Commit();

 private:
  explicit Transaction(Database& db) : db_(db) {}
  Database& db_;
  bool done_ = false;
};

}  // namespace fleet::sqlite
