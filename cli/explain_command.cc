#include "cli/explain_command.h"

#include <ostream>

#include "absl/strings/str_cat.h"
#include "cli/server_explain.h"
#include "common/base/flag_set.h"
#include "common/diagnosis/diagnosis_format.h"
#include "common/diagnosis/log_file.h"
#include "common/diagnosis/signature_matcher.h"

namespace fleet::cli {

int RunExplain(const std::vector<std::string>& args, bool stdout_is_tty, std::ostream& out,
               std::ostream& err) {
  CommandContext ctx;
  ctx.stdout_is_tty = stdout_is_tty;
  ctx.out = &out;
  ctx.err = &err;
  return RunExplain(args, ctx);
}

int RunExplain(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::ostream& out = *ctx.out;
  std::ostream& err = *ctx.err;
  std::string output = "text";
  std::string signatures;
  std::string color = "auto";
  std::string server;
  int64_t attempt = 0;
  bool live = false;
  bool confidence = false;
  FlagSet flags(
      "fleetctl explain [flags] FILE... | -\n       fleetctl explain --server SERVER [--attempt N]",
      "Names the root cause of a failed inference-server start (SGLang, vLLM, flashinfer or torch\n"
      "JIT logs), with the evidence: the whole failing unit with its line numbers, the facts it\n"
      "extracted, and the symptoms it skipped. Reads files, or standard input for '-'.\n"
      "Exit status: 0 every input diagnosed (unknown and none included), 2 an input could not\n"
      "be read, 1 a usage error.");
  flags.AddString("output", 'o', &output,
                  "text, or json: one object per input per line (JSON Lines)", "FORMAT");
  flags.AddString("signatures", '\0', &signatures,
                  "use this signature catalogue instead of the built-in one", "FILE");
  flags.AddString("color", '\0', &color, "auto, always or never", "WHEN");
  flags.AddBool("live", '\0', &live,
                "treat the input as a log still being written: a JIT phase that has not finished "
                "is not a stall");
  flags.AddBool("confidence", '\0', &confidence,
                "with -o json: add the field 'confidence' (high, or low for an inferred class)");
  flags.AddString("server", '\0', &server, "stored evidence of SERVER (host/ctid/gpuN)", "SERVER");
  flags.AddInt("attempt", '\0', &attempt, "with --server: the attempt number (default: latest)");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    err << "fleetctl explain: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    out << flags.Help();
    return 0;
  }
  if (output != "text" && output != "json") {
    err << "fleetctl explain: flag -o/--output: '" << output << "' is not one of text, json\n";
    return 1;
  }
  if (color != "auto" && color != "always" && color != "never") {
    err << "fleetctl explain: flag --color: '" << color << "' is not one of auto, always, never\n";
    return 1;
  }
  // NO_COLOR (https://no-color.org) turns colour off unless asked for explicitly.
  const bool use_color =
      color == "always" || (color == "auto" && ctx.stdout_is_tty && !ctx.no_color);
  if (!server.empty()) {
    if (!flags.positional().empty()) {
      err << "fleetctl explain: give log files or --server, not both\n";
      return 1;
    }
    return RunServerExplain({.server = server,
                             .attempt = attempt,
                             .json = output == "json",
                             .color = use_color,
                             .confidence = confidence},
                            ctx);
  }
  if (attempt != 0) {
    err << "fleetctl explain: --attempt goes with --server\n";
    return 1;
  }
  if (flags.positional().empty()) {
    err << "fleetctl explain: give one or more log files, or '-' for standard input (see "
           "--help)\n";
    return 1;
  }
  auto matcher = diagnosis::SignatureMatcher::Load(signatures);
  if (!matcher.ok()) {
    err << "fleetctl explain: " << matcher.status().message() << "\n";
    return 1;
  }
  diagnosis::ClassifierOptions options;
  options.offline = !live;

  int exit_code = 0;
  bool first = true;
  for (const std::string& path : flags.positional()) {
    absl::StatusOr<diagnosis::Diagnosis> d = diagnosis::ClassifyFile(path, **matcher, options);
    if (!d.ok()) {
      err << "fleetctl explain: " << d.status().message() << "\n";
      exit_code = 2;
      continue;
    }
    std::string text;
    if (output == "json") {
      diagnosis::AppendExplainJson(path, *d, &text, confidence);
      text.push_back('\n');
    } else {
      if (!first) text.push_back('\n');
      text += diagnosis::FormatExplainText(path, *d, use_color);
    }
    first = false;
    out << text;
    out.flush();
  }
  return exit_code;
}

}  // namespace fleet::cli
