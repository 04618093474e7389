#include "common/sql/postgres_connection.h"

#include "common/sql/statement_adapter.h"

namespace fleet::sql {

absl::StatusOr<std::unique_ptr<PostgresConnection>> PostgresConnection::Connect(
    std::string_view conninfo) {
  auto db = postgres::Database::Connect(conninfo);
  if (!db.ok()) return db.status();
  return std::unique_ptr<PostgresConnection>(new PostgresConnection(*std::move(db)));
}

absl::StatusOr<Statement> PostgresConnection::Prepare(std::string_view sql) {
  auto st = db_->Prepare(sql);
  if (!st.ok()) return st.status();
  return Statement(std::make_unique<StatementAdapter<postgres::Statement>>(*std::move(st)));
}

absl::Status PostgresConnection::Rollback() {
  // On a lost connection the server has rolled the transaction back already.
  if (db_->IsBroken()) return absl::OkStatus();
  return db_->Exec("ROLLBACK");
}

absl::Status PostgresConnection::Migrate(const std::vector<Migration>& migrations) {
  std::vector<postgres::Migration> steps;
  steps.reserve(migrations.size());
  for (const Migration& m : migrations) {
    steps.push_back([this, m](postgres::Database&) { return m(*this); });
  }
  return db_->Migrate(steps);
}

}  // namespace fleet::sql
