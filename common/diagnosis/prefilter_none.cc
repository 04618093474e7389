// Built with -DFLEET_VECTORSCAN=OFF: no prefilter; the matcher runs RE2 alone.
#include "common/diagnosis/prefilter.h"

namespace fleet::diagnosis {

struct Prefilter::Database {};
Prefilter::Scratch::~Scratch() = default;

Prefilter::~Prefilter() = default;

const PrefilterData* BuiltinPrefilter() { return nullptr; }

absl::StatusOr<std::unique_ptr<Prefilter>> Prefilter::Load(const PrefilterData&,
                                                           const std::vector<std::string>&) {
  return absl::FailedPreconditionError("prefilter: built without Vectorscan");
}

std::unique_ptr<Prefilter::Scratch> Prefilter::NewScratch() const { return nullptr; }

bool Prefilter::Scan(std::string_view, Scratch*, std::vector<Match>*) const { return false; }

}  // namespace fleet::diagnosis
