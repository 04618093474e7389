// StemsLogGenerator: writes the log of the benchmark's third comparison (bench/run.sh, issue 15):
// a startup log over which `grep -E -f bench/classifier/stems.txt` (30 short message stems a
// person greps for) matches about a quarter of the lines, deterministically from a seed.
//
// The body is StartupLogGenerator's text (SGLang records, JIT builds, progress bars) with one
// injected failure, its first, which decides the log's class. After the block that holds that
// failure, the generator interleaves single lines that carry a stem (an ImportError, a CUDA error,
// a bind failure, a linker message, ...), with the prefixes such lines have in real logs, until
// `stem_percent` of all lines match a stem. No line is inserted before the failure: the earliest
// root cause is the injected one, so the class and line `fleetctl explain` must report are the
// failure's. Which lines match is decided by the stems themselves (RE2 in POSIX syntax, as
// `LC_ALL=C grep -E` reads them), so matching_lines() is what grep -c must count.
//
// The same seed, options and stems give the same bytes on every platform. Not thread-safe; one
// generator per output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/classifier/startup_log_generator.h"
#include "re2/set.h"

namespace fleet::bench {

struct StemsLogOptions {
  uint64_t seed = 1;
  // The body's JIT share (StartupLogOptions::jit_percent).
  int jit_percent = 17;
  // Share of lines that match a stem, 1-99.
  int stem_percent = 25;
};

// The non-empty lines of a grep -f pattern file.
absl::StatusOr<std::vector<std::string>> ReadStemsFile(const std::string& path);

class StemsLogGenerator {
 public:
  // InvalidArgument when a stem does not compile as a POSIX ERE or none is given.
  static absl::StatusOr<std::unique_ptr<StemsLogGenerator>> Create(
      StemsLogOptions options, const std::vector<std::string>& stems, int64_t target_bytes);

  // Appends the next block of complete lines ('\n'-terminated) to `out`.
  void AppendBlock(std::string* out);

  int64_t bytes() const { return bytes_; }
  int64_t lines() const { return lines_; }
  // Lines that match at least one stem, inserted or not.
  int64_t matching_lines() const { return matching_lines_; }
  // Lines the generator inserted for their stem.
  int64_t inserted_lines() const { return inserted_lines_; }
  const std::optional<InjectedFailure>& first_failure() const { return body_.first_failure(); }

  // True when `line` matches a stem.
  bool Matches(std::string_view line) const;

 private:
  StemsLogGenerator(StemsLogOptions options, std::unique_ptr<re2::RE2::Set> stems,
                    int64_t target_bytes);

  uint64_t Next();  // splitmix64: small and the same everywhere
  uint64_t Below(uint64_t n) { return ((Next() >> 32) * n) >> 32; }
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo + 1)));
  }
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[Below(N)];
  }

  void Line(std::string* out, std::string_view text);
  // One line that carries a stem, in one of the shapes real logs print it.
  std::string StemLine();

  // Constant after construction.
  const StemsLogOptions options_;
  const std::unique_ptr<re2::RE2::Set> stems_;

  StartupLogGenerator body_;
  uint64_t state_;
  std::string body_block_;
  std::string stamp_ = "2026-11-29 10:00:00";  // the body's last SGLang timestamp
  int64_t bytes_ = 0;
  int64_t lines_ = 0;
  int64_t matching_lines_ = 0;
  int64_t inserted_lines_ = 0;
};

}  // namespace fleet::bench
