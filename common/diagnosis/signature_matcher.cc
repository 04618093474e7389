#include "common/diagnosis/signature_matcher.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/diagnosis/signature_catalogue.h"
#include "common/log/log.h"

namespace fleet::diagnosis {
namespace {

// DFA budgets. The set sees the lines that match something; its many-match DFA never gives up
// (RE2 resets its cache instead), and Match() checks its error info anyway.
constexpr int64_t kSetMaxMem = 8 << 20;
constexpr int64_t kPatternMaxMem = 1 << 20;
// The alternation scans every byte. When its budget is too small for its program, RE2's DFA gives
// up and RE2 silently falls back to its NFA: the same answers, about 100x slower. Measured with
// RE2 20220601 on the built-in catalogue: the DFA needs about 600 bytes per program instruction
// (7,209 instructions: slow at 4 MiB, fast from 4.5 MiB; 4,981: fast from 3 MiB). The budget is
// sized from the compiled program with twice that margin, so a bigger catalogue gets a bigger
// budget instead of a silent slowdown; never less than kAnyMinMem.
constexpr int64_t kAnyMinMem = 8 << 20;
constexpr int64_t kAnyBytesPerInstruction = 1280;

RE2::Options LineOptions(int64_t max_mem) {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingLatin1);
  o.set_never_nl(true);
  o.set_log_errors(false);
  o.set_max_mem(max_mem);
  return o;
}

// Log-record prefixes, each anchored with the part to strip as group 1.
constexpr const char* kPrefixPatterns[] = {
    // journald, ISO: "2026-08-18T19:04:34+0200 host unit[123]: "
    R"(^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? \S+ [^\s:\[]+(?:\[\d+\])?: ))",
    // journald/syslog classic: "Oct 04 13:19:39 host unit[394]: "
    R"(^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?: ))",
    // vLLM: "ERROR 10-30 18:49:38 [core.py:708] "
    // and older vLLM: "ERROR 11-25 08:17:34 multiproc_worker_utils.py:229] "
    R"(^((?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]*\]|[\w.-]+:\d+\]) ))",
    // Process prefix (vLLM, Ray): "(EngineCore_DP0 pid=294) ", "(VllmWorker rank=1 pid=7) ",
    // "(raylet, ip=1.2.3.4) "
    R"(^(\([\w.-]+(?: rank=\d+)?(?: pid=\d+)?(?:, ip=[\d.]+)?\) ))",
    // SGLang: "[2026-06-28 14:01:50 TP5] ", "[2024-09-05T00:38:34Z] "
    R"(^(\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*\] ))",
    // loguru-style: "2025-07-02 16:41:32 | ERROR | stderr | "
    R"(^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \| \w+ *\| [^|]*\| ))",
    // Plain timestamp: "2023-07-27 13:17:05.422836: "
    R"(^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?:? ))",
    // docker compose: "deepseek  | ", "vllm-1  | "
    R"(^([\w.-]+ +\| ))",
    // grep -n / grep -B: "1979:" or "1979-" before a timestamp or text
    R"(^(\d{1,9}[:-])[^\d\s])",
    R"(^(\d{1,9}[:-])\d{4}-\d\d-\d\d)",
    // uvicorn: "ERROR:    "
    R"(^((?:INFO|ERROR|WARNING|DEBUG|CRITICAL): +))",
    // Quoted or tabled text: "> ", "  | "
    R"(^(> ?(?:\s*\| )?))",
    R"(^(\s+\| ))",
    // pytest's failure marker keeps the indentation after it: "E       "
    R"(^(E) {2,}\S)",
};

// Replaces every named group "(?P<name>" with "(?:" so patterns can be joined.
std::string WithoutNamedGroups(std::string_view p) {
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (p.substr(i, 4) == "(?P<") {
      const size_t close = p.find('>', i);
      if (close != std::string_view::npos) {
        out.append("(?:");
        i = close + 1;
        continue;
      }
    }
    out.push_back(p[i]);
    ++i;
  }
  return out;
}

std::vector<std::string> SummaryPlaceholders(std::string_view summary) {
  std::vector<std::string> keys;
  size_t i = 0;
  while ((i = summary.find('{', i)) != std::string_view::npos) {
    const size_t close = summary.find('}', i);
    if (close == std::string_view::npos) break;
    keys.emplace_back(summary.substr(i + 1, close - i - 1));
    i = close + 1;
  }
  return keys;
}

}  // namespace

