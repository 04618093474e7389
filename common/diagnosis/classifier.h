// Classifier: reads one server log (one start attempt) and names the root cause of its failure,
// not the symptom, with the evidence. Streaming: feed bytes as they arrive (AddBytes, any chunking,
// partial lines kept) or lines (AddLine); Snapshot() tells what is known so far; Finish() ends the
// input. Linear time and bounded memory whatever the input: lines over kMaxLineBytes are cut with
// a marker, evidence and facts are capped, and lines that match no pattern are skipped in bulk.
//
// How it decides (docs/design.md, "Diagnosis: root cause, not symptom"):
//  - Lines group into units: a ninja `FAILED:` block, a Python traceback, a vLLM worker error, or
//    a run of matching lines with a little trailing context.
//  - The root cause is the earliest root-cause signature; its unit is the evidence. Symptoms
//    (`collect2`, `ninja: build stopped`, the SGLang sigquit line) never win over a cause. A cause
//    named on a warning line (a benign `UserWarning: libfoo.so: cannot open ...`) counts only
//    when no error line names one.
//  - With no cause, the most specific symptom decides: a specific one, then an unrecognised
//    exception that ends a traceback (`unknown`: a cause is there, just not named), then the
//    child's death (`child_process_failed`), then other failures (`unknown`). A weak one seen
//    during a phase with a failure class (graph capture, JIT) takes that class.
//  - The server reaching READY clears what came before: only failures after it count.
//  - Offline (a whole file), a log that ends inside an unfinished JIT phase is `startup_stalled`.
//
// Owns no threads. Not thread-safe: one classifier per log; the matcher may be shared.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnosis/diagnosis.h"
#include "common/diagnosis/evidence.h"
#include "common/diagnosis/facts.h"
#include "common/diagnosis/signature_matcher.h"

namespace fleet::diagnosis {

// Events for a live follower (the agent). Called synchronously from AddBytes/AddLine/Finish,
// after the classifier's state is updated, so Snapshot() may be called from them.
class ClassifierListener {
 public:
  virtual ~ClassifierListener() = default;
  virtual void OnPhaseChanged(Phase phase, std::string_view detail, int64_t line) {}
  virtual void OnProgress(int64_t step, int64_t total, int64_t line) {}
  // The first root-cause line was read: the diagnosis is provisional.
  virtual void OnRootCause(int64_t line) {}
  // The failing unit ended: the diagnosis is final unless the server reaches READY later.
  virtual void OnFailingUnitEnded(int64_t line) {}
};

struct ClassifierOptions {
  // The input is a whole log read after the fact (`fleetctl explain`): at Finish(), a log that
  // ends inside an unfinished JIT phase is `startup_stalled`. A live follower sets it false and
  // leaves stalls to its timers.
  bool offline = true;
  size_t max_evidence_lines = 200;
};

class Classifier {
 public:
  static constexpr size_t kMaxLineBytes = 1 << 20;
  // The longest state of a line that redraws itself ("\r" + state) counted before its line ends;
  // a progress bar's is under 200 bytes.
  static constexpr size_t kMaxRedrawBytes = 4096;
  static constexpr size_t kMaxSymptoms = 64;
  static constexpr size_t kTailLines = 12;
  // Lines after the last matching line that a unit of loose lines keeps.
  static constexpr int64_t kLooseTrailing = 2;
  // A unit that runs longer is ended (its evidence is elided in the middle anyway).
  static constexpr int64_t kMaxUnitLines = 20000;
  // The frame lines of a traceback kept for a frame signature's `caller`, and their clip.
  static constexpr size_t kMaxFrames = 32;
  static constexpr size_t kMaxFrameBytes = 512;
  // A traceback fragment that starts with a frame at most this many lines after a headless one
  // ended continues it (other processes' lines came between).
  static constexpr int64_t kResumeGap = 4;

  // `matcher` (and `listener`, when given) must outlive the classifier.
  explicit Classifier(const SignatureMatcher* matcher, ClassifierOptions options = {},
                      ClassifierListener* listener = nullptr);
  ~Classifier();
  Classifier(const Classifier&) = delete;
  Classifier& operator=(const Classifier&) = delete;

  // Any bytes, any chunking; a trailing partial line waits for the next call or Finish().
  void AddBytes(std::string_view bytes);
  // One complete line, without its '\n'. Do not mix with a pending partial line of AddBytes.
  void AddLine(std::string_view line);
  // Processes a pending partial line, ends the open unit and returns the final diagnosis.
  Diagnosis Finish();
  // What is known so far; does not change the state.
  Diagnosis Snapshot() const;

  int64_t lines() const { return line_no_; }
  // The last lines read (at most kTailLines), for a stall report.
  std::vector<EvidenceLine> LastLines() const { return {tail_.begin(), tail_.end()}; }

