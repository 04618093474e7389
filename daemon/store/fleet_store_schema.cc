// The record's schema, version by version, per dialect where it must differ (fleet_store_schema.h).
#include "daemon/store/fleet_store_schema.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fleet::daemon {
namespace {

constexpr char kSchemaV1[] = R"sql(
CREATE TABLE hosts (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE containers (
  id INTEGER PRIMARY KEY,
  host_id INTEGER NOT NULL REFERENCES hosts(id),
  ctid TEXT NOT NULL,
  name TEXT NOT NULL UNIQUE,
  UNIQUE (host_id, ctid)
);
CREATE TABLE configs (
  id INTEGER PRIMARY KEY,
  created_at TEXT NOT NULL,
  source TEXT NOT NULL,
  yaml TEXT NOT NULL,
  config BLOB NOT NULL
);
CREATE TABLE servers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  container_id INTEGER NOT NULL REFERENCES containers(id),
  gpu INTEGER NOT NULL,
  desired TEXT NOT NULL CHECK (desired IN ('running', 'stopped')),
  removed INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL,
  phase_detail TEXT NOT NULL DEFAULT '',
  progress_step INTEGER NOT NULL DEFAULT 0,
  progress_total INTEGER NOT NULL DEFAULT 0,
  state_since TEXT,
  attempt_id TEXT,
  attempt_number INTEGER NOT NULL DEFAULT 0,
  last_class TEXT NOT NULL DEFAULT '',
  last_summary TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  backoff_until TEXT,
  degraded INTEGER NOT NULL DEFAULT 0,
  spec BLOB NOT NULL,
  policy BLOB NOT NULL
);
CREATE TABLE attempts (
  id TEXT PRIMARY KEY,
  server_id INTEGER NOT NULL REFERENCES servers(id),
  number INTEGER NOT NULL,
  trigger TEXT NOT NULL,
  created_at TEXT NOT NULL,
  launched_at TEXT,
  ended_at TEXT,
  outcome TEXT NOT NULL
    CHECK (outcome IN ('pending', 'running', 'ready', 'failed', 'stopped', 'lost')),
  exit_code INTEGER,
  signal INTEGER,
  exit_status_unknown INTEGER NOT NULL DEFAULT 0,
  diagnosis_class TEXT NOT NULL DEFAULT '',
  root_cause_line INTEGER NOT NULL DEFAULT 0,
  summary TEXT NOT NULL DEFAULT '',
  toolchain_fix INTEGER NOT NULL DEFAULT 0,
  time_to_ready_ms INTEGER,
  spec BLOB NOT NULL,
  diagnosis BLOB,
  toolchain BLOB,
  UNIQUE (server_id, number)
);
CREATE TABLE remediations (
  id INTEGER PRIMARY KEY,
  container_id INTEGER NOT NULL REFERENCES containers(id),
  trigger TEXT NOT NULL CHECK (trigger IN ('preflight', 'diagnosis', 'manual')),
  diagnosis_class TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  applied_at TEXT,
  plan BLOB NOT NULL
);
CREATE TABLE remediation_attempts (
  remediation_id INTEGER NOT NULL REFERENCES remediations(id),
  attempt_id TEXT NOT NULL REFERENCES attempts(id),
  PRIMARY KEY (remediation_id, attempt_id)
);
CREATE TABLE actions (
  id INTEGER PRIMARY KEY,
  remediation_id INTEGER NOT NULL REFERENCES remediations(id),
  seq INTEGER NOT NULL,
  kind TEXT NOT NULL,
  ok INTEGER,
  message TEXT NOT NULL DEFAULT '',
  output_tail TEXT NOT NULL DEFAULT '',
  took_ms INTEGER,
  action BLOB NOT NULL,
  UNIQUE (remediation_id, seq)
);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  container_id INTEGER NOT NULL REFERENCES containers(id),
  incarnation TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  received_at TEXT NOT NULL,
  at TEXT,
  server TEXT NOT NULL DEFAULT '',
  attempt_id TEXT NOT NULL DEFAULT '',
  kind TEXT NOT NULL,
  summary TEXT NOT NULL DEFAULT '',
  event BLOB,
  UNIQUE (container_id, incarnation, sequence)
);
CREATE INDEX events_received_at ON events (received_at);
CREATE TABLE agent_cursors (
  container_id INTEGER PRIMARY KEY REFERENCES containers(id),
  incarnation TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  updated_at TEXT NOT NULL
);

