#include "tests/faults/fault_invariants.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/sql/postgres_connection.h"
#include "common/sql/sqlite_connection.h"
#include "common/sqlite/database.h"
#include "proto/agent.pb.h"
#include "proto/agent_state.pb.h"

namespace fleet::faults {
namespace {

using ::fleet::sqlite::Database;

// At most this many items are named in one violation's detail; the rest are counted.
constexpr size_t kNamed = 8;

std::string Named(const std::vector<std::string>& items) {
  std::vector<std::string> shown(items.begin(),
                                 items.begin() + static_cast<long>(std::min(items.size(), kNamed)));
  std::string out = absl::StrJoin(shown, ", ");
  if (items.size() > kNamed) absl::StrAppend(&out, " and ", items.size() - kNamed, " more");
  return out;
}

absl::StatusOr<std::unique_ptr<Database>> OpenExisting(const std::string& path) {
  std::ifstream probe(path);
  if (!probe) return absl::NotFoundError(absl::StrCat("database ", path, ": not found"));
  return Database::Open(path);
}

// fleetd's record: fleet.db, or the PostgreSQL database of --store-file. `sqlite` is set to the
// SQLite database underneath (for its integrity check), or null on PostgreSQL.
struct FleetRecord {
  std::unique_ptr<sql::Connection> connection;
  Database* sqlite = nullptr;
};

absl::StatusOr<FleetRecord> OpenFleetRecord(const CheckInput& input) {
  FleetRecord record;
  if (!input.fleet_store_url.empty()) {
    FLEET_ASSIGN_OR_RETURN(record.connection,
                           sql::PostgresConnection::Connect(input.fleet_store_url));
    return record;
  }
  std::ifstream probe(input.fleet_db);
  if (!probe) return absl::NotFoundError(absl::StrCat("database ", input.fleet_db, ": not found"));
  FLEET_ASSIGN_OR_RETURN(auto connection, sql::SqliteConnection::Open(input.fleet_db));
  record.sqlite = &connection->database();
  record.connection = std::move(connection);
  return record;
}

absl::StatusOr<std::string> IntegrityOf(Database& db) {
  FLEET_ASSIGN_OR_RETURN(auto check, db.Prepare("PRAGMA integrity_check"));
  std::vector<std::string> lines;
  while (true) {
    FLEET_ASSIGN_OR_RETURN(bool row, check.Step());
    if (!row) break;
    lines.push_back(check.ColumnText(0));
  }
  return absl::StrJoin(lines, "; ");
}

std::string KindOf(const fleet::v1::AgentEvent& e) {
  switch (e.kind_case()) {
    case fleet::v1::AgentEvent::kPhase:
      return absl::StrCat("phase ", e.phase().state());
    case fleet::v1::AgentEvent::kProgress:
      return "progress";
    case fleet::v1::AgentEvent::kDiagnosis:
      return "diagnosis";
    case fleet::v1::AgentEvent::kExited:
      return "exited";
    case fleet::v1::AgentEvent::kReady:
      return "ready";
    case fleet::v1::AgentEvent::kResync:
      return "resync";
    case fleet::v1::AgentEvent::kStalled:
      return "stalled";
    default:
      return "none";
  }
}

// The agent's Launch says STARTING before the server wrote anything, as the attempt's first event
// in that agent's log. The same phase read from the log later (SGLang logs it again after
// loading) has its log line; a re-adoption announces the phase again, but never first.
bool IsLaunch(const fleet::v1::AgentEvent& e) {
  return e.kind_case() == fleet::v1::AgentEvent::kPhase && e.phase().state() == "STARTING" &&
         e.phase().log_line() == 0;
}

// One agent.db: its incarnation and its events by sequence (serialized AgentEvent).
struct AgentLog {
  std::string path;
  std::string incarnation;
  std::map<int64_t, std::string> events;
};

absl::StatusOr<AgentLog> ReadAgentLog(Database& db) {
  AgentLog log;
  log.path = db.path();
  FLEET_ASSIGN_OR_RETURN(auto meta, db.Prepare("SELECT value FROM meta WHERE key = 'incarnation'"));
  FLEET_ASSIGN_OR_RETURN(bool has, meta.Step());
  if (has) log.incarnation = meta.ColumnText(0);
  FLEET_ASSIGN_OR_RETURN(auto events, db.Prepare("SELECT seq, event FROM events ORDER BY seq"));
  while (true) {
    FLEET_ASSIGN_OR_RETURN(bool row, events.Step());
    if (!row) break;
    log.events[events.ColumnInt(0)] = events.ColumnBlob(1);
  }
  return log;
}

struct AttemptRow {
  std::string id;
  std::string server;
  int64_t gpu = 0;
  int64_t number = 0;
  std::string outcome;
  bool launched = false;
};

}  // namespace

absl::StatusOr<std::vector<Violation>> CheckInvariants(const CheckInput& input) {
  std::vector<Violation> out;
  auto violation = [&out](std::string invariant, std::string detail) {
    out.push_back({std::move(invariant), std::move(detail)});
  };

  FLEET_ASSIGN_OR_RETURN(FleetRecord record, OpenFleetRecord(input));
  sql::Connection* const fleet = record.connection.get();
  FLEET_ASSIGN_OR_RETURN(std::unique_ptr<Database> agent, OpenExisting(input.agent_db));
  std::vector<std::unique_ptr<Database>> old_agents;
  for (const std::string& path : input.old_agent_dbs) {
    FLEET_ASSIGN_OR_RETURN(auto db, OpenExisting(path));
    old_agents.push_back(std::move(db));
  }

  // integrity: PRAGMA integrity_check says ok on every database (fleet.db when the record is
  // SQLite: PostgreSQL has no such check).
  std::vector<Database*> all;
  if (record.sqlite != nullptr) all.push_back(record.sqlite);
  all.push_back(agent.get());
  for (auto& db : old_agents) all.push_back(db.get());
  for (Database* db : all) {
    FLEET_ASSIGN_OR_RETURN(std::string integrity, IntegrityOf(*db));
    if (integrity != "ok") violation("integrity", absl::StrCat(db->path(), ": ", integrity));
  }

  FLEET_ASSIGN_OR_RETURN(auto container,
                         fleet->Prepare("SELECT id FROM containers WHERE name = ?1"));
  container.Bind(1, std::string_view(input.container));
  FLEET_ASSIGN_OR_RETURN(bool known, container.Step());
  if (!known) {
    return absl::NotFoundError(
        absl::StrCat("fleetd's record ", fleet->name(), ": no container ", input.container));
  }
  const int64_t container_id = container.ColumnInt(0);

  // events_once: every event of the agent's current incarnation is in fleet.db, once, as the
  // agent wrote it; fleet.db holds none of that incarnation that the agent did not write.
  FLEET_ASSIGN_OR_RETURN(AgentLog live, ReadAgentLog(*agent));
  std::vector<AgentLog> logs;
  for (auto& db : old_agents) {
    FLEET_ASSIGN_OR_RETURN(AgentLog log, ReadAgentLog(*db));
    logs.push_back(std::move(log));
  }
  logs.push_back(live);
  {
    FLEET_ASSIGN_OR_RETURN(auto stored, fleet->Prepare("SELECT sequence, event FROM events WHERE "
                                                       "container_id = ?1 AND incarnation = ?2 "
                                                       "AND sequence >= 0 ORDER BY sequence"));
    stored.Bind(1, container_id).Bind(2, std::string_view(live.incarnation));
    std::map<int64_t, std::string> in_fleet;
    while (true) {
      FLEET_ASSIGN_OR_RETURN(bool row, stored.Step());
      if (!row) break;
      in_fleet[stored.ColumnInt(0)] = stored.ColumnBlob(1);
    }
    std::vector<std::string> lost, foreign, differ;
    for (const auto& [seq, blob] : live.events) {
      auto it = in_fleet.find(seq);
      if (it == in_fleet.end()) {
        fleet::v1::AgentEvent e;
        e.ParseFromString(blob);
        lost.push_back(absl::StrCat("#", seq, " (", KindOf(e), ", ", e.attempt_id(), ")"));
      } else if (it->second != blob) {
        differ.push_back(absl::StrCat("#", seq));
      }
    }
    const int64_t first = live.events.empty() ? 1 : live.events.begin()->first;
    for (const auto& [seq, blob] : in_fleet) {
      if (seq >= first && live.events.count(seq) == 0) foreign.push_back(absl::StrCat("#", seq));
    }
    const std::string inc = live.incarnation.substr(0, 8);
    if (!lost.empty()) {
      violation("events_once",
                absl::StrCat(lost.size(), " of ", live.events.size(), " events of incarnation ",
                             inc, " never stored in fleet.db: ", Named(lost)));
    }
    if (!differ.empty()) {
      violation("events_once", absl::StrCat(differ.size(), " events of incarnation ", inc,
                                            " stored in fleet.db differ from the agent's (a "
                                            "sequence number reused): ",
                                            Named(differ)));
    }
    if (!foreign.empty()) {
      violation("events_once",
                absl::StrCat(foreign.size(), " events of incarnation ", inc,
                             " in fleet.db that the agent never wrote: ", Named(foreign)));
    }
  }

  // The attempt rows of this container.
  std::vector<AttemptRow> attempts;
  {
    FLEET_ASSIGN_OR_RETURN(
        auto rows, fleet->Prepare("SELECT a.id, s.name, s.gpu, a.number, a.outcome, "
                                  "a.launched_at IS NOT NULL FROM attempts a JOIN servers s ON "
                                  "s.id = a.server_id WHERE s.container_id = ?1 "
                                  "ORDER BY s.name, a.number"));
    rows.Bind(1, container_id);
    while (true) {
      FLEET_ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      attempts.push_back({rows.ColumnText(0), rows.ColumnText(1), rows.ColumnInt(2),
                          rows.ColumnInt(3), rows.ColumnText(4), rows.ColumnInt(5) != 0});
    }
  }

  // attempts_contiguous: each server's numbers are 1..N, each once.
  {
    std::map<std::string, std::vector<int64_t>> numbers;
    for (const AttemptRow& a : attempts) numbers[a.server].push_back(a.number);
    for (auto& [server, n] : numbers) {
      std::sort(n.begin(), n.end());
      for (size_t i = 0; i < n.size(); ++i) {
        if (n[i] != static_cast<int64_t>(i) + 1) {
          violation("attempts_contiguous",
                    absl::StrCat(server, ": attempt numbers ", absl::StrJoin(n, ","),
                                 " are not 1..", n.size()));
          break;
        }
      }
    }
  }

  // launched_once / launch_recorded: what the agents launched (every incarnation's launch
  // events) against the attempt rows. A second launch of one attempt by the same incarnation has
  // no event of its own: launches_match (the container's ledger) sees it.
  std::map<std::string, int> launches_of;                // attempt id -> STARTING events
  std::map<int64_t, std::set<std::string>> launched_on;  // gpu -> attempt ids
  for (const AgentLog& log : logs) {
    std::set<std::string> seen;  // attempt ids with an event earlier in this log
    for (const auto& [seq, blob] : log.events) {
      fleet::v1::AgentEvent e;
      if (!e.ParseFromString(blob)) {
        violation("integrity", absl::StrCat(log.path, ": event #", seq, " is unreadable"));
        continue;
      }
      if (!seen.insert(e.attempt_id()).second || !IsLaunch(e)) continue;
      ++launches_of[e.attempt_id()];
      launched_on[e.server().gpu()].insert(e.attempt_id());
    }
  }
  std::map<std::string, const AttemptRow*> attempt_by_id;
  for (const AttemptRow& a : attempts) attempt_by_id[a.id] = &a;
  {
    std::vector<std::string> twice, unrecorded, phantom;
    for (const auto& [id, n] : launches_of) {
      if (n > 1) twice.push_back(absl::StrCat(id, " (", n, " times)"));
      if (attempt_by_id.count(id) == 0) unrecorded.push_back(id);
    }
    for (const AttemptRow& a : attempts) {
      if (a.launched && launches_of.count(a.id) == 0) {
        phantom.push_back(absl::StrCat(a.server, " #", a.number, " (", a.outcome, ")"));
      }
    }
    if (!twice.empty())
      violation("launched_once", absl::StrCat("launched more than once: ", Named(twice)));
    if (!unrecorded.empty()) {
      violation("launch_recorded",
                absl::StrCat(unrecorded.size(),
                             " launches with no attempt row in fleet.db: ", Named(unrecorded)));
    }
    if (!phantom.empty()) {
      violation(
          "launch_recorded",
          absl::StrCat(phantom.size(),
                       " attempt rows marked launched that no agent launched: ", Named(phantom)));
    }
  }

  // launches_match: the container's own ledger of started server processes per GPU against the
  // launches the agents recorded (an agent that dropped its STARTING event shows here).
  if (!input.launch_ledger.empty()) {
    std::ifstream ledger(input.launch_ledger);
    if (!ledger) {
      return absl::NotFoundError(
          absl::StrCat("launch ledger ", input.launch_ledger, ": not found"));
    }
    std::map<int64_t, int> started;
    std::string line;
    while (std::getline(ledger, line)) {
      std::istringstream fields(line);
      int64_t gpu = -1;
      if (fields >> gpu) ++started[gpu];
    }
    std::set<int64_t> gpus;
    for (const auto& [gpu, n] : started) gpus.insert(gpu);
    for (const auto& [gpu, ids] : launched_on) gpus.insert(gpu);
    for (int64_t gpu : gpus) {
      const int in_container = started.count(gpu) ? started[gpu] : 0;
      const int by_agents = launched_on.count(gpu) ? static_cast<int>(launched_on[gpu].size()) : 0;
      if (in_container != by_agents) {
        violation("launches_match",
                  absl::StrCat("gpu ", gpu, ": the container started ", in_container,
                               " server processes, the agents recorded ", by_agents, " launches"));
      }
    }
  }

  // settled: after the fault cleared every wanted server is READY (or GAVE_UP with a reason when
  // allowed), no attempt is left pending and no remediation left applying.
  if (input.expect_settled) {
    FLEET_ASSIGN_OR_RETURN(auto servers,
                           fleet->Prepare("SELECT name, state, reason FROM servers WHERE "
                                          "container_id = ?1 AND removed = 0 AND desired = "
                                          "'running' ORDER BY name"));
    servers.Bind(1, container_id);
    while (true) {
      FLEET_ASSIGN_OR_RETURN(bool row, servers.Step());
      if (!row) break;
      const std::string state = servers.ColumnText(1);
      const std::string reason = servers.ColumnText(2);
      if (state == "READY") continue;
      if (state == "GAVE_UP" && input.allow_gave_up && !reason.empty()) continue;
      violation("settled", absl::StrCat(servers.ColumnText(0), " is ", state,
                                        reason.empty() ? "" : absl::StrCat(": ", reason)));
    }
    std::vector<std::string> pending;
    for (const AttemptRow& a : attempts) {
      if (a.outcome == "pending") pending.push_back(absl::StrCat(a.server, " #", a.number));
    }
    if (!pending.empty()) {
      violation("settled", absl::StrCat("attempts still pending: ", Named(pending)));
    }
    FLEET_ASSIGN_OR_RETURN(auto applying,
                           fleet->Prepare("SELECT id FROM remediations WHERE container_id = ?1 "
                                          "AND status = 'applying'"));
    applying.Bind(1, container_id);
    std::vector<std::string> open;
    while (true) {
      FLEET_ASSIGN_OR_RETURN(bool row, applying.Step());
      if (!row) break;
      open.push_back(absl::StrCat(applying.ColumnInt(0)));
    }
    if (!open.empty()) {
      violation("settled", absl::StrCat("remediations still applying: ", Named(open)));
    }
  }
  return out;
}

// The rows of fleetd's record that tell a failed injection's story, as text (`dump`): a
// PostgreSQL record is gone with its server when the injection ends.
absl::StatusOr<std::string> DumpRecord(sql::Connection& db) {
  struct Table {
    const char* title;
    int columns;
    const char* sql;
  };
  static constexpr Table kTables[] = {
      {"servers: name|desired|state|attempt_number|last_class|reason|state_since", 7,
       "SELECT name, desired, state, attempt_number, last_class, reason, state_since FROM servers "
       "ORDER BY name"},
      {"attempts: server|number|id|trigger|outcome|diagnosis_class|created_at|launched_at|ended_at",
       9,
       "SELECT s.name, a.number, a.id, a.trigger, a.outcome, a.diagnosis_class, a.created_at, "
       "a.launched_at, a.ended_at FROM attempts a JOIN servers s ON s.id = a.server_id ORDER BY "
       "s.name, a.number"},
      {"remediations: id|trigger|diagnosis_class|status|reason|created_at|applied_at", 7,
       "SELECT id, trigger, diagnosis_class, status, reason, created_at, applied_at FROM "
       "remediations ORDER BY id"},
      {"remediation_attempts: remediation_id|attempt_id", 2,
       "SELECT remediation_id, attempt_id FROM remediation_attempts ORDER BY remediation_id, "
       "attempt_id"},
      {"fleet_events: idx|at|type|server", 4,
       "SELECT idx, at, type, server FROM fleet_events ORDER BY idx"},
      {"agent_cursors: container_id|incarnation|sequence", 3,
       "SELECT container_id, incarnation, sequence FROM agent_cursors ORDER BY container_id"},
  };
  std::string out;
  for (const Table& table : kTables) {
    absl::StrAppend(&out, table.title, "\n");
    FLEET_ASSIGN_OR_RETURN(auto rows, db.Prepare(table.sql));
    while (true) {
      FLEET_ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      std::vector<std::string> fields;
      for (int i = 0; i < table.columns; ++i) fields.push_back(rows.ColumnText(i));
      absl::StrAppend(&out, "  ", absl::StrJoin(fields, "|"), "\n");
    }
  }
  return out;
}

absl::StatusOr<std::string> QueryRecord(const CheckInput& input, const std::string& name) {
  if (name == "dump") {
    FLEET_ASSIGN_OR_RETURN(FleetRecord record, OpenFleetRecord(input));
    return DumpRecord(*record.connection);
  }
  std::string sql;
  if (name == "cursor") {
    sql = "SELECT incarnation || '#' || sequence FROM agent_cursors";
  } else if (name == "applying") {
    sql = "SELECT count(*) FROM remediations WHERE status = 'applying'";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("no query named '", name, "' (cursor, applying, dump)"));
  }
  FLEET_ASSIGN_OR_RETURN(FleetRecord record, OpenFleetRecord(input));
  FLEET_ASSIGN_OR_RETURN(auto query, record.connection->Prepare(sql));
  FLEET_ASSIGN_OR_RETURN(bool row, query.Step());
  return row ? query.ColumnText(0) : std::string();
}

absl::StatusOr<std::vector<RecordedProcess>> RecordedProcesses(const std::string& agent_db) {
  FLEET_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenExisting(agent_db));
  FLEET_ASSIGN_OR_RETURN(auto rows, db->Prepare("SELECT gpu, record FROM servers ORDER BY gpu"));
  std::vector<RecordedProcess> out;
  while (true) {
    FLEET_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    fleet::v1::ServerRecord record;
    if (!record.ParseFromString(rows.ColumnBlob(1))) {
      return absl::DataLossError(absl::StrCat("agent.db ", agent_db, ": server of gpu ",
                                              rows.ColumnInt(0), " is unreadable"));
    }
    out.push_back({static_cast<int32_t>(rows.ColumnInt(0)), record.pid(), record.start_ticks(),
                   record.attempt_id()});
  }
  return out;
}

}  // namespace fleet::faults
