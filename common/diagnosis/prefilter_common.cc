#include "common/diagnosis/prefilter.h"

namespace fleet::diagnosis {

uint64_t PatternsFingerprint(const std::vector<std::string>& patterns) {
  uint64_t h = 14695981039346656037ull;
  for (const std::string& p : patterns) {
    for (const char c : p) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h *= 1099511628211ull;  // the NUL after each
  }
  return h;
}

}  // namespace fleet::diagnosis
