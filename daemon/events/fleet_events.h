// The fleet's events as the daemon makes them (fleet.proto FleetEvent): pure constructors from
// what the daemon holds (a server's row and attempt, a plan, a link), bounded so that an event
// never carries more than a few KiB whatever the log held, and the label forms the metrics use.
#pragma once

#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "daemon/store/fleet_store.h"
#include "proto/fleet.pb.h"

namespace fleet::daemon::events {

// Event types (FleetEvent.type).
inline constexpr char kServerState[] = "server_state";
inline constexpr char kAttemptStarted[] = "attempt_started";
inline constexpr char kAttemptFinished[] = "attempt_finished";
inline constexpr char kStalled[] = "stalled";
inline constexpr char kGaveUp[] = "gave_up";
inline constexpr char kRecovered[] = "recovered";
inline constexpr char kRemediation[] = "remediation";
inline constexpr char kRemediationAwaitingApproval[] = "remediation_awaiting_approval";
inline constexpr char kRemediationFailed[] = "remediation_failed";
inline constexpr char kAgentConnected[] = "agent_connected";
inline constexpr char kAgentLost[] = "agent_lost";

// The types a webhook may ask for (Notify.events).
bool IsNotifiable(std::string_view type);

// An attempt's trigger without its id: "remediation:12" -> "remediation"; "" -> "initial".
std::string TriggerLabel(std::string_view trigger);

// Bounds: evidence lines kept, and characters per text field.
inline constexpr int kMaxEvidenceLines = 12;
inline constexpr size_t kMaxText = 512;

// A server's event: its place, state, current attempt and diagnosis (class, summary, the
// root-cause line and a bounded excerpt of the evidence).
fleet::v1::FleetEvent ServerEvent(std::string_view type, const ServerRecord& server,
                                  const AttemptRecord& attempt, absl::Time now);
// A plan's event (remediation*): its container, server, class, status and summary.
fleet::v1::FleetEvent PlanEvent(std::string_view type, const fleet::v1::Plan& plan, absl::Time now);
// A container's agent link (agent_connected, agent_lost).
fleet::v1::FleetEvent LinkEvent(std::string_view type, std::string_view container,
                                std::string_view reason, absl::Time now);

}  // namespace fleet::daemon::events
