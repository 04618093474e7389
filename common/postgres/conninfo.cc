#include "common/postgres/conninfo.h"

#include <libpq-fe.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace fleet::postgres {

namespace {

struct OptionsFree {
  void operator()(PQconninfoOption* options) const { PQconninfoFree(options); }
};
using Options = std::unique_ptr<PQconninfoOption, OptionsFree>;

Options Parse(std::string_view conninfo) {
  const std::string copy(conninfo);
  char* error = nullptr;
  Options options(PQconninfoParse(copy.c_str(), &error));
  // libpq's parse error may quote the string: never shown.
  PQfreemem(error);
  return options;
}

bool IsSecret(std::string_view keyword) {
  return keyword == "password" || keyword == "sslpassword";
}

// A value in libpq's key=value syntax: bare when it has no space, quote or backslash.
std::string Quote(std::string_view value) {
  const bool bare = !value.empty() && value.find_first_of(" \t\n\r\f\v'\\") == std::string::npos;
  if (bare) return std::string(value);
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

}  // namespace

std::string RedactConninfo(std::string_view conninfo) {
  Options options = Parse(conninfo);
  if (options == nullptr) return "(unparsable connection string)";
  std::string out;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view keyword(o->keyword);
    absl::StrAppend(&out, out.empty() ? "" : " ", o->keyword, "=",
                    IsSecret(keyword) ? "****" : Quote(o->val));
  }
  return out;
}

std::vector<std::string> ConninfoSecrets(std::string_view conninfo) {
  std::vector<std::string> secrets;
  Options options = Parse(conninfo);
  if (options == nullptr) return secrets;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val != nullptr && *o->val != '\0' && IsSecret(o->keyword)) secrets.emplace_back(o->val);
  }
  return secrets;
}

std::string ScrubSecrets(std::string text, const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    if (!secret.empty()) absl::StrReplaceAll({{secret, "****"}}, &text);
  }
  return text;
}

}  // namespace fleet::postgres
