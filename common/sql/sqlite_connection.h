// SqliteConnection: sql::Connection over fleet::sqlite (one file, WAL). Writes begin with BEGIN
// IMMEDIATE; migrations are counted in PRAGMA user_version. Thread-safety as sqlite::Database.
#pragma once

#include <memory>
#include <string>

#include "common/sql/connection.h"
#include "common/sqlite/database.h"

namespace fleet::sql {

class SqliteConnection final : public Connection {
 public:
  // Opens (creating) the file as sqlite::Database::Open does.
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(
      const std::string& path, const sqlite::OpenOptions& options = {});

  // The SQLite database itself, for what only SQLite has (PRAGMAs the tests read).
  sqlite::Database& database() { return *db_; }

  Dialect dialect() const override { return Dialect::kSqlite; }
  const std::string& name() const override { return db_->path(); }
  absl::Status Exec(std::string_view sql) override { return db_->Exec(sql); }
  absl::StatusOr<Statement> Prepare(std::string_view sql) override;
  int64_t Changes() const override { return db_->Changes(); }
  absl::Status Begin() override { return db_->Exec("BEGIN IMMEDIATE"); }
  absl::Status Commit() override { return db_->Exec("COMMIT"); }
  absl::Status Rollback() override { return db_->Exec("ROLLBACK"); }
  absl::Status Migrate(const std::vector<Migration>& migrations) override;
  absl::StatusOr<int64_t> SchemaVersion() override { return db_->UserVersion(); }
  bool IsBroken() const override { return false; }
  absl::Status Reconnect() override { return absl::OkStatus(); }

 private:
  explicit SqliteConnection(std::unique_ptr<sqlite::Database> db) : db_(std::move(db)) {}
  std::unique_ptr<sqlite::Database> db_;
};

}  // namespace fleet::sql
