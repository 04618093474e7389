#include "common/diagnosis/classifier.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::diagnosis {
namespace {

using ::fleet::AsAbsl;

// Runs over every byte the matcher skips in bulk, so it counts eight bytes at a time (SWAR,
// portable): a byte loop costs several instructions per byte at -O2, about as much as the skip.
size_t CountNewlines(std::string_view text) {
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7fULL;
  constexpr uint64_t kNewlines = 0x0a0a0a0a0a0a0a0aULL;
  const char* p = text.data();
  size_t left = text.size();
  size_t count = 0;
  for (; left >= 8; p += 8, left -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof word);
    const uint64_t x = word ^ kNewlines;  // 0x00 exactly where a '\n' was
    // Bit 7 of each byte set iff that byte of x is zero; no carry crosses a byte.
    const uint64_t zero = ~(((x & kLow7) + kLow7) | x | kLow7);
    // One 0/1 per byte; the multiply sums the eight bytes into the top one.
    count += static_cast<size_t>(((zero >> 7) * 0x0101010101010101ULL) >> 56);
  }
  for (; left > 0; ++p, --left) count += *p == '\n';
  return count;
}

std::string_view LeftTrim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::string_view RightTrim(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The last state of a line that redraws itself ("\r" + the new state, as tqdm's progress bars
// write): the text after its last '\r' that is followed by more than spaces. Only steps are read
// from it; causes are looked for in the whole line (a '\r' can sit anywhere in a broken line).
std::string_view ShownText(std::string_view line) {
  const void* first = std::memchr(line.data(), '\r', line.size());
  if (first == nullptr) return line;
  size_t end = line.size();
  while (end > 0) {
    const size_t cr = line.rfind('\r', end - 1);
    const size_t begin = cr == std::string_view::npos ? 0 : cr + 1;
    std::string_view state = line.substr(begin, end - begin);
    if (state.find_first_not_of(" \t") != std::string_view::npos) return state;
    if (cr == std::string_view::npos) break;
    end = cr;
  }
  return line;
}

// Whether a line that ends a traceback is its exception line: a dotted name alone or before ':'
// ("ValueError: x", "triton.runtime.errors.OutOfResources: x", "KeyboardInterrupt"), not only the
// names IsExceptionLine knows. A traceback that ends otherwise lost its exception line.
bool LooksLikeExceptionLine(std::string_view s) {
  size_t i = 0;
  for (;;) {
    if (i >= s.size() || !(absl::ascii_isalpha(static_cast<unsigned char>(s[i])) || s[i] == '_')) {
      return false;
    }
    while (i < s.size() && (absl::ascii_isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) {
      ++i;
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      continue;
    }
    break;
  }
  const std::string_view rest = RightTrim(s.substr(i));
  return rest.empty() || rest[0] == ':';
}

// "[12/345] ..." as ninja prints a step.
bool IsNinjaStep(std::string_view s) {
  s = LeftTrim(s);
  if (s.size() < 5 || s[0] != '[') return false;
  size_t i = 1;
  const size_t digits_start = i;
  while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == digits_start || i >= s.size() || s[i] != '/') return false;
  const size_t total_start = ++i;
  while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
  return i > total_start && i < s.size() && s[i] == ']';
}

std::string RenderSummary(std::string_view templ, const Facts& facts) {
  std::string out;
  size_t i = 0;
  while (i < templ.size()) {
    const size_t open = templ.find('{', i);
    if (open == std::string_view::npos) break;
    const size_t close = templ.find('}', open);
    if (close == std::string_view::npos) break;
    out.append(templ.substr(i, open - i));
    const std::string_view key = templ.substr(open + 1, close - open - 1);
    const std::string_view value = facts.First(key);
    out.append(value.empty() ? std::string_view("?") : value);
    i = close + 1;
  }
  out.append(templ.substr(i));
  return out;
}

}  // namespace

Classifier::Classifier(const SignatureMatcher* matcher, ClassifierOptions options,
                       ClassifierListener* listener)
    : matcher_(matcher), options_(options), listener_(listener), scanner_(matcher->NewScanner()) {}

Classifier::~Classifier() = default;

void Classifier::AddBytes(std::string_view data) {
  while (!data.empty()) {
    if (!carry_.empty() || carry_cut_bytes_ > 0) {
      const void* nl = std::memchr(data.data(), '\n', data.size());
      if (nl == nullptr) {
        AppendCarry(data);
        ScanRedraw(data);
        return;
      }
      const size_t n = static_cast<const char*>(nl) - data.data();
      AppendCarry(data.substr(0, n));
      FlushCarry();
      data.remove_prefix(n + 1);
      continue;
    }
    const void* last = memrchr(data.data(), '\n', data.size());
    if (last == nullptr) {
      AppendCarry(data);
      ScanRedraw(data);
      return;
    }
    const size_t n = static_cast<const char*>(last) - data.data() + 1;
    ProcessBuffer(data.substr(0, n));
    data.remove_prefix(n);
  }
}

void Classifier::AddLine(std::string_view line) {
  if (line.size() > kMaxLineBytes) {
    scratch_ = absl::StrCat(AsAbsl(line.substr(0, kMaxLineBytes)),
                            " [... line cut: ", line.size() - kMaxLineBytes, " more bytes ...]");
    line = scratch_;
  }
  ProcessLine(line);
  PushTail(line_no_, line);
}

void Classifier::AppendCarry(std::string_view bytes) {
  const size_t room = kMaxLineBytes - carry_.size();
  if (bytes.size() <= room) {
    carry_.append(bytes);
  } else {
    carry_.append(bytes.substr(0, room));
    carry_cut_bytes_ += static_cast<int64_t>(bytes.size() - room);
  }
}

void Classifier::ScanRedraw(std::string_view added) {
  if (!carry_redraws_ && std::memchr(added.data(), '\r', added.size()) == nullptr) return;
  carry_redraws_ = true;
  // A full carry took none of these bytes: nothing new to show.
  if (carry_cut_bytes_ > 0) return;
  // The state the terminal shows now: after the last '\r', or before it when nothing follows.
  // Only the carry's last kMaxRedrawBytes are looked at, so a hostile line of '\r' and megabytes
  // costs each chunk a bounded search, not the whole carry's.
  const std::string_view whole(carry_);
  const std::string_view carry =
      whole.substr(whole.size() > kMaxRedrawBytes + 1 ? whole.size() - kMaxRedrawBytes - 1 : 0);
  size_t end = carry.size();
  size_t cr = carry.rfind('\r');
  if (cr == std::string_view::npos) return;  // a state longer than any progress bar
  if (cr + 1 == end) {
    end = cr;
    cr = cr == 0 ? std::string_view::npos : carry.rfind('\r', cr - 1);
  }
  // The state must start inside the window: one that does is a bar's, one that does not is not.
  if (cr == std::string_view::npos && carry.size() < whole.size()) return;
  const size_t begin = cr == std::string_view::npos ? 0 : cr + 1;
  if (begin >= end) return;
  OnRedraw(carry.substr(begin, end - begin));
}

void Classifier::OnRedraw(std::string_view state) {
  hits_.clear();
  matcher_->Match(state, &hits_, scanner_.get());
  const int n = matcher_->size();
  for (int h : hits_) {
    if (h >= n) break;
    const Signature& sig = matcher_->signatures()[static_cast<size_t>(h)];
    // Only a phase's own steps: a build's steps need the line they end on.
    if (sig.role == SignatureRole::kProgress && sig.enters_phase &&
        sig.phase != Phase::kJitCompiling) {
      OnProgress(h, state, line_no_ + 1);
    }
  }
}

void Classifier::FlushCarry() {
  carry_redraws_ = false;
  std::string line = std::move(carry_);
  carry_.clear();
  if (carry_cut_bytes_ > 0) {
    absl::StrAppend(&line, " [... line cut: ", carry_cut_bytes_, " more bytes ...]");
    carry_cut_bytes_ = 0;
  }
  ProcessLine(line);
  PushTail(line_no_, line);
}

void Classifier::ProcessBuffer(std::string_view text) {
  // Every line that matches anything, found in one pass; the lines between them are looked at
  // only inside a unit.
  matcher_->MatchLines(text, scanner_.get());
  const std::vector<SignatureMatcher::Scanner::Line>& matched = scanner_->lines();
  size_t next = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!NeedsEveryLine()) {
      if (next == matched.size()) {
        line_no_ += static_cast<int64_t>(CountNewlines(text.substr(pos)));
        break;
      }
      // Skip to the next matching line, counting the lines passed.
      line_no_ += static_cast<int64_t>(CountNewlines(text.substr(pos, matched[next].begin - pos)));
      pos = matched[next].begin;
    }
    const char* begin = text.data() + pos;
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', text.size() - pos));
    const size_t len = static_cast<size_t>(nl - begin);
    std::string_view line(begin, len);
    hits_.clear();
    const bool has_hits = next < matched.size() && matched[next].begin == pos;
    if (len > kMaxLineBytes) {
      scratch_ = absl::StrCat(AsAbsl(line.substr(0, kMaxLineBytes)),
                              " [... line cut: ", len - kMaxLineBytes, " more bytes ...]");
      line = scratch_;
      matcher_->Match(line, &hits_, scanner_.get());
    } else if (has_hits) {
      const auto first =
          scanner_->hits().begin() + static_cast<std::ptrdiff_t>(matched[next].first);
      hits_.assign(first, first + static_cast<std::ptrdiff_t>(matched[next].count));
    }
    if (has_hits) ++next;
    ProcessMatchedLine(line);
    pos += len + 1;
  }
  UpdateTailFromBuffer(text);
}

