// LeaderLease: which of several fleetds sharing one PostgreSQL record leads (issue 16). One row per
// fleet in `fleet_leases` holds the leader, its address, its backend's pid and when the lease
// expires, by the database's clock; taking it hands out a new **term** from a sequence, so terms
// only increase. The holder renews it (every second, say); a standby takes it once it has
// expired, and then ends the old holder's database session (pg_terminate_backend), only when that
// pid still carries the old holder's application_name: a pid PostgreSQL has reused is left alone.
//
// Fencing: every write transaction of the leader calls CheckTerm first. It locks the lease row FOR
// KEY SHARE, so a takeover (which locks it FOR UPDATE) waits for that transaction, and it fails
// once the term is no longer the live one: a leader that was paused (SIGSTOP), partitioned or slow
// commits nothing after its lease ran out. The local deadline (LocalDeadline) tells the holder
// when to stop acting without asking the database: the time it sent its last successful renewal
// plus the duration, less a margin.
//
// Not thread-safe; the connection is the lease's own (its session is what a successor ends).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/postgres/database.h"

namespace fleet::daemon {

struct LeaseOptions {
  std::string fleet_id;  // terms and leaders are per fleet
  std::string holder;    // this fleetd: unique among the contenders (host, pid, a random part)
  std::string address;   // where fleetctl reaches it: what standbys send clients to
  absl::Duration duration = absl::Seconds(5);
  // Subtracted from the local deadline: clock drift between renewals, scheduling.
  absl::Duration margin = absl::Milliseconds(500);
};

// The lease as the database has it now.
struct LeaseView {
  int64_t term = 0;  // 0: never taken
  std::string holder;
  std::string address;
  bool live = false;  // not expired by the database's clock
};

class LeaderLease {
 public:
  // Makes the table and sequence when missing and names the connection's session after the
  // holder. `db` must outlive the lease and serve nothing else.
  static absl::StatusOr<std::unique_ptr<LeaderLease>> Create(postgres::Database* db,
                                                             LeaseOptions options);

  // Takes the lease when nobody holds it live (or this holder does): the term it now leads with
  // (a new one when it was not this holder's). FailedPrecondition naming the live holder and its
  // address otherwise; Unavailable when the database cannot be reached.
  absl::StatusOr<int64_t> TryAcquire();
  // Extends this holder's lease. FailedPrecondition when it is lost (expired, or taken): term()
  // is then 0. Unavailable when the database cannot be reached: the lease may still be held, until
  // LocalDeadline().
  absl::Status Renew();
  // Expires this holder's lease now, for a clean stop: a standby takes over at once and leaves
  // this session alone.
  absl::Status Release();
  absl::StatusOr<LeaseView> Current();
  // Names the connection's session after the holder (application_name): a successor ends a
  // session only while it carries the name. Again after each reconnect (Renew then records the
  // new session's pid).
  absl::Status NameSession();

  // The term held (0 when none), and until when (this process's clock) it may act on it.
  int64_t term() const { return term_; }
  absl::Time LocalDeadline() const { return local_deadline_; }
  bool HoldsNow(absl::Time now) const { return term_ > 0 && now < local_deadline_; }

  // Inside a write transaction on `db` (any connection): OK when `term` is the live lease of
  // `fleet_id`, FailedPrecondition ("fenced") when not. Holds the row's share lock until the
  // transaction ends.
  static absl::Status CheckTerm(postgres::Database& db, std::string_view fleet_id, int64_t term);

  // The DDL of the lease's table and sequence (idempotent), for the store's migrations.
  static std::string_view SchemaSql();

 private:
  LeaderLease(postgres::Database* db, LeaseOptions options)
      : db_(db), options_(std::move(options)) {}
  int64_t DurationMs() const { return absl::ToInt64Milliseconds(options_.duration); }

  postgres::Database* const db_;
  const LeaseOptions options_;
  int64_t term_ = 0;
  absl::Time local_deadline_ = absl::InfinitePast();
};

}  // namespace fleet::daemon
