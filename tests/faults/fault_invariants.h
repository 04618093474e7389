// The invariants of the fault matrix (tests/faults/run.sh, docs/reliability.md), checked on the
// records a fleet leaves after a fault was injected and cleared: fleetd's fleet.db, the agent's
// agent.db (and the agent.db of every earlier incarnation the run wiped), and the launch ledger
// the simulated container keeps (one line per server process it started: `GPU PID UNIX_TIME`).
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
  std::string fleet_db;                    // fleetd's fleet.db
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

}  // namespace fleet::faults
