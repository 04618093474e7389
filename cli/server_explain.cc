#include "cli/server_explain.h"

#include <ostream>

#include "absl/strings/str_cat.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "common/base/string_view.h"
#include "common/diagnosis/diagnosis_format.h"
#include "common/diagnosis/diagnosis_proto.h"
#include "common/state/states.h"

namespace fleet::cli {

int RunServerExplain(const ServerExplainRequest& request, const CommandContext& ctx) {
  if (!CheckServerNames("explain", {request.server}, *ctx.err)) return kExitError;
  if (request.attempt < 0) {
    *ctx.err << "fleetctl explain: --attempt takes a number >= 1 (0 or none: the latest)\n";
    return kExitError;
  }
  v1::ExplainRequest rpc;
  rpc.set_server(request.server);
  rpc.set_attempt_number(request.attempt);
  FleetClient client(ctx, ctx.timeout);
  absl::StatusOr<v1::ExplainResponse> response = client.Explain(rpc);
  if (!response.ok()) return ReportError("explain", response.status(), *ctx.err);

  const int64_t number =
      response->attempt().number() > 0 ? response->attempt().number() : request.attempt;
  const std::string label = number > 0 ? absl::StrCat(request.server, "#", number) : request.server;
  if (!response->has_diagnosis() || response->diagnosis().diagnosis_class().empty()) {
    *ctx.err << "fleetctl explain: " << label << " has no stored diagnosis"
             << (AttemptOutcomeText(response->attempt()).empty()
                     ? ""
                     : absl::StrCat(" (attempt ", AsAbsl(AttemptOutcomeText(response->attempt())),
                                    ")"))
             << "\n";
    return kExitError;
  }
  const diagnosis::Diagnosis d = diagnosis::FromProto(response->diagnosis());
  std::string text;
  if (request.json) {
    diagnosis::AppendExplainJson(label, d, &text, request.confidence);
    text.push_back('\n');
  } else {
    text = diagnosis::FormatExplainText(label, d, request.color);
  }
  *ctx.out << text;
  ctx.out->flush();
  return kExitOk;
}

}  // namespace fleet::cli
