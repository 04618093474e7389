// A SQLite VFS for the fault matrix's power-loss row, never for production: "fleet-powerloss"
// wraps the default (unix) VFS and remembers, for each database, journal and WAL file it opens,
// what every write since that file's last completed sync overwrote. CutPower() then puts those
// bytes back and the file's size as it was at that sync: what a power cut leaves of a file whose
// page cache was lost. Until CutPower() runs, the files are what the kernel holds (other
// processes, the fleet's own readers and the harness's, see every write as usual), so a process
// killed alone loses nothing, as on a real machine; only the power cut loses the unsynced tail.
//
// The record of a file F is F-unsynced beside it: a header with F's size at its last sync, then
// one entry per write or truncation (offset, the bytes it replaced below that size), appended
// before the write reaches F and emptied once a sync of F completed. At most 256 MiB of it per
// file: past that a write fails with SQLITE_FULL. Shared memory (-shm) and temporary files go
// straight through (shared memory is rebuilt from the WAL after a crash anyway).
//
// Thread-safety: RegisterPowerLossVfs() may be called from any thread, any number of times.
// CutPower() must run when no process has the files open (after the power cut killed them all).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fleet::sqlite {

inline constexpr char kPowerLossVfs[] = "fleet-powerloss";

// Registers kPowerLossVfs (not as the default); idempotent.
absl::Status RegisterPowerLossVfs();

// The power cut: every file in `dir` that the VFS wrote gets back what its writes since its last
// sync replaced, and the size it had then; their records are removed. Files of other directories
// are not touched. Returns what it undid, a line per file that lost something
// ("agent.db-wal: 3 writes undone, 41232 -> 4152 bytes").
absl::StatusOr<std::vector<std::string>> CutPower(const std::string& dir);

}  // namespace fleet::sqlite
