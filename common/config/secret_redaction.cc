#include "common/config/secret_redaction.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/base/secret_names.h"

namespace fleet::config {
namespace {

// Values shorter than this are not searched for in text (they would mask ordinary words).
constexpr size_t kMinMaskedLength = 4;

void MaskIn(const std::vector<std::string>& secrets, std::string* text) {
  for (const std::string& secret : secrets) {
    for (size_t at = text->find(secret); at != std::string::npos;
         at = text->find(secret, at + sizeof(kRedacted) - 1)) {
      text->replace(at, secret.size(), kRedacted);
    }
  }
}

// Masks the value of `set_env` if secret; remembers it for the text.
void RedactAction(fleet::v1::Action* action, std::vector<std::string>* secrets) {
  if (!action->has_set_env() || !IsSecretEnvName(action->set_env().name())) return;
  const std::string& value = action->set_env().value();
  if (value == kRedacted) return;
  if (value.size() >= kMinMaskedLength) secrets->push_back(value);
  action->mutable_set_env()->set_value(kRedacted);
}

}  // namespace

void RedactPlan(fleet::v1::Plan* plan) {
  std::vector<std::string> secrets;
  for (auto& planned : *plan->mutable_actions()) RedactAction(planned.mutable_action(), &secrets);
  for (auto& result : *plan->mutable_results()) RedactAction(result.mutable_action(), &secrets);
  for (auto& [name, value] : *plan->mutable_env_changes()) {
    if (!IsSecretEnvName(name) || value == kRedacted) continue;
    if (value.size() >= kMinMaskedLength) secrets.push_back(value);
    value = kRedacted;
  }
  if (secrets.empty()) return;
  // Longest first: a secret that contains another is masked whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  MaskIn(secrets, plan->mutable_summary());
  MaskIn(secrets, plan->mutable_report_only());
  MaskIn(secrets, plan->mutable_outcome_reason());
  for (std::string& line : *plan->mutable_constraints()) MaskIn(secrets, &line);
  for (std::string& line : *plan->mutable_unresolved()) MaskIn(secrets, &line);
  for (auto& result : *plan->mutable_results()) {
    MaskIn(secrets, result.mutable_message());
    MaskIn(secrets, result.mutable_output_tail());
  }
}

}  // namespace fleet::config
