// FleetStore: the daemon's permanent record, in STATE_DIR/fleet.db (SQLite, WAL, migrations by
// PRAGMA user_version) or in a PostgreSQL database (fleetd --store-file; migrations counted in a
// schema_version table). One set of SQL text serves both (common/sql/connection.h); only the DDL
// differs by dialect. The schema is a user interface (docs/schema.md): hosts, containers,
// servers, configs (desired state, so it survives kill -9), attempts (a row written *before* each
// launch and closed after), remediations and actions, events (each agent event, once), and the
// per-agent stream cursors.
//
// Exactly once: a batch of one agent's events, the server and attempt rows they change, and the
// agent's new cursor are written in one transaction (IngestBatch); an event already stored
// (same container, incarnation, sequence) is skipped.
//
// Writes made while a Batch is open share its transaction (each still all-or-nothing on its own,
// as a savepoint): a daemon turn commits once. Statements are prepared once and kept.
//
// PostgreSQL's connection can be lost: what was written in the open transaction is gone with it
// (never a partial turn), every call fails with Unavailable until the Batch (if any) ends, and
// the next call outside a Batch connects again. A reconnect that fails waits a backoff (doubling,
// bounded) before the next try; calls in between fail at once with Unavailable.
//
// Not thread-safe: the daemon calls it under its own lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/sql/connection.h"
#include "common/sqlite/database.h"
#include "proto/agent.pb.h"
#include "proto/config.pb.h"
#include "proto/diagnosis.pb.h"
#include "proto/fleet.pb.h"
#include "proto/states.pb.h"

namespace fleet::daemon {

// One server as the daemon sees it: what is wanted and where it is.
struct ServerRecord {
  std::string name;  // host/ctid/gpuN
  std::string host;
  std::string container;
  int32_t gpu = 0;
  fleet::v1::ServerSpec spec;  // desired, placeholders expanded
  fleet::v1::Policy policy;
  bool desired_running = true;
  bool removed = false;                                            // no longer in the config
  fleet::v1::ServerState state = fleet::v1::SERVER_STATE_PENDING;  // its spelling in the column
  std::string phase_detail;
  int64_t progress_step = 0;
  int64_t progress_total = 0;
  absl::Time state_since;
  std::string attempt_id;  // the current (last) attempt
  int64_t attempt_number = 0;
  std::string last_class;
  std::string last_summary;
  std::string reason;  // why FAILED / GAVE_UP
  absl::Time backoff_until = absl::InfinitePast();
  bool degraded = false;
};

struct AttemptRecord {
  std::string id;
  std::string server;
  int64_t number = 0;
  std::string trigger;  // initial | deploy | restart | recovery | remediation:<id>
  fleet::v1::ServerSpec spec;
  absl::Time created_at;
  absl::Time launched_at = absl::InfinitePast();  // the agent accepted Launch
  absl::Time ended_at = absl::InfinitePast();
  // pending | running | ready | failed | stopped | lost in the column
  fleet::v1::AttemptOutcome outcome = fleet::v1::ATTEMPT_OUTCOME_PENDING;
  fleet::v1::ProcessExit exit;
  std::string diagnosis_class;
  std::string summary;
  fleet::v1::Diagnosis diagnosis;
  int64_t time_to_ready_ms = -1;
};

// A stored config's version (its row id), where it came from and the digest of its YAML text
// ("" when it was deployed as a message, without text).
struct StoredConfigInfo {
  int64_t version = 0;
  std::string source;
  std::string digest;
};

// "sha256:<hex>" of a config's text: what SaveConfig stores with it.
std::string ConfigDigest(std::string_view text);

struct AgentCursor {
  std::string incarnation;
  uint64_t sequence = 0;
};

// A webhook delivery of a fleet event (table deliveries): made in the commit that records the
// event, then tried until it is delivered or given up.
struct DeliveryRecord {
  int64_t id = 0;
  int64_t event_index = 0;
  std::string notify;  // the config's Notify.name
  std::string event_type;
  std::string server;
  std::string status = "pending";  // pending | delivered | failed (given up) | dropped
  int32_t attempts = 0;
  int32_t http_status = 0;  // of the last try (0: none answered)
  std::string error;        // of the last try
  absl::Time created_at;
  absl::Time next_at = absl::InfinitePast();  // when a pending one is tried next
  absl::Time finished_at = absl::InfinitePast();
  std::string body;  // the JSON sent
};

// True when `target` names a PostgreSQL database (a postgres:// or postgresql:// URL) rather than
// a SQLite file.
bool IsPostgresTarget(std::string_view target);

struct FleetStoreOptions {
  // SQLite only. Every commit is synced (synchronous=FULL): a row "written before launch" must
  // survive a power loss, not only a crash of fleetd. kNormal is for measuring what that costs
  // (fleetd --db-synchronous=normal, bench/daemon). `vfs`: the SQLite VFS (empty: the default;
  // fleetd --db-vfs, for the fault matrix's power-loss row). PostgreSQL's durability is the
  // server's (synchronous_commit, on by default).
  sqlite::OpenOptions::Synchronous synchronous = sqlite::OpenOptions::Synchronous::kFull;
  std::string vfs;
  // PostgreSQL only: the wait after a failed reconnect, doubled after each further failure up to
  // the maximum; and the clock it is measured by (tests; absl::Now when empty).
  absl::Duration reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(10);
  std::function<absl::Time()> clock;
};

class FleetStore {
 public:
  // Opens the record at `target`: a SQLite file (created, mode 0600) or a PostgreSQL database
  // (postgres:// or postgresql:// URL; the database must exist, its tables are created). Messages
  // and logs name a URL only redacted.
  static absl::StatusOr<std::unique_ptr<FleetStore>> Open(const std::string& target,
                                                          const FleetStoreOptions& options);
  static absl::StatusOr<std::unique_ptr<FleetStore>> Open(
      const std::string& path,
      sqlite::OpenOptions::Synchronous synchronous = sqlite::OpenOptions::Synchronous::kFull,
      const std::string& vfs = "");
  ~FleetStore();

