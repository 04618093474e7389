// FleetStore's statements and transactions (fleet_store.h): the prepared-statement cache, the
// write scopes and batches, and the reads and writes of configs, servers, attempts, remediations,
// events and cursors. The tables they use are made by the migrations in fleet_store_schema.cc.
#include "daemon/store/fleet_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/string_view.h"
#include "common/log/log.h"
#include "common/sql/postgres_connection.h"
#include "common/sql/sqlite_connection.h"
#include "common/state/states.h"
#include "daemon/store/fleet_store_internal.h"
#include "daemon/store/fleet_store_schema.h"

namespace fleet::daemon {

using store_internal::BindTime;
using store_internal::ColumnTime;
using store_internal::InsertedId;
using store_internal::ParseTime;
using store_internal::TimeText;

namespace {

std::string RandomHex(int bytes) {
  unsigned char buf[16] = {};
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, std::min(bytes, 16));
    static_cast<void>(n);
    close(fd);
  }
  std::string out;
  for (int i = 0; i < std::min(bytes, 16); ++i) absl::StrAppendFormat(&out, "%02x", buf[i]);
  return out;
}

std::string EventKind(const fleet::v1::AgentEvent& e) {
  switch (e.kind_case()) {
    case fleet::v1::AgentEvent::kPhase:
      return "phase";
    case fleet::v1::AgentEvent::kProgress:
      return "progress";
    case fleet::v1::AgentEvent::kDiagnosis:
      return e.diagnosis().final() ? "diagnosis" : "provisional_diagnosis";
    case fleet::v1::AgentEvent::kExited:
      return "exited";
    case fleet::v1::AgentEvent::kReady:
      return "ready";
    case fleet::v1::AgentEvent::kResync:
      return "resync";
    case fleet::v1::AgentEvent::kStalled:
      return "stalled";
    case fleet::v1::AgentEvent::KIND_NOT_SET:
      break;
  }
  return "unknown";
}

std::string EventSummary(const fleet::v1::AgentEvent& e) {
  switch (e.kind_case()) {
    case fleet::v1::AgentEvent::kPhase:
      return e.phase().detail().empty()
                 ? std::string(ServerStateText(e.phase()))
                 : absl::StrCat(AsAbsl(ServerStateText(e.phase())), " ", e.phase().detail());
    case fleet::v1::AgentEvent::kProgress:
      return absl::StrCat(e.progress().step(), "/", e.progress().total());
    case fleet::v1::AgentEvent::kDiagnosis:
      return absl::StrCat(e.diagnosis().diagnosis().diagnosis_class(), ": ",
                          e.diagnosis().diagnosis().summary());
    case fleet::v1::AgentEvent::kExited:
      return e.exited().status_unknown() ? "status unknown"
             : e.exited().exited()       ? absl::StrCat("exit ", e.exited().exit_code())
                                         : absl::StrCat("signal ", e.exited().signal());
    case fleet::v1::AgentEvent::kStalled:
      return absl::StrCat(e.stalled().diagnosis_class(), ": ", e.stalled().diagnosis().summary());
    default:
      return "";
  }
}

}  // namespace

absl::Status FleetStore::EnsureConnected() {
  if (!db_->IsBroken()) return absl::OkStatus();
  if (depth_ > 0) {
    // The transaction went with the connection: the rest of it must not land on a new one.
    return absl::UnavailableError(
        absl::StrCat("store ", db_->name(), ": the connection was lost in a transaction"));
  }
  const absl::Time now = options_.clock ? options_.clock() : absl::Now();
  if (now < next_reconnect_) {
    return absl::UnavailableError(absl::StrCat("store ", db_->name(),
                                               ": connection lost; next reconnect in ",
                                               absl::FormatDuration(next_reconnect_ - now)));
  }
  absl::Status s = db_->Reconnect();
  if (s.ok()) {
    backoff_ = absl::ZeroDuration();
    next_reconnect_ = absl::InfinitePast();
    container_ids_.clear();
    return s;
  }
  backoff_ = backoff_ == absl::ZeroDuration()
                 ? options_.reconnect_backoff
                 : std::min(backoff_ * 2, options_.max_reconnect_backoff);
  next_reconnect_ = now + backoff_;
  log::Get(log::Component::kStore)
      .warn("{} (next try in {})", AsStd(s.message()), absl::FormatDuration(backoff_));
  return s;
}

absl::StatusOr<FleetStore::Query> FleetStore::Prepare(const std::string& sql) {
  if (absl::Status s = EnsureConnected(); !s.ok()) return s;
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    auto st = db_->Prepare(sql);
    if (!st.ok()) return st.status();
    it = statements_.emplace(sql, std::make_unique<Cached>(Cached{*std::move(st)})).first;
  }
  Cached* cached = it->second.get();
  if (cached->busy) {
    // Used twice at once (not done today): a statement of its own.
    auto st = db_->Prepare(sql);
    if (!st.ok()) return st.status();
    return Query(*std::move(st));
  }
  cached->busy = true;
  return Query(cached);
}

// One write: a transaction of its own, or a savepoint inside the one that is open (a Batch).

FleetStore::Batch::Batch(FleetStore* store) : store_(store) {
  if (store_->depth_ > 0) return;  // already inside one
  begin_ = store_->BeginWrite();
  if (begin_.ok()) {
    open_ = true;
    ++store_->depth_;
  }
  // When BEGIN fails, each write makes its own transaction (and reports its error), and Commit
  // says that the batch was not one.
}

