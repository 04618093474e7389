// Which environment variables hold secrets, and the one marker that replaces their values
// wherever they are shown: CLI tables and JSON, fleetd's replies (plans, remediations), the
// agent's evidence and action results, logs. The list is documented in docs/config.md
// ("Secrets"); a name is matched case-insensitively, split into words at '_':
//   - it contains PASSWORD, PASSWD, SECRET or CREDENTIAL anywhere (PGPASSWORD,
//     AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS), or
//   - it has two words or more and its last word is TOKEN, KEY, APIKEY, AUTH, AUTHORIZATION or
//     COOKIE (HF_TOKEN, OPENAI_API_KEY, PROXY_AUTHORIZATION).
// Not secret: a bare TOKEN or KEY, HF_TOKEN_PATH, API_KEY_ID, TOKENIZERS_PARALLELISM,
// SSH_AUTH_SOCK (the secret word is not the last one: the value names a file, an id, a flag).
// Redaction is for what is shown; fleet.db still holds the values it launches with (0600). To
// keep a secret out of fleet.db, give it with env_from_file (the agent reads the file).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace fleet {

inline constexpr char kRedacted[] = "<redacted>";

bool IsSecretEnvName(std::string_view name);

// `value`, or kRedacted when `name` is a secret's name.
std::string RedactedEnvValue(std::string_view name, std::string_view value);

// Each value of a secret's name replaced by kRedacted.
std::map<std::string, std::string> RedactedEnv(const std::map<std::string, std::string>& env);

// `text` with every occurrence of a secret's value of `env` (4 bytes or more: a shorter one would
// mask ordinary words) replaced by kRedacted, the longest first: what the agent sends of a log
// (a diagnosis' evidence) and of an action's output.
std::string RedactSecretValues(std::string_view text,
                               const std::map<std::string, std::string>& env);

}  // namespace fleet