void Classifier::PushTail(int64_t line, std::string_view text) {
  tail_.push_back({line, EvidenceBuilder::ClipLine(text)});
  while (tail_.size() > kTailLines) tail_.pop_front();
}

void Classifier::UpdateTailFromBuffer(std::string_view text) {
  // `text` ends with '\n'; its last line is line_no_.
  std::vector<EvidenceLine> lines;
  size_t end = text.size() - 1;  // the final '\n'
  int64_t number = line_no_;
  while (lines.size() < kTailLines) {
    const void* prev = end == 0 ? nullptr : memrchr(text.data(), '\n', end);
    const size_t start = prev == nullptr ? 0 : static_cast<const char*>(prev) - text.data() + 1;
    lines.push_back({number--, EvidenceBuilder::ClipLine(text.substr(start, end - start))});
    if (prev == nullptr) break;
    end = start - 1;
  }
  if (lines.size() >= kTailLines) tail_.clear();
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) tail_.push_back(std::move(*it));
  while (tail_.size() > kTailLines) tail_.pop_front();
}

void Classifier::ProcessLine(std::string_view raw) {
  hits_.clear();
  matcher_->Match(raw, &hits_, scanner_.get());
  ProcessMatchedLine(raw);
}

void Classifier::ProcessMatchedLine(std::string_view raw) {
  ++line_no_;
  if (hits_.empty() && !unit_) return;

  const int n = matcher_->size();
  const std::vector<Signature>& sigs = matcher_->signatures();
  bool any_structure = false;
  bool any_classifying = false;
  bool any_symptom = false;
  bool unconstrained_classifying = false;
  for (int h : hits_) {
    if (h >= n) {
      any_structure = true;
      continue;
    }
    const Signature& s = sigs[h];
    if (s.role == SignatureRole::kRootCause || s.role == SignatureRole::kSymptom) {
      any_classifying = true;
      if (s.role == SignatureRole::kSymptom) any_symptom = true;
      if (s.within == UnitKind::kNone) unconstrained_classifying = true;
    }
  }

  // Structure: what unit this line starts, judged on the line without its log prefixes.
  std::string_view stripped = raw;
  if (unit_ || any_structure) stripped = matcher_->StripLogPrefixes(raw);
  UnitKind starts = UnitKind::kNone;
  bool frame = false;
  bool include_line = false;
  if (any_structure) {
    for (int h : hits_) {
      if (h < n) continue;
      switch (static_cast<Structure>(h - n)) {
        case Structure::kTraceback:
          starts = UnitKind::kTraceback;
          break;
        case Structure::kWorkerError:
          if (starts == UnitKind::kNone || starts == UnitKind::kNinjaFailed) {
            starts = UnitKind::kWorkerError;
          }
          break;
        case Structure::kNinjaFailed:
          if (starts == UnitKind::kNone && stripped.starts_with("FAILED: ")) {
            starts = UnitKind::kNinjaFailed;
          }
          break;
        case Structure::kFrame:
          frame = LeftTrim(stripped).starts_with("File \"");
          break;
        case Structure::kIncludedFrom:
          include_line = stripped.starts_with("In file included from ");
          break;
        case Structure::kCount:
          break;
      }
    }
  }

  if (unit_ && UnitEndsBefore(stripped, starts != UnitKind::kNone || frame, include_line,
                              any_classifying, any_symptom)) {
    // A traceback ended by a line that starts a unit (vLLM's "RuntimeError: Worker failed with
    // error '...'") still ended on its exception line.
    EndUnit(unit_->kind == UnitKind::kTraceback && IsTracebackEnd(stripped));
  }
  if (!unit_) {
    if (starts != UnitKind::kNone) {
      OpenUnitAt(starts);
      unit_->headed_start = starts == UnitKind::kTraceback;
    } else if (include_line) {
      OpenUnitAt(UnitKind::kCompilerOutput);
    } else if (frame) {
      OpenUnitAt(UnitKind::kTraceback);
    } else if (unconstrained_classifying) {
      OpenUnitAt(UnitKind::kLoose);
    }
  }
  const UnitKind kind = unit_ ? unit_->kind : UnitKind::kNone;
  // Source lines that a traceback quotes under a frame can hold error text; they are code, not
  // output.
  const bool code_line = kind == UnitKind::kTraceback && unit_->previous_was_frame && !frame &&
                         !stripped.empty() && (stripped[0] == ' ' || stripped[0] == '\t');

  int root = -1;
  int symptom = -1;
  int frame_sig = -1;
  for (int h : hits_) {
    if (h >= n) break;
    const Signature& s = sigs[h];
    if (s.within != UnitKind::kNone && s.within != kind) continue;
    if (code_line) continue;
    if (s.infer == Inference::kFrame) {
      if (frame && kind == UnitKind::kTraceback && frame_sig < 0) frame_sig = h;
      continue;
    }
    if (s.role == SignatureRole::kRootCause && root < 0) root = h;
    if (s.role == SignatureRole::kSymptom && symptom < 0) symptom = h;
  }
  const bool classifying = root >= 0 || symptom >= 0;

  if (unit_) {
    ++unit_->lines;
    // A named frame may decide (when its traceback lost the exception line): kept like a cause.
    unit_->evidence.Add(line_no_, raw, classifying || frame_sig >= 0);
    if (classifying) {
      unit_->last_hit_line = line_no_;
      unit_->has_hit = true;
    }
  }
  if (frame && kind == UnitKind::kTraceback) OnFrame(frame_sig, raw, stripped);
  // An informational line (NCCL's INFO: an optional plugin's probe "cannot open shared object
  // file") names no cause and no failure.
  if ((root >= 0 || symptom >= 0) && matcher_->IsInfoLine(raw)) {
    root = -1;
    symptom = -1;
  }
  if (root >= 0) {
    OnRoot(root, raw, matcher_->IsWarningLine(raw));
  } else if (symptom >= 0) {
    OnSymptom(symptom, raw, kind == UnitKind::kTraceback && UnitEndsAfter(stripped));
  }
  for (int h : hits_) {
    if (h >= n) break;
    const Signature& s = sigs[h];
    // Context facts keep their first value: once known, the (costly) extraction is skipped.
    if (s.role == SignatureRole::kContext && !code_line && !matcher_->AddsNothingTo(h, context_)) {
      matcher_->Extract(h, raw, &context_);
    }
  }
  // Phases first: a line that enters a phase and counts its steps ("Loading safetensors
  // checkpoint shards: 0% Completed | 0/4") counts them inside it.
  for (const SignatureRole wanted : {SignatureRole::kPhase, SignatureRole::kProgress}) {
    for (int h : hits_) {
      if (h >= n || code_line) break;
      if (sigs[h].role != wanted) continue;
      if (wanted == SignatureRole::kPhase) {
        OnPhase(h, raw);
      } else {
        // A bar redrawn on one line ("\r" between its states) counts its last state.
        OnProgress(h, ShownText(raw), line_no_);
      }
    }
  }

  if (unit_) {
    unit_->previous_was_frame = frame;
    if (UnitEndsAfter(stripped)) {
      // A traceback's last line is its exception line, unless the traceback was cut and another
      // record follows.
      EndUnit(kind != UnitKind::kTraceback || IsTracebackEnd(stripped));
    } else if (unit_->lines >= kMaxUnitLines) {
      EndUnit();
    }
  }
}

