// Errors in a fleet config and where they are: a ConfigError names a field path
// (`hosts[0].containers[1].gpus[2]`) and what is wrong; a SourceMap remembers the line of every
// field path the YAML reader saw, so that checks made later on the parsed message (unique names,
// ports, placeholders) still report `FILE:LINE: <field path>: <what>`.
//
// Plain values; a SourceMap is not thread-safe while it is being filled and may be read from any
// thread afterwards.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace fleet::config {

struct ConfigError {
  std::string path;  // field path; "" for the document as a whole
  std::string what;  // lower case, no trailing period
  int line = 0;      // 1-based; 0: look the path up in the SourceMap when formatting
};

// Field paths: `hosts`, `hosts[0]`, `hosts[0].name`, `hosts[0].containers[0].env.PATH`.
std::string FieldPath(std::string_view parent, std::string_view field);
std::string IndexPath(std::string_view parent, int index);
// A map entry's path: `parent.KEY` when KEY is a plain word, else `parent["KEY"]` (C-escaped).
std::string KeyPath(std::string_view parent, std::string_view key);
// The path one level up: `hosts[0].name` -> `hosts[0]` -> `hosts` -> "".
std::string ParentPath(std::string_view path);

// Field path -> 1-based line of the YAML node it was read from. A path that is absent (a field the
// file left out) is located at its nearest recorded ancestor, so "gpus: at least one GPU" points
// at the container that lacks them.
class SourceMap {
 public:
  // The first line recorded for a path wins (a duplicate key is an error anyway).
  void Record(std::string path, int line);
  // Whether the file gave this exact path a (non-null) value.
  bool Has(std::string_view path) const;
  // The line of `path` or of its nearest recorded ancestor; 0 when none is recorded.
  int LineOf(std::string_view path) const;

 private:
  absl::flat_hash_map<std::string, int> lines_;
};

// The one of `candidates` that is a close spelling of `word` (case, `-` for `_` and up to two
// edits), else "".
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);
// " (did you mean 'gpus'?)" for ClosestMatch, else "".
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

// The errors as one InvalidArgument status, one error per line, ordered by line:
// `ORIGIN:LINE: PATH: WHAT`. The line comes from the error, else from `source_map` (may be null);
// without one it is left out (`ORIGIN: PATH: WHAT`); an empty origin leaves out `ORIGIN:` too, and
// an empty path `PATH: `. At most kMaxReportedErrors are listed, then how many more there were.
// OK when `errors` is empty.
inline constexpr int kMaxReportedErrors = 20;
absl::Status ConfigErrorsToStatus(std::string_view origin, std::vector<ConfigError> errors,
                                  const SourceMap* source_map);

}  // namespace fleet::config
