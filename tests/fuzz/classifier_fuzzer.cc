// libFuzzer target for the diagnosis engine: logs are untrusted input, and so is a catalogue
// file given with --signatures. For each input:
//  (a) the input is a log: its first bytes choose the chunk sizes the rest is fed in (AddBytes),
//      with a Snapshot() midway; the result must keep the engine's invariants (line numbers within
//      the log, a known class, bounded evidence, symptoms and facts, valid UTF-8 JSON) and be the
//      same as the log fed in one piece and fed line by line (AddLine).
//  (c) the built-in catalogue's two matching paths agree on the log: the Vectorscan prefilter and
//      RE2 alone find the same lines with the same patterns, and classify it the same.
//  (b) the input is a signature catalogue: parsing and compiling it must fail with an error or
//      succeed, never crash; a catalogue that compiles then classifies the input.
// A broken invariant aborts with what broke, so libFuzzer saves the input as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/diagnosis/diagnosis_format.h"
#include "common/diagnosis/evidence.h"
#include "common/diagnosis/facts.h"
#include "common/diagnosis/signature_catalogue.h"
#include "common/diagnosis/signature_matcher.h"
#include "tests/testing/subprocess.h"

namespace fleet::diagnosis {
namespace {

// How many leading bytes of the input choose the chunk sizes (the rest is the log).
constexpr size_t kScheduleBytes = 4;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "invariant broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

#define FUZZ_CHECK(cond, detail)        \
  do {                                  \
    if (!(cond)) Fail(#cond, (detail)); \
  } while (false)

// --- A strict JSON (RFC 8259) and UTF-8 validator, small enough to trust by reading. ---

class JsonValidator {
 public:
  explicit JsonValidator(std::string_view text) : s_(text) {}

  // Whether the text is exactly one JSON object (with optional surrounding whitespace).
  bool ValidObject() {
    SkipSpace();
    if (Peek() != '{' || !Value(0)) return false;
    SkipSpace();
    return pos_ == s_.size();
  }

 private:
  static constexpr int kMaxDepth = 64;

  int Peek() const { return pos_ < s_.size() ? static_cast<unsigned char>(s_[pos_]) : -1; }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool Value(int depth) {
    if (depth > kMaxDepth) return false;
    SkipSpace();
    switch (Peek()) {
      case '{':
        return Object(depth);
      case '[':
        return Array(depth);
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }

  bool Object(int depth) {
    ++pos_;  // '{'
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (Peek() != '"' || !String()) return false;
      SkipSpace();
      if (Peek() != ':') return false;
      ++pos_;
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() != '}') return false;
      ++pos_;
      return true;
    }
  }

  bool Array(int depth) {
    ++pos_;  // '['
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() != ']') return false;
      ++pos_;
      return true;
    }
  }

  bool Digits() {
    const size_t start = pos_;
    while (Peek() >= '0' && Peek() <= '9') ++pos_;
    return pos_ > start;
  }

