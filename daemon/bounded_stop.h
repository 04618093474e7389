// fleetd's stop is bounded: systemd's TimeoutStopSec (deploy/fleetd.service) SIGKILLs a daemon
// that takes longer, and a remediation job (a pip install through the agent: calls of up to 30
// minutes) would otherwise hold the stop for as long as it runs. fleetd stops within its stop
// timeout instead, and the unit allows more than that, so fleetd always ends on its own: what it
// abandons is a job whose plan stays "applying" in the record, resolved at the next start.
//
// Thread-safe (no shared state).
#pragma once

#include <functional>

#include "absl/time/time.h"

namespace fleet::daemon {

// fleetd's --stop-timeout when not given; deploy/fleetd.service's TimeoutStopSec is longer.
inline constexpr absl::Duration kDefaultStopTimeout = absl::Seconds(30);

// Runs `stop` on a thread of its own and waits for it for at most `timeout`: true when it
// finished. When it did not, its thread is left running (detached), so the caller must exit
// (without running destructors of what `stop` uses) soon after.
bool StopWithin(absl::Duration timeout, std::function<void()> stop);

}  // namespace fleet::daemon
