// The copy of a SQLite fleet record into an empty PostgreSQL database (migrate_store.h).
#include "daemon/store/migrate_store.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/string_view.h"
#include "common/postgres/conninfo.h"
#include "daemon/store/fleet_store.h"
#include "daemon/store/fleet_store_schema.h"

namespace fleet::daemon {
namespace {

// The record's tables, parents before the rows that refer to them (the target checks its foreign
// keys at each insert). The one list of the copy: a table added by a migration is one line here
// (schema v5's `fleet_identity` too); its columns are read from the databases.
constexpr const char* kRecordTables[] = {
    "hosts",          "containers",   "configs",    "servers",
    "attempts",       "remediations", "actions",    "remediation_attempts",
    "events",         "fleet_events", "deliveries", "agent_cursors",
    "fleet_identity",
};
// Tables whose rows the target's own migrations make (the fleet id a new record gets): not a sign
// of a used target, and replaced by the source's (the record keeps its fleet id, so the leader
// lease's terms and the agents' fences stay its own).
constexpr const char* kReplacedTables[] = {"fleet_identity"};

bool Replaced(std::string_view table) {
  for (const char* t : kReplacedTables) {
    if (table == t) return true;
  }
  return false;
}

// Rows per INSERT, and the bytes of values after which a batch is sent sooner (blobs: a plan, an
// event's diagnosis, can be megabytes).
constexpr int kBatchRows = 200;
constexpr size_t kBatchBytes = 8 << 20;
// PostgreSQL's limit of parameters in one statement.
constexpr int kMaxParams = 65535;

std::string Quoted(std::string_view identifier) {
  std::string out = "\"";
  for (char c : identifier) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

// The target's name of the source's column: one is named apart (ContainerIdColumn).
std::string TargetColumn(std::string_view table, const std::string& column) {
  if (table == "containers" && column == ContainerIdColumn(sql::Dialect::kSqlite)) {
    return ContainerIdColumn(sql::Dialect::kPostgres);
  }
  return column;
}

// The first column of every row of `sql` (one text parameter, or none).
absl::StatusOr<std::vector<std::string>> Strings(sql::Connection& db, const std::string& sql,
                                                 std::optional<std::string_view> param = {}) {
  auto st = db.Prepare(sql);
  if (!st.ok()) return st.status();
  if (param) st->Bind(1, *param);
  std::vector<std::string> out;
  while (true) {
    auto row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    out.push_back(st->ColumnText(0));
  }
}

absl::StatusOr<int64_t> Count(sql::Connection& db, std::string_view table) {
  auto st = db.Prepare(absl::StrCat("SELECT count(*) FROM ", Quoted(table)));
  if (!st.ok()) return st.status();
  auto row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat("count of ", AsAbsl(table), ": no row"));
  return st->ColumnInt(0);
}

struct TargetColumnInfo {
  bool blob = false;
  bool identity = false;
};

// The target's columns of `table` by name (none: the table is not there).
absl::StatusOr<std::map<std::string, TargetColumnInfo>> TargetColumns(sql::Connection& db,
                                                                      std::string_view table) {
  auto st = db.Prepare(
      "SELECT column_name, data_type, is_identity FROM information_schema.columns "
      "WHERE table_schema = current_schema() AND table_name = ?1");
  if (!st.ok()) return st.status();
  st->Bind(1, table);
  std::map<std::string, TargetColumnInfo> out;
  while (true) {
    auto row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    out[st->ColumnText(0)] = {st->ColumnText(1) == "bytea", st->ColumnText(2) == "YES"};
  }
}

// FailedPrecondition naming the first of the record's tables that holds a row in `target`; tables
// it does not have (yet) are empty.
absl::Status CheckEmpty(sql::Connection& target) {
  for (const char* table : kRecordTables) {
    if (Replaced(table)) continue;
    auto columns = TargetColumns(target, table);
    if (!columns.ok()) return columns.status();
    if (columns->empty()) continue;
    auto st = target.Prepare(absl::StrCat("SELECT 1 FROM ", Quoted(table), " LIMIT 1"));
    if (!st.ok()) return st.status();
    auto row = st->Step();
    if (!row.ok()) return row.status();
    if (*row) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target ", target.name(), ": table ", table,
          " already holds rows; migrate-store copies into an empty database only (nothing was "
          "written)"));
    }
  }
  return absl::OkStatus();
}