  bool Number() {
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (!Digits()) {
      return false;
    }
    if (Peek() == '.') {
      ++pos_;
      if (!Digits()) return false;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!Digits()) return false;
    }
    return true;
  }

  int Hex4() {
    if (pos_ + 4 > s_.size()) return -1;
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return -1;
      }
    }
    return v;
  }

  // One UTF-8 sequence (shortest form, no surrogates, at most U+10FFFF) starting at pos_.
  bool Utf8Sequence() {
    const unsigned char b0 = static_cast<unsigned char>(s_[pos_]);
    int extra;
    uint32_t cp;
    if (b0 < 0x80) {
      ++pos_;
      return true;
    } else if ((b0 & 0xE0) == 0xC0) {
      extra = 1;
      cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      extra = 2;
      cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      extra = 3;
      cp = b0 & 0x07;
    } else {
      return false;
    }
    if (pos_ + 1 + static_cast<size_t>(extra) > s_.size()) return false;
    for (int i = 1; i <= extra; ++i) {
      const unsigned char b = static_cast<unsigned char>(s_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    pos_ += 1 + static_cast<size_t>(extra);
    return true;
  }

  bool String() {
    ++pos_;  // '"'
    while (pos_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped
      if (c != '\\') {
        if (!Utf8Sequence()) return false;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      if (e == 'u') {
        const int u = Hex4();
        if (u < 0) return false;
        if (u >= 0xDC00 && u <= 0xDFFF) return false;  // a lone low surrogate
        if (u >= 0xD800 && u <= 0xDBFF) {              // must pair with a low surrogate
          if (!Literal("\\u")) return false;
          const int low = Hex4();
          if (low < 0xDC00 || low > 0xDFFF) return false;
        }
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return false;
      }
    }
    return false;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// --- Invariants of a diagnosis. ---

std::string Json(const Diagnosis& d) {
  std::string json;
  AppendExplainJson("fuzz.log", d, &json, /*with_confidence=*/true);
  return json;
}

void CheckDiagnosis(const Diagnosis& d, int64_t lines_read, const ClassifierOptions& options) {
  const std::string json = Json(d);
  FUZZ_CHECK(d.lines == lines_read, json);
  FUZZ_CHECK(FindDiagnosisClass(d.diagnosis_class) != nullptr, d.diagnosis_class);
  FUZZ_CHECK(d.root_cause_line >= 0 && d.root_cause_line <= d.lines, json);
  FUZZ_CHECK((d.diagnosis_class == "none") == (d.root_cause_line == 0), json);
  // An inference (confidence low) never claims a toolchain fix.
  FUZZ_CHECK(d.toolchain_fix == (d.confidence == Confidence::kHigh && IsToolchainFix(d.fix)), json);

  int64_t last = 0;
  size_t numbered = 0;
  for (const EvidenceLine& e : d.evidence) {
    FUZZ_CHECK(e.line == 0 || (e.line >= 1 && e.line <= d.lines), json);
    FUZZ_CHECK(e.text.size() <= EvidenceBuilder::kMaxLineBytes + 64, json);
    if (e.line == 0) continue;
    FUZZ_CHECK(e.line > last, json);  // increasing, each line once
    last = e.line;
    ++numbered;
  }
  FUZZ_CHECK(numbered <= options.max_evidence_lines + Classifier::kTailLines + 1, json);

  FUZZ_CHECK(d.symptoms.size() <= Classifier::kMaxSymptoms, json);
  for (const SymptomHit& s : d.symptoms) {
    FUZZ_CHECK(s.line >= 1 && s.line <= d.lines, json);
    FUZZ_CHECK(FindDiagnosisClass(s.diagnosis_class) != nullptr, json);
  }

  FUZZ_CHECK(d.facts.entries().size() <= Facts::kMaxKeys, json);
  for (const auto& [key, values] : d.facts.entries()) {
    FUZZ_CHECK(!values.empty() && values.size() <= Facts::kMaxValuesPerKey, json);
    for (const std::string& v : values) FUZZ_CHECK(v.size() <= Facts::kMaxValueBytes, json);
  }
  FUZZ_CHECK(d.facts.packages().size() <= Facts::kMaxPackages, json);

  FUZZ_CHECK(JsonValidator(json).ValidObject(), json);
  // The human rendering must not crash either (its bytes are the log's own).
  static_cast<void>(FormatExplainText("fuzz.log", d, /*color=*/true));
}

void FuzzLog(const SignatureMatcher& matcher, const uint8_t* data, size_t size) {
  const size_t schedule_size = size < kScheduleBytes ? size : kScheduleBytes;
  const uint8_t* schedule = data;
  const std::string_view log(reinterpret_cast<const char*>(data) + schedule_size,
                             size - schedule_size);
  const ClassifierOptions options;

  // Chunked, with a snapshot when half the log is in.
  Classifier chunked(&matcher, options);
  bool snapshot_taken = false;
  size_t i = 0;
  for (size_t pos = 0; pos < log.size(); ++i) {
    size_t n = 1;
    if (schedule_size > 0) {
      const uint8_t b = schedule[i % schedule_size];
      // Small chunks (1..64) split lines anywhere; large ones (up to 16 KiB) cross many lines.
      n = (b & 0x80) != 0 ? (static_cast<size_t>(b & 0x7F) + 1) * 128 : (b & 0x3F) + 1u;
    }
    if (n > log.size() - pos) n = log.size() - pos;
    chunked.AddBytes(log.substr(pos, n));
    pos += n;
    if (!snapshot_taken && pos * 2 >= log.size()) {
      snapshot_taken = true;
      CheckDiagnosis(chunked.Snapshot(), chunked.lines(), options);
    }
  }
  const Diagnosis d = chunked.Finish();
  CheckDiagnosis(d, chunked.lines(), options);
  const std::string json = Json(d);

  // Any chunking gives the same answer.
  Classifier whole(&matcher, options);
  whole.AddBytes(log);
  const std::string whole_json = Json(whole.Finish());
  FUZZ_CHECK(whole_json == json, "chunked:\n" + json + "\nwhole:\n" + whole_json);

  // So do complete lines.
  Classifier by_line(&matcher, options);
  for (std::string_view line : fleet::testing::SplitLines(log)) by_line.AddLine(line);
  const std::string line_json = Json(by_line.Finish());
  FUZZ_CHECK(line_json == json, "AddBytes:\n" + json + "\nAddLine:\n" + line_json);

  // (c) The prefilter against RE2 alone, when `matcher` has one.
  if (!matcher.has_prefilter()) return;
  static const SignatureMatcher* const re2_only = [] {
    auto parsed = ParseSignatureCatalogue(BuiltinSignatureCatalogue(), "builtin");
    if (!parsed.ok()) Fail("built-in catalogue", std::string(parsed.status().message()));
    auto m = SignatureMatcher::Create(*std::move(parsed));
    if (!m.ok()) Fail("built-in catalogue", std::string(m.status().message()));
    return m->release();
  }();
  Classifier plain(re2_only, options);
  plain.AddBytes(log);
  const std::string plain_json = Json(plain.Finish());
  FUZZ_CHECK(plain_json == json, "prefilter:\n" + json + "\nRE2 alone:\n" + plain_json);
  auto fast = matcher.NewScanner();
  auto slow = re2_only->NewScanner();
  matcher.MatchLines(log, fast.get());
  re2_only->MatchLines(log, slow.get());
  FUZZ_CHECK(fast->lines().size() == slow->lines().size(), "lines matched differ");
  for (size_t l = 0; l < fast->lines().size(); ++l) {
    const auto& a = fast->lines()[l];
    const auto& b = slow->lines()[l];
    const std::string_view text = log.substr(a.begin, a.end - a.begin);
    FUZZ_CHECK(a.begin == b.begin && a.end == b.end,
               "a line matched differs: " + std::string(text));
    FUZZ_CHECK(
        std::equal(fast->hits().begin() + a.first, fast->hits().begin() + a.first + a.count,
                   slow->hits().begin() + b.first, slow->hits().begin() + b.first + b.count) &&
            a.count == b.count,
        "the patterns of a line differ: " + std::string(text));
  }
}

void FuzzCatalogue(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<Signature>> parsed = ParseSignatureCatalogue(text, "fuzz.conf");
  // Text without sections parses as an empty catalogue; compiling that (the structural patterns
  // only) once per input would cost most of the fuzzer's time and find nothing new.
  if (!parsed.ok() || parsed->empty()) return;
  absl::StatusOr<std::unique_ptr<SignatureMatcher>> matcher =
      SignatureMatcher::Create(*std::move(parsed));
  if (!matcher.ok()) return;
  // A catalogue that compiles must then classify: the input itself is a log as good as any.
  Classifier classifier(matcher->get());
  classifier.AddBytes(text);
  CheckDiagnosis(classifier.Finish(), classifier.lines(), ClassifierOptions{});
}

}  // namespace
}  // namespace fleet::diagnosis

// The validator is what judges the engine's JSON: check it on known answers before fuzzing.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using fleet::diagnosis::JsonValidator;
  constexpr std::string_view kValid[] = {
      "{}",
      " {\"a\": [1, -2.5e3, 0, true, false, null, {}, []]} ",
      "{\"s\":\"\\u00e9\\ud83d\\ude00\\n\\\"\\/\xc3\xa9\xf0\x9f\x98\x80\"}",
  };
  constexpr std::string_view kInvalid[] = {
      "",
      "[]",
      "{\"a\":1,}",
      "{\"a\":01}",
      "{\"a\":1} x",
      "{\"a\":.5}",
      "{\"a\":tru}",
      "{\"a\":\"\x01\"}",
      "{\"a\":\"\xff\"}",
      "{\"a\":\"\xc0\xaf\"}",
      "{\"a\":\"\xed\xa0\x80\"}",
      "{\"a\":\"\\ud800\"}",
      "{\"a\":\"\\q\"}",
      "{\"a\" 1}",
      "{\"a\":\"x}",
  };
  for (std::string_view json : kValid) {
    if (!JsonValidator(json).ValidObject())
      fleet::diagnosis::Fail("validator rejects", std::string(json));
  }
  for (std::string_view json : kInvalid) {
    if (JsonValidator(json).ValidObject())
      fleet::diagnosis::Fail("validator accepts", std::string(json));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fleet::diagnosis::SignatureMatcher* const matcher =
      &fleet::diagnosis::SignatureMatcher::Builtin();
  fleet::diagnosis::FuzzLog(*matcher, data, size);
  fleet::diagnosis::FuzzCatalogue(data, size);
  return 0;
}
