// The fencing of a leader's writes by its term (issue 16), as one piece of SQL shared by the
// leader lease (daemon/leader/lease.h, which owns the fleet_leases table) and the store (which runs
// it at the start of every write transaction once it is given a term): the lease row of the fleet
// is read FOR KEY SHARE, so a takeover (which locks it FOR UPDATE) waits for the transaction to
// end, and a row comes back only while `term` is the live lease's. ?1: the fleet id, ?2: the term.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::daemon {

// FOR KEY SHARE, not FOR SHARE: the holder's renewal (an UPDATE of expires_at, no key column)
// must not wait for a write that is itself waiting on a lock (finding 17: a lock held elsewhere
// for three seconds cost the leader its lease), while a takeover's SELECT ... FOR UPDATE still
// waits for every write transaction of the old term to end.
inline constexpr char kTermFenceSql[] =
    "SELECT 1 FROM fleet_leases WHERE fleet_id = ?1 AND term = ?2 "
    "AND expires_at > clock_timestamp() FOR KEY SHARE";

// Runs the check on `db` (a postgres::Database or a sql::Connection, inside the write transaction
// it fences): OK while `term` leads `fleet_id`, FailedPrecondition "fenced" when not.
template <typename Db>
absl::Status CheckTermFence(Db& db, std::string_view fleet_id, int64_t term) {
  auto check = db.Prepare(kTermFenceSql);
  if (!check.ok()) return check.status();
  check->Bind(1, fleet_id).Bind(2, term);
  auto live = check->Step();
  if (!live.ok()) return live.status();
  if (!*live) {
    return absl::FailedPreconditionError(
        absl::StrCat("fenced: term ", term, " no longer leads fleet ", AsAbsl(fleet_id),
                     " (another fleetd took over): nothing written"));
  }
  return absl::OkStatus();
}

}  // namespace fleet::daemon
