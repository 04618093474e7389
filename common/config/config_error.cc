#include "common/config/config_error.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/string_view.h"

namespace fleet::config {
namespace {

bool IsPlainWord(std::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::string Folded(std::string_view s) {
  std::string out;
  for (char c : s)
    out.push_back(c == '-' ? '_' : absl::ascii_tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance: edits, where swapping two neighbours is one edit.
int EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace

std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  // Long inputs are not worth comparing (and the table is quadratic).
  if (word.empty() || word.size() > 64) return "";
  const std::string folded = Folded(word);
  const int limit = std::min<int>(2, static_cast<int>(word.size()) / 2);
  int best = limit + 1;
  const std::string* match = nullptr;
  for (const std::string& candidate : candidates) {
    if (candidate == word) continue;
    const std::string other = Folded(candidate);
    const int distance = folded == other ? 0 : EditDistance(folded, other);
    if (distance < best) {
      best = distance;
      match = &candidate;
    }
  }
  return match == nullptr ? "" : *match;
}

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string match = ClosestMatch(word, candidates);
  return match.empty() ? "" : absl::StrCat(" (did you mean '", match, "'?)");
}

std::string FieldPath(std::string_view parent, std::string_view field) {
  if (parent.empty()) return std::string(field);
  return absl::StrCat(AsAbsl(parent), ".", AsAbsl(field));
}

std::string IndexPath(std::string_view parent, int index) {
  return absl::StrCat(AsAbsl(parent), "[", index, "]");
}

std::string KeyPath(std::string_view parent, std::string_view key) {
  if (IsPlainWord(key)) return FieldPath(parent, key);
  return absl::StrCat(AsAbsl(parent), "[\"", absl::CHexEscape(AsAbsl(key)), "\"]");
}

std::string ParentPath(std::string_view path) {
  if (path.empty()) return "";
  if (path.back() == ']') {
    // `a[3]` or `a["k.e[y"]`: the bracket that opens the last component. A quoted key is skipped
    // whole so that brackets and dots inside it do not count.
    size_t pos = path.size() - 1;
    if (pos > 0 && path[pos - 1] == '"') {
      size_t quote = path.rfind("[\"", pos - 1);
      if (quote != std::string_view::npos) return std::string(path.substr(0, quote));
    }
    size_t open = path.rfind('[');
    if (open != std::string_view::npos) return std::string(path.substr(0, open));
    return "";
  }
  size_t dot = path.rfind('.');
  size_t open = path.rfind(']');
  if (dot == std::string_view::npos || (open != std::string_view::npos && open > dot)) {
    // `hosts`, or `a["x"]b` which we never build.
    return "";
  }
  return std::string(path.substr(0, dot));
}

void SourceMap::Record(std::string path, int line) { lines_.try_emplace(std::move(path), line); }

bool SourceMap::Has(std::string_view path) const { return lines_.contains(AsAbsl(path)); }

int SourceMap::LineOf(std::string_view path) const {
  std::string current(path);
  while (true) {
    auto it = lines_.find(current);
    if (it != lines_.end()) return it->second;
    if (current.empty()) return 0;
    current = ParentPath(current);
  }
}

absl::Status ConfigErrorsToStatus(std::string_view origin, std::vector<ConfigError> errors,
                                  const SourceMap* source_map) {
  if (errors.empty()) return absl::OkStatus();
  for (ConfigError& error : errors) {
    if (error.line == 0 && source_map != nullptr) error.line = source_map->LineOf(error.path);
  }
  // Errors without a line sort last; otherwise the order they were found in is kept.
  std::stable_sort(errors.begin(), errors.end(), [](const ConfigError& a, const ConfigError& b) {
    const int la = a.line == 0 ? std::numeric_limits<int>::max() : a.line;
    const int lb = b.line == 0 ? std::numeric_limits<int>::max() : b.line;
    return la < lb;
  });
  std::vector<std::string> lines;
  for (size_t i = 0; i < errors.size() && i < static_cast<size_t>(kMaxReportedErrors); ++i) {
    const ConfigError& error = errors[i];
    std::string prefix(origin);
    if (error.line > 0) {
      absl::StrAppend(&prefix, prefix.empty() ? "line " : ":", error.line);
    }
    std::string text;
    if (!prefix.empty()) absl::StrAppend(&text, prefix, ": ");
    if (!error.path.empty()) absl::StrAppend(&text, error.path, ": ");
    absl::StrAppend(&text, error.what);
    lines.push_back(std::move(text));
  }
  if (errors.size() > static_cast<size_t>(kMaxReportedErrors)) {
    lines.push_back(absl::StrCat("... and ", errors.size() - kMaxReportedErrors, " more errors"));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

}  // namespace fleet::config
