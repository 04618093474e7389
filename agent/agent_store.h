// AgentStore: the agent's local record in STATE_DIR/agent.db (SQLite, WAL): its incarnation id
// (made once, when the record is new: a new incarnation means the state was lost), the servers it
// runs, and its event log (sequence → event, the newest `retention` kept), so an event stream
// resumes without a gap or a duplicate even across an agent restart.
//
// Durability: agent.db commits with synchronous=NORMAL (WAL fsynced at checkpoints only), which a
// crash of the agent cannot hurt (the page cache survives it) but a crash of the machine can: the
// last commits may be lost, and a log that lost its tail would give sequence numbers again that
// the daemon has already seen (and skip as duplicates). So the store records the kernel's boot id
// and whether it is open; opened after an unclean close under another boot id (the machine went
// down while the agent ran), it starts a new incarnation (an empty log, sequences from 1): the
// daemon, resuming from its old position, gets a Resync and takes a snapshot instead of skipping
// reused numbers. Those two marks are written with synchronous=FULL. A clean close, or a restart
// of the agent alone, keeps the incarnation.
//
// Not thread-safe: the agent calls it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sqlite/database.h"
#include "proto/agent.pb.h"
#include "proto/agent_state.pb.h"

namespace fleet::agent {

class AgentStore {
 public:
  static constexpr char kBootIdPath[] = "/proc/sys/kernel/random/boot_id";

  // Opens or creates STATE_DIR/agent.db (creating STATE_DIR, 0700; agent.db 0600). The boot id is
  // read from `boot_id_path` (a seam for tests); an unreadable one disables the lost-tail check.
  // `vfs`: the SQLite VFS of agent.db (empty: the default; for the fault matrix's power-loss row).
  static absl::StatusOr<std::unique_ptr<AgentStore>> Open(
      const std::string& state_dir, int64_t retention,
      const std::string& boot_id_path = kBootIdPath, const std::string& vfs = "");
  // Marks the close clean (the incarnation survives a reboot after it).
  ~AgentStore();
  AgentStore(const AgentStore&) = delete;
  AgentStore& operator=(const AgentStore&) = delete;

  const std::string& incarnation() const { return incarnation_; }
  // The sequence of the last event appended (0 when none yet).
  uint64_t last_sequence() const { return last_sequence_; }
  // The oldest sequence still kept (last_sequence()+1 when the log is empty).
  uint64_t first_sequence() const { return first_sequence_; }

  // Gives `event` this incarnation and the next sequence (unless it carries a later one: the
  // agent numbers events itself while the store fails), and stores it.
  absl::Status Append(fleet::v1::AgentEvent* event);
  // Events with sequence > `after`, at most `limit`, oldest first.
  absl::StatusOr<std::vector<fleet::v1::AgentEvent>> EventsAfter(uint64_t after, size_t limit);

  // The highest leader term seen per fleet (fencing, issue 16), and raising one: synced to disk
  // before it returns (a term forgotten in a power loss would let a replaced leader back in).
  absl::StatusOr<std::map<std::string, int64_t>> FenceTerms();
  absl::Status PutFenceTerm(const std::string& fleet_id, int64_t term);

  absl::Status PutServer(int32_t gpu, const fleet::v1::ServerRecord& record);
  absl::Status DeleteServer(int32_t gpu);
  absl::StatusOr<std::vector<fleet::v1::ServerRecord>> Servers();

 private:
  AgentStore(std::unique_ptr<sqlite::Database> db, int64_t retention)
      : db_(std::move(db)), retention_(retention) {}
  absl::Status Load(const std::string& boot_id);
  // Sets the "open" mark to "0" (clean) if it is still this run's, synced at the commit.
  absl::Status MarkClosed();

  std::unique_ptr<sqlite::Database> db_;
  const int64_t retention_;
  std::string incarnation_;
  uint64_t last_sequence_ = 0;
  uint64_t first_sequence_ = 1;
  std::string open_mark_;  // this run's "open" mark, once written
};

}  // namespace fleet::agent
