#include "cli/remediation_command.h"

#include <algorithm>
#include <optional>
#include <ostream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "cli/plan_format.h"
#include "cli/status_format.h"
#include "cli/text_table.h"
#include "common/base/flag_set.h"
#include "common/config/server_name.h"
#include "common/state/states.h"

namespace fleet::cli {
namespace {

// The colour of a remediation's status: applied green, failed and rolled back red, proposed and
// applying yellow (as a server that is REMEDIATING).
std::string_view StatusColor(v1::PlanStatus status) {
  switch (status) {
    case v1::PLAN_STATUS_APPLIED:
      return StateColor(v1::SERVER_STATE_READY);
    case v1::PLAN_STATUS_FAILED:
    case v1::PLAN_STATUS_ROLLED_BACK:
      return StateColor(v1::SERVER_STATE_FAILED);
    case v1::PLAN_STATUS_PROPOSED:
    case v1::PLAN_STATUS_APPLYING:
      return StateColor(v1::SERVER_STATE_REMEDIATING);
    default:
      return "";
  }
}

// `remediations [SERVER|CONTAINER]`: the number of parts tells the form, then the config's rule
// for that form (config::ParseServerName or ParseContainerName) decides.
absl::Status CheckServerOrContainerName(const std::string& name) {
  const auto slashes = std::count(name.begin(), name.end(), '/');
  if (slashes == 1) return config::ParseContainerName(name).status();
  if (slashes == 2) return config::ParseServerName(name).status();
  return absl::InvalidArgumentError(absl::StrCat(
      "server or container name '", absl::CHexEscape(name),
      "': not two or three parts separated by '/' (expected HOST/CTID/gpuN or HOST/CTID, e.g. "
      "pve1/200/gpu3 or pve1/200)"));
}

void PrintJson(const v1::Plan& plan, std::ostream& out) {
  out << JsonText(RemediationJson(plan)) << "\n";
}

}  // namespace

int RunPlan(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string output = "text";
  FlagSet flags("fleetctl plan SERVER [-o text|json]",
                "The remediation fleetd's planner has for a server: a proposed plan waiting for\n"
                "approval, or one computed now from a fresh probe of the container (and the\n"
                "server's failed attempt, when its last attempt failed). Status 'proposed'\n"
                "comes with an id for 'fleetctl apply ID'; status 'report' says why nothing\n"
                "would be changed. Nothing in the container is changed. Waits at least 1\n"
                "minute for fleetd (a longer --timeout wins).");
  flags.AddString("output", 'o', &output, "text or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("plan", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (!CheckOutput("plan", output, {"text", "json"}, *ctx.err)) return kExitError;
  if (flags.positional().size() != 1) {
    *ctx.err << "fleetctl plan: give one SERVER (see --help)\n";
    return kExitError;
  }
  if (!CheckServerNames("plan", flags.positional(), *ctx.err)) return kExitError;

  v1::PlanRequest request;
  request.set_server(flags.positional()[0]);
  FleetClient client(ctx, std::max(ctx.timeout, kPlanTimeout));
  absl::StatusOr<v1::PlanResponse> response = client.Plan(request);
  if (!response.ok()) return ReportError("plan", response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    PrintJson(response->plan(), out);
  } else {
    out << FormatPlan(response->plan());
  }
  out.flush();
  return kExitOk;
}

int RunApply(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string output = "table";
  FlagSet flags("fleetctl apply PLAN_ID [-o table|json]",
                "Asks fleetd to apply a proposed plan ('fleetctl plan SERVER' shows one and its\n"
                "id) and waits until it is done: the actions run in the container, then the\n"
                "affected servers restart. Prints each action's result and the plan's final\n"
                "status. Exit 0 only when the plan was applied; 1 when it failed or was rolled\n"
                "back (the reason on standard error). Waits at least 15 minutes for fleetd\n"
                "(a longer --timeout wins).");
  flags.AddString("output", 'o', &output, "table or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("apply", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (!CheckOutput("apply", output, {"table", "json"}, *ctx.err)) return kExitError;
  if (flags.positional().size() != 1 || flags.positional()[0].empty()) {
    *ctx.err << "fleetctl apply: give one PLAN_ID (see --help; 'fleetctl plan SERVER' shows it)\n";
    return kExitError;
  }
  const std::string& id = flags.positional()[0];

  v1::ApplyPlanRequest request;
  request.set_plan_id(id);
  FleetClient client(ctx, std::max(ctx.timeout, kApplyTimeout));
  absl::StatusOr<v1::ApplyPlanResponse> response = client.ApplyPlan(request);
  if (!response.ok()) return ReportError("apply", response.status(), *ctx.err);

  v1::Plan plan = response->plan();
  // fleetd puts the results in the plan and beside it; take them from either.
  if (plan.results().empty()) *plan.mutable_results() = response->results();
  if (plan.id().empty()) plan.set_id(id);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    PrintJson(plan, out);
  } else {
    out << FormatApplyResults(plan, ctx.color());
    if (PlanStatusOf(plan) == v1::PLAN_STATUS_APPLIED) out << "plan " << plan.id() << " applied\n";
  }
  out.flush();
  if (PlanStatusOf(plan) == v1::PLAN_STATUS_APPLIED) return kExitOk;
  *ctx.err << "fleetctl apply: plan " << plan.id() << " "
           << (plan.status().empty() ? "ended with no status from fleetd" : plan.status())
           << (plan.outcome_reason().empty() ? "" : ": ") << plan.outcome_reason() << "\n";
  return kExitError;
}

int RunRemediations(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string output = "table";
  FlagSet flags("fleetctl remediations [SERVER|CONTAINER] [-o table|wide|json]",
                "The remediations fleetd recorded, oldest first: for every container, one\n"
                "container (host/ctid) or a server's container (host/ctid/gpuN). Each has its\n"
                "trigger (preflight, diagnosis, manual), the diagnosis class it addresses, its\n"
                "status (proposed, applying, applied, failed, rolled_back, superseded) and its\n"
                "actions; -o wide lists the actions under each row, with the outcome's reason.");
  flags.AddString("output", 'o', &output, "table, wide or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("remediations", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (!CheckOutput("remediations", output, {"table", "wide", "json"}, *ctx.err)) {
    return kExitError;
  }
  if (flags.positional().size() > 1) {
    *ctx.err << "fleetctl remediations: give at most one SERVER or CONTAINER (see --help)\n";
    return kExitError;
  }
  v1::ListRemediationsRequest request;
  if (!flags.positional().empty()) {
    const std::string& name = flags.positional()[0];
    if (absl::Status s = CheckServerOrContainerName(name); !s.ok()) {
      return ReportError("remediations", s, *ctx.err);
    }
    request.set_container(name);
  }
  FleetClient client(ctx, ctx.timeout);
  absl::StatusOr<v1::ListRemediationsResponse> response = client.ListRemediations(request);
  if (!response.ok()) return ReportError("remediations", response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    Json plans = Json::array();
    for (const v1::Plan& p : response->plans()) plans.push_back(RemediationJson(p));
    Json json = Json::object();
    json["remediations"] = std::move(plans);
    out << JsonText(std::move(json)) << "\n";
    out.flush();
    return kExitOk;
  }
  if (response->plans().empty()) {
    *ctx.err << "fleetctl remediations: no remediations recorded"
             << (request.container().empty() ? "" : " for ") << request.container() << "\n";
    return kExitOk;
  }
  const bool wide = output == "wide";
  std::vector<std::string> header = {"ID", "CONTAINER"};
  if (wide) header.push_back("SERVER");
  for (const char* h : {"TRIGGER", "CLASS", "STATUS", "ACTIONS", "CREATED", "SUMMARY"}) {
    header.push_back(h);
  }
  if (wide) {
    header.push_back("TEST-COMPILE");
    header.push_back("REASON");
  }
  TextTable table(header);
  for (const v1::Plan& p : response->plans()) {
    std::optional<absl::Time> created = FromProtoTime(p.created_at());
    std::vector<TextTable::Cell> row = {OrDash(p.id()), OrDash(p.container())};
    if (wide) row.push_back(OrDash(p.server()));
    row.push_back(OrDash(p.trigger()));
    row.push_back(OrDash(p.diagnosis_class()));
    row.push_back(
        TextTable::Cell(OrDash(std::string(PlanStatusText(p))), StatusColor(PlanStatusOf(p))));
    row.push_back(absl::StrCat(p.actions_size()));
    row.push_back(created ? absl::FormatTime("%Y-%m-%d %H:%M:%S", *created, ctx.time_zone) : "-");
    row.push_back(OrDash(p.summary().empty() ? p.report_only() : p.summary()));
    if (wide) {
      row.push_back(TestCompileCell(p));
      row.push_back(OrDash(p.outcome_reason()));
    }
    table.AddRow(std::move(row));
  }
  const std::string rendered = table.Render(ctx.color());
  if (!wide) {
    out << rendered;
    out.flush();
    return kExitOk;
  }
  // Wide: each row, then its actions one per line, with their result when they ran.
  const std::vector<std::string> lines = absl::StrSplit(rendered, '\n');
  out << lines[0] << "\n";
  for (int i = 0; i < response->plans_size(); ++i) {
    const v1::Plan& p = response->plans(i);
    out << lines[i + 1] << "\n";
    const MatchedResults m = MatchResults(p);
    for (int a = 0; a < p.actions_size(); ++a) {
      out << "    " << a + 1 << ". " << DescribeAction(p.actions(a).action());
      if (const v1::ActionResult* r = m.per_action[a]) out << (r->ok() ? "  [ok]" : "  [failed]");
      out << "\n";
    }
    for (size_t r = 0; r < m.rollback.size(); ++r) {
      out << "    undo" << r + 1 << ". " << DescribeAction(m.rollback[r]->action())
          << (m.rollback[r]->ok() ? "  [ok]" : "  [failed]") << "\n";
    }
  }
  out.flush();
  return kExitOk;
}

}  // namespace fleet::cli
