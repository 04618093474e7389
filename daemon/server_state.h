// Small facts about a server's record that the daemon's parts (agent_links.cc, reconciler.cc,
// remediation.cc, fleet_api.cc) share: its container's key, whether a state means a process runs.
// The state and class spellings are the contract's (docs/design.md). Pure functions.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "common/diagnosis/diagnosis_class.h"
#include "daemon/store/fleet_store.h"
#include "proto/config.pb.h"

namespace fleet::daemon {

// A container's key, "host/ctid".
inline std::string ContainerKey(const std::string& host, const std::string& ctid) {
  return absl::StrCat(host, "/", ctid);
}
inline std::string ContainerOf(const ServerRecord& r) { return ContainerKey(r.host, r.container); }

// Whether a server in `state` has a process (starting, serving or being stopped).
inline bool Alive(const std::string& state) {
  return state == "STARTING" || state == "LOADING" || state == "JIT_COMPILING" ||
         state == "CAPTURING_GRAPHS" || state == "READY" || state == "STOPPING";
}

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
