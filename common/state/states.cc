#include "common/state/states.h"

#include <utility>

namespace fleet {
namespace {

// The spellings, by value: written out (not taken from the descriptor's names) so that renaming
// an enum value in the .proto cannot change a contract spelling.
constexpr std::pair<v1::ServerState, std::string_view> kStates[] = {
    {v1::SERVER_STATE_PENDING, "PENDING"},
    {v1::SERVER_STATE_STARTING, "STARTING"},
    {v1::SERVER_STATE_LOADING, "LOADING"},
    {v1::SERVER_STATE_JIT_COMPILING, "JIT_COMPILING"},
    {v1::SERVER_STATE_CAPTURING_GRAPHS, "CAPTURING_GRAPHS"},
    {v1::SERVER_STATE_READY, "READY"},
    {v1::SERVER_STATE_FAILED, "FAILED"},
    {v1::SERVER_STATE_STOPPING, "STOPPING"},
    {v1::SERVER_STATE_STOPPED, "STOPPED"},
    {v1::SERVER_STATE_RESTARTING, "RESTARTING"},
    {v1::SERVER_STATE_REMEDIATING, "REMEDIATING"},
    {v1::SERVER_STATE_GAVE_UP, "GAVE_UP"},
};

constexpr std::pair<v1::AttemptOutcome, std::string_view> kOutcomes[] = {
    {v1::ATTEMPT_OUTCOME_PENDING, "pending"}, {v1::ATTEMPT_OUTCOME_RUNNING, "running"},
    {v1::ATTEMPT_OUTCOME_READY, "ready"},     {v1::ATTEMPT_OUTCOME_FAILED, "failed"},
    {v1::ATTEMPT_OUTCOME_STOPPED, "stopped"}, {v1::ATTEMPT_OUTCOME_LOST, "lost"},
};

constexpr std::pair<v1::PlanStatus, std::string_view> kPlanStatuses[] = {
    {v1::PLAN_STATUS_PROPOSED, "proposed"},       {v1::PLAN_STATUS_APPLYING, "applying"},
    {v1::PLAN_STATUS_APPLIED, "applied"},         {v1::PLAN_STATUS_FAILED, "failed"},
    {v1::PLAN_STATUS_ROLLED_BACK, "rolled_back"}, {v1::PLAN_STATUS_SUPERSEDED, "superseded"},
    {v1::PLAN_STATUS_INTERRUPTED, "interrupted"}, {v1::PLAN_STATUS_REPORT, "report"},
};

template <typename Enum, size_t N>
std::string_view NameIn(const std::pair<Enum, std::string_view> (&table)[N], Enum value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "";
}

template <typename Enum, size_t N>
std::optional<Enum> ParseIn(const std::pair<Enum, std::string_view> (&table)[N],
                            std::string_view name) {
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string_view StateName(v1::ServerState state) { return NameIn(kStates, state); }
std::optional<v1::ServerState> ParseServerState(std::string_view name) {
  return ParseIn(kStates, name);
}

std::string_view OutcomeName(v1::AttemptOutcome outcome) { return NameIn(kOutcomes, outcome); }
std::optional<v1::AttemptOutcome> ParseAttemptOutcome(std::string_view name) {
  return ParseIn(kOutcomes, name);
}

std::string_view PlanStatusName(v1::PlanStatus status) { return NameIn(kPlanStatuses, status); }
std::optional<v1::PlanStatus> ParsePlanStatus(std::string_view name) {
  return ParseIn(kPlanStatuses, name);
}

bool HasProcess(v1::ServerState state) {
  return IsStartPhase(state) || state == v1::SERVER_STATE_READY ||
         state == v1::SERVER_STATE_STOPPING;
}

bool IsStartPhase(v1::ServerState state) {
  return state == v1::SERVER_STATE_STARTING || state == v1::SERVER_STATE_LOADING ||
         state == v1::SERVER_STATE_JIT_COMPILING || state == v1::SERVER_STATE_CAPTURING_GRAPHS;
}

}  // namespace fleet