CREATE VIEW attempt_history AS
  SELECT s.name AS server, a.number, a.outcome, a.diagnosis_class, a.summary, a.trigger,
         a.created_at, a.ended_at,
         round((julianday(a.ended_at) - julianday(a.created_at)) * 86400.0, 1) AS seconds,
         a.exit_code, a.signal, a.time_to_ready_ms
  FROM attempts a JOIN servers s ON s.id = a.server_id
  ORDER BY s.name, a.number;
CREATE VIEW server_status AS
  SELECT name, state, phase_detail, attempt_number, last_class, last_summary, reason, state_since
  FROM servers WHERE removed = 0 ORDER BY name;
CREATE VIEW failure_classes AS
  SELECT diagnosis_class, count(*) AS attempts, count(DISTINCT server_id) AS servers
  FROM attempts WHERE outcome = 'failed' GROUP BY diagnosis_class ORDER BY attempts DESC;
CREATE VIEW remediation_log AS
  SELECT r.id, c.name AS container, r.trigger, r.diagnosis_class, r.status, r.reason,
         r.created_at, r.applied_at,
         (SELECT count(*) FROM actions x WHERE x.remediation_id = r.id) AS actions
  FROM remediations r JOIN containers c ON c.id = r.container_id ORDER BY r.id;
)sql";

// PostgreSQL's version 1: the same tables, columns and views; row ids are identity columns,
// blobs bytea, integers bigint; times stay ISO-8601 UTC text (one set of SQL for both engines),
// cast to timestamptz where a view computes with them. One column is named apart: PostgreSQL
// reserves `ctid` (every table's system column), so containers.ctid is containers.vmid there
// (Proxmox's name for a guest's id; ContainerIdColumn).
constexpr char kPostgresSchemaV1[] = R"sql(
CREATE TABLE hosts (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name text NOT NULL UNIQUE
);
CREATE TABLE containers (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  host_id bigint NOT NULL REFERENCES hosts(id),
  vmid text NOT NULL,
  name text NOT NULL UNIQUE,
  UNIQUE (host_id, vmid)
);
CREATE TABLE configs (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  created_at text NOT NULL,
  source text NOT NULL,
  yaml text NOT NULL,
  config bytea NOT NULL
);
CREATE TABLE servers (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name text NOT NULL UNIQUE,
  container_id bigint NOT NULL REFERENCES containers(id),
  gpu bigint NOT NULL,
  desired text NOT NULL CHECK (desired IN ('running', 'stopped')),
  removed bigint NOT NULL DEFAULT 0,
  state text NOT NULL,
  phase_detail text NOT NULL DEFAULT '',
  progress_step bigint NOT NULL DEFAULT 0,
  progress_total bigint NOT NULL DEFAULT 0,
  state_since text,
  attempt_id text,
  attempt_number bigint NOT NULL DEFAULT 0,
  last_class text NOT NULL DEFAULT '',
  last_summary text NOT NULL DEFAULT '',
  reason text NOT NULL DEFAULT '',
  backoff_until text,
  degraded bigint NOT NULL DEFAULT 0,
  spec bytea NOT NULL,
  policy bytea NOT NULL
);
CREATE TABLE attempts (
  id text PRIMARY KEY,
  server_id bigint NOT NULL REFERENCES servers(id),
  number bigint NOT NULL,
  trigger text NOT NULL,
  created_at text NOT NULL,
  launched_at text,
  ended_at text,
  outcome text NOT NULL
    CHECK (outcome IN ('pending', 'running', 'ready', 'failed', 'stopped', 'lost')),
  exit_code bigint,
  signal bigint,
  exit_status_unknown bigint NOT NULL DEFAULT 0,
  diagnosis_class text NOT NULL DEFAULT '',
  root_cause_line bigint NOT NULL DEFAULT 0,
  summary text NOT NULL DEFAULT '',
  toolchain_fix bigint NOT NULL DEFAULT 0,
  time_to_ready_ms bigint,
  spec bytea NOT NULL,
  diagnosis bytea,
  toolchain bytea,
  UNIQUE (server_id, number)
);
CREATE TABLE remediations (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  container_id bigint NOT NULL REFERENCES containers(id),
  trigger text NOT NULL CHECK (trigger IN ('preflight', 'diagnosis', 'manual')),
  diagnosis_class text NOT NULL DEFAULT '',
  status text NOT NULL,
  reason text NOT NULL DEFAULT '',
  created_at text NOT NULL,
  applied_at text,
  plan bytea NOT NULL
);
CREATE TABLE remediation_attempts (
  remediation_id bigint NOT NULL REFERENCES remediations(id),
  attempt_id text NOT NULL REFERENCES attempts(id),
  PRIMARY KEY (remediation_id, attempt_id)
);
CREATE TABLE actions (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  remediation_id bigint NOT NULL REFERENCES remediations(id),
  seq bigint NOT NULL,
  kind text NOT NULL,
  ok bigint,
  message text NOT NULL DEFAULT '',
  output_tail text NOT NULL DEFAULT '',
  took_ms bigint,
  action bytea NOT NULL,
  UNIQUE (remediation_id, seq)
);
CREATE TABLE events (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  container_id bigint NOT NULL REFERENCES containers(id),
  incarnation text NOT NULL,
  sequence bigint NOT NULL,
  received_at text NOT NULL,
  at text,
  server text NOT NULL DEFAULT '',
  attempt_id text NOT NULL DEFAULT '',
  kind text NOT NULL,
  summary text NOT NULL DEFAULT '',
  event bytea,
  UNIQUE (container_id, incarnation, sequence)
);
CREATE INDEX events_received_at ON events (received_at);
CREATE TABLE agent_cursors (
  container_id bigint PRIMARY KEY REFERENCES containers(id),
  incarnation text NOT NULL,
  sequence bigint NOT NULL,
  updated_at text NOT NULL
);

