#include "cli/control_command.h"

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

enum class Verb { kRestart, kStop };

int RunControl(Verb verb, const std::vector<std::string>& args, const CommandContext& ctx) {
  const bool restart = verb == Verb::kRestart;
  const char* name = restart ? "restart" : "stop";
  bool all = false;
  bool now = false;
  std::string output = "table";
  FlagSet flags(
      restart ? "fleetctl restart SERVER...|--all [--now] [-o table|json]"
              : "fleetctl stop SERVER...|--all [-o table|json]",
      restart ? "Restarts servers: a new attempt each, recorded by fleetd. Prints the servers it\n"
                "restarted."
              : "Stops servers; fleetd keeps them stopped until a restart or a deploy. Prints the\n"
                "servers it stopped.");
  flags.AddBool("all", '\0', &all, absl::StrCat(name, " every server"));
  if (restart) flags.AddBool("now", '\0', &now, "skip the canary and the backoff");
  flags.AddString("output", 'o', &output, "table or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError(name, s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (output != "table" && output != "json") {
    *ctx.err << "fleetctl " << name << ": flag -o/--output: '" << output
             << "' is not one of table, json\n";
    return kExitError;
  }
  if (all == !flags.positional().empty()) {
    *ctx.err << "fleetctl " << name << ": give SERVER names or --all (not both; see --help)\n";
    return kExitError;
  }
  if (!CheckServerNames(name, flags.positional(), *ctx.err)) return kExitError;

  v1::ServersRequest request;
  for (const std::string& server : flags.positional()) request.add_servers(server);
  request.set_all(all);
  request.set_now(now);
  FleetClient client(ctx, ctx.timeout);
  absl::StatusOr<v1::ServersResponse> response =
      restart ? client.Restart(request) : client.Stop(request);
  if (!response.ok()) return ReportError(name, response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    Json servers = Json::array();
    for (const v1::ServerRow& row : response->servers()) servers.push_back(ServerRowJson(row));
    Json json = Json::object();
    json["servers"] = std::move(servers);
    out << JsonText(std::move(json)) << "\n";
  } else if (response->servers().empty()) {
    *ctx.err << "fleetctl " << name << ": no server was " << (restart ? "restarted" : "stopped")
             << "\n";
  } else {
    TextTable table({"SERVER", "STATE", "ATTEMPT"});
    for (const v1::ServerRow& row : response->servers()) {
      table.AddRow(
          {row.server(),
           TextTable::Cell(std::string(ServerStateText(row)), StateColor(ServerStateOf(row))),
           row.attempt_number() > 0 ? absl::StrCat(row.attempt_number()) : "-"});
    }
    out << table.Render(ctx.color());
  }
  out.flush();
  return kExitOk;
}

}  // namespace

int RunRestart(const std::vector<std::string>& args, const CommandContext& ctx) {
  return RunControl(Verb::kRestart, args, ctx);
}

int RunStop(const std::vector<std::string>& args, const CommandContext& ctx) {
  return RunControl(Verb::kStop, args, ctx);
}

}  // namespace fleet::cli