FleetStore::Batch::~Batch() {
  if (open_) Commit().IgnoreError();
}

absl::Status FleetStore::Batch::Commit() {
  if (!open_) {
    absl::Status s = std::exchange(begin_, absl::OkStatus());
    if (s.ok()) return s;
    return absl::Status(s.code(),
                        absl::StrCat("the batch's transaction did not begin: ", s.message()));
  }
  absl::Status s = store_->db_->Commit();
  if (!s.ok()) {
    store_->db_->Rollback().IgnoreError();
    store_->container_ids_.clear();
  }
  open_ = false;
  --store_->depth_;
  return s;
}

FleetStore::FleetStore(std::unique_ptr<sql::Connection> db, sqlite::Database* sqlite,
                       const FleetStoreOptions& options)
    : db_(std::move(db)), sqlite_(sqlite), options_(options) {}

FleetStore::~FleetStore() {
  // The statements go before the connection.
  statements_.clear();
}

bool IsPostgresTarget(std::string_view target) {
  return absl::StartsWith(AsAbsl(target), "postgres://") ||
         absl::StartsWith(AsAbsl(target), "postgresql://");
}

absl::StatusOr<std::unique_ptr<FleetStore>> FleetStore::Open(const std::string& target,
                                                             const FleetStoreOptions& options) {
  if (IsPostgresTarget(target)) {
    auto db = sql::PostgresConnection::Connect(target);
    if (!db.ok()) return db.status();
    if (absl::Status s = (*db)->Migrate(FleetStoreMigrations(sql::Dialect::kPostgres)); !s.ok()) {
      return s;
    }
    return std::unique_ptr<FleetStore>(new FleetStore(*std::move(db), nullptr, options));
  }
  sqlite::OpenOptions sqlite_options;
  sqlite_options.synchronous = options.synchronous;
  sqlite_options.vfs = options.vfs;
  sqlite_options.mode = 0600;  // it holds the config's env values
  auto db = sql::SqliteConnection::Open(target, sqlite_options);
  if (!db.ok()) return db.status();
  // A page cache of 16 MiB instead of SQLite's 2 MiB: a turn's writes touch the server and
  // attempt rows and the events' indexes all over; with the small cache, pages were spilled and
  // read back within one commit (measured: a quarter less CPU per ingested event).
  if (absl::Status s = (*db)->Exec("PRAGMA cache_size = -16384"); !s.ok()) return s;
  if (absl::Status s = (*db)->Migrate(FleetStoreMigrations(sql::Dialect::kSqlite)); !s.ok()) {
    return s;
  }
  sqlite::Database* sqlite = &(*db)->database();
  return std::unique_ptr<FleetStore>(new FleetStore(*std::move(db), sqlite, options));
}

absl::StatusOr<std::unique_ptr<FleetStore>> FleetStore::Open(
    const std::string& path, sqlite::OpenOptions::Synchronous synchronous, const std::string& vfs) {
  FleetStoreOptions options;
  options.synchronous = synchronous;
  options.vfs = vfs;
  return Open(path, options);
}

std::string ConfigDigest(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), md, &size, EVP_sha256(), nullptr) != 1) {
    // Only an OpenSSL without SHA-256 fails here: nothing this process can run without.
    log::Get(log::Component::kStore).critical("sha256 is not available");
    abort();
  }
  std::string out = "sha256:";
  for (unsigned int i = 0; i < size; ++i) absl::StrAppendFormat(&out, "%02x", md[i]);
  return out;
}

absl::StatusOr<int64_t> FleetStore::SaveConfig(const fleet::v1::FleetConfig& config,
                                               std::string_view source, std::string_view yaml,
                                               absl::Time now) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  auto st = Prepare(
      "INSERT INTO configs (created_at, source, yaml, config, digest) "
      "VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id");
  if (!st.ok()) return st.status();
  (*st)
      ->Bind(1, std::string_view(TimeText(now)))
      .Bind(2, source)
      .Bind(3, yaml)
      .BindBlob(4, config.SerializeAsString());
  if (yaml.empty()) {
    (*st)->BindNull(5);
  } else {
    (*st)->Bind(5, std::string_view(ConfigDigest(yaml)));
  }
  absl::StatusOr<int64_t> id = InsertedId(**st, "configs");
  if (!id.ok()) return id.status();
  if (absl::Status s = (*tx)->Commit(); !s.ok()) return s;
  return *id;
}

absl::StatusOr<std::optional<StoredConfigInfo>> FleetStore::LatestConfigInfo() {
  auto st = Prepare("SELECT id, source, digest, yaml FROM configs ORDER BY id DESC LIMIT 1");
  if (!st.ok()) return st.status();
  return ReadConfigInfo(**st);
}

absl::StatusOr<std::optional<StoredConfigInfo>> FleetStore::LastConfigFrom(
    std::string_view source) {
  auto st = Prepare(
      "SELECT id, source, digest, yaml FROM configs WHERE source = ?1 AND yaml != '' "
      "ORDER BY id DESC LIMIT 1");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, source);
  return ReadConfigInfo(**st);
}

absl::StatusOr<std::optional<StoredConfigInfo>> FleetStore::ReadConfigInfo(sql::Statement& st) {
  auto row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<StoredConfigInfo>();
  StoredConfigInfo info;
  info.version = st.ColumnInt(0);
  info.source = st.ColumnText(1);
  if (!st.ColumnIsNull(2)) {
    info.digest = st.ColumnText(2);
  } else if (const std::string yaml = st.ColumnText(3); !yaml.empty()) {
    info.digest = ConfigDigest(yaml);  // a row of a fleetd before the digest column
  }
  return std::optional<StoredConfigInfo>(std::move(info));
}

