#include "common/diagnosis/facts.h"

#include <algorithm>

namespace fleet::diagnosis {

void Facts::Add(std::string_view key, std::string_view value) {
  if (value.empty()) return;
  value = value.substr(0, kMaxValueBytes);
  for (auto& [k, values] : entries_) {
    if (k != key) continue;
    if (values.size() >= kMaxValuesPerKey) return;
    if (std::find(values.begin(), values.end(), value) == values.end()) {
      values.emplace_back(value);
    }
    return;
  }
  if (entries_.size() >= kMaxKeys) return;
  entries_.emplace_back(std::string(key), std::vector<std::string>{std::string(value)});
}

void Facts::AddPackage(std::string_view name, std::string_view version) {
  if (name.empty() || version.empty()) return;
  name = name.substr(0, kMaxValueBytes);
  version = version.substr(0, kMaxValueBytes);
  for (const auto& [n, v] : packages_) {
    if (n == name) return;
  }
  if (packages_.size() >= kMaxPackages) return;
  packages_.emplace_back(std::string(name), std::string(version));
}

void Facts::AddMissingFrom(const Facts& other) {
  for (const auto& [k, values] : other.entries_) {
    if (Has(k)) continue;
    for (const std::string& v : values) Add(k, v);
  }
  for (const auto& [n, v] : other.packages_) AddPackage(n, v);
}

void Facts::AddAllFrom(const Facts& other) {
  for (const auto& [k, values] : other.entries_) {
    for (const std::string& v : values) Add(k, v);
  }
  for (const auto& [n, v] : other.packages_) AddPackage(n, v);
}

bool Facts::Has(std::string_view key) const {
  for (const auto& [k, values] : entries_) {
    if (k == key) return true;
  }
  return false;
}

std::string_view Facts::First(std::string_view key) const {
  for (const auto& [k, values] : entries_) {
    if (k == key && !values.empty()) return values.front();
  }
  return {};
}

}  // namespace fleet::diagnosis
