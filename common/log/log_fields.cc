#include "common/log/log_fields.h"

#include "absl/strings/str_cat.h"

namespace fleet::log {
namespace {

bool NeedsQuotes(absl::string_view value) {
  for (const char c : value) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

void Append(absl::string_view name, absl::string_view value, std::string* out) {
  if (value.empty()) return;
  if (!out->empty()) out->push_back(' ');
  absl::StrAppend(out, name, "=");
  if (!NeedsQuotes(value)) {
    absl::StrAppend(out, value);
    return;
  }
  out->push_back('"');
  for (const char c : value) {
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(c);
  }
  out->push_back('"');
}

}  // namespace

std::string FormatFields(const LogFields& fields) {
  std::string out;
  Append("container", fields.container, &out);
  Append("server", fields.server, &out);
  Append("attempt", fields.attempt, &out);
  return out;
}

}  // namespace fleet::log
