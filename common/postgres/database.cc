#include "common/postgres/database.h"

#include <libpq-fe.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/string_view.h"
#include "common/log/log.h"
#include "common/postgres/conninfo.h"
#include "common/postgres/placeholders.h"

namespace fleet::postgres {

void ResultFree::operator()(pg_result* result) const { PQclear(result); }

namespace {

constexpr Oid kByteaOid = 17;
constexpr Oid kBoolOid = 16;
// The advisory lock Migrate holds: any constant, the same in every binary ("flee" in ASCII).
constexpr int64_t kMigrationLock = 0x666c6565;

std::string Trimmed(const char* text) {
  return text == nullptr ? std::string() : std::string(absl::StripTrailingAsciiWhitespace(text));
}

std::string Snippet(std::string_view sql) { return std::string(sql.substr(0, 60)); }

// Notices (a table that already exists, a WARNING) go to the store's logger, not libpq's stderr.
void ReceiveNotice(void* arg, const PGresult* result) {
  const auto* target = static_cast<const std::string*>(arg);
  const char* severity = PQresultErrorField(result, PG_DIAG_SEVERITY_NONLOCALIZED);
  const std::string message = Trimmed(PQresultErrorMessage(result));
  if (severity != nullptr && std::string_view(severity) == "WARNING") {
    log::Get(log::Component::kStore).warn("postgres {}: {}", *target, message);
  } else {
    log::Get(log::Component::kStore).debug("postgres {}: {}", *target, message);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> Database::Connect(std::string_view conninfo) {
  const std::string copy(conninfo);
  std::string target = RedactConninfo(conninfo);
  std::vector<std::string> secrets = ConninfoSecrets(conninfo);
  // dbname is expanded as a connection string; what it sets wins over the keywords before it.
  const char* keywords[] = {"connect_timeout", "dbname", nullptr};
  const char* values[] = {"10", copy.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError("postgres: out of memory");
  std::unique_ptr<Database> db(new Database(conn, std::move(target), std::move(secrets)));
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = ScrubSecrets(
        absl::StrCat("postgres ", db->target_, ": connect: ", Trimmed(PQerrorMessage(conn))),
        db->secrets_);
    if (PQconnectionNeedsPassword(conn) != 0) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  PQsetNoticeReceiver(conn, ReceiveNotice, &db->target_);
  return db;
}

Database::~Database() { PQfinish(conn_); }

absl::Status Database::Error(const pg_result* result, std::string_view what) const {
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = state != nullptr ? state : "";
  std::string detail = result != nullptr
                           ? Trimmed(PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY))
                           : std::string();
  if (detail.empty()) detail = Trimmed(PQerrorMessage(conn_));
  const std::string message =
      ScrubSecrets(absl::StrCat("postgres ", target_, ": ", AsAbsl(what), ": ", detail,
                                sqlstate.empty() ? "" : absl::StrCat(" (", sqlstate, ")")),
                   secrets_);
  const std::string_view cls = std::string_view(sqlstate).substr(0, 2);
  if (IsBroken() || cls == "08" || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03") {
    return absl::UnavailableError(message);
  }
  if (sqlstate == "23505") return absl::AlreadyExistsError(message);
  if (cls == "23") return absl::FailedPreconditionError(message);
  if (sqlstate == "40001" || sqlstate == "40P01") return absl::AbortedError(message);
  if (sqlstate == "25P02") return absl::FailedPreconditionError(message);
  if (cls == "22") return absl::InvalidArgumentError(message);
  if (cls == "53") return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

bool Database::IsBroken() const { return PQstatus(conn_) == CONNECTION_BAD; }

absl::Status Database::Reconnect() {
  prepared_.clear();
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) {
    return absl::UnavailableError(ScrubSecrets(
        absl::StrCat("postgres ", target_, ": reconnect: ", Trimmed(PQerrorMessage(conn_))),
        secrets_));
  }
  log::Get(log::Component::kStore).info("postgres {}: reconnected", target_);
  return absl::OkStatus();
}

absl::StatusOr<Result> Database::Query(std::string_view sql, std::string_view what) {
  const std::string copy(sql);
  Result result(PQexec(conn_, copy.c_str()));
  const ExecStatusType status =
      result != nullptr ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return Error(result.get(), what);
  int64_t changes = 0;
  changes_ = absl::SimpleAtoi(PQcmdTuples(result.get()), &changes) ? changes : 0;
  return result;
}

absl::Status Database::Exec(std::string_view sql) {
  return Query(sql, absl::StrCat("exec '", Snippet(sql), "'")).status();
}

absl::StatusOr<Statement> Database::Prepare(std::string_view sql) {
  absl::StatusOr<TranslatedSql> translated = TranslatePlaceholders(sql);
  if (!translated.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "postgres ", target_, ": prepare '", Snippet(sql), "': ", translated.status().message()));
  }
  Statement statement(this, std::move(translated->sql), translated->param_count);
  // Prepared now so that a mistake in the SQL shows where the statement is made.
  FLEET_RETURN_IF_ERROR(PreparedName(statement.sql_).status());
  return statement;
}

absl::StatusOr<std::string> Database::PreparedName(const std::string& sql) {
  if (auto it = prepared_.find(sql); it != prepared_.end()) return it->second;
  std::string name = absl::StrCat("fleet_", next_statement_++);
  Result result(PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr));
  if (result == nullptr || PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
    return Error(result.get(), absl::StrCat("prepare '", Snippet(sql), "'"));
  }
  prepared_.emplace(sql, name);
  return name;
}

absl::StatusOr<int64_t> Database::SchemaVersion() {
  // Two queries: a statement naming a missing table fails when parsed, whatever CASE says.
  FLEET_ASSIGN_OR_RETURN(
      Result exists, Query("SELECT to_regclass('schema_version') IS NOT NULL", "schema version"));
  if (PQntuples(exists.get()) != 1 || std::string_view(PQgetvalue(exists.get(), 0, 0)) != "t") {
    return 0;
  }
  FLEET_ASSIGN_OR_RETURN(Result result,
                         Query("SELECT version FROM schema_version", "schema version"));
  int64_t version = 0;
  if (PQntuples(result.get()) == 1 && PQgetisnull(result.get(), 0, 0) == 0 &&
      !absl::SimpleAtoi(PQgetvalue(result.get(), 0, 0), &version)) {
    return absl::DataLossError(absl::StrCat("postgres ", target_, ": schema_version unreadable"));
  }
  return version;
}

absl::Status Database::Migrate(const std::vector<Migration>& migrations) {
  const auto known = static_cast<int64_t>(migrations.size());
  while (true) {
    FLEET_ASSIGN_OR_RETURN(std::unique_ptr<Transaction> tx, Transaction::Begin(*this));
    FLEET_RETURN_IF_ERROR(Exec(absl::StrCat("SELECT pg_advisory_xact_lock(", kMigrationLock, ")")));
    FLEET_RETURN_IF_ERROR(
        Exec("CREATE TABLE IF NOT EXISTS schema_version (one boolean PRIMARY KEY DEFAULT true "
             "CHECK (one), version bigint NOT NULL)"));
    FLEET_RETURN_IF_ERROR(
        Exec("INSERT INTO schema_version (version) VALUES (0) ON CONFLICT DO NOTHING"));
    FLEET_ASSIGN_OR_RETURN(const int64_t version, SchemaVersion());
    if (version > known) {
      return absl::FailedPreconditionError(
          absl::StrCat("postgres ", target_, ": schema version ", version,
                       " is newer than this binary knows (", known, ")"));
    }
    if (version == known) return tx->Commit();
    FLEET_RETURN_IF_ERROR(migrations[static_cast<size_t>(version)](*this));
    FLEET_RETURN_IF_ERROR(Exec(absl::StrCat("UPDATE schema_version SET version = ", version + 1)));
    FLEET_RETURN_IF_ERROR(tx->Commit());
    log::Get(log::Component::kStore)
        .info("postgres {}: schema version {} to {}", target_, version, version + 1);
  }
}

Statement::Param* Statement::ParamAt(int index) {
  if (index < 1 || index > static_cast<int>(params_.size())) {
    if (bind_status_.ok()) {
      bind_status_ = absl::InvalidArgumentError(
          absl::StrCat("postgres ", db_->target_, ": bind index ", index, " out of range (",
                       params_.size(), " parameters) in '", Snippet(sql_), "'"));
    }
    return nullptr;
  }
  return &params_[static_cast<size_t>(index - 1)];
}

Statement& Statement::Bind(int index, int64_t value) {
  if (Param* p = ParamAt(index)) *p = {Param::Kind::kText, absl::StrCat(value)};
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  Param* p = ParamAt(index);
  if (p == nullptr) return *this;
  if (text.find('\0') != std::string_view::npos) {
    if (bind_status_.ok()) {
      bind_status_ =
          absl::InvalidArgumentError(absl::StrCat("postgres ", db_->target_, ": bind ", index,
                                                  ": text with a NUL byte (PostgreSQL text "
                                                  "cannot hold one; bind it as a blob) in '",
                                                  Snippet(sql_), "'"));
    }
    return *this;
  }
  *p = {Param::Kind::kText, std::string(text)};
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  if (Param* p = ParamAt(index)) *p = {Param::Kind::kBinary, std::string(bytes)};
  return *this;
}

Statement& Statement::BindNull(int index) {
  if (Param* p = ParamAt(index)) *p = {};
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (result_ == nullptr) {
    if (!bind_status_.ok()) return bind_status_;
    FLEET_ASSIGN_OR_RETURN(const std::string name, db_->PreparedName(sql_));
    std::vector<const char*> values(params_.size());
    std::vector<int> lengths(params_.size());
    std::vector<int> formats(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const Param& p = params_[i];
      values[i] = p.kind == Param::Kind::kNull ? nullptr : p.value.c_str();
      lengths[i] = static_cast<int>(p.value.size());
      formats[i] = p.kind == Param::Kind::kBinary ? 1 : 0;
    }
    Result result(PQexecPrepared(db_->conn_, name.c_str(), static_cast<int>(params_.size()),
                                 values.data(), lengths.data(), formats.data(),
                                 /*resultFormat=*/0));
    const ExecStatusType status =
        result != nullptr ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      return db_->Error(result.get(), absl::StrCat("run '", Snippet(sql_), "'"));
    }
    int64_t changes = 0;
    db_->changes_ = absl::SimpleAtoi(PQcmdTuples(result.get()), &changes) ? changes : 0;
    result_ = std::move(result);
    row_ = -1;
  }
  if (row_ < PQntuples(result_.get())) ++row_;
  return row_ < PQntuples(result_.get());
}