SignatureMatcher::~SignatureMatcher() = default;

absl::StatusOr<std::unique_ptr<SignatureMatcher>> SignatureMatcher::Create(
    std::vector<Signature> signatures, const PrefilterData* prefilter) {
  auto m = std::unique_ptr<SignatureMatcher>(new SignatureMatcher());
  m->signatures_ = std::move(signatures);
  m->patterns_ = MatcherPatterns(m->signatures_);

  m->set_ = std::make_unique<RE2::Set>(LineOptions(kSetMaxMem), RE2::UNANCHORED);
  std::vector<std::string> joined;
  for (size_t i = 0; i < m->patterns_.size(); ++i) {
    const std::string& pattern = m->patterns_[i];
    const Signature* sig = i < m->signatures_.size() ? &m->signatures_[i] : nullptr;
    auto where = [&]() {
      return sig ? absl::StrCat(sig->origin, ": signature ", sig->id) : std::string("structure");
    };
    if (sig != nullptr) {
      for (const auto& [field, text] :
           {std::pair<const char*, const std::string*>{"after", &sig->cut_after},
            std::pair<const char*, const std::string*>{"cut_tail", &sig->cut_tail}}) {
        if (text->empty()) continue;
        // On its own, so that text which would close the generated group is refused.
        RE2 alone(*text, LineOptions(kPatternMaxMem));
        if (!alone.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": field '", field, "': ", alone.error()));
        }
      }
    }
    Compiled c;
    c.re = std::make_unique<RE2>(pattern, LineOptions(kPatternMaxMem));
    if (!c.re->ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": field 'pattern': ", c.re->error()));
    }
    std::set<std::string> keys;
    for (const auto& [name, group] : c.re->NamedCapturingGroups()) {
      std::string key = name;
      const size_t dup = key.find("__");
      if (dup != std::string::npos) key.resize(dup);
      c.captures.push_back({key, group});
      keys.insert(key);
    }
    std::sort(c.captures.begin(), c.captures.end(),
              [](const Capture& a, const Capture& b) { return a.group < b.group; });
    c.first_values_only =
        sig != nullptr && !sig->all_matches && !keys.count("package") && !c.captures.empty();
    if (sig != nullptr) {
      if (keys.count("package") != keys.count("version")) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": field 'pattern': captures 'package' and 'version' go together"));
      }
      if (sig->role == SignatureRole::kProgress && (!keys.count("step") || !keys.count("total"))) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": field 'pattern': a progress pattern captures 'step' and 'total'"));
      }
      if (!sig->caller.empty()) {
        c.caller = std::make_unique<RE2>(sig->caller, LineOptions(kPatternMaxMem));
        if (!c.caller->ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": field 'caller': ", c.caller->error()));
        }
      }
      for (const std::string& k : SummaryPlaceholders(sig->summary)) {
        if (!keys.count(k)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": field 'summary': {", k, "} is not captured by the pattern"));
        }
      }
    }
    std::string error;
    if (m->set_->Add(pattern, &error) != static_cast<int>(i)) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": field 'pattern': ", error));
    }
    joined.push_back(absl::StrCat("(?:", WithoutNamedGroups(pattern), ")"));
    m->compiled_.push_back(std::move(c));
  }
  m->alternation_ = absl::StrCat("(?m)", absl::StrJoin(joined, "|"));
  for (const char* p : kPrefixPatterns) {
    Prefix prefix{std::make_unique<RE2>(p, LineOptions(kPatternMaxMem)), {}};
    if (!prefix.re->ok()) {
      return absl::InternalError(absl::StrCat("prefix pattern: ", prefix.re->error()));
    }
    // The range of a match's first byte; every byte when RE2 cannot bound it.
    std::string min, max;
    if (prefix.re->PossibleMatchRange(&min, &max, 1) && !min.empty() && !max.empty()) {
      for (int b = static_cast<unsigned char>(min[0]); b <= static_cast<unsigned char>(max[0]);
           ++b) {
        prefix.first.set(static_cast<size_t>(b));
      }
    } else {
      prefix.first.set();
    }
    m->prefix_first_ |= prefix.first;
    m->prefixes_.push_back(std::move(prefix));
  }
  m->exception_line_ = std::make_unique<RE2>(
      R"(^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b)",
      LineOptions(kPatternMaxMem));
  m->warning_line_ = std::make_unique<RE2>(
      R"((?:[A-Za-z]Warning: |\bWARNING\b|\bWARN\b|^\[?W\d{4} |(?i:\bwarning\s*: )))",
      LineOptions(kPatternMaxMem));
  m->info_line_ = std::make_unique<RE2>(R"(\bNCCL INFO\b)", LineOptions(kPatternMaxMem));
  if (prefilter != nullptr) {
    absl::StatusOr<std::unique_ptr<Prefilter>> loaded = Prefilter::Load(*prefilter, m->patterns_);
    if (loaded.ok()) {
      m->prefilter_ = *std::move(loaded);
    } else {
      log::Get(log::Component::kDiagnosis)
          .warn("signature matcher: {}; matching with RE2 alone", loaded.status().message());
    }
  }
  // RE2's set and alternation are what matching runs on without a prefilter: compiled now, so
  // that their errors are Create's. With one, they serve only a buffer it cannot scan, and are
  // compiled then: a process start is not spent on them.
  if (m->prefilter_ == nullptr) {
    if (!m->SetCompiled()) {
      return absl::ResourceExhaustedError("signature set: out of memory compiling the patterns");
    }
    if (absl::Status s = m->AlternationStatus(); !s.ok()) return s;
  }
  return m;
}

