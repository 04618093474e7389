#include "common/config/placeholders.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/string_view.h"
#include "common/config/config_error.h"

namespace fleet::config {
namespace {

bool IsIdentifierStart(char c) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool IsIdentifierChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Calls on_text(literal) and on_placeholder(name) for the parts of `text`, in order; stops at the
// first on_placeholder that returns false.
template <typename OnText, typename OnPlaceholder>
bool Scan(std::string_view text, OnText on_text, OnPlaceholder on_placeholder) {
  size_t literal_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '{' && i + 1 < text.size() && IsIdentifierStart(text[i + 1])) {
      size_t j = i + 1;
      while (j < text.size() && IsIdentifierChar(text[j])) ++j;
      if (j < text.size() && text[j] == '}') {
        on_text(text.substr(literal_start, i - literal_start));
        if (!on_placeholder(text.substr(i + 1, j - i - 1))) return false;
        i = j + 1;
        literal_start = i;
        continue;
      }
    }
    ++i;
  }
  on_text(text.substr(literal_start));
  return true;
}

const std::string* ValueOf(std::string_view name, const PlaceholderValues& values) {
  if (name == "gpu") return &values.gpu;
  if (name == "port") return &values.port;
  if (name == "log") return &values.log;
  if (name == "model") return &values.model;
  if (name == "gpus") return &values.gpus;
  if (name == "gpu_count") return &values.gpu_count;
  return nullptr;
}

}  // namespace

PlaceholderValues ServerPlaceholders(const std::vector<int>& gpus, int port,
                                     std::string_view model) {
  return PlaceholderValues{.gpu = gpus.empty() ? "" : absl::StrCat(gpus.front()),
                           .port = absl::StrCat(port),
                           .log = "",
                           .model = std::string(model),
                           .gpus = absl::StrJoin(gpus, ","),
                           .gpu_count = absl::StrCat(gpus.size())};
}

std::vector<std::string> PlaceholdersIn(std::string_view text) {
  std::vector<std::string> names;
  Scan(
      text, [](std::string_view) {},
      [&](std::string_view name) {
        names.emplace_back(name);
        return true;
      });
  return names;
}

absl::StatusOr<std::string> ExpandPlaceholders(std::string_view text,
                                               const PlaceholderValues& values) {
  std::string out;
  std::string unknown;
  const bool ok = Scan(
      text, [&](std::string_view literal) { out.append(literal); },
      [&](std::string_view name) {
        const std::string* value = ValueOf(name, values);
        if (value == nullptr) {
          unknown = std::string(name);
          return false;
        }
        out.append(*value);
        return true;
      });
  if (!ok) {
    std::vector<std::string> known(std::begin(kPlaceholderNames), std::end(kPlaceholderNames));
    const std::string match = ClosestMatch(unknown, known);
    const std::string suggestion =
        match.empty() ? "" : absl::StrCat(" (did you mean '{", match, "}'?)");
    std::vector<std::string> braced;
    for (const std::string& name : known) braced.push_back(absl::StrCat("{", name, "}"));
    return absl::InvalidArgumentError(absl::StrCat("unknown placeholder '{", unknown, "}'",
                                                   suggestion,
                                                   "; known: ", absl::StrJoin(braced, " ")));
  }
  return out;
}

}  // namespace fleet::config