absl::StatusOr<std::optional<fleet::v1::FleetConfig>> FleetStore::LatestConfig() {
  auto st = Prepare("SELECT config FROM configs ORDER BY id DESC LIMIT 1");
  if (!st.ok()) return st.status();
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<fleet::v1::FleetConfig>();
  fleet::v1::FleetConfig c;
  if (!c.ParseFromString((*st)->ColumnBlob(0))) {
    return absl::DataLossError(
        absl::StrCat("database ", db_->name(), ": the stored config is unreadable"));
  }
  return std::optional<fleet::v1::FleetConfig>(std::move(c));
}

absl::StatusOr<int64_t> FleetStore::ContainerId(const std::string& host,
                                                const std::string& container) {
  const std::string name = absl::StrCat(host, "/", container);
  if (auto it = container_ids_.find(name); it != container_ids_.end()) return it->second;
  auto host_insert = Prepare("INSERT INTO hosts (name) VALUES (?1) ON CONFLICT(name) DO NOTHING");
  if (!host_insert.ok()) return host_insert.status();
  (*host_insert)->Bind(1, std::string_view(host));
  if (absl::Status s = (*host_insert)->Run(); !s.ok()) return s;
  auto insert =
      Prepare(absl::StrCat("INSERT INTO containers (host_id, ", ContainerIdColumn(db_->dialect()),
                           ", name) SELECT id, ?2, ?3 FROM hosts WHERE name = ?1 "
                           "ON CONFLICT(name) DO NOTHING"));
  if (!insert.ok()) return insert.status();
  (*insert)
      ->Bind(1, std::string_view(host))
      .Bind(2, std::string_view(container))
      .Bind(3, std::string_view(name));
  if (absl::Status s = (*insert)->Run(); !s.ok()) return s;
  auto select = Prepare("SELECT id FROM containers WHERE name = ?1");
  if (!select.ok()) return select.status();
  (*select)->Bind(1, std::string_view(name));
  auto row = (*select)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat("container ", name, " was not recorded"));
  const int64_t id = (*select)->ColumnInt(0);
  container_ids_[name] = id;
  return id;
}

absl::Status FleetStore::PutServerRow(const ServerRecord& s) {
  absl::StatusOr<int64_t> container = ContainerId(s.host, s.container);
  if (!container.ok()) return container.status();
  auto st = Prepare(
      "INSERT INTO servers (name, container_id, gpu, desired, removed, state, phase_detail, "
      "progress_step, progress_total, state_since, attempt_id, attempt_number, last_class, "
      "last_summary, reason, backoff_until, degraded, spec, policy) VALUES "
      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) "
      "ON CONFLICT(name) DO UPDATE SET container_id = excluded.container_id, gpu = excluded.gpu, "
      "desired = excluded.desired, removed = excluded.removed, state = excluded.state, "
      "phase_detail = excluded.phase_detail, progress_step = excluded.progress_step, "
      "progress_total = excluded.progress_total, state_since = excluded.state_since, "
      "attempt_id = excluded.attempt_id, attempt_number = excluded.attempt_number, "
      "last_class = excluded.last_class, last_summary = excluded.last_summary, "
      "reason = excluded.reason, backoff_until = excluded.backoff_until, "
      "degraded = excluded.degraded, spec = excluded.spec, policy = excluded.policy");
  if (!st.ok()) return st.status();
  (*st)
      ->Bind(1, std::string_view(s.name))
      .Bind(2, *container)
      .Bind(3, static_cast<int64_t>(s.gpu))
      .Bind(4, std::string_view(s.desired_running ? "running" : "stopped"))
      .Bind(5, static_cast<int64_t>(s.removed))
      .Bind(6, StateName(s.state))
      .Bind(7, std::string_view(s.phase_detail))
      .Bind(8, s.progress_step)
      .Bind(9, s.progress_total);
  BindTime(**st, 10, s.state_since);
  if (s.attempt_id.empty()) {
    (*st)->BindNull(11);
  } else {
    (*st)->Bind(11, std::string_view(s.attempt_id));
  }
  (*st)
      ->Bind(12, s.attempt_number)
      .Bind(13, std::string_view(s.last_class))
      .Bind(14, std::string_view(s.last_summary))
      .Bind(15, std::string_view(s.reason));
  BindTime(**st, 16, s.backoff_until);
  (*st)
      ->Bind(17, static_cast<int64_t>(s.degraded))
      .BindBlob(18, s.spec.SerializeAsString())
      .BindBlob(19, s.policy.SerializeAsString());
  return (*st)->Run();
}