void Classifier::OnFrame(int index, std::string_view raw, std::string_view stripped) {
  std::deque<std::string>& frames = unit_->frames;
  if (index >= 0) {
    const bool called = !matcher_->HasCaller(index) ||
                        std::any_of(frames.begin(), frames.end(), [&](const std::string& outer) {
                          return matcher_->MatchesCaller(index, outer);
                        });
    if (called) pending_frame_ = MakeFinding(index, raw);
  }
  const std::string_view frame = LeftTrim(stripped);
  frames.emplace_back(frame.substr(0, kMaxFrameBytes));
  if (frames.size() > kMaxFrames) frames.pop_front();
}

void Classifier::OpenUnitAt(UnitKind kind) {
  unit_.emplace(OpenUnit{.kind = kind,
                         .serial = ++unit_serial_,
                         .start_line = line_no_,
                         .last_hit_line = line_no_,
                         .evidence = EvidenceBuilder(options_.max_evidence_lines)});
}

bool Classifier::IsTracebackEnd(std::string_view stripped) const {
  return matcher_->IsExceptionLine(stripped) || LooksLikeExceptionLine(stripped);
}

bool Classifier::UnitEndsBefore(std::string_view stripped, bool starts_unit, bool include_line,
                                bool has_classifying, bool has_symptom) const {
  switch (unit_->kind) {
    case UnitKind::kCompilerOutput:
      // The include chain continues ("In file included from", "                 from x.h:3"),
      // up to the diagnostic; a chain that leads to no error is dropped.
      if (include_line) return false;
      if (!unit_->has_hit) {
        return starts_unit || (!has_classifying && !LeftTrim(stripped).starts_with("from "));
      }
      return starts_unit;
    case UnitKind::kNinjaFailed:
      return starts_unit || IsNinjaStep(stripped) || matcher_->IsExceptionLine(stripped);
    case UnitKind::kTraceback:
      // A frame continues the traceback; any other unit start begins a new unit.
      return starts_unit && !LeftTrim(stripped).starts_with("File \"");
    case UnitKind::kWorkerError:
      return starts_unit || has_symptom;
    case UnitKind::kLoose:
      return starts_unit || include_line;
    case UnitKind::kNone:
      break;
  }
  return false;
}