absl::Status Statement::Run() {
  FLEET_RETURN_IF_ERROR(Step().status());
  row_ = PQntuples(result_.get());
  return absl::OkStatus();
}

void Statement::Reset() {
  for (Param& p : params_) p = {};
  bind_status_ = absl::OkStatus();
  result_.reset();
  row_ = -1;
}

int64_t Statement::Changes() const {
  int64_t changes = 0;
  return result_ != nullptr && absl::SimpleAtoi(PQcmdTuples(result_.get()), &changes) ? changes : 0;
}

const char* Statement::Value(int index) const {
  if (result_ == nullptr || row_ < 0 || row_ >= PQntuples(result_.get()) || index < 0 ||
      index >= PQnfields(result_.get()) || PQgetisnull(result_.get(), row_, index) != 0) {
    return nullptr;
  }
  return PQgetvalue(result_.get(), row_, index);
}

int64_t Statement::ColumnInt(int index) const {
  const char* value = Value(index);
  if (value == nullptr) return 0;
  if (PQftype(result_.get(), index) == kBoolOid) return *value == 't' ? 1 : 0;
  int64_t n = 0;
  return absl::SimpleAtoi(value, &n) ? n : 0;
}

std::string Statement::ColumnText(int index) const {
  const char* value = Value(index);
  if (value == nullptr) return std::string();
  return std::string(value, static_cast<size_t>(PQgetlength(result_.get(), row_, index)));
}

