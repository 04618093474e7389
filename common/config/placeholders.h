// The placeholders a server template's argv and log_path may hold: `{gpu}`, `{port}`, `{log}`,
// `{model}`, and for a server on several GPUs (tensor parallel) `{gpus}` (its GPUs,
// comma-separated: "0,1") and `{gpu_count}` ("2"; "1" for a one-GPU server). A placeholder is `{` +
// an identifier + `}`; any other brace is literal text (so JSON arguments such as `{"rope_type":
// "yarn"}` pass through untouched). An identifier that is not one of these is an error: a typo must
// not reach the server's command line. Pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::config {

struct PlaceholderValues {
  std::string gpu;
  std::string port;
  std::string log;
  std::string model;
  std::string gpus;       // "0,1"; a one-GPU server's: its GPU
  std::string gpu_count;  // "2"
};

inline constexpr std::string_view kPlaceholderNames[] = {"gpu",   "port", "log",
                                                         "model", "gpus", "gpu_count"};

// The values for a server on `gpus` (its lead first), listening on `port`, of a template with
// `model`; `log` is left empty (the caller expands log_path with these, then sets it).
PlaceholderValues ServerPlaceholders(const std::vector<int>& gpus, int port,
                                     std::string_view model);

// The placeholder names used in `text`, in order, repeats included (`{gpu}` -> "gpu"). Unknown
// names are included too; the caller decides.
std::vector<std::string> PlaceholdersIn(std::string_view text);

// `text` with each known placeholder replaced. InvalidArgument naming the first unknown one
// (`unknown placeholder '{prot}' (did you mean '{port}'?); known: {gpu} {port} {log} ...`).
absl::StatusOr<std::string> ExpandPlaceholders(std::string_view text,
                                               const PlaceholderValues& values);

}  // namespace fleet::config