  // While a Batch lives, the store's writes share one transaction, committed by Commit() or at
  // the end of the batch; a write that fails still undoes only its own part (a savepoint).
  // Batches do not nest (an inner one is a no-op). When the transaction could not begin (the
  // database busy), each write is its own transaction and Commit returns BEGIN's error: the
  // caller cannot count on the batch as one.
  class Batch {
   public:
    explicit Batch(FleetStore* store);
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    absl::Status Commit();

   private:
    FleetStore* const store_;
    bool open_ = false;
    absl::Status begin_;  // BEGIN's result, when this batch tried to open one
  };

  // Desired state: the config as given (its YAML text too, and that text's digest), newest last.
  absl::StatusOr<int64_t> SaveConfig(const fleet::v1::FleetConfig& config, std::string_view source,
                                     std::string_view yaml, absl::Time now);
  absl::StatusOr<std::optional<fleet::v1::FleetConfig>> LatestConfig();
  // The newest config row, and the newest one deployed with text from `source`; nullopt when
  // there is none.
  absl::StatusOr<std::optional<StoredConfigInfo>> LatestConfigInfo();
  absl::StatusOr<std::optional<StoredConfigInfo>> LastConfigFrom(std::string_view source);

  // Servers (by name; hosts and containers rows follow).
  absl::Status PutServer(const ServerRecord& server);
  absl::StatusOr<std::vector<ServerRecord>> Servers();

  // Attempts. CreateAttempt gives the next number for the server and a unique id, and writes the
  // row with outcome "pending" before anything is launched.
  absl::StatusOr<AttemptRecord> CreateAttempt(const std::string& server, const std::string& trigger,
                                              const fleet::v1::ServerSpec& spec, absl::Time now);
  // Writes the attempt: the whole row when it is missing (its creation was rolled back with a
  // failed commit), else what changes after creation (launch, end, outcome, exit, diagnosis). An
  // error when no row was written (its server has no row, its number is another attempt's).
  absl::Status PutAttempt(const AttemptRecord& attempt);
  // The attempts of `server` (all servers when empty), oldest first.
  absl::StatusOr<std::vector<AttemptRecord>> Attempts(const std::string& server);
  // Attempt `number` of `server` (the latest when 0).
  absl::StatusOr<std::optional<AttemptRecord>> Attempt(const std::string& server, int64_t number);

  // Remediations of a container ("host/ctid"), recorded as fleet.proto Plans: the row (and one
  // `actions` row per action, its result empty) is written before anything runs, with the
  // attempt that triggered it linked; UpdateRemediation records the status and the results.
  // CreateRemediation assigns plan.id (a decimal number, the row id).
  absl::StatusOr<fleet::v1::Plan> CreateRemediation(fleet::v1::Plan plan, absl::Time now);
  absl::Status UpdateRemediation(const fleet::v1::Plan& plan);
  // Oldest first; all containers when `container` is empty.
  absl::StatusOr<std::vector<fleet::v1::Plan>> Remediations(const std::string& container);
  absl::StatusOr<std::optional<fleet::v1::Plan>> Remediation(const std::string& id);
  // Links a (later) attempt to a remediation: the restarts it made, a failure after it.
  absl::Status LinkRemediationAttempt(const std::string& remediation_id,
                                      const std::string& attempt_id);

