// What fleet_store.cc and fleet_store_events.cc share inside FleetStore: how times are stored
// (ISO-8601 UTC text), the prepared-statement cache entry and handle, and the write scope (a
// transaction, or a savepoint inside an open Batch). Include only from daemon/store/*.cc.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/sqlite/database.h"
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

inline void BindTime(sqlite::Statement& st, int index, absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) {
    st.BindNull(index);
  } else {
    st.Bind(index, std::string_view(TimeText(t)));
  }
}

inline absl::Time ColumnTime(const sqlite::Statement& st, int index) {
  return st.ColumnIsNull(index) ? absl::InfinitePast() : ParseTime(st.ColumnText(index));
}

}  // namespace store_internal

struct FleetStore::Cached {
  sqlite::Statement statement;
  bool busy = false;  // a Query holds it
};

class FleetStore::Query {
 public:
  // `cached` is reset and released when the query goes; `owned` (when the cached one was busy)
  // is finalized.
  explicit Query(Cached* cached) : cached_(cached), st_(&cached->statement) {}
  explicit Query(sqlite::Statement owned)
      : owned_(std::make_unique<sqlite::Statement>(std::move(owned))), st_(owned_.get()) {}
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
  sqlite::Statement* operator->() const { return st_; }
  sqlite::Statement& operator*() const { return *st_; }

 private:
  Cached* cached_ = nullptr;
  std::unique_ptr<sqlite::Statement> owned_;
  sqlite::Statement* st_ = nullptr;
};

class FleetStore::Scope {
 public:
  static absl::StatusOr<std::unique_ptr<Scope>> Begin(FleetStore* store) {
    const bool outer = store->depth_ == 0;
    if (absl::Status s = store->db_->Exec(outer ? "BEGIN IMMEDIATE" : "SAVEPOINT fleet_write");
        !s.ok()) {
      return s;
    }
    ++store->depth_;
    return std::unique_ptr<Scope>(new Scope(store, outer));
  }
  ~Scope() {
    if (done_) return;
    store_->db_->Exec(outer_ ? "ROLLBACK" : "ROLLBACK TO fleet_write; RELEASE fleet_write")
        .IgnoreError();
    --store_->depth_;
    // Rows this scope inserted are gone; so are their ids.
    store_->container_ids_.clear();
  }
  absl::Status Commit() {
    absl::Status s = store_->db_->Exec(outer_ ? "COMMIT" : "RELEASE fleet_write");
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
