// Secret values out of what fleetd and fleetctl show: a remediation plan's SetEnv actions and
// env changes whose names look secret (common/base/secret_names.h) get "<redacted>" for a value,
// and the same values are masked wherever they occur in the plan's text (summary, constraints,
// unresolved problems, results). Applied by fleetd to every plan it answers with (Plan, ApplyPlan,
// ListRemediations: the stored plan blob as shown) and by fleetctl before it prints one (it may
// talk to an older fleetd). fleet.db keeps the values the servers launch with (0600).
#pragma once

#include "proto/fleet.pb.h"

namespace fleet::config {

void RedactPlan(fleet::v1::Plan* plan);

}  // namespace fleet::config