 private:
  struct PhaseEntry {
    Phase phase;
    std::string detail;  // the JIT op, the graph backend
    int64_t line;
    std::string text;           // the phase line, clipped
    bool implicit;              // opened by a ninja step counter rather than a phase line
    std::string failure_class;  // of an unexplained failure during this phase
    Facts facts;
  };
  struct OpenUnit {
    UnitKind kind;
    int64_t serial;
    int64_t start_line;
    int64_t last_hit_line;
    int64_t lines = 0;
    bool has_hit = false;
    bool previous_was_frame = false;
    EvidenceBuilder evidence;
    Facts facts;  // captured by the unit's symptom lines (the failing ninja target, ...)
    // A traceback's frame lines so far (the last kMaxFrames, clipped), for a frame signature's
    // `caller`.
    std::deque<std::string> frames;
    bool headed_start = false;  // a traceback opened by its "Traceback (most recent ...)" line
  };
  // A deciding line: the root cause, or the first symptom of a rank.
  struct Finding {
    int signature;
    int64_t line;
    int64_t unit_serial;
    UnitKind unit;
    Facts facts;
    Phase phase;                                        // the phase the line was read in
    std::string phase_failure_class;                    // of the innermost phase that has one
    Facts phase_facts;                                  // captured by the open phases' lines
    std::optional<std::vector<EvidenceLine>> evidence;  // set when its unit has ended
  };

  void ProcessBuffer(std::string_view text);
  // Matches `raw` and processes it.
  void ProcessLine(std::string_view raw);
  // Processes `raw`, whose patterns are in hits_.
  void ProcessMatchedLine(std::string_view raw);
  void AppendCarry(std::string_view bytes);
  void FlushCarry();
  void PushTail(int64_t line, std::string_view text);
  void UpdateTailFromBuffer(std::string_view text);
  bool NeedsEveryLine() const { return unit_.has_value(); }

  void OpenUnitAt(UnitKind kind);
  // `headed`: a traceback ends on its exception line (frames then tell nothing more).
  void EndUnit(bool headed = false);
  void OnFrame(int index, std::string_view raw, std::string_view stripped);
  // Whether `stripped`, ending a traceback, is its exception line.
  bool IsTracebackEnd(std::string_view stripped) const;
  bool UnitEndsBefore(std::string_view stripped, bool starts_unit, bool include_line,
                      bool has_classifying, bool has_symptom) const;
  bool UnitEndsAfter(std::string_view stripped) const;

  void OnRoot(int index, std::string_view raw, bool on_warning);
  void OnSymptom(int index, std::string_view raw, bool ends_traceback);
  void OnPhase(int index, std::string_view raw);
  // `line`: the line the steps are counted on (a redraw counts on the unfinished next line).
  void OnProgress(int index, std::string_view raw, int64_t line);
  // Bytes were added to an unfinished line: if it redraws itself, its current state counts.
  void ScanRedraw(std::string_view added);
  void OnRedraw(std::string_view state);
  void ResetForReady();
  Phase CurrentPhase() const;
  Finding MakeFinding(int index, std::string_view raw) const;
  std::vector<EvidenceLine> EvidenceOf(const Finding& f) const;
  Diagnosis Decide(bool finished) const;

  // Constant after construction.
  const SignatureMatcher* matcher_;
  const ClassifierOptions options_;
  ClassifierListener* listener_;
  std::unique_ptr<SignatureMatcher::Scanner> scanner_;

  int64_t line_no_ = 0;
  int64_t unit_serial_ = 0;
  std::string carry_;
  int64_t carry_cut_bytes_ = 0;
  bool carry_redraws_ = false;  // the unfinished line has a '\r' (a progress bar's redraws)
  std::string scratch_;
  std::vector<int> hits_;
  std::optional<OpenUnit> unit_;
  std::optional<Finding> root_;
  // The first cause named on a warning line; used when no error line names one.
  std::optional<Finding> warning_root_;
  // The innermost named frame of the open traceback (at most one pending), then of the first
  // traceback that ended without its exception line; and the first such traceback with no named
  // frame (its first line): an `unknown` failure, low confidence.
  std::optional<Finding> pending_frame_;
  std::optional<Finding> frame_root_;
  std::optional<Finding> headless_;
  int64_t frame_root_end_ = 0;  // the last line of frame_root_'s and headless_'s tracebacks
  int64_t headless_end_ = 0;
  // First symptom of each rank (index = DiagnosisClassInfo::symptom_rank; 3 is an unrecognised
  // exception that ends a traceback).
  std::array<std::optional<Finding>, 5> symptom_by_rank_;
  std::vector<SymptomHit> symptoms_;
  std::vector<PhaseEntry> phases_;
  bool ready_ = false;
  int64_t progress_step_ = 0;
  int64_t progress_total_ = 0;
  Facts context_;
  std::deque<EvidenceLine> tail_;
};

}  // namespace fleet::diagnosis
