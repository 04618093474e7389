// MigrateStore: copies a fleet record from SQLite (fleet.db) into an empty PostgreSQL database
// (`fleetd migrate-store`, issue 16), so that a fleet moves to `fleetd --store-file` with its whole
// history: configs, servers, attempts, remediations, events, fleet events, deliveries, cursors.
//
// The contract:
// - The source may be live (a fleetd writing to it): everything is read inside ONE read
//   transaction, a consistent snapshot (SQLite's WAL lets a reader run beside the writer and never
//   blocks it), and the source is never written (PRAGMA query_only).
// - The source's schema version must be this build's (FleetStoreMigrations): an older record is
//   migrated forward by starting this fleetd on it once; a newer one belongs to a newer fleetd.
// - The target must hold no row in any of the record's tables (FailedPrecondition naming the
//   first that does; nothing is written then). Its schema is made by FleetStore's own migrations
//   (each in its transaction, as fleetd would), then every row is written in ONE transaction: all
//   or nothing; a failure (the server lost) leaves the tables empty. Rows keep their ids; the
//   identity sequences are advanced past them so the next insert of fleetd's does not collide.
// - After the commit every table's rows are counted in the target and compared with the
//   snapshot's count: DataLoss when one differs.
//
// The record's tables are listed once, in migrate_store.cc (kRecordTables); their columns are read
// from the two databases, so a column added by a migration needs nothing here, and a table is one
// line there. A table the source has and the list does not is refused rather than left behind.
//
// Not thread-safe: the connections are the caller's, used by the calling thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sql/connection.h"

namespace fleet::daemon {

// One table's rows: in the source's snapshot and in the target after the commit.
struct TableCount {
  std::string table;
  int64_t source = 0;
  int64_t target = 0;
};

struct MigrateResult {
  int64_t schema_version = 0;
  std::vector<TableCount> tables;  // in copy order
};

// Told as the copy goes: after each `every` rows of a table (rows: copied so far) and when a table
// is done (done: true). Runs on the calling thread, inside both transactions.
struct MigrateProgress {
  std::string_view table;
  int64_t rows = 0;
  bool done = false;
};
using MigrateProgressFn = std::function<void(const MigrateProgress&)>;

struct MigrateOptions {
  MigrateProgressFn progress;
  int64_t progress_every = 10000;
};

// Copies `source` (a SQLite fleet record) into `target` (an empty PostgreSQL database) as the
// contract above says. InvalidArgument for another pair of engines; FailedPrecondition for a
// source of another schema version, a target with rows or a newer schema; DataLoss when the
// counts differ after the commit; the connections' own errors otherwise (Unavailable: the
// server was lost, nothing committed).
absl::StatusOr<MigrateResult> MigrateStore(sql::Connection& source, sql::Connection& target,
                                           const MigrateOptions& options = {});

// The names of the record's tables, in copy order (parents before the rows that refer to them).
std::vector<std::string> RecordTables();

// `--to URL`: OK when the URL carries no password (which would then be in argv and in the
// process list). InvalidArgument otherwise, naming `--to-file` and never quoting the URL.
absl::Status CheckUrlWithoutPassword(std::string_view url);

}  // namespace fleet::daemon