absl::Status FleetStore::PutServerState(const ServerRecord& s) {
  auto st = Prepare(
      "UPDATE servers SET state = ?2, phase_detail = ?3, progress_step = ?4, progress_total = ?5, "
      "state_since = ?6, attempt_id = ?7, attempt_number = ?8, last_class = ?9, "
      "last_summary = ?10, reason = ?11, backoff_until = ?12, degraded = ?13 WHERE name = ?1");
  if (!st.ok()) return st.status();
  (*st)
      ->Bind(1, std::string_view(s.name))
      .Bind(2, StateName(s.state))
      .Bind(3, std::string_view(s.phase_detail))
      .Bind(4, s.progress_step)
      .Bind(5, s.progress_total);
  BindTime(**st, 6, s.state_since);
  if (s.attempt_id.empty()) {
    (*st)->BindNull(7);
  } else {
    (*st)->Bind(7, std::string_view(s.attempt_id));
  }
  (*st)
      ->Bind(8, s.attempt_number)
      .Bind(9, std::string_view(s.last_class))
      .Bind(10, std::string_view(s.last_summary))
      .Bind(11, std::string_view(s.reason));
  BindTime(**st, 12, s.backoff_until);
  (*st)->Bind(13, static_cast<int64_t>(s.degraded));
  if (absl::Status r = (*st)->Run(); !r.ok()) return r;
  if (db_->Changes() > 0) return absl::OkStatus();
  return PutServerRow(s);  // not recorded yet: the whole row
}

absl::Status FleetStore::PutServer(const ServerRecord& server) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  if (absl::Status s = PutServerRow(server); !s.ok()) return s;
  return (*tx)->Commit();
}

absl::StatusOr<std::vector<ServerRecord>> FleetStore::Servers() {
  auto st = Prepare(absl::StrCat(
      "SELECT s.name, h.name, c.", ContainerIdColumn(db_->dialect()),
      ", s.gpu, s.desired, s.removed, s.state, s.phase_detail, "
      "s.progress_step, s.progress_total, s.state_since, s.attempt_id, s.attempt_number, "
      "s.last_class, s.last_summary, s.reason, s.backoff_until, s.degraded, s.spec, s.policy "
      "FROM servers s JOIN containers c ON c.id = s.container_id JOIN hosts h ON h.id = "
      "c.host_id ORDER BY s.name"));
  if (!st.ok()) return st.status();
  std::vector<ServerRecord> out;
  while (true) {
    auto row = (*st)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    ServerRecord s;
    s.name = (*st)->ColumnText(0);
    s.host = (*st)->ColumnText(1);
    s.container = (*st)->ColumnText(2);
    s.gpu = static_cast<int32_t>((*st)->ColumnInt(3));
    s.desired_running = (*st)->ColumnText(4) == "running";
    s.removed = (*st)->ColumnInt(5) != 0;
    s.state = ParseServerState((*st)->ColumnText(6)).value_or(fleet::v1::SERVER_STATE_UNSPECIFIED);
    s.phase_detail = (*st)->ColumnText(7);
    s.progress_step = (*st)->ColumnInt(8);
    s.progress_total = (*st)->ColumnInt(9);
    s.state_since = ColumnTime(**st, 10);
    s.attempt_id = (*st)->ColumnIsNull(11) ? "" : (*st)->ColumnText(11);
    s.attempt_number = (*st)->ColumnInt(12);
    s.last_class = (*st)->ColumnText(13);
    s.last_summary = (*st)->ColumnText(14);
    s.reason = (*st)->ColumnText(15);
    s.backoff_until = ColumnTime(**st, 16);
    s.degraded = (*st)->ColumnInt(17) != 0;
    if (!s.spec.ParseFromString((*st)->ColumnBlob(18)) ||
        !s.policy.ParseFromString((*st)->ColumnBlob(19))) {
      return absl::DataLossError(
          absl::StrCat("database ", db_->name(), ": server ", s.name, " is unreadable"));
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<AttemptRecord> FleetStore::CreateAttempt(const std::string& server,
                                                        const std::string& trigger,
                                                        const fleet::v1::ServerSpec& spec,
                                                        absl::Time now) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  auto next = Prepare(
      "SELECT s.id, coalesce(max(a.number), 0) + 1 FROM servers s LEFT JOIN attempts a ON "
      "a.server_id = s.id WHERE s.name = ?1 GROUP BY s.id");
  if (!next.ok()) return next.status();
  (*next)->Bind(1, std::string_view(server));
  auto row = (*next)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("attempt: no server ", server));
  const int64_t server_id = (*next)->ColumnInt(0);
  AttemptRecord a;
  a.server = server;
  a.number = (*next)->ColumnInt(1);
  // Unique across daemon restarts and stores: the server, the number, and random bits.
  a.id = absl::StrCat(server, "#", a.number, "-", RandomHex(4));
  a.trigger = trigger;
  a.spec = spec;
  a.created_at = now;
  auto insert = Prepare(
      "INSERT INTO attempts (id, server_id, number, trigger, created_at, outcome, spec) VALUES "
      "(?1, ?2, ?3, ?4, ?5, 'pending', ?6)");
  if (!insert.ok()) return insert.status();
  (*insert)
      ->Bind(1, std::string_view(a.id))
      .Bind(2, server_id)
      .Bind(3, a.number)
      .Bind(4, std::string_view(trigger))
      .Bind(5, std::string_view(TimeText(now)))
      .BindBlob(6, spec.SerializeAsString());
  if (absl::Status s = (*insert)->Run(); !s.ok()) return s;
  if (absl::Status s = (*tx)->Commit(); !s.ok()) return s;
  return a;
}

absl::Status FleetStore::PutAttemptRow(const AttemptRecord& a) {
  // The whole row when it is not there (a turn whose commit failed took it away with the rest of
  // its writes, and the turn is written again), else its changing columns: never a write that
  // silently changes nothing. A server without a row, or a number another attempt holds, fails.
  auto st = Prepare(
      "INSERT INTO attempts (id, launched_at, ended_at, outcome, exit_code, signal, "
      "exit_status_unknown, diagnosis_class, root_cause_line, summary, toolchain_fix, "
      "time_to_ready_ms, diagnosis, server_id, number, trigger, created_at, spec, confidence) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
      "(SELECT id FROM servers WHERE name = ?14), ?15, ?16, ?17, ?18, ?19) "
      "ON CONFLICT(id) DO UPDATE SET launched_at = excluded.launched_at, "
      "ended_at = excluded.ended_at, outcome = excluded.outcome, exit_code = excluded.exit_code, "
      "signal = excluded.signal, exit_status_unknown = excluded.exit_status_unknown, "
      "diagnosis_class = excluded.diagnosis_class, root_cause_line = excluded.root_cause_line, "
      "summary = excluded.summary, toolchain_fix = excluded.toolchain_fix, "
      "time_to_ready_ms = excluded.time_to_ready_ms, diagnosis = excluded.diagnosis, "
      "confidence = excluded.confidence");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, std::string_view(a.id));
  BindTime(**st, 2, a.launched_at);
  BindTime(**st, 3, a.ended_at);
  (*st)->Bind(4, OutcomeName(a.outcome));
  const bool exited = a.exit.exited();
  if (exited) {
    (*st)->Bind(5, static_cast<int64_t>(a.exit.exit_code()));
  } else {
    (*st)->BindNull(5);
  }
  if (!exited && a.exit.signal() != 0) {
    (*st)->Bind(6, static_cast<int64_t>(a.exit.signal()));
  } else {
    (*st)->BindNull(6);
  }
  (*st)
      ->Bind(7, static_cast<int64_t>(a.exit.status_unknown()))
      .Bind(8, std::string_view(a.diagnosis_class))
      .Bind(9, a.diagnosis.root_cause_line())
      .Bind(10, std::string_view(a.summary))
      .Bind(11, static_cast<int64_t>(a.diagnosis.toolchain_fix()));
  if (a.time_to_ready_ms >= 0) {
    (*st)->Bind(12, a.time_to_ready_ms);
  } else {
    (*st)->BindNull(12);
  }
  if (a.diagnosis.diagnosis_class().empty()) {
    (*st)->BindNull(13);
  } else {
    (*st)->BindBlob(13, a.diagnosis.SerializeAsString());
  }
  (*st)
      ->Bind(14, std::string_view(a.server))
      .Bind(15, a.number)
      .Bind(16, std::string_view(a.trigger))
      .Bind(17, std::string_view(TimeText(a.created_at)))
      .BindBlob(18, a.spec.SerializeAsString())
      .Bind(19,
            a.diagnosis.confidence() == "low" ? std::string_view("low") : std::string_view("high"));
  if (absl::Status s = (*st)->Run(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("attempt ", a.id, ": ", s.message()));
  }
  if (db_->Changes() == 0) {
    return absl::InternalError(absl::StrCat("attempt ", a.id, ": its row was not written"));
  }
  return absl::OkStatus();
}

