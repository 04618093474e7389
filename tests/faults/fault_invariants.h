// The invariants of the fault matrix (tests/faults/run.sh, docs/reliability.md), checked on the
// records a fleet leaves after a fault was injected and cleared: fleetd's fleet.db, the agent's
// agent.db (and the agent.db of every earlier incarnation the run wiped), and the launch ledger
// the simulated container keeps (one line per server process it started: `GPU PID UNIX_TIME`).
//
// fleetd's record is read through common/sql: fleet.db (SQLite), or the PostgreSQL database of
// `fleetd --store-file` (its URL; PostgreSQL names containers' ctid column `vmid`, its booleans
// are read as 0/1). The agents' records are always SQLite (agent.db).
//
// The checker only reads; the records must be quiescent (fleetd and the agent stopped). Each
// broken invariant is one Violation; an unreadable input is a Status. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::faults {

struct CheckInput {
  std::string fleet_db;  // fleetd's fleet.db
  // fleetd's record in PostgreSQL instead (a libpq URL, which may carry a password: never in a
  // message). fleet.db's PRAGMA integrity_check has no PostgreSQL equivalent: `integrity` is
  // checked on the agent.dbs only then.
  std::string fleet_store_url;
  std::string container;                   // "host/ctid" of the agent below, e.g. "local/200"
  std::string agent_db;                    // the agent's agent.db now
  std::vector<std::string> old_agent_dbs;  // agent.db of incarnations whose state was wiped
  std::string launch_ledger;               // the container's ledger of launches; "" for none
  // After the fault cleared every server that is wanted running must be READY; with
  // allow_gave_up, GAVE_UP with a reason is accepted too.
  bool expect_settled = true;
  bool allow_gave_up = false;
};

struct Violation {
  std::string invariant;  // events_once, attempts_contiguous, launch_recorded, launched_once,
                          // launches_match, settled, integrity
  std::string detail;
};

// Every invariant of the matrix, in a fixed order.
absl::StatusOr<std::vector<Violation>> CheckInvariants(const CheckInput& input);

// A server process an agent.db records, as the agent would try to re-adopt it.
struct RecordedProcess {
  int32_t gpu = 0;
  int32_t pid = 0;
  uint64_t start_ticks = 0;
  std::string attempt_id;
};

// The processes the agent's record names (for a container "reboot": the harness hands these pids
// to unrelated processes in the new PID namespace).
absl::StatusOr<std::vector<RecordedProcess>> RecordedProcesses(const std::string& agent_db);

// What the harness asks of fleetd's record while the fleet runs (run.sh, through `fault-check
// --query NAME`), as one line of text:
//   cursor    the stored cursor of the (one) agent, `INCARNATION#SEQUENCE`; "" when none
//   applying  how many remediations are `applying`
//   dump      the rows that tell a failed injection's story (servers, attempts, remediations,
//             their links, fleet events, cursors), a table after another
// InvalidArgument for another name. `fleet_db` or `fleet_store_url` as in CheckInput.
absl::StatusOr<std::string> QueryRecord(const CheckInput& input, const std::string& name);

}  // namespace fleet::faults