bool Classifier::UnitEndsAfter(std::string_view stripped) const {
  switch (unit_->kind) {
    case UnitKind::kNinjaFailed:
      return stripped.starts_with("ninja: build stopped") || stripped.starts_with("ninja: error");
    case UnitKind::kTraceback: {
      if (line_no_ == unit_->start_line) return false;
      const std::string_view s = RightTrim(stripped);
      if (s.empty() || s[0] == ' ' || s[0] == '\t') return false;
      if (s.starts_with("Traceback") || s.starts_with("File \"")) return false;
      return true;  // the exception line
    }
    case UnitKind::kWorkerError:
      return RightTrim(stripped).ends_with("'");
    case UnitKind::kLoose:
      return line_no_ - unit_->last_hit_line >= kLooseTrailing;
    case UnitKind::kCompilerOutput:
      return unit_->has_hit && line_no_ - unit_->last_hit_line >= kLooseTrailing;
    case UnitKind::kNone:
      break;
  }
  return false;
}

void Classifier::EndUnit(bool headed) {
  bool failing = false;
  std::optional<std::vector<EvidenceLine>> built;
  auto evidence = [&]() -> const std::vector<EvidenceLine>& {
    if (!built) built = unit_->evidence.Build();
    return *built;
  };
  if (root_ && root_->unit_serial == unit_->serial && !root_->evidence) {
    root_->evidence = evidence();
    failing = true;
  }
  for (auto& f : symptom_by_rank_) {
    if (f && f->unit_serial == unit_->serial && !f->evidence) f->evidence = evidence();
  }
  if (warning_root_ && warning_root_->unit_serial == unit_->serial && !warning_root_->evidence) {
    warning_root_->evidence = evidence();
  }
  if (unit_->kind == UnitKind::kTraceback && headed && !unit_->headed_start) {
    // A traceback fragment that starts with a frame and ends on an exception line continues the
    // headless one just before it (another process's lines came between): that traceback did not
    // lose its exception line after all.
    if (frame_root_ && unit_->start_line - frame_root_end_ <= kResumeGap) frame_root_.reset();
    if (headless_ && unit_->start_line - headless_end_ <= kResumeGap) headless_.reset();
  }
  if (unit_->kind == UnitKind::kTraceback && !headed && !unit_->frames.empty()) {
    // The traceback lost its exception line: its innermost named frame tells the class; with
    // none, a failure is there but not named.
    if (pending_frame_ && !frame_root_) {
      frame_root_ = std::move(pending_frame_);
      frame_root_->evidence = evidence();
      frame_root_end_ = line_no_;
    } else if (!pending_frame_ && !headless_) {
      headless_end_ = line_no_;
      headless_ = Finding{.signature = -1,
                          .line = unit_->start_line,
                          .unit_serial = unit_->serial,
                          .unit = UnitKind::kTraceback,
                          .phase = CurrentPhase(),
                          .evidence = evidence()};
    }
  }
  pending_frame_.reset();
  unit_.reset();
  if (failing && listener_ != nullptr) listener_->OnFailingUnitEnded(line_no_);
}