absl::Status FleetStore::PutAttempt(const AttemptRecord& attempt) {
  // A scope of its own: on PostgreSQL a failed statement would otherwise spoil an open Batch.
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  if (absl::Status s = PutAttemptRow(attempt); !s.ok()) return s;
  return (*tx)->Commit();
}

namespace {

constexpr char kAttemptColumns[] =
    "SELECT a.id, s.name, a.number, a.trigger, a.created_at, a.launched_at, a.ended_at, "
    "a.outcome, a.exit_code, a.signal, a.exit_status_unknown, a.diagnosis_class, a.summary, "
    "a.time_to_ready_ms, a.spec, a.diagnosis, a.confidence FROM attempts a JOIN servers s ON "
    "s.id = a.server_id ";

absl::StatusOr<AttemptRecord> ReadAttempt(const sql::Statement& st) {
  AttemptRecord a;
  a.id = st.ColumnText(0);
  a.server = st.ColumnText(1);
  a.number = st.ColumnInt(2);
  a.trigger = st.ColumnText(3);
  a.created_at = ColumnTime(st, 4);
  a.launched_at = ColumnTime(st, 5);
  a.ended_at = ColumnTime(st, 6);
  a.outcome =
      ParseAttemptOutcome(st.ColumnText(7)).value_or(fleet::v1::ATTEMPT_OUTCOME_UNSPECIFIED);
  if (!st.ColumnIsNull(8)) {
    a.exit.set_exited(true);
    a.exit.set_exit_code(static_cast<int32_t>(st.ColumnInt(8)));
  }
  if (!st.ColumnIsNull(9)) a.exit.set_signal(static_cast<int32_t>(st.ColumnInt(9)));
  a.exit.set_status_unknown(st.ColumnInt(10) != 0);
  a.diagnosis_class = st.ColumnText(11);
  a.summary = st.ColumnText(12);
  a.time_to_ready_ms = st.ColumnIsNull(13) ? -1 : st.ColumnInt(13);
  if (!a.spec.ParseFromString(st.ColumnBlob(14)) ||
      (!st.ColumnIsNull(15) && !a.diagnosis.ParseFromString(st.ColumnBlob(15)))) {
    return absl::DataLossError(absl::StrCat("attempt ", a.id, " is unreadable"));
  }
  // The column is the record (a row of a fleetd before schema version 4 reads 'high').
  if (!a.diagnosis_class.empty() || !st.ColumnIsNull(15)) {
    a.diagnosis.set_confidence(st.ColumnText(16));
  }
  return a;
}

}  // namespace

