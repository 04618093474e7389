// Prefilter: a catalogue's patterns as one Vectorscan database (the portable Hyperscan), loaded
// from its serialised form, that finds in one pass over a buffer of lines which patterns match on
// which lines. The classifier's SignatureMatcher runs RE2 only on what it reports (issue 15).
//
// The database is built from the RE2 patterns by BuildPrefilterDatabase
// (common/diagnosis/vectorscan_patterns.h): at build time for the built-in catalogue
// (prefilter_db_gen, embedded as BuiltinPrefilter()). Only Vectorscan's runtime is used here, so
// the binaries carry no regex compiler. Built with -DFLEET_VECTORSCAN=OFF, Load() always fails
// and BuiltinPrefilter() is null: the matcher then runs RE2 alone, with the same answers.
//
// A Prefilter is immutable and shared between threads; each scanning thread has its own Scratch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct hs_scratch;  // Vectorscan's hs_scratch_t

namespace fleet::diagnosis {

// What a build embeds for the built-in catalogue.
struct PrefilterData {
  // hs_serialize_database's bytes, tried in order: the first that loads on this CPU is used (the
  // build embeds one tuned for the build machine's CPU, then one for any x86-64).
  std::vector<std::string_view> databases;
  std::vector<int> confirm;  // patterns whose matches RE2 must confirm
  uint64_t fingerprint = 0;  // PatternsFingerprint of the patterns it was built from
};

// The built-in catalogue's database, or null when built without Vectorscan.
const PrefilterData* BuiltinPrefilter();

// FNV-1a over the patterns (each followed by a NUL): ties a database to the patterns it was built
// from, so a stale one is never used.
uint64_t PatternsFingerprint(const std::vector<std::string>& patterns);

class Prefilter {
 public:
  struct Match {
    uint64_t end;  // offset just past the match's last byte
    unsigned int id;
  };
  // Vectorscan's per-thread scan space.
  class Scratch {
   public:
    Scratch() = default;
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

   private:
    friend class Prefilter;
    hs_scratch* scratch_ = nullptr;
  };

  // Loads `data` built for `patterns`. FailedPrecondition when the fingerprint differs, when this
  // CPU cannot run the database, or when built without Vectorscan.
  static absl::StatusOr<std::unique_ptr<Prefilter>> Load(const PrefilterData& data,
                                                         const std::vector<std::string>& patterns);
  ~Prefilter();

  std::unique_ptr<Scratch> NewScratch() const;
  // Appends every match in `text` (where it ends, which pattern), in the order found. False when
  // the scan could not run or found more than one match per kBytesPerMatch bytes (plus
  // kMinMatches): then `matches` holds nothing reliable. Real logs give about one per 500 bytes;
  // the bound keeps a hostile text (one line of `FAILED: FAILED: ...`) from costing memory in
  // proportion to its matches.
  bool Scan(std::string_view text, Scratch* scratch, std::vector<Match>* matches) const;
  static constexpr size_t kBytesPerMatch = 16;
  static constexpr size_t kMinMatches = 4096;
  bool NeedsConfirm(int id) const { return confirm_[static_cast<size_t>(id)]; }

 private:
  struct Database;
  Prefilter() = default;
  std::unique_ptr<Database> db_;
  std::vector<bool> confirm_;
};

}  // namespace fleet::diagnosis