// One table's copy: the source's rows (read in the open snapshot) inserted into the target in
// batches, each an INSERT of several rows.
class TableCopy {
 public:
  TableCopy(std::string_view table, sql::Connection& source, sql::Connection& target,
            const MigrateOptions& options)
      : table_(table), source_(source), target_(target), options_(options) {}

  // The number of rows copied.
  absl::StatusOr<int64_t> Run() {
    if (absl::Status s = ReadColumns(); !s.ok()) return s;
    std::vector<std::string> selected;
    for (const std::string& c : source_columns_) selected.push_back(Quoted(c));
    auto st = source_.Prepare(absl::StrCat("SELECT ", absl::StrJoin(selected, ", "), " FROM ",
                                           Quoted(table_), " ORDER BY rowid"));
    if (!st.ok()) return st.status();
    const int n = static_cast<int>(source_columns_.size());
    const int batch_rows = std::min(kBatchRows, kMaxParams / n);
    int64_t copied = 0;
    while (true) {
      auto row = st->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      for (int i = 0; i < n; ++i) {
        std::optional<std::string> value;
        if (!st->ColumnIsNull(i)) value = blob_[i] ? st->ColumnBlob(i) : st->ColumnText(i);
        pending_bytes_ += value ? value->size() : 0;
        pending_.push_back(std::move(value));
      }
      ++copied;
      if (static_cast<int>(pending_.size()) / n >= batch_rows || pending_bytes_ >= kBatchBytes) {
        if (absl::Status s = Flush(); !s.ok()) return s;
      }
      if (options_.progress && options_.progress_every > 0 &&
          copied % options_.progress_every == 0) {
        options_.progress({table_, copied, false});
      }
    }
    if (absl::Status s = Flush(); !s.ok()) return s;
    if (absl::Status s = AdvanceIdentities(); !s.ok()) return s;
    if (options_.progress) options_.progress({table_, copied, true});
    return copied;
  }