absl::StatusOr<std::vector<AttemptRecord>> FleetStore::Attempts(const std::string& server) {
  auto st = Prepare(absl::StrCat(kAttemptColumns, server.empty() ? "" : "WHERE s.name = ?1 ",
                                 "ORDER BY s.name, a.number"));
  if (!st.ok()) return st.status();
  if (!server.empty()) (*st)->Bind(1, std::string_view(server));
  std::vector<AttemptRecord> out;
  while (true) {
    auto row = (*st)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    auto a = ReadAttempt(**st);
    if (!a.ok()) return a.status();
    out.push_back(*std::move(a));
  }
  return out;
}

absl::StatusOr<std::optional<AttemptRecord>> FleetStore::Attempt(const std::string& server,
                                                                 int64_t number) {
  auto st = Prepare(absl::StrCat(kAttemptColumns, "WHERE s.name = ?1 ",
                                 number > 0 ? "AND a.number = ?2 " : "",
                                 "ORDER BY a.number DESC LIMIT 1"));
  if (!st.ok()) return st.status();
  (*st)->Bind(1, std::string_view(server));
  if (number > 0) (*st)->Bind(2, number);
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<AttemptRecord>();
  auto a = ReadAttempt(**st);
  if (!a.ok()) return a.status();
  return std::optional<AttemptRecord>(*std::move(a));
}

absl::StatusOr<fleet::v1::Plan> FleetStore::CreateRemediation(fleet::v1::Plan plan,
                                                              absl::Time now) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  const size_t slash = plan.container().find('/');
  if (slash == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("remediation: bad container ", plan.container()));
  }
  absl::StatusOr<int64_t> container =
      ContainerId(plan.container().substr(0, slash), plan.container().substr(slash + 1));
  if (!container.ok()) return container.status();
  const int64_t ns = absl::ToUnixNanos(now);
  plan.mutable_created_at()->set_seconds(ns / 1000000000);
  plan.mutable_created_at()->set_nanos(static_cast<int32_t>(ns % 1000000000));
  auto insert = Prepare(
      "INSERT INTO remediations (container_id, trigger, diagnosis_class, status, reason, "
      "created_at, plan) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id");
  if (!insert.ok()) return insert.status();
  (*insert)
      ->Bind(1, *container)
      .Bind(2, std::string_view(plan.trigger()))
      .Bind(3, std::string_view(plan.diagnosis_class()))
      .Bind(4, PlanStatusText(plan))
      .Bind(5, std::string_view(plan.summary()))
      .Bind(6, std::string_view(TimeText(now)))
      .BindBlob(7, std::string_view(""));  // the plan is written by UpdateRemediation below
  absl::StatusOr<int64_t> inserted = InsertedId(**insert, "remediations");
  if (!inserted.ok()) return inserted.status();
  const int64_t remediation_id = *inserted;
  plan.set_id(absl::StrCat(remediation_id));
  auto action =
      Prepare("INSERT INTO actions (remediation_id, seq, kind, action) VALUES (?1, ?2, ?3, ?4)");
  if (!action.ok()) return action.status();
  for (int i = 0; i < plan.actions_size(); ++i) {
    const fleet::v1::Action& a = plan.actions(i).action();
    std::string kind = "none";
    if (const auto* field =
            a.GetReflection()->GetOneofFieldDescriptor(a, a.GetDescriptor()->oneof_decl(0))) {
      kind = field->name();
    }
    (*action)
        ->Bind(1, remediation_id)
        .Bind(2, static_cast<int64_t>(i + 1))
        .Bind(3, std::string_view(kind))
        .BindBlob(4, a.SerializeAsString());
    if (absl::Status s = (*action)->Run(); !s.ok()) return s;
    (*action)->Reset();
  }
  if (!plan.attempt_id().empty()) {
    if (absl::Status s = LinkRemediationAttempt(plan.id(), plan.attempt_id()); !s.ok()) return s;
  }
  if (absl::Status s = UpdateRemediation(plan); !s.ok()) return s;
  if (absl::Status s = (*tx)->Commit(); !s.ok()) return s;
  return plan;
}

absl::Status FleetStore::UpdateRemediation(const fleet::v1::Plan& plan) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  int64_t id = 0;
  if (!absl::SimpleAtoi(plan.id(), &id)) {
    return absl::InvalidArgumentError(absl::StrCat("remediation: bad id '", plan.id(), "'"));
  }
  auto st = Prepare(
      "UPDATE remediations SET status = ?2, reason = ?3, applied_at = ?4, plan = ?5 WHERE id = ?1");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, id).Bind(2, PlanStatusText(plan));
  (*st)->Bind(
      3, std::string_view(plan.outcome_reason().empty() ? plan.summary() : plan.outcome_reason()));
  if (plan.has_applied_at()) {
    BindTime(**st, 4,
             absl::FromUnixSeconds(plan.applied_at().seconds()) +
                 absl::Nanoseconds(plan.applied_at().nanos()));
  } else {
    (*st)->BindNull(4);
  }
  (*st)->BindBlob(5, plan.SerializeAsString());
  if (absl::Status s = (*st)->Run(); !s.ok()) return s;
  // The results, by position: the plan's actions, then a rollback's (seq after them).
  auto result = Prepare(
      "INSERT INTO actions (remediation_id, seq, kind, ok, message, output_tail, took_ms, action) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (remediation_id, seq) DO UPDATE SET "
      "ok = excluded.ok, message = excluded.message, output_tail = excluded.output_tail, "
      "took_ms = excluded.took_ms");
  if (!result.ok()) return result.status();
  for (int i = 0; i < plan.results_size(); ++i) {
    const fleet::v1::ActionResult& r = plan.results(i);
    std::string kind = "none";
    if (const auto* field = r.action().GetReflection()->GetOneofFieldDescriptor(
            r.action(), r.action().GetDescriptor()->oneof_decl(0))) {
      kind = field->name();
    }
    (*result)
        ->Bind(1, id)
        .Bind(2, static_cast<int64_t>(i + 1))
        .Bind(3, std::string_view(kind))
        .Bind(4, static_cast<int64_t>(r.ok() ? 1 : 0))
        .Bind(5, std::string_view(r.message()))
        .Bind(6, std::string_view(r.output_tail()))
        .Bind(7, r.took().seconds() * 1000 + r.took().nanos() / 1000000)
        .BindBlob(8, r.action().SerializeAsString());
    if (absl::Status s = (*result)->Run(); !s.ok()) return s;
    (*result)->Reset();
  }
  return (*tx)->Commit();
}

