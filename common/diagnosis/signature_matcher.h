// SignatureMatcher: the compiled form of a signature catalogue, and the structural patterns that
// delimit units (ninja FAILED blocks, tracebacks). Immutable after Create(); safe to share between
// threads and classifiers.
//
// All patterns run in linear time (RE2, bytes as Latin-1, so invalid UTF-8 and NULs are plain
// bytes). With a prefilter (prefilter.h: the built-in catalogue's Vectorscan database, built at
// build time), MatchLines and Match(line, hits, scanner) find the patterns a line matches in one
// Vectorscan pass, and RE2 runs only for captures and to confirm the few patterns Vectorscan can
// run only approximately: the same answers as RE2 alone (tests and a fuzz target compare). The
// ways to match:
//  - MatchLines(text, scanner): every line of a buffer that matches anything, with its patterns.
//  - Match(line): every pattern a line matches, in one pass (RE2::Set). When the set's DFA runs
//    out of memory it falls back to the patterns one by one, so a miss is never silent.
//  - FindCandidate(text): where the next line that matches anything starts, over many lines at
//    once (one alternation, DFA), so the classifier skips the lines that match nothing without
//    looking at them one by one.
//  - Extract(i, line): the named captures of pattern i, as facts.
#pragma once

#include <bitset>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "common/diagnosis/facts.h"
#include "common/diagnosis/prefilter.h"
#include "common/diagnosis/signature.h"
#include "common/diagnosis/signature_catalogue.h"
#include "re2/re2.h"
#include "re2/set.h"

namespace fleet::diagnosis {

class SignatureMatcher {
 public:
  // The built-in catalogue, compiled on first use and kept for the life of the process:
  // immutable, safe to share between threads. The built-in catalogue always compiles (tests
  // check it); if it did not, this aborts with the error. Load("").
  static const SignatureMatcher& Builtin();

  // One thread's scan state (the prefilter's scratch space, buffers): a Classifier has one.
  class Scanner {
   public:
    struct Line {
      size_t begin = 0;  // offset of the line in the text
      size_t end = 0;    // offset of its '\n' (or the text's end)
      size_t first = 0;  // its patterns: hits()[first, first + count), ascending
      size_t count = 0;
    };
    Scanner();
    ~Scanner();
    const std::vector<Line>& lines() const { return lines_; }
    const std::vector<int>& hits() const { return hits_; }
    // How many buffers MatchLines handed to RE2 because the prefilter could not scan them.
    int64_t re2_fallbacks() const { return re2_fallbacks_; }

   private:
    friend class SignatureMatcher;
    std::unique_ptr<Prefilter::Scratch> scratch_;
    std::vector<Prefilter::Match> matches_;
    std::vector<Line> lines_;
    std::vector<int> hits_;
    int64_t re2_fallbacks_ = 0;
  };
  // Whether matching goes through a prefilter.
  bool has_prefilter() const { return prefilter_ != nullptr; }
  std::unique_ptr<Scanner> NewScanner() const;

  // Compiles `signatures`. InvalidArgument names the signature's origin (file:line) and the
  // pattern's error, or a summary `{key}` that the pattern does not capture. With `prefilter`
  // (a database built for these signatures' MatcherPatterns), matching goes through it; when it
  // does not load (built for other patterns, or for a CPU this is not), RE2 runs alone and a
  // warning says why.
  static absl::StatusOr<std::unique_ptr<SignatureMatcher>> Create(
      std::vector<Signature> signatures, const PrefilterData* prefilter = nullptr);
  // The built-in catalogue with its prefilter (unless the environment has
  // FLEET_CLASSIFIER_PREFILTER=off), or the catalogue file at `path` when it is not empty (RE2
  // alone: only the built-in catalogue's database is built with the binaries).
  static absl::StatusOr<std::unique_ptr<SignatureMatcher>> Load(const std::string& path);

  ~SignatureMatcher();

  const std::vector<Signature>& signatures() const { return signatures_; }
  // Number of catalogue signatures; indices from here on are structural patterns.
  int size() const { return static_cast<int>(signatures_.size()); }
  static int StructureIndex(int size, Structure s) { return size + static_cast<int>(s); }

  // Appends to `hits` the index of every pattern `line` matches, ascending: RE2's set; with
  // `scanner`, through the prefilter when there is one.
  void Match(std::string_view line, std::vector<int>* hits) const;
  void Match(std::string_view line, std::vector<int>* hits, Scanner* scanner) const;