Classifier::Finding Classifier::MakeFinding(int index, std::string_view raw) const {
  Finding f;
  f.signature = index;
  f.line = line_no_;
  f.unit_serial = unit_ ? unit_->serial : 0;
  f.unit = unit_ ? unit_->kind : UnitKind::kNone;
  matcher_->Extract(index, raw, &f.facts);
  if (unit_) f.facts.AddMissingFrom(unit_->facts);
  f.phase = CurrentPhase();
  for (auto it = phases_.rbegin(); it != phases_.rend(); ++it) {
    if (f.phase_failure_class.empty()) f.phase_failure_class = it->failure_class;
    f.phase_facts.AddMissingFrom(it->facts);
  }
  return f;
}

void Classifier::OnRoot(int index, std::string_view raw, bool on_warning) {
  const Signature& s = matcher_->signatures()[index];
  if (on_warning) {
    if (!root_ && !warning_root_) warning_root_ = MakeFinding(index, raw);
    return;
  }
  // A stem (low confidence) can match a line that only mentions a message's words; the first
  // intact message after it is the better cause.
  const bool replaces_stem =
      root_ && matcher_->signatures()[root_->signature].confidence == Confidence::kLow &&
      s.confidence == Confidence::kHigh && !s.consequence;
  // A failure that only follows another process's (a tensor-parallel peer gone) gives way to the
  // first intact cause that does not (a stem, a retyped word, does not outweigh it: NCCL's
  // message also covers a network that really failed).
  const bool replaces_consequence = root_ && matcher_->signatures()[root_->signature].consequence &&
                                    !s.consequence && s.confidence == Confidence::kHigh;
  if (!root_ || replaces_stem || replaces_consequence) {
    root_ = MakeFinding(index, raw);
    if (listener_ != nullptr) listener_->OnRootCause(line_no_);
    return;
  }
  // More lines of the same cause in the same unit add their facts ("cannot find -lcudart",
  // "cannot find -lcuda").
  if (!root_->evidence && unit_ && root_->unit_serial == unit_->serial &&
      matcher_->signatures()[root_->signature].diagnosis_class == s.diagnosis_class) {
    matcher_->Extract(index, raw, &root_->facts);
  }
}

