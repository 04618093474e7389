#include "cli/events_command.h"

#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "common/base/flag_set.h"
#include "common/events/fleet_event_json.h"

namespace fleet::cli {
namespace {

// INDEX  TIME  TYPE  WHERE  DETAIL, one line per event.
std::string TableLine(const v1::FleetEvent& e) {
  const absl::Time at = absl::FromUnixSeconds(e.at().seconds()) + absl::Nanoseconds(e.at().nanos());
  std::string where = !e.server().empty() ? e.server()
                      : !e.ctid().empty() ? absl::StrCat(e.host(), "/", e.ctid())
                                          : e.host();
  std::string detail;
  if (!e.state().empty()) {
    detail =
        e.previous_state().empty() ? e.state() : absl::StrCat(e.previous_state(), "->", e.state());
  }
  if (!e.outcome().empty()) absl::StrAppend(&detail, detail.empty() ? "" : " ", e.outcome());
  if (!e.plan_id().empty()) {
    absl::StrAppend(&detail, detail.empty() ? "" : " ", "plan ", e.plan_id(), " ", e.plan_status());
  }
  if (!e.diagnosis_class().empty()) absl::StrAppend(&detail, " ", e.diagnosis_class());
  if (!e.reason().empty() && e.type() != "server_state") absl::StrAppend(&detail, ": ", e.reason());
  return absl::StrCat(e.index(), "  ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone()), "  ",
                      e.type(), "  ", where, "  ", detail, "\n");
}

}  // namespace

int RunEvents(const std::vector<std::string>& args, const CommandContext& ctx) {
  bool follow = false;
  int64_t since = 0;
  std::string output = "table";
  FlagSet flags("fleetctl events [-f] [--since N] [-o table|json]",
                "The fleet's events as fleetd recorded them (state changes, attempts, stalls,\n"
                "remediations, agents lost and found), oldest first. -f keeps following.\n"
                "-o json writes JSON Lines; resume with --since the last line's index.");
  flags.AddBool("follow", 'f', &follow, "keep following the events");
  flags.AddInt("since", '\0', &since, "only events after this index (default: all kept)");
  flags.AddString("output", 'o', &output, "table or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("events", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    *ctx.err << "fleetctl events: unexpected argument '" << flags.positional()[0] << "'\n";
    return kExitError;
  }
  if (since < 0) {
    *ctx.err << "fleetctl events: --since takes an index >= 0\n";
    return kExitError;
  }
  if (output != "table" && output != "json") {
    *ctx.err << "fleetctl events: flag -o/--output: '" << output << "' is not table or json\n";
    return kExitError;
  }
  const bool json = output == "json";
  v1::FleetEventsRequest request;
  request.set_since(since);
  request.set_follow(follow);
  FleetClient client(ctx, ctx.timeout);
  std::ostream& out = *ctx.out;
  std::ostream& err = *ctx.err;
  const absl::Status status =
      client.FleetEvents(request, [&](const v1::FleetEventsResponse& message) {
        if (message.resync()) {
          if (json) {
            Json line;
            line["resync"] = true;
            line["oldest"] = message.oldest();
            out << JsonText(line) << "\n";
          } else {
            err << "fleetctl events: the events after " << since << " up to "
                << message.oldest() - 1 << " were pruned; continuing at " << message.oldest()
                << "\n";
          }
        }
        for (const v1::FleetEvent& e : message.events()) {
          out << (json ? JsonText(fleet::events::FleetEventJson(e)) + "\n" : TableLine(e));
        }
        if (follow) out.flush();
        return static_cast<bool>(out);
      });
  out.flush();
  if (!status.ok()) return ReportError("events", status, *ctx.err);
  return kExitOk;
}

}  // namespace fleet::cli