absl::StatusOr<std::unique_ptr<SignatureMatcher>> SignatureMatcher::Load(const std::string& path) {
  std::string text;
  std::string origin = "builtin:signatures.conf";
  if (path.empty()) {
    text = std::string(BuiltinSignatureCatalogue());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return absl::NotFoundError(absl::StrCat("signature catalogue ", path, ": cannot open"));
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    origin = path;
  }
  auto signatures = ParseSignatureCatalogue(text, origin);
  if (!signatures.ok()) return signatures.status();
  // The built-in catalogue's database is built with the binaries; another catalogue runs on RE2.
  const char* env = std::getenv("FLEET_CLASSIFIER_PREFILTER");
  const bool off = env != nullptr && std::string_view(env) == "off";
  return Create(*std::move(signatures), path.empty() && !off ? BuiltinPrefilter() : nullptr);
}

const SignatureMatcher& SignatureMatcher::Builtin() {
  static const SignatureMatcher* const builtin = [] {
    absl::StatusOr<std::unique_ptr<SignatureMatcher>> loaded = Load("");
    if (!loaded.ok()) {
      log::Get(log::Component::kDiagnosis)
          .critical("built-in signature catalogue: {}", loaded.status());
      std::abort();
    }
    return loaded->release();
  }();
  return *builtin;
}

void SignatureMatcher::Match(std::string_view line, std::vector<int>* hits) const {
  if (!hits->empty()) {  // RE2::Set::Match replaces what the vector holds
    std::vector<int> own;
    Match(line, &own);
    hits->insert(hits->end(), own.begin(), own.end());
    return;
  }
  RE2::Set::ErrorInfo info{RE2::Set::kNotCompiled};
  const size_t before = hits->size();
  if (SetCompiled()) {
    if (set_->Match(re2::StringPiece(line.data(), line.size()), hits, &info)) {
      std::sort(hits->begin() + before, hits->end());
      return;
    }
    if (info.kind == RE2::Set::kNoError) return;
  }
  // The set could not answer (DFA out of memory, or it did not compile: "no match" is then not an
  // answer). Match pattern by pattern instead; each RE2 falls back to its NFA when its own DFA
  // gives up.
  hits->resize(before);
  for (size_t i = 0; i < compiled_.size(); ++i) {
    if (RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), *compiled_[i].re)) {
      hits->push_back(static_cast<int>(i));
    }
  }
}

SignatureMatcher::Scanner::Scanner() = default;
SignatureMatcher::Scanner::~Scanner() = default;

std::unique_ptr<SignatureMatcher::Scanner> SignatureMatcher::NewScanner() const {
  auto scanner = std::make_unique<Scanner>();
  if (prefilter_ != nullptr) scanner->scratch_ = prefilter_->NewScratch();
  return scanner;
}

void SignatureMatcher::Confirm(std::string_view line, std::vector<int>* hits, size_t from) const {
  auto kept = hits->begin() + static_cast<std::ptrdiff_t>(from);
  for (auto it = kept; it != hits->end(); ++it) {
    if (!prefilter_->NeedsConfirm(*it) ||
        RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), *compiled_[*it].re)) {
      *kept++ = *it;
    }
  }
  hits->erase(kept, hits->end());
}

