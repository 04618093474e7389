#include "common/base/secret_names.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "common/base/string_view.h"

namespace fleet {

bool IsSecretEnvName(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(AsAbsl(name));
  for (const char* anywhere : {"PASSWORD", "PASSWD", "SECRET", "CREDENTIAL"}) {
    if (upper.find(anywhere) != std::string::npos) return true;
  }
  const std::vector<std::string> words = absl::StrSplit(upper, '_', absl::SkipEmpty());
  if (words.size() < 2) return false;
  for (const char* last : {"TOKEN", "KEY", "APIKEY", "AUTH", "AUTHORIZATION", "COOKIE"}) {
    if (words.back() == last) return true;
  }
  return false;
}

std::string RedactedEnvValue(std::string_view name, std::string_view value) {
  return IsSecretEnvName(name) ? std::string(kRedacted) : std::string(value);
}

std::map<std::string, std::string> RedactedEnv(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out = env;
  for (auto& [name, value] : out) {
    if (IsSecretEnvName(name)) value = kRedacted;
  }
  return out;
}

std::string RedactSecretValues(std::string_view text,
                               const std::map<std::string, std::string>& env) {
  constexpr size_t kMinRedactedLength = 4;
  std::vector<std::string_view> secrets;
  for (const auto& [name, value] : env) {
    if (value.size() >= kMinRedactedLength && IsSecretEnvName(name)) secrets.push_back(value);
  }
  // Longest first: a secret that contains another is masked whole.
  std::sort(secrets.begin(), secrets.end(),
            [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  std::string out(text);
  for (std::string_view secret : secrets) {
    for (size_t at = out.find(secret); at != std::string::npos;
         at = out.find(secret, at + sizeof(kRedacted) - 1)) {
      out.replace(at, secret.size(), kRedacted);
    }
  }
  return out;
}

}  // namespace fleet
