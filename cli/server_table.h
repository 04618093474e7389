// ServerTable: fleetctl's copy of fleetd's status table while it watches. A Watch sends the
// whole table, then the rows that changed (or the whole table again); Apply merges each message
// by server name and says which rows really changed, which is what `status --watch` prints off a
// terminal. Also decides `--until-ready`. Not thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/fleet.pb.h"

namespace fleet::cli {

class ServerTable {
 public:
  struct Update {
    // Rows added or different from before, in message order; valid until the next Apply.
    std::vector<const v1::ServerRow*> changed;
    // Servers named in the message's `removed` that the table held.
    std::vector<std::string> removed;
  };

  Update Apply(const v1::FleetStatusResponse& message);

  // Every row, in the order first seen.
  std::vector<const v1::ServerRow*> rows() const;
  // The `at` of the last message that had one.
  std::optional<absl::Time> at() const { return at_; }

  // What `--until-ready` makes of the table.
  enum class Readiness {
    kWaiting,     // not there yet (also: an empty table, as before a deploy has reached fleetd)
    kReady,       // every server READY (STOPPED ones are not waited for), at least one READY
    kGaveUp,      // some server GAVE_UP: it will not become ready without a person
    kAllStopped,  // every server STOPPED: nothing will become ready
  };
  Readiness Evaluate() const;
  std::vector<const v1::ServerRow*> GaveUp() const;

 private:
  std::vector<std::unique_ptr<v1::ServerRow>> rows_;
  std::map<std::string, size_t> index_;  // server name -> position in rows_
  std::optional<absl::Time> at_;
};

}  // namespace fleet::cli
