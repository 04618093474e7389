// The JSON forms of a fleet event (fleet.proto FleetEvent): one object per line of `fleetctl events
// -o json`, and a webhook's body (the same object with what a person needs to act on it: the
// `fleetctl` command to see more, and a Slack-compatible `text`). Field names are snake_case and
// every field is present (docs/observability.md pins both forms). Pure functions.
#pragma once

#include <string>

#include "common/base/json_text.h"
#include "proto/fleet.pb.h"

namespace fleet::events {

Json FleetEventJson(const fleet::v1::FleetEvent& e);

// The command that shows more of what the event is about ("fleetctl explain --server S", ...).
std::string NextCommand(const fleet::v1::FleetEvent& e);
// One line for a chat message: what happened, where, the class and its cause, the command.
std::string OneLine(const fleet::v1::FleetEvent& e);
// The webhook's body (JSON text): FleetEventJson plus "cause", "command" and "text".
std::string WebhookBody(const fleet::v1::FleetEvent& e);

}  // namespace fleet::events