void Classifier::OnSymptom(int index, std::string_view raw, bool ends_traceback) {
  const Signature& s = matcher_->signatures()[index];
  if (symptoms_.size() < kMaxSymptoms) symptoms_.push_back({line_no_, s.diagnosis_class, s.id});
  if (unit_) {
    // A symptom's facts (the failing ninja target) belong to its unit, and so to a cause in it.
    Facts facts;
    matcher_->Extract(index, raw, &facts);
    if (root_ && !root_->evidence && root_->unit_serial == unit_->serial) {
      root_->facts.AddMissingFrom(facts);
    }
    unit_->facts.AddAllFrom(facts);
  }
  const DiagnosisClassInfo* info = FindDiagnosisClass(s.diagnosis_class);
  int rank = info->symptom_rank > 0 ? std::min(info->symptom_rank, 4) : 4;
  if (rank == 1 && ends_traceback) rank = 3;
  if (!symptom_by_rank_[rank]) symptom_by_rank_[rank] = MakeFinding(index, raw);
}

void Classifier::OnPhase(int index, std::string_view raw) {
  const Signature& s = matcher_->signatures()[index];
  const Phase before = CurrentPhase();
  const std::string before_detail = phases_.empty() ? "" : phases_.back().detail;
  if (s.enters_phase && s.phase == Phase::kReady) {
    ResetForReady();
    phases_.clear();
    ready_ = true;
    if (listener_ != nullptr && before != Phase::kReady) {
      listener_->OnPhaseChanged(Phase::kReady, "", line_no_);
    }
    return;
  }
  if (s.ends_phase) {
    for (size_t i = phases_.size(); i-- > 0;) {
      if (phases_[i].phase == s.ended_phase) {
        phases_.resize(i);
        break;
      }
    }
  }
  if (s.enters_phase) {
    Facts facts;
    matcher_->Extract(index, raw, &facts);
    std::string detail;
    if (!facts.entries().empty()) detail = facts.entries().front().second.front();
    ready_ = false;
    if (!phases_.empty() && phases_.back().phase == s.phase) {
      PhaseEntry& top = phases_.back();
      top.detail = detail;
      top.line = line_no_;
      top.text = EvidenceBuilder::ClipLine(raw);
      top.implicit = false;
      top.failure_class = s.failure_class;
      top.facts = std::move(facts);
    } else {
      if (phases_.size() >= 8) phases_.erase(phases_.begin());
      phases_.push_back({s.phase, detail, line_no_, EvidenceBuilder::ClipLine(raw), false,
                         s.failure_class, std::move(facts)});
    }
  }
  const std::string after_detail = phases_.empty() ? "" : phases_.back().detail;
  if (listener_ != nullptr && (CurrentPhase() != before || after_detail != before_detail)) {
    listener_->OnPhaseChanged(CurrentPhase(), after_detail, line_no_);
  }
}

