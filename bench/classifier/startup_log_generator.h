// StartupLogGenerator: writes a large, realistic inference-server startup log for the classifier
// benchmark (bench/run.sh), deterministically from a seed.
//
// The text mixes what a long SGLang + flashinfer JIT start prints: SGLang records from several TP
// ranks (weight loading, memory and KV-cache stats, server arguments), flashinfer `Loading JIT
// ops` phases whose verbose ninja output is 1-4 KB nvcc command lines, nvcc and GCC warning
// blocks, tqdm progress bars redrawn with '\r' on one line, harmless logged tracebacks, and a
// finished earlier attempt (READY) at the top. Most lines match no signature; ninja step lines,
// which do, are common. Failures are sprinkled in: one failing unit (a ninja FAILED block, a
// scheduler traceback) every few MiB, each with a known root-cause class and line. The first one
// decides the log's class, so the benchmark checks the classifier's answer as well as its speed.
//
// The same seed and options give the same bytes on every platform (own PRNG and arithmetic, no
// std:: distributions). Not thread-safe; one generator per output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fleet::bench {

struct StartupLogOptions {
  uint64_t seed = 1;
  // Mean distance between injected failures; each gap is uniform in [0.5, 1.5] of it.
  int64_t mean_failure_spacing_bytes = 4 << 20;
  // The first failure comes after the prologue, within this many bytes of the start (or of the
  // requested size, when smaller): the class is decided early and must survive the rest.
  int64_t first_failure_within_bytes = 2 << 20;
  // Share of blocks that are JIT builds (ninja steps and compiler warnings), 0-100: the knob for
  // how much of the log is long matching lines (see AppendBlock).
  int jit_percent = 17;
};

// A failure the generator wrote: the class the classifier must report when it is the first one.
struct InjectedFailure {
  std::string_view kind;             // what was injected, e.g. "ptxas_unsupported_version"
  std::string_view diagnosis_class;  // a class string of docs/design.md's table
  int64_t root_cause_line = 0;       // 1-based line number of the deciding line
};

class StartupLogGenerator {
 public:
  // `target_bytes` is the size the caller will stop at; it places the first failure.
  StartupLogGenerator(StartupLogOptions options, int64_t target_bytes);

  // Appends the next block of complete lines ('\n'-terminated) to `out`: a few hundred bytes to
  // a few tens of KiB.
  void AppendBlock(std::string* out);

  int64_t bytes() const { return bytes_; }
  int64_t lines() const { return lines_; }
  int64_t failures() const { return failures_; }
  const std::optional<InjectedFailure>& first_failure() const { return first_failure_; }

 private:
  // xoshiro256**, seeded through splitmix64: small, fast, and the same everywhere.
  uint64_t Next();
  // Uniform in [0, n), n < 2^32.
  uint64_t Below(uint64_t n);
  // Uniform in [lo, hi].
  int64_t Between(int64_t lo, int64_t hi);
  bool Chance(int percent) { return Below(100) < static_cast<uint64_t>(percent); }
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[Below(N)];
  }

  // One line, '\n' added; counts bytes and lines.
  void Line(std::string* out, std::string_view text);
  void Advance(int64_t min_ms, int64_t max_ms);
  std::string Stamp() const;           // "2026-11-29 10:00:00"
  std::string SglangPrefix(int rank);  // "[2026-11-29 10:00:00 TP3] "
  std::string SglangPrefix();          // "[2026-11-29 10:00:00] "
  std::string FlashinferPrefix();      // "2026-11-29 10:00:00,123 - INFO - flashinfer.jit: "

  std::string JitOpName();
  std::string NvccCommand(const std::string& op, const std::string& stem);
  std::string LinkCommand(const std::string& op, int objects);

  void Prologue(std::string* out);
  void JitBuild(std::string* out);
  void NvccWarning(std::string* out, const std::string& op);
  void GccWarning(std::string* out);
  void SglangRecords(std::string* out);
  void ProgressBar(std::string* out);
  void HarmlessTraceback(std::string* out);
  void Failure(std::string* out);
  // Writes `text` as the failure's deciding line and records it.
  void RootCauseLine(std::string* out, std::string_view text, std::string_view kind,
                     std::string_view diagnosis_class);

  // Constant after construction.
  const StartupLogOptions options_;

  uint64_t state_[4];
  int64_t bytes_ = 0;
  int64_t lines_ = 0;
  int64_t failures_ = 0;
  int64_t next_failure_at_;
  int64_t clock_ms_ = 0;  // since 2026-11-29 10:00:00
  int tp_size_;
  bool prologue_done_ = false;
  std::optional<InjectedFailure> first_failure_;
};

}  // namespace fleet::bench
