#include "cli/deploy_command.h"

#include <fstream>
#include <iostream>
#include <iterator>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "cli/text_table.h"
#include "common/base/flag_set.h"
#include "common/base/json_text.h"
#include "common/config/fleet_config.h"

namespace fleet::cli {
namespace {

constexpr char kDeployVerb[] = "deploy";

absl::StatusOr<std::string> ReadAll(const std::string& path, std::istream& in) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(in), {});
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot be read (no such file, or no access)"));
  }
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

int RunDeployFrom(const std::vector<std::string>& args, const CommandContext& ctx,
                  std::istream& in) {
  std::string file;
  std::vector<std::string> only;
  bool dry_run = false;
  std::string output = "table";
  FlagSet flags(
      "fleetctl deploy [-f FILE] [--only SERVER]... [--dry-run] [-o table|json]",
      "Sends a fleet config (YAML, docs/config.md) to fleetd, which keeps it as desired\n"
      "state and starts, updates or stops servers to match. The config is checked first:\n"
      "an error names FILE:LINE and the field. Without -f, fleetd applies the config it\n"
      "holds again (servers that gave up get a new try). -f - reads standard input.");
  flags.AddString("file", 'f', &file, "the fleet config", "FILE");
  flags.AddRepeated("only", '\0', &only, "act on this server only (repeatable)", "SERVER");
  flags.AddBool("dry-run", '\0', &dry_run, "show what would change; change nothing");
  flags.AddString("output", 'o', &output, "table or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError(kDeployVerb, s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (output != "table" && output != "json") {
    *ctx.err << "fleetctl deploy: flag -o/--output: '" << output << "' is not one of table, json\n";
    return kExitError;
  }
  if (!flags.positional().empty()) {
    *ctx.err << "fleetctl deploy: unexpected argument '" << flags.positional()[0]
             << "' (the config is given with -f FILE)\n";
    return kExitError;
  }
  if (!CheckServerNames(kDeployVerb, only, *ctx.err)) return kExitError;

  v1::DeployRequest request;
  if (!file.empty()) {
    absl::StatusOr<std::string> yaml = ReadAll(file, in);
    if (!yaml.ok()) return ReportError(kDeployVerb, yaml.status(), *ctx.err);
    const std::string origin = file == "-" ? "<stdin>" : file;
    // Checked here, so a mistake is shown with its line before anything is sent.
    absl::StatusOr<v1::FleetConfig> config = config::ParseFleetConfig(*yaml, origin);
    if (!config.ok()) {
      *ctx.err << "fleetctl deploy: the config has errors:\n" << config.status().message() << "\n";
      return kExitError;
    }
    *request.mutable_config() = *std::move(config);
    request.set_yaml(*std::move(yaml));
    request.set_source(origin);
  }
  for (const std::string& server : only) request.add_only(server);
  request.set_dry_run(dry_run);

  FleetClient client(ctx, ctx.timeout);
  absl::StatusOr<v1::DeployResponse> response = client.Deploy(request);
  if (!response.ok()) return ReportError(kDeployVerb, response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    Json changes = Json::array();
    for (const v1::Change& c : response->changes()) {
      Json change = Json::object();
      change["server"] = c.server();
      change["change"] = c.kind();
      change["detail"] = c.detail();
      changes.push_back(std::move(change));
    }
    Json json = Json::object();
    json["dry_run"] = dry_run;
    json["config_version"] = response->config_version();
    json["changes"] = std::move(changes);
    out << JsonText(std::move(json)) << "\n";
  } else {
    TextTable table({"SERVER", "CHANGE", "DETAIL"});
    int changed = 0;
    for (const v1::Change& c : response->changes()) {
      table.AddRow({c.server(), c.kind(), c.detail()});
      if (c.kind() != "unchanged") ++changed;
    }
    if (response->changes().empty()) {
      out << "no servers in the config\n";
    } else {
      out << table.Render(ctx.color());
    }
    if (dry_run) {
      out << changed << " server(s) would change (dry run: nothing was sent to the agents)\n";
    } else {
      out << changed << " server(s) changed; config version " << response->config_version()
          << " stored\n";
    }
  }
  out.flush();
  return kExitOk;
}

int RunDeploy(const std::vector<std::string>& args, const CommandContext& ctx) {
  return RunDeployFrom(args, ctx, std::cin);
}

}  // namespace fleet::cli
