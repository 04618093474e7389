// The fencing of a leader's writes by its term (issue 16), as one piece of SQL shared by the
// leader lease (daemon/leader/lease.h, which owns the fleet_leases table) and the store (which runs
// it at the start of every write transaction once it is given a term): the lease row of the fleet
// is read FOR SHARE, so a takeover (which locks it FOR UPDATE) waits for the transaction to end,
// and a row comes back only while `term` is the live lease's. ?1: the fleet id, ?2: the term.
#pragma once

namespace fleet::daemon {

inline constexpr char kTermFenceSql[] =
    "SELECT 1 FROM fleet_leases WHERE fleet_id = ?1 AND term = ?2 "
    "AND expires_at > clock_timestamp() FOR SHARE";

}  // namespace fleet::daemon