void SignatureMatcher::Match(std::string_view line, std::vector<int>* hits,
                             Scanner* scanner) const {
  if (prefilter_ == nullptr || scanner == nullptr || scanner->scratch_ == nullptr) {
    Match(line, hits);
    return;
  }
  scanner->matches_.clear();
  if (!prefilter_->Scan(line, scanner->scratch_.get(), &scanner->matches_)) {
    ++scanner->re2_fallbacks_;
    Match(line, hits);  // a scan that failed says nothing: RE2 answers
    return;
  }
  const size_t before = hits->size();
  for (const Prefilter::Match& m : scanner->matches_) hits->push_back(static_cast<int>(m.id));
  std::sort(hits->begin() + static_cast<std::ptrdiff_t>(before), hits->end());
  hits->erase(std::unique(hits->begin() + static_cast<std::ptrdiff_t>(before), hits->end()),
              hits->end());
  Confirm(line, hits, before);
}

void SignatureMatcher::MatchLinesWithRe2(std::string_view text, Scanner* scanner) const {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t candidate = FindCandidate(text.substr(pos));
    if (candidate == std::string_view::npos) break;
    const size_t at = pos + candidate;
    const void* prev = at == 0 ? nullptr : memrchr(text.data(), '\n', at);
    const size_t begin = prev == nullptr ? 0 : static_cast<const char*>(prev) - text.data() + 1;
    const void* nl = std::memchr(text.data() + at, '\n', text.size() - at);
    const size_t end = nl == nullptr ? text.size() : static_cast<const char*>(nl) - text.data();
    const size_t first = scanner->hits_.size();
    Match(text.substr(begin, end - begin), &scanner->hits_);
    if (scanner->hits_.size() > first) {
      scanner->lines_.push_back({begin, end, first, scanner->hits_.size() - first});
    }
    pos = end + 1;
  }
}

void SignatureMatcher::MatchLines(std::string_view text, Scanner* scanner) const {
  scanner->lines_.clear();
  scanner->hits_.clear();
  scanner->matches_.clear();
  if (prefilter_ == nullptr || scanner->scratch_ == nullptr) {
    MatchLinesWithRe2(text, scanner);
    return;
  }
  if (!prefilter_->Scan(text, scanner->scratch_.get(), &scanner->matches_)) {
    scanner->matches_.clear();
    ++scanner->re2_fallbacks_;
    MatchLinesWithRe2(text, scanner);
    return;
  }
  std::vector<Prefilter::Match>& matches = scanner->matches_;
  // Vectorscan reports in order of end offset, almost: sort, then walk the lines they end in.
  std::sort(matches.begin(), matches.end(),
            [](const Prefilter::Match& a, const Prefilter::Match& b) {
              return a.end != b.end ? a.end < b.end : a.id < b.id;
            });
  std::vector<int>& hits = scanner->hits_;
  auto close_line = [&]() {
    if (scanner->lines_.empty()) return;
    Scanner::Line& line = scanner->lines_.back();
    std::sort(hits.begin() + static_cast<std::ptrdiff_t>(line.first), hits.end());
    hits.erase(std::unique(hits.begin() + static_cast<std::ptrdiff_t>(line.first), hits.end()),
               hits.end());
    Confirm(text.substr(line.begin, line.end - line.begin), &hits, line.first);
    line.count = hits.size() - line.first;
    if (line.count == 0) scanner->lines_.pop_back();
  };
  size_t line_end = 0;
  bool open = false;
  for (const Prefilter::Match& m : matches) {
    // The match's last byte; a match never holds a '\n' (the patterns are made so), so this is
    // inside its line (a '\n' here would be the line's own end).
    const size_t last = m.end == 0 ? 0 : static_cast<size_t>(m.end - 1);
    if (!open || last > line_end) {
      close_line();
      const void* prev = last == 0 ? nullptr : memrchr(text.data(), '\n', last);
      const size_t begin = prev == nullptr ? 0 : static_cast<const char*>(prev) - text.data() + 1;
      const void* nl = std::memchr(text.data() + last, '\n', text.size() - last);
      line_end = nl == nullptr ? text.size() : static_cast<const char*>(nl) - text.data();
      scanner->lines_.push_back({begin, line_end, hits.size(), 0});
      open = true;
    }
    hits.push_back(static_cast<int>(m.id));
  }
  close_line();
}

bool SignatureMatcher::SetCompiled() const {
  absl::call_once(set_once_, [this] { set_compiled_ = set_->Compile(); });
  return set_compiled_;
}

