// The typed states (proto/states.proto) and their stable spellings: a server's state ("READY"),
// an attempt's outcome ("failed"), a plan's status ("rolled_back"). The spellings are a contract
// (the CLI, the JSON, the SQLite columns show them); code holds the enums and converts only at
// those edges.
//
// The messages carry each enum beside its older string field, still written for one release:
// Set*() writes both, *Of() reads the enum when it is set and the string otherwise (a message from
// an agent or a fleetd of the release before). Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "proto/states.pb.h"

namespace fleet {

// "PENDING", "READY", "GAVE_UP", ...; "" for SERVER_STATE_UNSPECIFIED or a value this build does
// not know.
std::string_view StateName(v1::ServerState state);
// nullopt for a spelling that is not a state ("" included).
std::optional<v1::ServerState> ParseServerState(std::string_view name);

// "pending", "running", "ready", "failed", "stopped", "lost"; "" for UNSPECIFIED.
std::string_view OutcomeName(v1::AttemptOutcome outcome);
std::optional<v1::AttemptOutcome> ParseAttemptOutcome(std::string_view name);

// "proposed", "applying", "applied", "failed", "rolled_back", "superseded", "interrupted",
// "report"; "" for UNSPECIFIED.
std::string_view PlanStatusName(v1::PlanStatus status);
std::optional<v1::PlanStatus> ParsePlanStatus(std::string_view name);

// Whether a server in `state` has a process: starting, serving or being stopped.
bool HasProcess(v1::ServerState state);
// Whether `state` is one of the start phases the log shows: STARTING up to CAPTURING_GRAPHS.
bool IsStartPhase(v1::ServerState state);

// A message's state: its `server_state` when it is a value this build knows, else its `state`
// string parsed (UNSPECIFIED when neither says; a newer peer's value keeps its number in proto3,
// and its spelling beside it is what an older reader goes by). For ServerStatus, PhaseChanged and
// ServerRow.
template <typename Message>
v1::ServerState ServerStateOf(const Message& m) {
  if (!StateName(m.server_state()).empty()) return m.server_state();
  return ParseServerState(m.state()).value_or(v1::SERVER_STATE_UNSPECIFIED);
}
// Writes the state both ways: `server_state` and the `state` string.
template <typename Message>
void SetServerState(v1::ServerState state, Message* m) {
  m->set_server_state(state);
  m->set_state(std::string(StateName(state)));
}

// The state's spelling for people and JSON: the enum's when it is one this build knows, else the
// string as sent (a newer fleetd's state this build has no value for).
template <typename Message>
std::string_view ServerStateText(const Message& m) {
  const std::string_view name = StateName(m.server_state());
  return name.empty() ? std::string_view(m.state()) : name;
}

// An Attempt's outcome, both ways.
template <typename Message>
v1::AttemptOutcome AttemptOutcomeOf(const Message& m) {
  if (!OutcomeName(m.attempt_outcome()).empty()) return m.attempt_outcome();
  return ParseAttemptOutcome(m.outcome()).value_or(v1::ATTEMPT_OUTCOME_UNSPECIFIED);
}
template <typename Message>
void SetAttemptOutcome(v1::AttemptOutcome outcome, Message* m) {
  m->set_attempt_outcome(outcome);
  m->set_outcome(std::string(OutcomeName(outcome)));
}

template <typename Message>
std::string_view AttemptOutcomeText(const Message& m) {
  const std::string_view name = OutcomeName(m.attempt_outcome());
  return name.empty() ? std::string_view(m.outcome()) : name;
}

// A Plan's status, both ways.
template <typename Message>
v1::PlanStatus PlanStatusOf(const Message& m) {
  if (!PlanStatusName(m.plan_status()).empty()) return m.plan_status();
  return ParsePlanStatus(m.status()).value_or(v1::PLAN_STATUS_UNSPECIFIED);
}
template <typename Message>
void SetPlanStatus(v1::PlanStatus status, Message* m) {
  m->set_plan_status(status);
  m->set_status(std::string(PlanStatusName(status)));
}
template <typename Message>
std::string_view PlanStatusText(const Message& m) {
  const std::string_view name = PlanStatusName(m.plan_status());
  return name.empty() ? std::string_view(m.status()) : name;
}

}  // namespace fleet
