#include "common/sql/sqlite_connection.h"

#include "common/sql/statement_adapter.h"

namespace fleet::sql {

absl::StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(
    const std::string& path, const sqlite::OpenOptions& options) {
  auto db = sqlite::Database::Open(path, options);
  if (!db.ok()) return db.status();
  return std::unique_ptr<SqliteConnection>(new SqliteConnection(*std::move(db)));
}

absl::StatusOr<Statement> SqliteConnection::Prepare(std::string_view sql) {
  auto st = db_->Prepare(sql);
  if (!st.ok()) return st.status();
  return Statement(std::make_unique<StatementAdapter<sqlite::Statement>>(*std::move(st)));
}

absl::Status SqliteConnection::Migrate(const std::vector<Migration>& migrations) {
  std::vector<sqlite::Migration> steps;
  steps.reserve(migrations.size());
  // Each step runs on this connection (the one sqlite::Database::Migrate passes back).
  for (const Migration& m : migrations) {
    steps.push_back([this, m](sqlite::Database&) { return m(*this); });
  }
  return db_->Migrate(steps);
}

}  // namespace fleet::sql