absl::Status FleetStore::LinkRemediationAttempt(const std::string& remediation_id,
                                                const std::string& attempt_id) {
  int64_t id = 0;
  if (!absl::SimpleAtoi(remediation_id, &id)) {
    return absl::InvalidArgumentError(absl::StrCat("remediation: bad id '", remediation_id, "'"));
  }
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  auto st = Prepare(
      "INSERT INTO remediation_attempts (remediation_id, attempt_id) VALUES (?1, ?2) "
      "ON CONFLICT DO NOTHING");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, id).Bind(2, std::string_view(attempt_id));
  if (absl::Status s = (*st)->Run(); !s.ok()) return s;
  return (*tx)->Commit();
}

namespace {

absl::StatusOr<fleet::v1::Plan> ReadPlan(const sql::Statement& st) {
  fleet::v1::Plan plan;
  if (!plan.ParseFromString(st.ColumnBlob(1))) {
    return absl::DataLossError(absl::StrCat("remediation ", st.ColumnInt(0), ": plan unreadable"));
  }
  plan.set_id(absl::StrCat(st.ColumnInt(0)));
  // The column is the plan's status (the blob's copy may be older); a spelling this build does
  // not know stays readable as it is.
  const std::string status = st.ColumnText(2);
  if (std::optional<fleet::v1::PlanStatus> known = ParsePlanStatus(status)) {
    SetPlanStatus(*known, &plan);
  } else {
    plan.set_plan_status(fleet::v1::PLAN_STATUS_UNSPECIFIED);
    plan.set_status(status);
  }
  return plan;
}

}  // namespace

absl::StatusOr<std::vector<fleet::v1::Plan>> FleetStore::Remediations(
    const std::string& container) {
  auto st = Prepare(
      absl::StrCat("SELECT r.id, r.plan, r.status FROM remediations r JOIN containers c ON c.id = "
                   "r.container_id ",
                   container.empty() ? "" : "WHERE c.name = ?1 ", "ORDER BY r.id"));
  if (!st.ok()) return st.status();
  if (!container.empty()) (*st)->Bind(1, std::string_view(container));
  std::vector<fleet::v1::Plan> out;
  while (true) {
    auto row = (*st)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    auto plan = ReadPlan(**st);
    if (!plan.ok()) return plan.status();
    out.push_back(*std::move(plan));
  }
  return out;
}

absl::StatusOr<std::optional<fleet::v1::Plan>> FleetStore::Remediation(const std::string& id) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(id, &n)) return std::optional<fleet::v1::Plan>();
  auto st = Prepare("SELECT id, plan, status FROM remediations WHERE id = ?1");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, n);
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<fleet::v1::Plan>();
  auto plan = ReadPlan(**st);
  if (!plan.ok()) return plan.status();
  return std::optional<fleet::v1::Plan>(*std::move(plan));
}

absl::StatusOr<AgentCursor> FleetStore::Cursor(const std::string& container) {
  auto st = Prepare(
      "SELECT k.incarnation, k.sequence FROM agent_cursors k JOIN containers c ON c.id = "
      "k.container_id WHERE c.name = ?1");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, std::string_view(container));
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  AgentCursor cursor;
  if (*row) {
    cursor.incarnation = (*st)->ColumnText(0);
    cursor.sequence = static_cast<uint64_t>((*st)->ColumnInt(1));
  }
  return cursor;
}

namespace {
// Events per INSERT statement in IngestBatch (10 parameters each: SQLite allows 32766).
constexpr size_t kEventsPerInsert = 32;
}  // namespace