void Classifier::OnProgress(int index, std::string_view raw, int64_t line) {
  Facts facts;
  matcher_->Extract(index, raw, &facts);
  int64_t step = 0, total = 0;
  if (!absl::SimpleAtoi(AsAbsl(facts.First("step")), &step) ||
      !absl::SimpleAtoi(AsAbsl(facts.First("total")), &total) || total <= 0) {
    return;
  }
  const Signature& sig = matcher_->signatures()[static_cast<size_t>(index)];
  if (sig.enters_phase && sig.phase != Phase::kJitCompiling) {
    // Steps of another phase (weight shards): shown while that phase runs; never a build step,
    // so neither the JIT phase nor the diagnosis's "last build step" moves.
    if (CurrentPhase() != sig.phase) return;
    if (listener_ != nullptr) listener_->OnProgress(step, total, line);
    return;
  }
  progress_step_ = step;
  progress_total_ = total;
  const Phase before = CurrentPhase();
  if (phases_.empty() || phases_.back().phase != Phase::kJitCompiling) {
    // A build is running: JIT compiling, possibly inside another phase (graph capture).
    if (phases_.size() >= 8) phases_.erase(phases_.begin());
    std::string detail;
    for (auto it = phases_.rbegin(); it != phases_.rend() && detail.empty(); ++it) {
      if (it->phase == Phase::kJitCompiling) detail = it->detail;
    }
    phases_.push_back({Phase::kJitCompiling, detail, line_no_, EvidenceBuilder::ClipLine(raw), true,
                       classes::kJitBuildFailed, Facts()});
    ready_ = false;
  } else {
    phases_.back().text = EvidenceBuilder::ClipLine(raw);
    phases_.back().line = line_no_;
  }
  if (step >= total && phases_.back().implicit) phases_.pop_back();
  if (listener_ != nullptr) {
    if (CurrentPhase() != before) {
      listener_->OnPhaseChanged(CurrentPhase(), phases_.empty() ? "" : phases_.back().detail,
                                line_no_);
    }
    listener_->OnProgress(step, total, line);
  }
}

void Classifier::ResetForReady() {
  unit_.reset();
  root_.reset();
  warning_root_.reset();
  pending_frame_.reset();
  frame_root_.reset();
  headless_.reset();
  for (auto& f : symptom_by_rank_) f.reset();
  symptoms_.clear();
}

Phase Classifier::CurrentPhase() const {
  if (!phases_.empty()) return phases_.back().phase;
  return ready_ ? Phase::kReady : Phase::kStarting;
}

std::vector<EvidenceLine> Classifier::EvidenceOf(const Finding& f) const {
  if (f.evidence) return *f.evidence;
  if (unit_ && unit_->serial == f.unit_serial) return unit_->evidence.Build();
  return {};
}