std::string Statement::ColumnBlob(int index) const {
  const char* value = Value(index);
  if (value == nullptr) return std::string();
  if (PQftype(result_.get(), index) != kByteaOid) return ColumnText(index);
  size_t length = 0;
  unsigned char* bytes = PQunescapeBytea(reinterpret_cast<const unsigned char*>(value), &length);
  if (bytes == nullptr) return std::string();
  std::string out(reinterpret_cast<const char*>(bytes), length);
  PQfreemem(bytes);
  return out;
}

bool Statement::ColumnIsNull(int index) const {
  return result_ == nullptr || row_ < 0 || row_ >= PQntuples(result_.get()) ||
         PQgetisnull(result_.get(), row_, index) != 0;
}

absl::StatusOr<std::unique_ptr<Transaction>> Transaction::Begin(Database& db, Isolation isolation) {
  FLEET_RETURN_IF_ERROR(db.Exec(
      isolation == Isolation::kSerializable ? "BEGIN ISOLATION LEVEL SERIALIZABLE" : "BEGIN"));
  return std::unique_ptr<Transaction>(new Transaction(db));
}

Transaction::~Transaction() {
  if (!done_ && !db_.IsBroken()) db_.Exec("ROLLBACK").IgnoreError();
}

absl::Status Transaction::Commit() {
  done_ = true;
  return db_.Commit();
}

absl::Status Database::Commit() {
  if (PQtransactionStatus(conn_) == PQTRANS_INERROR) {
    Exec("ROLLBACK").IgnoreError();
    return absl::FailedPreconditionError(absl::StrCat(
        "postgres ", target_, ": commit: a statement of the transaction failed; rolled back"));
  }
  FLEET_ASSIGN_OR_RETURN(Result result, Query("COMMIT", "commit"));
  if (std::string_view(PQcmdStatus(result.get())) != "COMMIT") {
    return absl::FailedPreconditionError(
        absl::StrCat("postgres ", target_, ": commit: the server rolled back"));
  }
  return absl::OkStatus();
}

}  // namespace fleet::postgres
