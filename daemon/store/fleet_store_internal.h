// What fleet_store.cc and fleet_store_events.cc share inside FleetStore: how times are stored
// (ISO-8601 UTC text), the prepared-statement cache entry and handle, and the write scope (a
// transaction, or a savepoint inside an open Batch). Include only from daemon/store/*.cc.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/sql/connection.h"
#include "daemon/store/fleet_store.h"

namespace fleet::daemon {
namespace store_internal {

// Times are stored as ISO-8601 UTC text, so sqlite3's date functions work on them.
inline std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

inline absl::Time ParseTime(const std::string& text) {
  absl::Time t;
  std::string err;
  if (text.empty() ||
      !absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", text, absl::UTCTimeZone(), &t, &err)) {
    return absl::InfinitePast();
  }
  return t;
}

inline void BindTime(sql::Statement& st, int index, absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) {
    st.BindNull(index);
  } else {
    st.Bind(index, std::string_view(TimeText(t)));
  }
}

inline absl::Time ColumnTime(const sql::Statement& st, int index) {
  return st.ColumnIsNull(index) ? absl::InfinitePast() : ParseTime(st.ColumnText(index));
}

// Runs an INSERT ... RETURNING id and gives the id. The statement is run to its end, so that
// SQLite does not hold it open (a COMMIT with a write statement in progress fails).
inline absl::StatusOr<int64_t> InsertedId(sql::Statement& st, const char* table) {
  auto row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat(table, ": the insert returned no id"));
  const int64_t id = st.ColumnInt(0);
  if (absl::Status s = st.Run(); !s.ok()) return s;
  return id;
}

}  // namespace store_internal

struct FleetStore::Cached {
  sql::Statement statement;
  bool busy = false;  // a Query holds it
};

class FleetStore::Query {
 public:
  // `cached` is reset and released when the query goes; `owned` (when the cached one was busy)
  // is finalized.
  explicit Query(Cached* cached) : cached_(cached), st_(&cached->statement) {}
  explicit Query(sql::Statement owned)
      : owned_(std::make_unique<sql::Statement>(std::move(owned))), st_(owned_.get()) {}
  Query(Query&& o) noexcept
      : cached_(std::exchange(o.cached_, nullptr)),
        owned_(std::move(o.owned_)),
        st_(std::exchange(o.st_, nullptr)) {}
  Query& operator=(Query&&) = delete;
  ~Query() {
    if (cached_ != nullptr) {
      cached_->statement.Reset();
      cached_->busy = false;
    }
  }
  sql::Statement* operator->() const { return st_; }
  sql::Statement& operator*() const { return *st_; }

 private:
  Cached* cached_ = nullptr;
  std::unique_ptr<sql::Statement> owned_;
  sql::Statement* st_ = nullptr;
};

class FleetStore::Scope {
 public:
  static absl::StatusOr<std::unique_ptr<Scope>> Begin(FleetStore* store) {
    const bool outer = store->depth_ == 0;
    if (absl::Status s = outer ? store->BeginWrite() : store->db_->Exec("SAVEPOINT fleet_write");
        !s.ok()) {
      return s;
    }
    ++store->depth_;
    return std::unique_ptr<Scope>(new Scope(store, outer));
  }
  ~Scope() {
    if (done_) return;
    (outer_ ? store_->db_->Rollback()
            : store_->db_->Exec("ROLLBACK TO fleet_write; RELEASE fleet_write"))
        .IgnoreError();
    --store_->depth_;
    // Rows this scope inserted are gone; so are their ids.
    store_->container_ids_.clear();
  }
  absl::Status Commit() {
    absl::Status s = outer_ ? store_->db_->Commit() : store_->db_->Exec("RELEASE fleet_write");
    if (s.ok()) {
      done_ = true;
      --store_->depth_;
    }
    return s;
  }

 private:
  Scope(FleetStore* store, bool outer) : store_(store), outer_(outer) {}
  FleetStore* const store_;
  const bool outer_;
  bool done_ = false;
};

}  // namespace fleet::daemon
