// A server as fleetd holds it in memory (TrackedServer), and small facts about its record that the
// daemon's parts (agent_links.cc, apply_decisions.cc, reconciler.cc, remediation.cc, fleet_api.cc)
// share: its container's key, whether a state means a process runs. The state and class
// spellings are the contract's (docs/design.md). Pure functions; a TrackedServer is owned by the
// Daemon and guarded by its state lock (Daemon::mu_), read by the Reconciler under it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/state/states.h"
#include "daemon/store/fleet_store.h"
#include "proto/config.pb.h"

namespace fleet::daemon {

// One server: its row, its current attempt, and what a turn needs to know about calls sent and
// requests taken that the record does not hold.
struct TrackedServer {
  ServerRecord record;
  AttemptRecord attempt;  // the current attempt (id empty when none)
  uint64_t version = 0;
  bool restart_requested = false;
  bool restart_now = false;
  // The trigger recorded with the next attempt: "deploy" after a (re)deploy, "restart" after a
  // restart request; empty: "initial" for a first attempt, "recovery" after a lost one.
  std::string next_trigger;
  bool stop_sent = false;
  bool launch_in_flight = false;  // a Launch was sent and has not answered yet
  bool attempt_unsaved = false;   // events changed the attempt since its row was last written
  bool stalled = false;           // a stall report arrived: stop it, then count it as a failure
  // What keeps it from launching: "" (nothing), "preflight" (the container's first probe),
  // "fix" (a remediation of its container), "canary" (another GPU builds the JIT cache),
  // "approval" (a plan waits for `fleetctl apply`).
  std::string waiting;
  std::string fix_class;  // the class it failed with, while waiting on a fix
  int failures = 0;  // failed attempts since it was last READY for DaemonOptions::backoff_reset
  // Attempts made before the last deploy of it: the policy's max_attempts counts those after.
  int64_t budget_base = 0;
  // The fleet events (daemon/events/): the attempt whose outcome was told (attempt_finished once
  // per attempt), and the container's JIT cache when the current attempt was made.
  std::string attempt_told;
  bool jit_warm_at_launch = false;
  bool failed_since_ready = false;  // an attempt failed (or was lost) since it was last READY
  std::string recovered_from;       // the class of the last such failure
  int64_t AttemptsThisDeploy() const { return record.attempt_number - budget_base; }
};

// A container's key, "host/ctid".
inline std::string ContainerKey(const std::string& host, const std::string& ctid) {
  return absl::StrCat(host, "/", ctid);
}
inline std::string ContainerOf(const ServerRecord& r) { return ContainerKey(r.host, r.container); }

// Whether a server in `state` has a process (starting, serving or being stopped).
inline bool Alive(fleet::v1::ServerState state) { return HasProcess(state); }

// A diagnosis class as a row shows it: "" for "none".
inline std::string ShortClass(const std::string& c) {
  return c == diagnosis::classes::kNone ? "" : c;
}

// What ingest writes of a server row (FleetStore::IngestBatch updates its state columns; the row
// exists, with its spec and policy, since before the attempt): copied under the lock for every
// server a turn touched, so without the spec and policy messages.
ServerRecord StateOf(const ServerRecord& r);

// A host as a link keeps it: without its containers (each link has its own).
fleet::v1::Host WithoutContainers(const fleet::v1::Host& h);

}  // namespace fleet::daemon
