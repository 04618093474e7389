#include "cli/attempts_command.h"

#include <csignal>
#include <cstring>
#include <optional>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "cli/status_format.h"
#include "cli/text_table.h"
#include "common/base/flag_set.h"
#include "common/state/states.h"

namespace fleet::cli {
namespace {

// sigabbrev_np is glibc 2.32+; Debian 12 has 2.36.
std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

// The attempt's length: to its end, or to `now` while it runs.
std::optional<absl::Duration> Duration(const v1::Attempt& a, absl::Time now) {
  std::optional<absl::Time> start = FromProtoTime(a.started_at());
  if (!start) return std::nullopt;
  std::optional<absl::Time> end = FromProtoTime(a.ended_at());
  return end.value_or(now) - *start;
}

// Ready green, failed red, the others uncoloured.
std::string_view OutcomeColor(const v1::Attempt& a) {
  switch (AttemptOutcomeOf(a)) {
    case v1::ATTEMPT_OUTCOME_READY:
      return StateColor(v1::SERVER_STATE_READY);
    case v1::ATTEMPT_OUTCOME_FAILED:
      return StateColor(v1::SERVER_STATE_FAILED);
    default:
      return "";
  }
}

// fleetd sends an empty ProcessExit for an attempt that has not ended (it always sets the field):
// that is no exit, the same as none.
bool HasExit(const v1::Attempt& a) {
  if (!a.has_exit()) return false;
  const v1::ProcessExit& e = a.exit();
  return e.exited() || e.signal() != 0 || e.status_unknown() || FromProtoTime(e.at()).has_value();
}

}  // namespace

std::string FormatExit(const v1::Attempt& attempt) {
  if (!HasExit(attempt)) return "-";
  const v1::ProcessExit& exit = attempt.exit();
  if (exit.status_unknown()) return "unknown";
  if (exit.exited()) return absl::StrCat(exit.exit_code());
  if (exit.signal() > 0) return SignalName(exit.signal());
  return "-";
}

Json AttemptJson(const v1::Attempt& a) {
  Json json = Json::object();
  json["id"] = a.id();
  json["server"] = a.server();
  json["number"] = a.number();
  json["outcome"] = AttemptOutcomeText(a);
  json["diagnosis_class"] = a.diagnosis_class();
  json["summary"] = a.summary();
  json["trigger"] = a.trigger();
  json["started_at"] = TimeJson(a.started_at());
  json["ended_at"] = TimeJson(a.ended_at());
  std::optional<absl::Time> start = FromProtoTime(a.started_at());
  std::optional<absl::Time> end = FromProtoTime(a.ended_at());
  json["duration_ms"] =
      start && end ? Json(absl::ToInt64Milliseconds(*end - *start)) : Json(nullptr);
  json["time_to_ready_ms"] =
      a.has_time_to_ready()
          ? Json(a.time_to_ready().seconds() * 1000 + a.time_to_ready().nanos() / 1000000)
          : Json(nullptr);
  if (HasExit(a)) {
    Json exit = Json::object();
    exit["exited"] = a.exit().exited();
    exit["exit_code"] = a.exit().exit_code();
    exit["signal"] = a.exit().signal();
    exit["status_unknown"] = a.exit().status_unknown();
    exit["at"] = TimeJson(a.exit().at());
    json["exit"] = std::move(exit);
  } else {
    json["exit"] = nullptr;
  }
  return json;
}

int RunAttempts(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string output = "table";
  FlagSet flags("fleetctl attempts [SERVER] [-o table|json]",
                "The history of start attempts that fleetd recorded, for every server or one:\n"
                "outcome, diagnosis class, start, duration, exit, trigger (initial, restart,\n"
                "remediation:ID) and the diagnosis in one sentence. 'fleetctl explain --server\n"
                "SERVER --attempt N' shows an attempt's evidence.");
  flags.AddString("output", 'o', &output, "table or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("attempts", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (output != "table" && output != "json") {
    *ctx.err << "fleetctl attempts: flag -o/--output: '" << output
             << "' is not one of table, json\n";
    return kExitError;
  }
  if (flags.positional().size() > 1) {
    *ctx.err << "fleetctl attempts: give at most one SERVER (see --help)\n";
    return kExitError;
  }
  if (!CheckServerNames("attempts", flags.positional(), *ctx.err)) return kExitError;

  v1::ListAttemptsRequest request;
  if (!flags.positional().empty()) request.set_server(flags.positional()[0]);
  FleetClient client(ctx, ctx.timeout);
  absl::StatusOr<v1::ListAttemptsResponse> response = client.ListAttempts(request);
  if (!response.ok()) return ReportError("attempts", response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    Json attempts = Json::array();
    for (const v1::Attempt& a : response->attempts()) attempts.push_back(AttemptJson(a));
    Json json = Json::object();
    json["attempts"] = std::move(attempts);
    out << JsonText(std::move(json)) << "\n";
    out.flush();
    return kExitOk;
  }
  if (response->attempts().empty()) {
    *ctx.err << "fleetctl attempts: no attempts recorded"
             << (request.server().empty() ? "" : " for ") << request.server() << "\n";
    return kExitOk;
  }
  const absl::Time now = ctx.clock->Now();
  TextTable table(
      {"SERVER", "#", "OUTCOME", "CLASS", "STARTED", "DURATION", "EXIT", "TRIGGER", "SUMMARY"});
  for (const v1::Attempt& a : response->attempts()) {
    std::optional<absl::Time> start = FromProtoTime(a.started_at());
    std::optional<absl::Duration> duration = Duration(a, now);
    table.AddRow({a.server(), absl::StrCat(a.number()),
                  TextTable::Cell(OrDash(std::string(AttemptOutcomeText(a))), OutcomeColor(a)),
                  a.diagnosis_confidence() == "low" ? absl::StrCat(a.diagnosis_class(), " (low)")
                                                    : OrDash(a.diagnosis_class()),
                  start ? absl::FormatTime("%Y-%m-%d %H:%M:%S", *start, ctx.time_zone) : "-",
                  duration ? FormatAge(*duration) : "-", FormatExit(a), OrDash(a.trigger()),
                  OrDash(a.summary())});
  }
  out << table.Render(ctx.color());
  out.flush();
  return kExitOk;
}

}  // namespace fleet::cli
