// PostgresConnection: sql::Connection over fleet::postgres (one libpq connection). Writes begin
// with BEGIN (READ COMMITTED); migrations are counted in the schema_version table under an
// advisory lock. The connection can be lost: IsBroken() then says so and Reconnect() connects
// again with the same parameters (the open transaction is gone). name() is the connection string
// redacted: no password in messages or logs. Thread-safety as postgres::Database.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/postgres/database.h"
#include "common/sql/connection.h"

namespace fleet::sql {

class PostgresConnection final : public Connection {
 public:
  static absl::StatusOr<std::unique_ptr<PostgresConnection>> Connect(std::string_view conninfo);

  Dialect dialect() const override { return Dialect::kPostgres; }
  const std::string& name() const override { return db_->target(); }
  absl::Status Exec(std::string_view sql) override { return db_->Exec(sql); }
  absl::StatusOr<Statement> Prepare(std::string_view sql) override;
  int64_t Changes() const override { return db_->Changes(); }
  absl::Status Begin() override { return db_->Exec("BEGIN"); }
  absl::Status Commit() override { return db_->Commit(); }
  absl::Status Rollback() override;
  absl::Status Migrate(const std::vector<Migration>& migrations) override;
  absl::StatusOr<int64_t> SchemaVersion() override { return db_->SchemaVersion(); }
  bool IsBroken() const override { return db_->IsBroken(); }
  absl::Status Reconnect() override { return db_->Reconnect(); }

 private:
  explicit PostgresConnection(std::unique_ptr<postgres::Database> db) : db_(std::move(db)) {}
  std::unique_ptr<postgres::Database> db_;
};

}  // namespace fleet::sql
