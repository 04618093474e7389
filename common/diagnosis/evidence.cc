#include "common/diagnosis/evidence.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::diagnosis {

EvidenceBuilder::EvidenceBuilder(size_t max_lines) {
  max_lines = std::max<size_t>(max_lines, 8);
  head_cap_ = max_lines * 2 / 5;
  tail_cap_ = max_lines * 2 / 5;
  key_cap_ = max_lines - head_cap_ - tail_cap_;
}

std::string EvidenceBuilder::ClipLine(std::string_view text) {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (text.size() <= kMaxLineBytes) return std::string(text);
  constexpr size_t kKeepEnd = 1024;
  const size_t keep_start = kMaxLineBytes - kKeepEnd;
  const size_t cut = text.size() - keep_start - kKeepEnd;
  return absl::StrCat(AsAbsl(text.substr(0, keep_start)), " [... ", cut, " bytes cut ...] ",
                      AsAbsl(text.substr(text.size() - kKeepEnd)));
}

void EvidenceBuilder::Add(int64_t line, std::string_view text, bool key) {
  if (head_.size() < head_cap_) {
    head_.push_back({line, ClipLine(text)});
    return;
  }
  tail_.push_back({line, ClipLine(text)});
  tail_key_.push_back(key);
  if (tail_.size() > tail_cap_) {
    if (tail_key_.front() && middle_keys_.size() < key_cap_) {
      middle_keys_.push_back(std::move(tail_.front()));
    }
    tail_.pop_front();
    tail_key_.pop_front();
  }
}

std::vector<EvidenceLine> EvidenceBuilder::Build() const {
  std::vector<EvidenceLine> out;
  out.reserve(head_.size() + middle_keys_.size() + tail_.size() + 4);
  int64_t last = 0;
  auto append = [&](const EvidenceLine& l) {
    if (last != 0 && l.line > last + 1) {
      const int64_t n = l.line - last - 1;
      out.push_back({0, absl::StrCat("[... ", n, n == 1 ? " line" : " lines", " elided ...]")});
    }
    out.push_back(l);
    last = l.line;
  };
  for (const auto& l : head_) append(l);
  for (const auto& l : middle_keys_) append(l);
  for (const auto& l : tail_) append(l);
  return out;
}

}  // namespace fleet::diagnosis
