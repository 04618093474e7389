#include "daemon/leader/lease.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"
#include "common/log/log.h"
#include "daemon/store/term_fence.h"

namespace fleet::daemon {
namespace {

using ::fleet::AsAbsl;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS fleet_leases (
  fleet_id text PRIMARY KEY,
  term bigint NOT NULL,
  holder text NOT NULL,
  address text NOT NULL,
  backend_pid integer NOT NULL,
  expires_at timestamptz NOT NULL,
  acquired_at timestamptz NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS fleet_terms;
)sql";

// Serialises the schema's creation between processes starting at once (CREATE ... IF NOT EXISTS
// is not safe against a concurrent one).
constexpr char kSchemaLock[] = "SELECT pg_advisory_xact_lock(8140226011)";

}  // namespace

std::string_view LeaderLease::SchemaSql() { return kSchema; }

absl::StatusOr<std::unique_ptr<LeaderLease>> LeaderLease::Create(postgres::Database* db,
                                                                 LeaseOptions options) {
  if (options.fleet_id.empty() || options.holder.empty()) {
    return absl::InvalidArgumentError("lease: fleet id and holder are required");
  }
  if (options.duration < absl::Milliseconds(100) || options.margin >= options.duration) {
    return absl::InvalidArgumentError(
        "lease: the duration must be >= 100 ms and exceed the margin");
  }
  {
    auto tx = postgres::Transaction::Begin(*db);
    if (!tx.ok()) return tx.status();
    if (absl::Status s = db->Exec(kSchemaLock); !s.ok()) return s;
    if (absl::Status s = db->Exec(kSchema); !s.ok()) return s;
    if (absl::Status s = (*tx)->Commit(); !s.ok()) return s;
  }
  auto lease = std::unique_ptr<LeaderLease>(new LeaderLease(db, std::move(options)));
  if (absl::Status s = lease->NameSession(); !s.ok()) return s;
  return lease;
}

absl::Status LeaderLease::NameSession() {
  auto name = db_->Prepare("SELECT set_config('application_name', ?1, false)");
  if (!name.ok()) return name.status();
  return name->Bind(1, options_.holder).Run();
}

absl::StatusOr<int64_t> LeaderLease::TryAcquire() {
  const absl::Time sent = absl::Now();
  int64_t old_pid = 0;
  std::string old_holder;
  int64_t term = 0;
  {
    auto tx = postgres::Transaction::Begin(*db_);
    if (!tx.ok()) return tx.status();
    auto seed = db_->Prepare(
        "INSERT INTO fleet_leases (fleet_id, term, holder, address, backend_pid, expires_at, "
        "acquired_at) VALUES (?1, 0, '', '', 0, '-infinity', clock_timestamp()) "
        "ON CONFLICT (fleet_id) DO NOTHING");
    if (!seed.ok()) return seed.status();
    if (absl::Status s = seed->Bind(1, options_.fleet_id).Run(); !s.ok()) return s;
    auto row = db_->Prepare(
        "SELECT term, holder, address, backend_pid, expires_at > clock_timestamp() "
        "FROM fleet_leases WHERE fleet_id = ?1 FOR UPDATE");
    if (!row.ok()) return row.status();
    row->Bind(1, options_.fleet_id);
    auto has = row->Step();
    if (!has.ok()) return has.status();
    if (!*has) return absl::InternalError("lease: the fleet's row is missing");
    const int64_t current = row->ColumnInt(0);
    const std::string holder = row->ColumnText(1);
    const std::string address = row->ColumnText(2);
    const bool live = row->ColumnInt(4) != 0;
    if (live && holder != options_.holder) {
      return absl::FailedPreconditionError(
          absl::StrCat("lease: fleet ", options_.fleet_id, " is led by ", holder, " (term ",
                       current, address.empty() ? "" : ", at ", address, ")"));
    }
    if (live && current > 0) {
      // Ours already: extend it, same term.
      term = current;
    } else {
      old_pid = row->ColumnInt(3);
      old_holder = holder;
    }
    auto take = db_->Prepare(
        term > 0
            ? "UPDATE fleet_leases SET expires_at = clock_timestamp() + make_interval(secs => "
              "?2::float8 / 1000) WHERE fleet_id = ?1 RETURNING term"
            : "UPDATE fleet_leases SET term = nextval('fleet_terms'), holder = ?3, address = ?4, "
              "backend_pid = pg_backend_pid(), acquired_at = clock_timestamp(), expires_at = "
              "clock_timestamp() + make_interval(secs => ?2::float8 / 1000) WHERE fleet_id = ?1 "
              "RETURNING term");
    if (!take.ok()) return take.status();
    take->Bind(1, options_.fleet_id).Bind(2, DurationMs());
    if (term == 0) take->Bind(3, options_.holder).Bind(4, options_.address);
    auto taken = take->Step();
    if (!taken.ok()) return taken.status();
    if (!*taken) return absl::InternalError("lease: the fleet's row is missing");
    term = take->ColumnInt(0);
    if (absl::Status s = (*tx)->Commit(); !s.ok()) return s;
  }
  const bool new_term = term != term_;
  term_ = term;
  local_deadline_ = sent + options_.duration - options_.margin;
  if (new_term) {
    log::Get(log::Component::kStore)
        .info("lease: {} leads fleet {} with term {}", options_.holder, options_.fleet_id, term);
  }
  if (old_pid > 0 && !old_holder.empty() && old_holder != options_.holder) {
    // The old leader's session, if it is still there (a paused or partitioned process): ended, so
    // its open transactions roll back. Only a backend that still carries its name.
    auto end = db_->Prepare(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE pid = ?1 AND application_name = ?2 AND pid <> pg_backend_pid()");
    if (end.ok()) {
      absl::Status s = end->Bind(1, old_pid).Bind(2, old_holder).Run();
      if (!s.ok()) {
        log::Get(log::Component::kStore)
            .warn("lease: ending {}'s session (pid {}): {}", old_holder, old_pid, s.message());
      }
    }
  }
  return term;
}

absl::Status LeaderLease::Renew() {
  if (term_ == 0) return absl::FailedPreconditionError("lease: not held");
  const absl::Time sent = absl::Now();
  auto renew = db_->Prepare(
      "UPDATE fleet_leases SET expires_at = clock_timestamp() + make_interval(secs => ?4::float8 / "
      "1000), backend_pid = pg_backend_pid() WHERE fleet_id = ?1 AND holder = ?2 AND term = ?3 AND "
      "expires_at > clock_timestamp() "
      "RETURNING term");
  if (!renew.ok()) return renew.status();
  renew->Bind(1, options_.fleet_id).Bind(2, options_.holder).Bind(3, term_).Bind(4, DurationMs());
  auto renewed = renew->Step();
  if (!renewed.ok()) return renewed.status();
  if (!*renewed) {
    const int64_t lost = term_;
    term_ = 0;
    local_deadline_ = absl::InfinitePast();
    return absl::FailedPreconditionError(
        absl::StrCat("lease: term ", lost, " of fleet ", options_.fleet_id, " is lost"));
  }
  local_deadline_ = sent + options_.duration - options_.margin;
  return absl::OkStatus();
}

absl::Status LeaderLease::Release() {
  if (term_ == 0) return absl::OkStatus();
  auto release = db_->Prepare(
      "UPDATE fleet_leases SET expires_at = '-infinity', backend_pid = 0 "
      "WHERE fleet_id = ?1 AND holder = ?2 AND term = ?3");
  if (!release.ok()) return release.status();
  absl::Status s =
      release->Bind(1, options_.fleet_id).Bind(2, options_.holder).Bind(3, term_).Run();
  term_ = 0;
  local_deadline_ = absl::InfinitePast();
  return s;
}

absl::StatusOr<LeaseView> LeaderLease::Current() {
  auto row = db_->Prepare(
      "SELECT term, holder, address, expires_at > clock_timestamp() FROM fleet_leases "
      "WHERE fleet_id = ?1");
  if (!row.ok()) return row.status();
  row->Bind(1, options_.fleet_id);
  auto has = row->Step();
  if (!has.ok()) return has.status();
  LeaseView view;
  if (*has) {
    view.term = row->ColumnInt(0);
    view.holder = row->ColumnText(1);
    view.address = row->ColumnText(2);
    view.live = row->ColumnInt(3) != 0 && view.term > 0;
  }
  return view;
}

absl::Status LeaderLease::CheckTerm(postgres::Database& db, std::string_view fleet_id,
                                    int64_t term) {
  return CheckTermFence(db, fleet_id, term);
}

}  // namespace fleet::daemon
