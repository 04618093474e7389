#include "common/diagnosis/prefilter.h"

#include <hs/hs_runtime.h>

#include <climits>

#include "absl/strings/str_cat.h"

namespace fleet::diagnosis {

struct Prefilter::Database {
  hs_database_t* db = nullptr;
  ~Database() { hs_free_database(db); }
};

Prefilter::Scratch::~Scratch() { hs_free_scratch(scratch_); }

Prefilter::~Prefilter() = default;

absl::StatusOr<std::unique_ptr<Prefilter>> Prefilter::Load(
    const PrefilterData& data, const std::vector<std::string>& patterns) {
  if (data.fingerprint != PatternsFingerprint(patterns)) {
    return absl::FailedPreconditionError("prefilter: built from other patterns");
  }
  auto p = std::unique_ptr<Prefilter>(new Prefilter());
  p->db_ = std::make_unique<Database>();
  hs_error_t rc = HS_INVALID;
  for (std::string_view serialized : data.databases) {
    rc = hs_deserialize_database(serialized.data(), serialized.size(), &p->db_->db);
    if (rc == HS_SUCCESS) break;
  }
  if (rc != HS_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefilter: the database does not load on this machine (hs error ", rc, ")"));
  }
  p->confirm_.assign(patterns.size(), false);
  for (int id : data.confirm) {
    if (id < 0 || static_cast<size_t>(id) >= patterns.size()) {
      return absl::FailedPreconditionError("prefilter: confirm list out of range");
    }
    p->confirm_[static_cast<size_t>(id)] = true;
  }
  // The scratch must be allocatable: a database this runtime can scan.
  if (p->NewScratch() == nullptr) {
    return absl::FailedPreconditionError("prefilter: cannot allocate scan space");
  }
  return p;
}

std::unique_ptr<Prefilter::Scratch> Prefilter::NewScratch() const {
  auto s = std::make_unique<Scratch>();
  if (hs_alloc_scratch(db_->db, &s->scratch_) != HS_SUCCESS) return nullptr;
  return s;
}

bool Prefilter::Scan(std::string_view text, Scratch* scratch, std::vector<Match>* matches) const {
  if (scratch == nullptr || text.size() > UINT_MAX) return false;
  struct Context {
    std::vector<Match>* matches;
    size_t limit;
  } context{matches, matches->size() + text.size() / kBytesPerMatch + kMinMatches};
  const auto on_match = [](unsigned int id, unsigned long long, unsigned long long to, unsigned int,
                           void* ctx) {
    auto* c = static_cast<Context*>(ctx);
    if (c->matches->size() >= c->limit) return 1;  // stop: the caller asks RE2 instead
    c->matches->push_back({to, id});
    return 0;
  };
  return hs_scan(db_->db, text.data(), static_cast<unsigned int>(text.size()), 0, scratch->scratch_,
                 on_match, &context) == HS_SUCCESS;
}

}  // namespace fleet::diagnosis