  // Agent streams.
  absl::StatusOr<AgentCursor> Cursor(const std::string& container);
  // One transaction (a savepoint inside an open Batch): the events (skipping ones already
  // stored), the servers and attempts they changed, and the new cursor. Of `servers` only the
  // state columns are written (state, phase, progress, attempt, diagnosis, reason, backoff): their
  // spec and policy are written by PutServer when they change (a row not recorded yet is written
  // whole). RecordGap records a resynchronisation (events lost at the agent).
  absl::Status IngestBatch(const std::string& container,
                           const std::vector<fleet::v1::AgentEvent>& events,
                           const std::vector<ServerRecord>& servers,
                           const std::vector<AttemptRecord>& attempts, const AgentCursor& cursor,
                           absl::Time now);
  absl::Status RecordGap(const std::string& container, const AgentCursor& from,
                         const AgentCursor& to, absl::Time now);

  // The fleet's events (FleetJournal), with the webhook deliveries they make (each given its id):
  // one savepoint. Their indexes are set (the journal's); an index already stored is an error.
  absl::Status AppendFleetEvents(const std::vector<fleet::v1::FleetEvent>& events,
                                 std::vector<DeliveryRecord>* deliveries, absl::Time now);
  // Events with an index above `since`, oldest first, at most `limit`.
  absl::StatusOr<std::vector<fleet::v1::FleetEvent>> FleetEvents(int64_t since, int64_t limit);
  // The oldest and the newest index kept (0, 0 when none).
  absl::StatusOr<std::pair<int64_t, int64_t>> FleetEventRange();
  // Deliveries still pending, oldest first, at most `limit`; and the newest of all (tests, CLI).
  absl::StatusOr<std::vector<DeliveryRecord>> PendingDeliveries(int64_t limit);
  absl::StatusOr<std::vector<DeliveryRecord>> Deliveries(int64_t limit);
  // Records a try's outcome (status, attempts, http status, error, next and finished times).
  absl::Status UpdateDelivery(const DeliveryRecord& delivery);

  // Retention: events older than `older_than`, and beyond the newest `max_events`, are deleted;
  // so are fleet events by the same rules, and finished deliveries older than `older_than`.
  // Attempts and remediations are kept.
  absl::Status PruneEvents(absl::Time older_than, int64_t max_events);
  absl::StatusOr<int64_t> EventCount();

  // The fleet's id (schema v5: made once, with the record): what the leader lease's terms and the
  // agents' fences are scoped by.
  absl::StatusOr<std::string> FleetId();
  // A leader's store (PostgreSQL, issue 16): from now on every write transaction begins by checking
  // that `term` still holds the live lease of `fleet_id` (term_fence.h: the lease row locked FOR
  // SHARE until the transaction ends), and fails without writing anything, FailedPrecondition
  // "fenced", when it does not. 0: no check (SQLite, a fleetd alone).
  void SetFence(std::string fleet_id, int64_t term);

  // The connection (tests, tools); sqlite() is the SQLite database itself, null on PostgreSQL.
  sql::Connection& db() { return *db_; }
  sqlite::Database* sqlite() { return sqlite_; }

 private:
  class Scope;
  class Query;

  FleetStore(std::unique_ptr<sql::Connection> db, sqlite::Database* sqlite,
             const FleetStoreOptions& options);
  // Connects again when the connection was lost and no transaction is open (within the backoff:
  // Unavailable at once).
  absl::Status EnsureConnected();
  // The outer write transaction: connected, begun, and the term checked (SetFence); rolled back
  // when the check fails.
  absl::Status BeginWrite();
  // A statement prepared once (by its SQL text) and reset when the handle goes.
  absl::StatusOr<Query> Prepare(const std::string& sql);
  absl::StatusOr<std::optional<StoredConfigInfo>> ReadConfigInfo(sql::Statement& st);
  absl::StatusOr<int64_t> ContainerId(const std::string& host, const std::string& container);
  absl::Status PutServerRow(const ServerRecord& server);
  // Only what events change (state, phase, progress, attempt, diagnosis, reason, backoff): the
  // row exists, and its spec and policy are written when they change.
  absl::Status PutServerState(const ServerRecord& server);
  absl::Status PutAttemptRow(const AttemptRecord& attempt);

  std::unique_ptr<sql::Connection> db_;
  sqlite::Database* const sqlite_;  // db_'s, when it is SQLite
  const FleetStoreOptions options_;
  absl::Duration backoff_ = absl::ZeroDuration();  // after the last failed reconnect
  absl::Time next_reconnect_ = absl::InfinitePast();
  struct Cached;
  std::map<std::string, std::unique_ptr<Cached>, std::less<>> statements_;
  std::map<std::string, int64_t, std::less<>> container_ids_;  // name (host/ctid) -> id
  int depth_ = 0;                                              // open transaction and savepoints
  std::string fence_fleet_;
  int64_t fence_term_ = 0;
};

}  // namespace fleet::daemon