CREATE VIEW attempt_history AS
  SELECT s.name AS server, a.number, a.outcome, a.diagnosis_class, a.summary, a.trigger,
         a.created_at, a.ended_at,
         round((extract(epoch FROM a.ended_at::timestamptz) -
                extract(epoch FROM a.created_at::timestamptz))::numeric, 1) AS seconds,
         a.exit_code, a.signal, a.time_to_ready_ms
  FROM attempts a JOIN servers s ON s.id = a.server_id
  ORDER BY s.name, a.number;
CREATE VIEW server_status AS
  SELECT name, state, phase_detail, attempt_number, last_class, last_summary, reason, state_since
  FROM servers WHERE removed = 0 ORDER BY name;
CREATE VIEW failure_classes AS
  SELECT diagnosis_class, count(*) AS attempts, count(DISTINCT server_id) AS servers
  FROM attempts WHERE outcome = 'failed' GROUP BY diagnosis_class ORDER BY attempts DESC;
CREATE VIEW remediation_log AS
  SELECT r.id, c.name AS container, r.trigger, r.diagnosis_class, r.status, r.reason,
         r.created_at, r.applied_at,
         (SELECT count(*) FROM actions x WHERE x.remediation_id = r.id) AS actions
  FROM remediations r JOIN containers c ON c.id = r.container_id ORDER BY r.id;
)sql";

// v2 (both engines): the digest of the YAML text a config was deployed from (ConfigDigest), so that
// fleetd
// --config FILE can tell whether FILE changed since it was last applied. Rows written before it
// have none; their digest is computed from their stored text when asked (LastConfigFrom).
constexpr char kSchemaV2[] = R"sql(
ALTER TABLE configs ADD COLUMN digest TEXT;
CREATE INDEX configs_source ON configs (source, id);
)sql";

