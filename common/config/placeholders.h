// The placeholders a server template's argv and log_path may hold: `{gpu}`, `{port}`, `{log}`,
// `{model}`. A placeholder is `{` + an identifier + `}`; any other brace is literal text (so JSON
// arguments such as `{"rope_type": "yarn"}` pass through untouched). An identifier that is not
// one of the four is an error: a typo must not reach the server's command line. Pure functions.
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
};

inline constexpr std::string_view kPlaceholderNames[] = {"gpu", "port", "log", "model"};

// The placeholder names used in `text`, in order, repeats included (`{gpu}` -> "gpu"). Unknown
// names are included too; the caller decides.
std::vector<std::string> PlaceholdersIn(std::string_view text);

// `text` with each known placeholder replaced. InvalidArgument naming the first unknown one
// (`unknown placeholder '{gpus}' (did you mean '{gpu}'?); known: {gpu} {port} {log} {model}`).
absl::StatusOr<std::string> ExpandPlaceholders(std::string_view text,
                                               const PlaceholderValues& values);

}  // namespace fleet::config