absl::Status SignatureMatcher::AlternationStatus() const {
  absl::call_once(any_once_, [this] {
    any_ = std::make_unique<RE2>(alternation_, LineOptions(kAnyMinMem));
    if (!any_->ok()) {
      any_status_ =
          absl::InvalidArgumentError(absl::StrCat("signature alternation: ", any_->error()));
      return;
    }
    const int64_t wanted = kAnyBytesPerInstruction *
                           std::max<int64_t>(any_->ProgramSize(), any_->ReverseProgramSize());
    if (wanted > kAnyMinMem) {
      any_ = std::make_unique<RE2>(alternation_, LineOptions(wanted));
      if (!any_->ok()) {
        any_status_ =
            absl::ResourceExhaustedError(absl::StrCat("signature alternation: ", any_->error()));
        return;
      }
    }
    any_budget_ = std::max(wanted, kAnyMinMem);
  });
  return any_status_;
}

int64_t SignatureMatcher::alternation_budget() const {
  return AlternationStatus().ok() ? any_budget_ : 0;
}

size_t SignatureMatcher::FindCandidate(std::string_view text) const {
  // Without its alternation (it did not compile), every line is a candidate.
  if (!AlternationStatus().ok()) return 0;
  re2::StringPiece match;
  if (!any_->Match(re2::StringPiece(text.data(), text.size()), 0, text.size(), RE2::UNANCHORED,
                   &match, 1)) {
    return std::string_view::npos;
  }
  return static_cast<size_t>(match.data() - text.data());
}

void SignatureMatcher::Extract(int index, std::string_view line, Facts* facts) const {
  const Compiled& c = compiled_[index];
  if (c.captures.empty()) return;
  const int groups = c.re->NumberOfCapturingGroups();
  std::vector<re2::StringPiece> sub(groups + 1);
  const bool all = index < size() && signatures_[index].all_matches;
  size_t pos = 0;
  while (pos <= line.size()) {
    if (!c.re->Match(re2::StringPiece(line.data(), line.size()), pos, line.size(), RE2::UNANCHORED,
                     sub.data(), groups + 1)) {
      break;
    }
    std::string_view package, version;
    for (const Capture& cap : c.captures) {
      const re2::StringPiece& v = sub[cap.group];
      if (v.data() == nullptr) continue;
      const std::string_view value(v.data(), v.size());
      if (cap.key == "package") {
        package = value;
      } else if (cap.key == "version") {
        version = value;
      } else {
        facts->Add(cap.key, value);
      }
    }
    if (!package.empty()) facts->AddPackage(package, version);
    if (!all) break;
    const size_t end = static_cast<size_t>(sub[0].data() - line.data()) + sub[0].size();
    pos = sub[0].empty() ? end + 1 : end;
  }
}

bool SignatureMatcher::AddsNothingTo(int index, const Facts& facts) const {
  const Compiled& c = compiled_[index];
  if (c.captures.empty()) return true;
  if (!c.first_values_only) return false;
  for (const Capture& cap : c.captures) {
    if (!facts.Has(cap.key)) return false;
  }
  return true;
}

std::string_view SignatureMatcher::StripLogPrefixes(std::string_view line) const {
  for (int round = 0; round < 8; ++round) {
    if (line.empty()) break;
    const size_t first = static_cast<unsigned char>(line.front());
    if (!prefix_first_.test(first)) break;
    bool stripped = false;
    for (const Prefix& prefix : prefixes_) {
      if (!prefix.first.test(first)) continue;
      re2::StringPiece group;
      if (RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), *prefix.re, &group)) {
        line.remove_prefix(group.size());
        stripped = true;
        break;
      }
    }
    if (!stripped) break;
  }
  return line;
}

bool SignatureMatcher::MatchesCaller(int index, std::string_view frame) const {
  const RE2* caller = compiled_[static_cast<size_t>(index)].caller.get();
  return caller != nullptr &&
         RE2::PartialMatch(re2::StringPiece(frame.data(), frame.size()), *caller);
}

bool SignatureMatcher::IsExceptionLine(std::string_view stripped) const {
  return RE2::PartialMatch(re2::StringPiece(stripped.data(), stripped.size()), *exception_line_);
}

bool SignatureMatcher::IsWarningLine(std::string_view line) const {
  return RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), *warning_line_);
}

bool SignatureMatcher::IsInfoLine(std::string_view line) const {
  return RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), *info_line_);
}

}  // namespace fleet::diagnosis
