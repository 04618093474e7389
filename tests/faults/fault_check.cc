// fault-check: the invariants of the fault matrix (tests/faults/fault_invariants.h) on one run's
// records, for tests/faults/run.sh. Prints one line per violation (`violation: INVARIANT:
// DETAIL`) and exits 0 when none, 1 when some, 2 when an input cannot be read or a flag is wrong.
//
//   fault-check --fleet-db F --container host/ctid --agent-db A [--old-agent-db A0]...
//               [--launches LEDGER] [--allow-gave-up] [--no-settled]
//   fault-check --store-file FILE ...  the same, fleetd's record in PostgreSQL: FILE holds its URL
//                                      (mode 0600, as for fleetd --store-file; never in argv)
//   fault-check (--fleet-db F | --store-file FILE) --query NAME
//                                      what the harness asks of the record while the fleet runs:
//                                      `cursor` (INCARNATION#SEQUENCE), `applying` (a count) or
//                                      `dump` (the record's story, kept with a failed injection)
//   fault-check --store-file FILE --hold-lock MS
//                                      fleetd-busy on PostgreSQL: an outside session holds LOCK
//                                      TABLE servers IN EXCLUSIVE MODE (every turn's write needs
//                                      it; reads go on) for MS ms, says `locked` once it holds it,
//                                      then commits
//   fault-check --recorded-pids A      the pids agent.db A records, one `GPU PID` a line
//   fault-check --power-cut DIR...     the power cut: the databases of DIR written through the
//                                      power-loss VFS lose their writes since their last sync
//                                      (a line per file that lost some)
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/base/flag_set.h"
#include "common/sql/postgres_connection.h"
#include "common/sqlite/power_loss_vfs.h"
#include "daemon/store/store_url_file.h"
#include "tests/faults/fault_invariants.h"

namespace {

// The fleetd-busy row's outside writer on PostgreSQL. The hold is the fault's own timing (the
// one sleep the matrix allows).
absl::Status HoldWriteLock(const std::string& url, int64_t hold_ms) {
  auto db = fleet::sql::PostgresConnection::Connect(url);
  if (!db.ok()) return db.status();
  if (absl::Status s = (*db)->Begin(); !s.ok()) return s;
  if (absl::Status s = (*db)->Exec("LOCK TABLE servers IN EXCLUSIVE MODE"); !s.ok()) return s;
  std::printf("locked\n");
  std::fflush(stdout);
  // The fault itself: the lock held this long (not a wait for anything to happen).
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  return (*db)->Commit();
}

}  // namespace

int main(int argc, char** argv) {
  fleet::faults::CheckInput input;
  std::string recorded_pids;
  std::vector<std::string> power_cut;
  bool allow_gave_up = false;
  bool no_settled = false;
  std::string store_file;
  std::string query;
  std::string hold_lock;
  fleet::FlagSet flags(
      "fault-check --fleet-db F --container host/ctid --agent-db A [flags]",
      "Checks the fault matrix's invariants on a stopped fleet's records (docs/reliability.md).");
  flags.AddString("fleet-db", '\0', &input.fleet_db, "fleetd's fleet.db", "FILE");
  flags.AddString("store-file", '\0', &store_file,
                  "fleetd's record in PostgreSQL: FILE holds its URL (mode 0600 or stricter, as "
                  "for fleetd --store-file)",
                  "FILE");
  flags.AddString("query", '\0', &query,
                  "print what the record says (cursor: the agent's stored cursor; applying: how "
                  "many remediations are applying; dump: its servers, attempts, remediations and "
                  "fleet events) and exit",
                  "NAME");
  flags.AddString("hold-lock", '\0', &hold_lock,
                  "with --store-file: hold LOCK TABLE servers IN EXCLUSIVE MODE for MS "
                  "milliseconds (print `locked` once held), then commit and exit",
                  "MS");
  flags.AddString("container", '\0', &input.container, "the agent's container (host/ctid)");
  flags.AddString("agent-db", '\0', &input.agent_db, "the agent's agent.db now", "FILE");
  flags.AddRepeated("old-agent-db", '\0', &input.old_agent_dbs,
                    "agent.db of an incarnation the run wiped (launches only)", "FILE");
  flags.AddString("launches", '\0', &input.launch_ledger,
                  "the container's ledger of started servers (`GPU PID TIME` a line)", "FILE");
  flags.AddBool("allow-gave-up", '\0', &allow_gave_up, "accept GAVE_UP with a reason as settled");
  flags.AddBool("no-settled", '\0', &no_settled, "skip the settled invariant");
  flags.AddString("recorded-pids", '\0', &recorded_pids,
                  "print the pids this agent.db records and exit", "FILE");
  flags.AddRepeated("power-cut", '\0', &power_cut,
                    "discard the writes since their last sync of the databases in DIR that were "
                    "opened with fleet-powerloss (every process using them gone), and exit",
                    "DIR");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::fprintf(stderr, "fault-check: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (!store_file.empty()) {
    absl::StatusOr<std::string> url = fleet::daemon::ReadStoreUrlFile(store_file);
    if (!url.ok()) {
      std::fprintf(stderr, "fault-check: %s\n", std::string(url.status().message()).c_str());
      return 2;
    }
    input.fleet_store_url = *std::move(url);
  }
  if (!hold_lock.empty()) {
    int64_t ms = 0;
    if (input.fleet_store_url.empty() || !absl::SimpleAtoi(hold_lock, &ms) || ms < 0) {
      std::fprintf(stderr, "fault-check: --hold-lock MS needs --store-file\n");
      return 2;
    }
    if (absl::Status s = HoldWriteLock(input.fleet_store_url, ms); !s.ok()) {
      std::fprintf(stderr, "fault-check: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    return 0;
  }
  if (!query.empty()) {
    auto answer = fleet::faults::QueryRecord(input, query);
    if (!answer.ok()) {
      std::fprintf(stderr, "fault-check: %s\n", std::string(answer.status().message()).c_str());
      return 2;
    }
    std::printf("%s\n", answer->c_str());
    return 0;
  }
  if (!power_cut.empty()) {
    for (const std::string& dir : power_cut) {
      auto undone = fleet::sqlite::CutPower(dir);
      if (!undone.ok()) {
        std::fprintf(stderr, "fault-check: %s\n", std::string(undone.status().message()).c_str());
        return 2;
      }
      for (const std::string& line : *undone) std::printf("%s\n", line.c_str());
    }
    return 0;
  }
  if (!recorded_pids.empty()) {
    auto processes = fleet::faults::RecordedProcesses(recorded_pids);
    if (!processes.ok()) {
      std::fprintf(stderr, "fault-check: %s\n", std::string(processes.status().message()).c_str());
      return 2;
    }
    for (const auto& p : *processes) std::printf("%d %d\n", p.gpu, p.pid);
    return 0;
  }
  if ((input.fleet_db.empty() && input.fleet_store_url.empty()) || input.agent_db.empty() ||
      input.container.empty()) {
    std::fprintf(stderr,
                 "fault-check: --fleet-db (or --store-file), --agent-db and --container are "
                 "required\n");
    return 2;
  }
  input.allow_gave_up = allow_gave_up;
  input.expect_settled = !no_settled;
  auto violations = fleet::faults::CheckInvariants(input);
  if (!violations.ok()) {
    std::fprintf(stderr, "fault-check: %s\n", std::string(violations.status().message()).c_str());
    return 2;
  }
  for (const auto& v : *violations) {
    std::printf("violation: %s: %s\n", v.invariant.c_str(), v.detail.c_str());
  }
  return violations->empty() ? 0 : 1;
}
