#include "common/base/secret_names.h"

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

}  // namespace fleet
