#include "agent/message_budget.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fleet::agent {
namespace {

// Keeps the start and the end of `text` around a marker, within `max_bytes` or so.
void CutText(std::string* text, size_t max_bytes) {
  if (text->size() <= max_bytes) return;
  const size_t keep = max_bytes / 2;
  const size_t cut = text->size() - 2 * keep;
  *text = absl::StrCat(text->substr(0, keep), " [... ", cut, " bytes cut ...] ",
                       text->substr(text->size() - keep));
}

fleet::v1::EvidenceLine Elision(int64_t lines) {
  fleet::v1::EvidenceLine e;
  e.set_line(0);
  e.set_text(absl::StrCat("[... ", lines, lines == 1 ? " line" : " lines",
                          " left out of this message ...]"));
  return e;
}

}  // namespace

int64_t FitDiagnosis(fleet::v1::Diagnosis* d, size_t max_bytes) {
  if (d->ByteSizeLong() <= max_bytes) return 0;
  int64_t omitted = 0;
  // Evidence: half the budget, around the root-cause line (else the last line).
  std::vector<fleet::v1::EvidenceLine> lines;
  for (fleet::v1::EvidenceLine& l : *d->mutable_evidence()) {
    if (l.line() > 0) lines.push_back(std::move(l));
  }
  d->clear_evidence();
  if (!lines.empty()) {
    const size_t evidence_budget = max_bytes / 2;
    const size_t line_cap = std::clamp<size_t>(evidence_budget / 8, 256, 8192);
    for (fleet::v1::EvidenceLine& l : lines) CutText(l.mutable_text(), line_cap);
    size_t anchor = lines.size() - 1;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].line() == d->root_cause_line()) anchor = i;
    }
    size_t lo = anchor, hi = anchor;
    size_t used = lines[anchor].ByteSizeLong() + 8;
    bool grow_lo = true, grow_hi = true;
    while (grow_lo || grow_hi) {
      if (grow_lo) {
        if (lo > 0 && used + lines[lo - 1].ByteSizeLong() + 8 <= evidence_budget) {
          used += lines[--lo].ByteSizeLong() + 8;
        } else {
          grow_lo = false;
        }
      }
      if (grow_hi) {
        if (hi + 1 < lines.size() && used + lines[hi + 1].ByteSizeLong() + 8 <= evidence_budget) {
          used += lines[++hi].ByteSizeLong() + 8;
        } else {
          grow_hi = false;
        }
      }
    }
    if (lo > 0) *d->add_evidence() = Elision(static_cast<int64_t>(lo));
    for (size_t i = lo; i <= hi; ++i) *d->add_evidence() = std::move(lines[i]);
    if (hi + 1 < lines.size())
      *d->add_evidence() = Elision(static_cast<int64_t>(lines.size() - hi - 1));
    omitted = static_cast<int64_t>(lo + (lines.size() - hi - 1));
  }
  if (d->ByteSizeLong() <= max_bytes) return omitted;
  // Then the facts, symptoms and packages beyond a few.
  for (fleet::v1::Fact& f : *d->mutable_facts()) {
    while (f.values_size() > 4) f.mutable_values()->RemoveLast();
    for (std::string& v : *f.mutable_values()) CutText(&v, 256);
  }
  while (d->facts_size() > 16) d->mutable_facts()->RemoveLast();
  while (d->symptoms_size() > 16) d->mutable_symptoms()->RemoveLast();
  while (d->packages_size() > 16) d->mutable_packages()->RemoveLast();
  CutText(d->mutable_summary(), 1024);
  CutText(d->mutable_phase_detail(), 256);
  return omitted;
}

}  // namespace fleet::agent
