#include "common/sqlite/database.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"
#include "common/sqlite/power_loss_vfs.h"

namespace fleet::sqlite {

absl::Status Database::Error(int rc, std::string_view what) const {
  const std::string message =
      absl::StrCat("database ", path_, ": ", AsAbsl(what), ": ",
                   db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE) {
        return absl::AlreadyExistsError(message);
      }
      return absl::FailedPreconditionError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(message);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

// Gives `path` the mode `mode`: created with it when missing (so that SQLite, which creates its
// -wal and -shm files with the database file's mode, never makes a readable one), changed to it
// when it is there. `create` false: a missing file is left missing.
absl::Status EnsureMode(const std::string& path, int mode, bool create) {
  const int fd =
      open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), static_cast<mode_t>(mode));
  if (fd < 0) {
    if (!create && errno == ENOENT) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("database ", path, ": open: ", std::strerror(errno)));
  }
  struct stat st = {};
  int rc = fstat(fd, &st);
  if (rc == 0 && (st.st_mode & 07777) != static_cast<mode_t>(mode)) {
    rc = fchmod(fd, static_cast<mode_t>(mode));
  }
  const int saved = errno;
  close(fd);
  if (rc != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("database ", path, ": mode: ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                         const OpenOptions& options) {
  if (path != ":memory:") {
    if (absl::Status s = EnsureMode(path, options.mode, /*create=*/true); !s.ok()) return s;
    for (const char* suffix : {"-wal", "-shm"}) {
      absl::Status s = EnsureMode(absl::StrCat(path, suffix), options.mode, /*create=*/false);
      if (!s.ok()) return s;
    }
  }
  if (options.vfs == kPowerLossVfs) {
    if (absl::Status s = RegisterPowerLossVfs(); !s.ok()) return s;
  }
  if (!options.vfs.empty() && sqlite3_vfs_find(options.vfs.c_str()) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("database ", path, ": no sqlite vfs named '", options.vfs, "'"));
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 options.vfs.empty() ? nullptr : options.vfs.c_str());
  std::unique_ptr<Database> db(new Database(raw, path));
  if (rc != SQLITE_OK) return db->Error(rc, "open");
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);
  if (path != ":memory:") {
    absl::Status s = db->Exec("PRAGMA journal_mode=WAL");
    if (!s.ok()) return s;
  }
  absl::Status s = db->Exec(options.synchronous == OpenOptions::Synchronous::kFull
                                ? "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON"
                                : "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON");
  if (!s.ok()) return s;
  return db;
}

Database::~Database() { sqlite3_close_v2(db_); }

absl::Status Database::Exec(std::string_view sql) {
  const std::string copy(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, copy.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("exec '", copy.substr(0, 60), "'"));
  return absl::OkStatus();
}

absl::StatusOr<Statement> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return Error(rc, absl::StrCat("prepare '", AsAbsl(sql.substr(0, 60)), "'"));
  }
  return Statement(this, stmt);
}

absl::StatusOr<int64_t> Database::UserVersion() {
  absl::StatusOr<Statement> st = Prepare("PRAGMA user_version");
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  return *row ? st->ColumnInt(0) : 0;
}

absl::Status Database::Migrate(const std::vector<Migration>& migrations) {
  absl::StatusOr<int64_t> version = UserVersion();
  if (!version.ok()) return version.status();
  if (*version > static_cast<int64_t>(migrations.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path_, ": schema version ", *version,
                     " is newer than this binary knows (", migrations.size(), ")"));
  }
  for (int64_t v = *version; v < static_cast<int64_t>(migrations.size()); ++v) {
    absl::StatusOr<std::unique_ptr<Transaction>> tx = Transaction::Begin(*this);
    if (!tx.ok()) return tx.status();
    if (absl::Status s = migrations[v](*this); !s.ok()) return s;
    if (absl::Status s = Exec(absl::StrCat("PRAGMA user_version=", v + 1)); !s.ok()) return s;
    if (absl::Status s = (*tx)->Commit(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Database::Synchronous() {
  absl::StatusOr<Statement> st = Prepare("PRAGMA synchronous");
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  return *row ? st->ColumnInt(0) : 0;
}

int64_t Database::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
int Database::Changes() const { return sqlite3_changes(db_); }

Statement::Statement(Statement&& o) noexcept
    : db_(o.db_), stmt_(std::exchange(o.stmt_, nullptr)), bind_status_(o.bind_status_) {}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = std::exchange(o.stmt_, nullptr);
    bind_status_ = o.bind_status_;
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_status_.ok()) bind_status_ = db_->Error(rc, "bind");
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_status_.ok()) bind_status_ = db_->Error(rc, "bind");
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  const int rc = sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_status_.ok()) bind_status_ = db_->Error(rc, "bind");
  return *this;
}

Statement& Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_status_.ok()) bind_status_ = db_->Error(rc, "bind");
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (!bind_status_.ok()) return bind_status_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, absl::StrCat("step '", std::string(sqlite3_sql(stmt_)).substr(0, 60), "'"));
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_status_ = absl::OkStatus();
}

int64_t Statement::ColumnInt(int index) const { return sqlite3_column_int64(stmt_, index); }

std::string Statement::ColumnText(int index) const {
  const unsigned char* text = sqlite3_column_text(stmt_, index);
  const int n = sqlite3_column_bytes(stmt_, index);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text), n);
}

std::string Statement::ColumnBlob(int index) const {
  const void* blob = sqlite3_column_blob(stmt_, index);
  const int n = sqlite3_column_bytes(stmt_, index);
  return blob == nullptr ? std::string() : std::string(static_cast<const char*>(blob), n);
}

bool Statement::ColumnIsNull(int index) const {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

absl::StatusOr<std::unique_ptr<Transaction>> Transaction::Begin(Database& db) {
  if (absl::Status s = db.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  return std::unique_ptr<Transaction>(new Transaction(db));
}

Transaction::~Transaction() {
  if (!done_) db_.Exec("ROLLBACK").IgnoreError();
}

absl::Status Transaction::Commit() {
  absl::Status s = db_.Exec("COMMIT");
  if (s.ok()) done_ = true;
  return s;
}

}  // namespace fleet::sqlite