Diagnosis Classifier::Decide(bool finished) const {
  Diagnosis d;
  d.lines = line_no_;
  d.phase = CurrentPhase();
  d.phase_detail = phases_.empty() ? "" : phases_.back().detail;
  d.progress_step = progress_step_;
  d.progress_total = progress_total_;
  d.symptoms = symptoms_;

  const std::vector<Signature>& sigs = matcher_->signatures();
  const Finding* f = nullptr;
  int rank = 0;
  const std::optional<Finding>& cause = root_ ? root_ : warning_root_;
  if (cause) {
    f = &*cause;
  } else {
    // A specific symptom, then a traceback's named frame, then the weaker symptoms.
    for (rank = 4; rank >= 1; --rank) {
      if (rank == 3 && frame_root_) {
        f = &*frame_root_;
        break;
      }
      if (symptom_by_rank_[rank]) {
        f = &*symptom_by_rank_[rank];
        break;
      }
    }
  }
  const bool frame_inferred = frame_root_ && f == &*frame_root_;

  if (f == nullptr && headless_) {
    // A traceback lost its exception line and no frame in it is known: a failure, not named.
    const DiagnosisClassInfo* info = FindDiagnosisClass(classes::kUnknown);
    d.diagnosis_class = info->name;
    d.signature_id = "traceback_headless";
    d.fix = info->fix;
    d.confidence = Confidence::kLow;
    d.summary =
        "a Python traceback ends without its exception line: a failure is there but not named";
    d.root_cause_line = headless_->line;
    d.unit = UnitKind::kTraceback;
    d.evidence = EvidenceOf(*headless_);
    d.facts = context_;
  } else if (f != nullptr) {
    const Signature& s = sigs[f->signature];
    d.diagnosis_class = s.diagnosis_class;
    d.signature_id = s.id;
    d.fix = s.fix;
    d.confidence = s.confidence;
    const DiagnosisClassInfo* info = FindDiagnosisClass(s.diagnosis_class);
    d.summary = RenderSummary(s.summary.empty() ? info->summary : s.summary, f->facts);
    if (!cause && !frame_inferred && rank <= 3 && !f->phase_failure_class.empty()) {
      // A child died with no cause in sight, during a phase that names what failed.
      const DiagnosisClassInfo* phase_info = FindDiagnosisClass(f->phase_failure_class);
      d.diagnosis_class = phase_info->name;
      d.fix = phase_info->fix;
      d.summary = absl::StrCat(AsAbsl(phase_info->summary), " (the failure came during ",
                               absl::AsciiStrToLower(AsAbsl(PhaseName(f->phase))),
                               " with no cause found nearby)");
    }
    d.root_cause_line = f->line;
    d.unit = f->unit;
    d.evidence = EvidenceOf(*f);
    d.provisional = !finished && !f->evidence;
    d.facts = f->facts;
    d.facts.AddMissingFrom(f->phase_facts);
    d.facts.AddMissingFrom(context_);
  } else if (finished && options_.offline && !phases_.empty() &&
             phases_.back().phase == Phase::kJitCompiling) {
    const PhaseEntry& p = phases_.back();
    const DiagnosisClassInfo* info = FindDiagnosisClass(classes::kStartupStalled);
    d.diagnosis_class = info->name;
    d.fix = info->fix;
    d.summary = p.detail.empty()
                    ? std::string(info->summary)
                    : absl::StrCat("the log ends inside the unfinished JIT compile of ", p.detail,
                                   " with no error: the start stalled or was cut short");
    d.root_cause_line = p.line;
    if (tail_.empty() || tail_.front().line > p.line) {
      d.evidence.push_back({p.line, p.text});
      if (!tail_.empty() && tail_.front().line > p.line + 1) {
        const int64_t gap = tail_.front().line - p.line - 1;
        d.evidence.push_back(
            {0, absl::StrCat("[... ", gap, gap == 1 ? " line" : " lines", " elided ...]")});
      }
    }
    for (const EvidenceLine& l : tail_) d.evidence.push_back(l);
    d.facts = p.facts;
    d.facts.AddMissingFrom(context_);
  } else {
    d.summary = std::string(FindDiagnosisClass("none")->summary);
    d.facts = context_;
  }
  d.toolchain_fix = d.confidence == Confidence::kHigh && IsToolchainFix(d.fix);
  return d;
}

Diagnosis Classifier::Snapshot() const { return Decide(false); }

Diagnosis Classifier::Finish() {
  if (!carry_.empty() || carry_cut_bytes_ > 0) FlushCarry();
  if (unit_) EndUnit();
  return Decide(true);
}

}  // namespace fleet::diagnosis