absl::Status FleetStore::IngestBatch(const std::string& container,
                                     const std::vector<fleet::v1::AgentEvent>& events,
                                     const std::vector<ServerRecord>& servers,
                                     const std::vector<AttemptRecord>& attempts,
                                     const AgentCursor& cursor, absl::Time now) {
  const size_t slash = container.find('/');
  if (slash == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("container name '", container, "'"));
  }
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  absl::StatusOr<int64_t> container_id =
      ContainerId(container.substr(0, slash), container.substr(slash + 1));
  if (!container_id.ok()) return container_id.status();
  if (!events.empty()) {
    // Several events per statement: on PostgreSQL each statement is a round trip, which one per
    // event made the ingest's cost (BENCHMARKS.md, "SQLite and PostgreSQL side by side"). Each row
    // is still skipped on its own when stored already.
    const std::string received = TimeText(now);
    for (size_t first = 0; first < events.size(); first += kEventsPerInsert) {
      const size_t rows = std::min(kEventsPerInsert, events.size() - first);
      std::string sql =
          "INSERT INTO events (container_id, incarnation, sequence, received_at, at, server, "
          "attempt_id, kind, summary, event) VALUES ";
      for (size_t r = 0; r < rows; ++r) {
        const size_t p = r * 10;
        absl::StrAppend(&sql, r == 0 ? "" : ", ", "(?", p + 1, ", ?", p + 2, ", ?", p + 3, ", ?",
                        p + 4, ", ?", p + 5, ", ?", p + 6, ", ?", p + 7, ", ?", p + 8, ", ?", p + 9,
                        ", ?", p + 10, ")");
      }
      sql += " ON CONFLICT(container_id, incarnation, sequence) DO NOTHING";
      auto insert = Prepare(sql);
      if (!insert.ok()) return insert.status();
      for (size_t r = 0; r < rows; ++r) {
        const fleet::v1::AgentEvent& e = events[first + r];
        const int p = static_cast<int>(r * 10);
        (*insert)
            ->Bind(p + 1, *container_id)
            .Bind(p + 2, std::string_view(e.incarnation()))
            .Bind(p + 3, static_cast<int64_t>(e.sequence()))
            .Bind(p + 4, std::string_view(received))
            .Bind(p + 5, std::string_view(TimeText(absl::FromUnixSeconds(e.at().seconds()) +
                                                   absl::Nanoseconds(e.at().nanos()))))
            .Bind(p + 6,
                  std::string_view(absl::StrCat(e.server().host(), "/", e.server().container(),
                                                "/gpu", e.server().gpu())))
            .Bind(p + 7, std::string_view(e.attempt_id()))
            .Bind(p + 8, std::string_view(EventKind(e)))
            .Bind(p + 9, std::string_view(EventSummary(e)))
            .BindBlob(p + 10, e.SerializeAsString());
      }
      if (absl::Status s = (*insert)->Run(); !s.ok()) return s;
    }
  }
  for (const ServerRecord& s : servers) {
    if (absl::Status st = PutServerState(s); !st.ok()) return st;
  }
  for (const AttemptRecord& a : attempts) {
    if (absl::Status st = PutAttemptRow(a); !st.ok()) return st;
  }
  auto put = Prepare(
      "INSERT INTO agent_cursors (container_id, incarnation, sequence, updated_at) VALUES "
      "(?1, ?2, ?3, ?4) ON CONFLICT(container_id) DO UPDATE SET incarnation = "
      "excluded.incarnation, sequence = excluded.sequence, updated_at = excluded.updated_at");
  if (!put.ok()) return put.status();
  (*put)
      ->Bind(1, *container_id)
      .Bind(2, std::string_view(cursor.incarnation))
      .Bind(3, static_cast<int64_t>(cursor.sequence))
      .Bind(4, std::string_view(TimeText(now)));
  if (absl::Status s = (*put)->Run(); !s.ok()) return s;
  return (*tx)->Commit();
}

absl::Status FleetStore::RecordGap(const std::string& container, const AgentCursor& from,
                                   const AgentCursor& to, absl::Time now) {
  const size_t slash = container.find('/');
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  absl::StatusOr<int64_t> container_id =
      ContainerId(container.substr(0, slash), container.substr(slash + 1));
  if (!container_id.ok()) return container_id.status();
  auto insert = Prepare(
      "INSERT INTO events (container_id, incarnation, sequence, received_at, kind, summary) "
      "VALUES (?1, ?2, ?3, ?4, 'gap', ?5) ON CONFLICT DO NOTHING");
  if (!insert.ok()) return insert.status();
  // Recorded under the new position with a negative sequence, so it never collides with a real
  // event: the gap sits between `from` and `to`.
  (*insert)
      ->Bind(1, *container_id)
      .Bind(2, std::string_view(to.incarnation))
      .Bind(3, -static_cast<int64_t>(to.sequence) - 1)
      .Bind(4, std::string_view(TimeText(now)))
      .Bind(5, std::string_view(absl::StrCat("resynchronised: the agent could not replay after ",
                                             from.incarnation.empty() ? "(none)" : from.incarnation,
                                             "#", from.sequence, "; continuing at ", to.incarnation,
                                             "#", to.sequence)));
  if (absl::Status s = (*insert)->Run(); !s.ok()) return s;
  return (*tx)->Commit();
}

absl::Status FleetStore::PruneEvents(absl::Time older_than, int64_t max_events) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  for (const char* sql :
       {"DELETE FROM events WHERE received_at < ?1", "DELETE FROM fleet_events WHERE at < ?1",
        "DELETE FROM deliveries WHERE status != 'pending' AND created_at < ?1"}) {
    auto old = Prepare(sql);
    if (!old.ok()) return old.status();
    (*old)->Bind(1, std::string_view(TimeText(older_than)));
    if (absl::Status s = (*old)->Run(); !s.ok()) return s;
  }
  for (const char* sql :
       {"DELETE FROM events WHERE id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?1)",
        "DELETE FROM fleet_events WHERE idx <= "
        "(SELECT idx FROM fleet_events ORDER BY idx DESC LIMIT 1 OFFSET ?1)"}) {
    auto excess = Prepare(sql);
    if (!excess.ok()) return excess.status();
    (*excess)->Bind(1, max_events);
    if (absl::Status s = (*excess)->Run(); !s.ok()) return s;
  }
  return (*tx)->Commit();
}

}  // namespace fleet::daemon
