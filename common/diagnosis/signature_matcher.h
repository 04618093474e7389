// SignatureMatcher: the compiled form of a signature catalogue, and the structural patterns that
// delimit units (ninja FAILED blocks, tracebacks). Immutable after Create(); safe to share between
// threads and classifiers.
//
// All patterns run in linear time (RE2, bytes as Latin-1, so invalid UTF-8 and NULs are plain
// bytes). Three ways to match:
//  - Match(line): every pattern a line matches, in one pass (RE2::Set). When the set's DFA runs
//    out of memory it falls back to the patterns one by one, so a miss is never silent.
//  - FindCandidate(text): where the next line that matches anything starts, over many lines at
//    once (one alternation, DFA), so the classifier skips the lines that match nothing without
//    looking at them one by one.
//  - Extract(i, line): the named captures of pattern i, as facts.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/diagnosis/facts.h"
#include "common/diagnosis/signature.h"
#include "re2/re2.h"
#include "re2/set.h"

namespace fleet::diagnosis {

// Structural patterns, numbered after the catalogue's signatures (index = size() + value).
enum class Structure { kNinjaFailed = 0, kTraceback, kFrame, kWorkerError, kIncludedFrom, kCount };

class SignatureMatcher {
 public:
  // The built-in catalogue, compiled on first use and kept for the life of the process:
  // immutable, safe to share between threads. The built-in catalogue always compiles (tests
  // check it); if it did not, this aborts with the error.
  static const SignatureMatcher& Builtin();

  // Compiles `signatures`. InvalidArgument names the signature's origin (file:line) and the
  // pattern's error, or a summary `{key}` that the pattern does not capture.
  static absl::StatusOr<std::unique_ptr<SignatureMatcher>> Create(
      std::vector<Signature> signatures);
  // The built-in catalogue, or the catalogue file at `path` when it is not empty.
  static absl::StatusOr<std::unique_ptr<SignatureMatcher>> Load(const std::string& path);

  ~SignatureMatcher();

  const std::vector<Signature>& signatures() const { return signatures_; }
  // Number of catalogue signatures; indices from here on are structural patterns.
  int size() const { return static_cast<int>(signatures_.size()); }
  static int StructureIndex(int size, Structure s) { return size + static_cast<int>(s); }

  // Appends to `hits` the index of every pattern `line` matches, ascending.
  void Match(std::string_view line, std::vector<int>* hits) const;

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
  // Whether a line is a warning (Python `UserWarning:`, a WARNING log level, `nvcc warning`): a
  // cause named on a warning is weaker than one named on an error.
  bool IsWarningLine(std::string_view line) const;

  // The RE2 patterns it runs: the signatures' then the structural ones (the classifier
  // benchmark hands them to grep, translated: bench/classifier/re2_to_ere.h).
  const std::vector<std::string>& patterns() const { return patterns_; }

  // The memory budget of the alternation FindCandidate runs (bytes), sized from its program.
  int64_t alternation_budget() const { return any_budget_; }

 private:
  struct Capture {
    std::string key;  // fact key; "package"/"version" pair into `packages`
    int group;        // 1-based capturing group
  };
  struct Compiled {
    std::unique_ptr<RE2> re;
    std::vector<Capture> captures;
    bool first_values_only = false;  // not all_matches, no package/version
  };

  SignatureMatcher() = default;

  std::vector<Signature> signatures_;
  std::vector<std::string> patterns_;  // signatures then structural patterns
  std::vector<Compiled> compiled_;     // one per pattern
  std::unique_ptr<RE2::Set> set_;
  std::unique_ptr<RE2> any_;  // every pattern in one alternation, for FindCandidate
  int64_t any_budget_ = 0;
  std::vector<std::unique_ptr<RE2>> prefixes_;
  std::unique_ptr<RE2> exception_line_;
  std::unique_ptr<RE2> warning_line_;
};

}  // namespace fleet::diagnosis