 private:
  // The source's columns (in its order), each checked against the target's: the same set, but
  // for the one named apart.
  absl::Status ReadColumns() {
    auto names = Strings(source_, "SELECT name FROM pragma_table_info(?1) ORDER BY cid", table_);
    if (!names.ok()) return names.status();
    auto target = TargetColumns(target_, table_);
    if (!target.ok()) return target.status();
    if (names->empty() || target->empty()) {
      return absl::InternalError(absl::StrCat("table ", AsAbsl(table_), ": not in the ",
                                              names->empty() ? "source" : "target"));
    }
    std::set<std::string> unmatched;
    for (const auto& [name, info] : *target) unmatched.insert(name);
    for (const std::string& name : *names) {
      const std::string to = TargetColumn(table_, name);
      auto it = target->find(to);
      if (it == target->end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "table ", AsAbsl(table_), ": the source's column ", name, " is not in the target"));
      }
      unmatched.erase(to);
      source_columns_.push_back(name);
      target_columns_.push_back(Quoted(to));
      blob_.push_back(it->second.blob);
      if (it->second.identity) identities_.push_back(to);
    }
    if (!unmatched.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("table ", AsAbsl(table_), ": the target's columns ",
                       absl::StrJoin(unmatched, ", "), " are not in the source"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<sql::Statement*> InsertOf(int rows) {
    auto it = inserts_.find(rows);
    if (it != inserts_.end()) return &it->second;
    const int n = static_cast<int>(target_columns_.size());
    std::string sql = absl::StrCat("INSERT INTO ", Quoted(table_), " (",
                                   absl::StrJoin(target_columns_, ", "), ") VALUES ");
    for (int r = 0; r < rows; ++r) {
      absl::StrAppend(&sql, r == 0 ? "(" : ", (");
      for (int i = 0; i < n; ++i) absl::StrAppend(&sql, i == 0 ? "?" : ", ?", r * n + i + 1);
      absl::StrAppend(&sql, ")");
    }
    auto st = target_.Prepare(sql);
    if (!st.ok()) return st.status();
    return &inserts_.emplace(rows, *std::move(st)).first->second;
  }

  absl::Status Flush() {
    if (pending_.empty()) return absl::OkStatus();
    const int n = static_cast<int>(target_columns_.size());
    const int rows = static_cast<int>(pending_.size()) / n;
    auto st = InsertOf(rows);
    if (!st.ok()) return st.status();
    sql::Statement& insert = **st;
    insert.Reset();
    for (size_t i = 0; i < pending_.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      const std::optional<std::string>& value = pending_[i];
      if (!value) {
        insert.BindNull(index);
      } else if (blob_[i % n]) {
        insert.BindBlob(index, *value);
      } else {
        insert.Bind(index, std::string_view(*value));
      }
    }
    absl::Status s = insert.Run();
    const int64_t changed = target_.Changes();
    insert.Reset();
    pending_.clear();
    pending_bytes_ = 0;
    if (!s.ok()) return s;
    if (changed != rows) {
      return absl::DataLossError(
          absl::StrCat("table ", AsAbsl(table_), ": an insert of ", rows, " rows wrote ", changed));
    }
    return absl::OkStatus();
  }

  // Rows came with their ids: each identity column's sequence goes past the largest, so that the
  // next row fleetd inserts gets a new one.
  absl::Status AdvanceIdentities() {
    for (const std::string& column : identities_) {
      auto st = target_.Prepare(
          absl::StrCat("SELECT setval(pg_get_serial_sequence(?1, ?2), COALESCE(max(",
                       Quoted(column), "), 0) + 1, false) FROM ", Quoted(table_)));
      if (!st.ok()) return st.status();
      st->Bind(1, Quoted(table_)).Bind(2, std::string_view(column));
      if (absl::Status s = st->Run(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const std::string_view table_;
  sql::Connection& source_;
  sql::Connection& target_;
  const MigrateOptions& options_;
  std::vector<std::string> source_columns_;
  std::vector<std::string> target_columns_;          // quoted
  std::vector<bool> blob_;                           // per column: bytea in the target
  std::vector<std::string> identities_;              // the target's identity columns
  std::map<int, sql::Statement> inserts_;            // by rows per statement
  std::vector<std::optional<std::string>> pending_;  // row-major values not sent yet
  size_t pending_bytes_ = 0;
};

// What the source holds, read in its snapshot (open): its version and tables checked, then each
// table counted and copied into the open target transaction.
absl::StatusOr<std::vector<TableCount>> CopyTables(sql::Connection& source, sql::Connection& target,
                                                   const MigrateOptions& options) {
  std::vector<TableCount> counts;
  for (const char* table : kRecordTables) {
    auto count = Count(source, table);
    if (!count.ok()) return count.status();
    if (Replaced(table)) {
      if (absl::Status s = target.Exec(absl::StrCat("DELETE FROM ", Quoted(table))); !s.ok()) {
        return s;
      }
    }
    auto copied = TableCopy(table, source, target, options).Run();
    if (!copied.ok()) return copied.status();
    if (*copied != *count) {
      return absl::InternalError(absl::StrCat("table ", table, ": ", *count,
                                              " rows counted in the snapshot, ", *copied, " read"));
    }
    counts.push_back({table, *count, 0});
  }
  return counts;
}

absl::Status CheckSource(sql::Connection& source, int64_t want) {
  // A read first: it begins the snapshot, which the version and everything after are read in.
  auto tables = Strings(source,
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                        "'sqlite\\_%' ESCAPE '\\' ORDER BY name");
  if (!tables.ok()) return tables.status();
  auto version = source.SchemaVersion();
  if (!version.ok()) return version.status();
  if (*version == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("source ", source.name(), ": not a fleet record (schema version 0)"));
  }
  if (*version < want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "source ", source.name(), ": schema version ", *version, ", this fleetd's is ", want,
        ": start this fleetd once on it (it migrates the record forward), then migrate it"));
  }
  if (*version > want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "source ", source.name(), ": schema version ", *version, " is newer than this fleetd's (",
        want, "): migrate it with the fleetd that wrote it"));
  }
  std::set<std::string> known(std::begin(kRecordTables), std::end(kRecordTables));
  for (const std::string& table : *tables) {
    if (known.erase(table) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("source ", source.name(), ": table ", table,
                       " is not one the copy knows (migrate_store.cc's kRecordTables): it would "
                       "be left behind"));
    }
  }
  if (!known.empty()) {
    return absl::InternalError(absl::StrCat("source ", source.name(), ": no table ", *known.begin(),
                                            " at schema version ", want));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> RecordTables() {
  return std::vector<std::string>(std::begin(kRecordTables), std::end(kRecordTables));
}

absl::Status CheckUrlWithoutPassword(std::string_view url) {
  if (!IsPostgresTarget(url)) {
    return absl::InvalidArgumentError("--to: expected a postgres:// or postgresql:// URL");
  }
  if (!postgres::ConninfoSecrets(url).empty()) {
    return absl::InvalidArgumentError(
        "--to: the URL carries a password, and argv is readable by every user of the machine "
        "(ps): put the URL in a file of mode 0600 and give --to-file FILE instead");
  }
  return absl::OkStatus();
}

absl::StatusOr<MigrateResult> MigrateStore(sql::Connection& source, sql::Connection& target,
                                           const MigrateOptions& options) {
  if (source.dialect() != sql::Dialect::kSqlite || target.dialect() != sql::Dialect::kPostgres) {
    return absl::InvalidArgumentError("migrate-store copies a SQLite record into PostgreSQL");
  }
  const int64_t want = static_cast<int64_t>(FleetStoreMigrations(sql::Dialect::kSqlite).size());

  // The source: never written, read in one snapshot (a deferred transaction: its first read fixes
  // what every later read sees, while fleetd goes on writing to the WAL).
  if (absl::Status s = source.Exec("PRAGMA query_only = ON"); !s.ok()) return s;
  absl::Cleanup writable = [&source] { source.Exec("PRAGMA query_only = OFF").IgnoreError(); };
  if (absl::Status s = source.Exec("BEGIN DEFERRED"); !s.ok()) return s;
  absl::Cleanup end_read = [&source] { source.Exec("ROLLBACK").IgnoreError(); };
  if (absl::Status s = CheckSource(source, want); !s.ok()) return s;

  // The target: empty, not newer; then its schema, made by the migrations fleetd runs.
  auto target_version = target.SchemaVersion();
  if (!target_version.ok()) return target_version.status();
  if (*target_version > want) {
    return absl::FailedPreconditionError(absl::StrCat("target ", target.name(), ": schema version ",
                                                      *target_version,
                                                      " is newer than this fleetd's (", want, ")"));
  }
  if (absl::Status s = CheckEmpty(target); !s.ok()) return s;
  if (absl::Status s = target.Migrate(FleetStoreMigrations(sql::Dialect::kPostgres)); !s.ok()) {
    return s;
  }

  // Every row in one transaction: all or nothing.
  if (absl::Status s = target.Begin(); !s.ok()) return s;
  absl::Cleanup end_write = [&target] { target.Rollback().IgnoreError(); };
  // Again inside the transaction: a fleetd may have started on it meanwhile.
  if (absl::Status s = CheckEmpty(target); !s.ok()) return s;
  auto counts = CopyTables(source, target, options);
  if (!counts.ok()) return counts.status();
  std::move(end_write).Cancel();
  if (absl::Status s = target.Commit(); !s.ok()) {
    target.Rollback().IgnoreError();
    return s;
  }

  // What the target holds now, against the snapshot.
  MigrateResult result;
  result.schema_version = want;
  std::vector<std::string> differ;
  for (TableCount& count : *counts) {
    auto n = Count(target, count.table);
    if (!n.ok()) return n.status();
    count.target = *n;
    if (count.target != count.source) {
      differ.push_back(absl::StrCat(count.table, ": ", count.source, " in the source, ",
                                    count.target, " in the target"));
    }
  }
  result.tables = *std::move(counts);
  if (!differ.empty()) {
    return absl::DataLossError(
        absl::StrCat("target ", target.name(),
                     ": the counts differ after the commit: ", absl::StrJoin(differ, "; ")));
  }
  return result;
}

}  // namespace fleet::daemon
