// The signature catalogue's RE2 patterns in the form Vectorscan (the portable Hyperscan, <hs/hs.h>)
// compiles, for measuring what a multi-pattern prefilter in front of the RE2 matcher could give
// (issue 15; bench/classifier/hs_scan_bench.cc).
//
// Re2ToVectorscan rewrites one pattern: named groups become non-capturing ones, a leading (?i)
// becomes HS_FLAG_CASELESS, and every construct that could reach a '\n' is made to stop at one, so
// that a whole buffer of lines scanned at once (with HS_FLAG_MULTILINE, for ^ and $) reports the
// same lines as one scan per line: \s is RE2's [\t\n\f\r ] without '\n' (PCRE's \s also holds \v),
// \S, \D and \W exclude '\n', and a negated class gets '\n'. A line never holds '\n', so these
// match the same lines as the RE2 pattern does. Syntax it does not know is copied for the
// compiler to judge. The '\n' in negated classes also works around a Vectorscan 5.4.9 bug: it
// misses `x "[^"]*", y` when the class runs over more than 64 bytes (a class excluding two bytes
// is found), so a prefilter built on it must keep being compared with RE2 (hs_patterns_test).
//
// CompileVectorscanCatalogue compiles them with HS_FLAG_PREFILTER (Vectorscan then accepts
// constructs it cannot run exactly and may report a match RE2 would not, never miss one), each
// pattern's id being its index in the input. A pattern the compiler refuses is left out and listed
// with Vectorscan's reason, so one bad pattern does not hide the rest's figures.
//
// BuildPrefilterDatabase is what the classifier's prefilter runs (common/diagnosis/prefilter.h):
// each translation also loses its trailing repeats (TrimTrailingRepeats), and is compiled exactly
// where Vectorscan can, as a prefilter where it cannot; it is serialised so that the build can
// embed it (prefilter_db_gen).
//
// Pure functions; a VectorscanCatalogue owns its database (immutable, shareable between threads;
// each scanning thread needs its own hs_scratch_t).
#pragma once

#include <hs/hs.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::diagnosis {

struct VectorscanPattern {
  std::string expression;
  unsigned int flags = 0;  // HS_FLAG_CASELESS when the RE2 pattern opens with (?i)
};

VectorscanPattern Re2ToVectorscan(std::string_view re2_pattern);

struct HsDatabaseDeleter {
  void operator()(hs_database_t* db) const { hs_free_database(db); }
};
using HsDatabase = std::unique_ptr<hs_database_t, HsDatabaseDeleter>;

struct HsScratchDeleter {
  void operator()(hs_scratch_t* s) const { hs_free_scratch(s); }
};
using HsScratch = std::unique_ptr<hs_scratch_t, HsScratchDeleter>;

struct RefusedPattern {
  int index = 0;
  std::string pattern;  // the RE2 pattern
  std::string error;    // Vectorscan's compile error for its translation
};

struct VectorscanCatalogue {
  HsDatabase database;
  std::vector<int> ids;                 // the indices compiled into `database`, ascending
  std::vector<RefusedPattern> refused;  // left out
  // Compiled, but only as a prefilter: Vectorscan cannot run them exactly (without
  // HS_FLAG_PREFILTER it refuses them), so their matches are candidates for RE2 to confirm.
  std::vector<int> inexact;
  double compile_ms = 0;  // hs_compile_multi of the accepted patterns, wall time
};

// Compiles `re2_patterns` translated, with HS_FLAG_PREFILTER | `mode_flags` (HS_FLAG_SINGLEMATCH
// for one scan per line; HS_FLAG_MULTILINE for whole buffers of lines) in block mode.
// InvalidArgument when no pattern compiles; Internal when Vectorscan refuses the set of patterns
// it accepted one by one.
absl::StatusOr<VectorscanCatalogue> CompileVectorscanCatalogue(
    const std::vector<std::string>& re2_patterns, unsigned int mode_flags);

// `expression` (Vectorscan syntax) without the trailing parts that only lengthen a match: a last
// atom that may be left out goes, one that may repeat keeps its minimum (`/[^:]+` -> `/[^:]`), and
// a last group's alternatives are trimmed the same way. A line holds a match of the result
// exactly when it holds one of `expression`; a scan reporting every match then reports each once
// instead of once per end offset. An alternative is never trimmed down to nothing.
std::string TrimTrailingRepeats(std::string_view expression);

struct PrefilterDatabase {
  // hs_serialize_database of a block-mode database (HS_FLAG_MULTILINE: a buffer of lines), each
  // pattern's id its index in the input.
  std::string serialized;
  // The patterns compiled with HS_FLAG_PREFILTER because Vectorscan cannot run them exactly:
  // their matches are candidates for RE2 to confirm. Ascending.
  std::vector<int> confirm;
};

// The whole catalogue for the prefilter: every pattern must compile (InvalidArgument names the
// first that does not, with Vectorscan's reason); the database targets any x86-64 CPU
// (`portable`) or the one it is built on.
absl::StatusOr<PrefilterDatabase> BuildPrefilterDatabase(
    const std::vector<std::string>& re2_patterns, bool portable = true);

}  // namespace fleet::diagnosis
