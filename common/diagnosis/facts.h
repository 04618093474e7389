// Facts: the values a diagnosis extracted from a log (versions, paths, library names), keyed as in
// the corpus labels (`ptx_wanted`, `library`, `packages`, ...). Bounded whatever the log holds:
// at most kMaxKeys keys, kMaxValuesPerKey distinct values each, values cut at kMaxValueBytes.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fleet::diagnosis {

class Facts {
 public:
  static constexpr size_t kMaxKeys = 64;
  static constexpr size_t kMaxValuesPerKey = 32;
  static constexpr size_t kMaxValueBytes = 512;
  static constexpr size_t kMaxPackages = 128;

  // Appends `value` to `key` unless already there.
  void Add(std::string_view key, std::string_view value);
  // packages[name] = version; the first version seen for a name stays.
  void AddPackage(std::string_view name, std::string_view version);
  // Copies from `other` every key this object lacks (all of its values), and packages it lacks.
  void AddMissingFrom(const Facts& other);
  // Appends every value of `other` (distinct), key by key.
  void AddAllFrom(const Facts& other);

  bool Has(std::string_view key) const;
  // The first value of `key`, or "" when absent.
  std::string_view First(std::string_view key) const;
  bool empty() const { return entries_.empty() && packages_.empty(); }

  // Keys in the order they were first added.
  const std::vector<std::pair<std::string, std::vector<std::string>>>& entries() const {
    return entries_;
  }
  const std::vector<std::pair<std::string, std::string>>& packages() const { return packages_; }

 private:
  std::vector<std::pair<std::string, std::vector<std::string>>> entries_;
  std::vector<std::pair<std::string, std::string>> packages_;
};

}  // namespace fleet::diagnosis