// v3: the fleet's events (fleet.proto FleetEvent: what `fleetctl events`, the metrics and the
// webhooks are made from), by their fleet-wide index; and each webhook delivery of one, with how
// it went (docs/observability.md).
constexpr char kSchemaV3[] = R"sql(
CREATE TABLE fleet_events (
  idx INTEGER PRIMARY KEY,
  at TEXT NOT NULL,
  type TEXT NOT NULL,
  server TEXT NOT NULL DEFAULT '',
  container TEXT NOT NULL DEFAULT '',
  event BLOB NOT NULL
);
CREATE INDEX fleet_events_at ON fleet_events (at);
CREATE TABLE deliveries (
  id INTEGER PRIMARY KEY,
  event_idx INTEGER NOT NULL,
  notify TEXT NOT NULL,
  event_type TEXT NOT NULL,
  server TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  http_status INTEGER,
  error TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  next_at TEXT,
  finished_at TEXT,
  body BLOB NOT NULL,
  UNIQUE (event_idx, notify)
);
CREATE INDEX deliveries_status ON deliveries (status, id);
)sql";

// PostgreSQL's version 3.
constexpr char kPostgresSchemaV3[] = R"sql(
CREATE TABLE fleet_events (
  idx bigint PRIMARY KEY,
  at text NOT NULL,
  type text NOT NULL,
  server text NOT NULL DEFAULT '',
  container text NOT NULL DEFAULT '',
  event bytea NOT NULL
);
CREATE INDEX fleet_events_at ON fleet_events (at);
CREATE TABLE deliveries (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  event_idx bigint NOT NULL,
  notify text NOT NULL,
  event_type text NOT NULL,
  server text NOT NULL DEFAULT '',
  status text NOT NULL,
  attempts bigint NOT NULL DEFAULT 0,
  http_status bigint,
  error text NOT NULL DEFAULT '',
  created_at text NOT NULL,
  next_at text,
  finished_at text,
  body bytea NOT NULL,
  UNIQUE (event_idx, notify)
);
CREATE INDEX deliveries_status ON deliveries (status, id);
)sql";

// v4 (both engines): how far an attempt's diagnosis can be trusted (issue 15): 'high' (a signature
// matched on an intact line) or 'low' (inferred from a message's stem, a cut-off message or a
// traceback's frames: never remediated automatically). Rows written before it read as 'high', which
// is what every diagnosis of that fleetd was.
constexpr char kSchemaV4[] = R"sql(
ALTER TABLE attempts ADD COLUMN confidence TEXT NOT NULL DEFAULT 'high'
  CHECK (confidence IN ('high', 'low'));
)sql";

// v5 (both engines): the fleet's identity (issue 16): one row, a random id made when the record is
// created (or, for a record made before v5, when it is first opened by a fleetd that knows v5). The
// leader lease, its terms and the agents' fences are scoped by it: an agent that served one fleet
// may later serve another, whose terms start again.
constexpr char kSchemaV5[] = R"sql(
CREATE TABLE fleet_identity (
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  fleet_id TEXT NOT NULL
);
)sql";

// 128 random bits in hex, from the kernel: a fleet id no other record has.
absl::StatusOr<std::string> NewFleetId() {
  unsigned char bytes[16];
  if (getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  std::string out;
  for (unsigned char b : bytes) absl::StrAppendFormat(&out, "%02x", b);
  return out;
}

}  // namespace

const char* ContainerIdColumn(sql::Dialect dialect) {
  return dialect == sql::Dialect::kPostgres ? "vmid" : "ctid";
}

std::vector<sql::Migration> FleetStoreMigrations(sql::Dialect dialect) {
  const bool pg = dialect == sql::Dialect::kPostgres;
  std::vector<sql::Migration> out;
  for (const char* ddl : {pg ? kPostgresSchemaV1 : kSchemaV1, kSchemaV2,
                          pg ? kPostgresSchemaV3 : kSchemaV3, kSchemaV4}) {
    out.push_back([ddl](sql::Connection& db) { return db.Exec(ddl); });
  }
  out.push_back([](sql::Connection& db) -> absl::Status {
    if (absl::Status s = db.Exec(kSchemaV5); !s.ok()) return s;
    absl::StatusOr<std::string> id = NewFleetId();
    if (!id.ok()) return id.status();
    auto insert = db.Prepare("INSERT INTO fleet_identity (singleton, fleet_id) VALUES (1, ?1)");
    if (!insert.ok()) return insert.status();
    insert->Bind(1, *id);
    return insert->Run();
  });
  return out;
}

}  // namespace fleet::daemon