  // Every line of `text` (whole lines, '\n'-terminated; a last line without one counts too) that
  // some pattern matches, in order, with its patterns, into scanner->lines() and hits(). The same
  // lines and patterns as Match() line by line.
  void MatchLines(std::string_view text, Scanner* scanner) const;

  // Offset in `text` (whole lines) of a byte inside the first line that some pattern matches, or
  // std::string_view::npos.
  size_t FindCandidate(std::string_view text) const;

  // Adds the named captures of signature `index` on `line` to `facts`.
  void Extract(int index, std::string_view line, Facts* facts) const;
  // Whether Extract(index, ...) could add nothing to `facts`: every key it captures has a value
  // already and it collects only first values (no all_matches, no packages).
  bool AddsNothingTo(int index, const Facts& facts) const;

  // `line` without the log-record prefixes that hide its structure: journald, vLLM's
  // "(EngineCore pid=1) ERROR 10-30 18:49:38 [core.py:708] ", SGLang's "[2026-01-01 10:00:00
  // TP0] ", grep -n's "1234:", and similar. Applied repeatedly; the message's own indentation is
  // kept.
  std::string_view StripLogPrefixes(std::string_view line) const;
  // Whether a prefix-stripped line starts like a Python exception line ("RuntimeError: ...",
  // "subprocess.CalledProcessError: ...").
  bool IsExceptionLine(std::string_view stripped) const;
  // Whether signature `index` has a `caller`, and whether `frame` (a traceback's frame line)
  // matches it.
  bool HasCaller(int index) const {
    return compiled_[static_cast<size_t>(index)].caller != nullptr;
  }
  bool MatchesCaller(int index, std::string_view frame) const;
  // Whether a line is a warning (Python `UserWarning:`, a WARNING log level, `nvcc warning`): a
  // cause named on a warning is weaker than one named on an error.
  bool IsWarningLine(std::string_view line) const;
  // Whether a line is informational (NCCL's INFO lines): it names no cause and no failure.
  bool IsInfoLine(std::string_view line) const;

  // The RE2 patterns it runs: the signatures' then the structural ones (the classifier
  // benchmark hands them to grep, translated: bench/classifier/re2_to_ere.h).
  const std::vector<std::string>& patterns() const { return patterns_; }

  // The memory budget of the alternation FindCandidate runs (bytes), sized from its program.
  int64_t alternation_budget() const;

 private:
  struct Capture {
    std::string key;  // fact key; "package"/"version" pair into `packages`
    int group;        // 1-based capturing group
  };
  struct Compiled {
    std::unique_ptr<RE2> re;
    std::vector<Capture> captures;
    std::unique_ptr<RE2> caller;     // a frame signature's `caller`
    bool first_values_only = false;  // not all_matches, no package/version
  };

  SignatureMatcher() = default;
  // Keeps the patterns the prefilter reported on `line` that RE2 confirms.
  void Confirm(std::string_view line, std::vector<int>* hits, size_t from) const;
  void MatchLinesWithRe2(std::string_view text, Scanner* scanner) const;

  std::vector<Signature> signatures_;
  std::vector<std::string> patterns_;  // signatures then structural patterns
  std::vector<Compiled> compiled_;     // one per pattern
  // RE2's set (Match) and the alternation (FindCandidate), compiled at Create without a
  // prefilter, on first use with one (SetCompiled, AlternationStatus: thread-safe).
  bool SetCompiled() const;
  absl::Status AlternationStatus() const;
  std::unique_ptr<RE2::Set> set_;
  mutable absl::once_flag set_once_;
  mutable bool set_compiled_ = false;
  std::string alternation_;  // every pattern in one alternation, for FindCandidate
  mutable absl::once_flag any_once_;
  mutable std::unique_ptr<RE2> any_;
  mutable int64_t any_budget_ = 0;
  mutable absl::Status any_status_;
  // Log prefix patterns, each with the bytes a line it matches can start with (from RE2's
  // PossibleMatchRange: a line that starts otherwise is not tried), and their union.
  struct Prefix {
    std::unique_ptr<RE2> re;
    std::bitset<256> first;
  };
  std::vector<Prefix> prefixes_;
  std::bitset<256> prefix_first_;
  std::unique_ptr<RE2> exception_line_;
  std::unique_ptr<RE2> warning_line_;
  std::unique_ptr<RE2> info_line_;
  std::unique_ptr<Prefilter> prefilter_;
};

}  // namespace fleet::diagnosis
