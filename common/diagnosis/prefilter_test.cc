// The Vectorscan prefilter (prefilter.h, vectorscan_patterns.h) against RE2 alone: the same lines
// and patterns, the same diagnoses, on generated logs of both mixes, the fuzz seeds and our
// fixtures, as written and upper-cased; and what happens when a database cannot be used.
#include "common/diagnosis/prefilter.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bench/classifier/startup_log_generator.h"
#include "common/base/string_view.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis_format.h"
#include "common/diagnosis/signature_catalogue.h"
#include "common/diagnosis/signature_matcher.h"
#include "common/diagnosis/vectorscan_patterns.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::diagnosis {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::string Json(const Diagnosis& d) {
  std::string json;
  AppendExplainJson("x.log", d, &json);
  return absl::StrCat(json, " ", AsAbsl(ConfidenceName(d.confidence)), " ",
                      AsAbsl(PhaseName(d.phase)), " ", d.progress_step, "/", d.progress_total, " ",
                      d.lines);
}

std::vector<Signature> BuiltinSignatures() {
  auto parsed = ParseSignatureCatalogue(BuiltinSignatureCatalogue(), "builtin");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *std::move(parsed) : std::vector<Signature>();
}

// The built-in catalogue on RE2 alone.
const SignatureMatcher& Re2Only() {
  static const SignatureMatcher* const m = [] {
    auto created = SignatureMatcher::Create(BuiltinSignatures());
    EXPECT_TRUE(created.ok()) << created.status();
    return created->release();
  }();
  return *m;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Generated logs of both mixes, the fuzz seeds and our fixtures, each also upper-cased (where only
// the case-insensitive patterns still match).
std::string VarietyOfLogs() {
  std::string text;
  for (int jit_percent : {17, 60}) {
    bench::StartupLogOptions options;
    options.jit_percent = jit_percent;
    options.mean_failure_spacing_bytes = 64 << 10;
    bench::StartupLogGenerator gen(options, 1 << 20);
    while (gen.bytes() < (1 << 20)) gen.AppendBlock(&text);
  }
  std::vector<std::string> paths;
  for (const char* dir : {"tests/fuzz/seeds", "tests/corpus/fixtures"}) {
    for (const auto& entry : std::filesystem::directory_iterator(testing::SourcePath(dir))) {
      if (entry.path().extension() == ".log") paths.push_back(entry.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  EXPECT_GT(paths.size(), 50u);
  for (const std::string& path : paths) {
    std::string log = ReadFile(path);
    if (!log.empty() && log.back() != '\n') log.push_back('\n');
    text += log;
    absl::AsciiStrToUpper(&log);
    text += log;
  }
  return text;
}

struct LineHits {
  size_t begin, end;
  std::vector<int> hits;
  bool operator==(const LineHits&) const = default;
};

std::vector<LineHits> MatchedLines(const SignatureMatcher& m, std::string_view text) {
  auto scanner = m.NewScanner();
  m.MatchLines(text, scanner.get());
  std::vector<LineHits> out;
  for (const auto& l : scanner->lines()) {
    const auto first = scanner->hits().begin() + static_cast<std::ptrdiff_t>(l.first);
    out.push_back({l.begin, l.end, {first, first + static_cast<std::ptrdiff_t>(l.count)}});
  }
  return out;
}

TEST(TrimTrailingRepeats, KeepsWhatAMatchNeedsAndNothingAfter) {
  EXPECT_EQ(TrimTrailingRepeats("ld: cannot find /[^\\n\\t :]+"), "ld: cannot find /[^\\n\\t :]");
  EXPECT_EQ(TrimTrailingRepeats("version \\d+\\.\\d*"), "version \\d+\\.");
  EXPECT_EQ(TrimTrailingRepeats("a\\d{2,5}"), "a\\d{2}");
  EXPECT_EQ(TrimTrailingRepeats("a\\d{3}"), "a\\d{3}");
  EXPECT_EQ(TrimTrailingRepeats("a\\d{2,}?"), "a\\d{2}");
  EXPECT_EQ(TrimTrailingRepeats("x(?:ab+|cd?)"), "x(?:ab|c)");
  EXPECT_EQ(TrimTrailingRepeats("foo|ba+r*"), "foo|ba");
  EXPECT_EQ(TrimTrailingRepeats("[^]x]+"), "[^]x]");
  EXPECT_EQ(TrimTrailingRepeats("(?:foo|bar)+"), "(?:foo|bar)");
  // What is not a trailing repeat stays: an anchor, an escaped '+', a group with its own flags.
  EXPECT_EQ(TrimTrailingRepeats("a+$"), "a+$");
  EXPECT_EQ(TrimTrailingRepeats("a\\+"), "a\\+");
  EXPECT_EQ(TrimTrailingRepeats("x(?i:ab+)"), "x(?i:ab+)");
  // Never down to nothing: that would match every line.
  EXPECT_EQ(TrimTrailingRepeats("x*"), "x*");
  EXPECT_EQ(TrimTrailingRepeats("a|x?"), "a|x?");
}

TEST(Prefilter, TheBuiltinCatalogueRunsOnIt) {
  ASSERT_NE(BuiltinPrefilter(), nullptr);
  EXPECT_TRUE(SignatureMatcher::Builtin().has_prefilter());
  EXPECT_FALSE(Re2Only().has_prefilter());
  // Every pattern compiles exactly: nothing for RE2 to confirm.
  EXPECT_THAT(BuiltinPrefilter()->confirm, IsEmpty());
}

TEST(Prefilter, FindsTheLinesAndPatternsRe2Finds) {
  const std::string text = VarietyOfLogs();
  const SignatureMatcher& fast = SignatureMatcher::Builtin();
  const std::vector<LineHits> expected = MatchedLines(Re2Only(), text);
  const std::vector<LineHits> got = MatchedLines(fast, text);
  EXPECT_GT(expected.size(), 1000u);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], expected[i])
        << "line at " << expected[i].begin << ": "
        << text.substr(expected[i].begin, expected[i].end - expected[i].begin);
  }
  // Line by line too, on each line the buffer scan found.
  auto scanner = fast.NewScanner();
  std::vector<int> a, b;
  for (const LineHits& l : expected) {
    const std::string_view line(text.data() + l.begin, l.end - l.begin);
    a.clear();
    b.clear();
    fast.Match(line, &a, scanner.get());
    Re2Only().Match(line, &b);
    ASSERT_EQ(a, b) << line;
  }
}

TEST(Prefilter, ClassifiesLikeRe2Alone) {
  std::vector<std::string> paths;
  for (const char* dir : {"tests/fuzz/seeds", "tests/corpus/fixtures"}) {
    for (const auto& entry : std::filesystem::directory_iterator(testing::SourcePath(dir))) {
      if (entry.path().extension() == ".log") paths.push_back(entry.path().string());
    }
  }
  for (const std::string& path : paths) {
    const std::string log = ReadFile(path);
    Classifier fast(&SignatureMatcher::Builtin());
    Classifier slow(&Re2Only());
    // Chunks that split lines, so both the buffer scans and the line-at-a-time path run.
    for (size_t pos = 0; pos < log.size(); pos += 100) {
      fast.AddBytes(std::string_view(log).substr(pos, 100));
      slow.AddBytes(std::string_view(log).substr(pos, 100));
    }
    EXPECT_EQ(Json(fast.Finish()), Json(slow.Finish())) << path;
  }
}

// A text with more matches than any log (one line of `FAILED: ` over and over) is handed to RE2,
// whose answers are the same, instead of costing memory for every match.
TEST(Prefilter, TooManyMatchesGoToRe2) {
  std::string text = "Traceback (most recent call last)\n";
  for (int i = 0; i < 20000; ++i) text += "FAILED: ";
  text += "\nninja: build stopped: subcommand failed.\n";
  auto scanner = SignatureMatcher::Builtin().NewScanner();
  SignatureMatcher::Builtin().MatchLines(text, scanner.get());
  EXPECT_EQ(scanner->re2_fallbacks(), 1);
  EXPECT_EQ(MatchedLines(SignatureMatcher::Builtin(), text), MatchedLines(Re2Only(), text));
  // An ordinary log is not.
  const std::string log = ReadFile(testing::SourcePath("tests/fuzz/seeds/ninja_ptxas.log"));
  SignatureMatcher::Builtin().MatchLines(log, scanner.get());
  EXPECT_EQ(scanner->re2_fallbacks(), 1);
}

TEST(Prefilter, ADatabaseBuiltForOtherPatternsIsNotUsed) {
  std::vector<Signature> signatures = BuiltinSignatures();
  signatures.pop_back();
  auto m = SignatureMatcher::Create(std::move(signatures), BuiltinPrefilter());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->has_prefilter());
  // And it still classifies, with RE2.
  Classifier c(m->get());
  c.AddBytes("ptxas fatal   : Unsupported .version 8.7; current version is '8.5'\n");
  EXPECT_EQ(c.Finish().diagnosis_class, "ptx_version_unsupported");
}

TEST(Prefilter, ADatabaseThatDoesNotLoadIsNotUsed) {
  const std::vector<std::string> patterns = MatcherPatterns(BuiltinSignatures());
  PrefilterData data = *BuiltinPrefilter();
  std::string damaged(data.databases.back());
  damaged[damaged.size() / 2] ^= 0x55;
  damaged.resize(damaged.size() / 3);
  data.databases = {damaged};
  EXPECT_FALSE(Prefilter::Load(data, patterns).ok());
  data.databases = {};
  EXPECT_FALSE(Prefilter::Load(data, patterns).ok());
}

// A prefilter may report more than RE2 matches (patterns Vectorscan runs only approximately):
// those are confirmed by RE2. Here the database is built from looser patterns than the matcher
// runs, and every pattern is marked for confirmation: the answers are RE2's.
TEST(Prefilter, ReportsThatRe2DoesNotConfirmAreDropped) {
  std::vector<Signature> signatures;
  for (const auto& [id, pattern] : {std::pair{"a", "alpha \\d+ beta"}, {"b", "gamma"}}) {
    Signature s;
    s.id = id;
    s.role = SignatureRole::kContext;
    s.pattern = pattern;
    signatures.push_back(s);
  }
  std::vector<std::string> loose = MatcherPatterns(signatures);
  loose[0] = "alpha";  // reports every line with "alpha"
  auto built = BuildPrefilterDatabase(loose);
  ASSERT_TRUE(built.ok()) << built.status();
  PrefilterData data;
  data.databases = {built->serialized};
  for (size_t i = 0; i < loose.size(); ++i) data.confirm.push_back(static_cast<int>(i));
  data.fingerprint = PatternsFingerprint(MatcherPatterns(signatures));
  auto m = SignatureMatcher::Create(signatures, &data);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->has_prefilter());
  const std::string text = "alpha x beta\nalpha 12 beta gamma\nalpha\ngamma\n";
  const std::vector<LineHits> got = MatchedLines(**m, text);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (LineHits{13, 32, {0, 1}}));
  EXPECT_EQ(got[1], (LineHits{39, 44, {1}}));
  std::vector<int> hits;
  auto scanner = (*m)->NewScanner();
  (*m)->Match("alpha x beta", &hits, scanner.get());
  EXPECT_THAT(hits, IsEmpty());
  (*m)->Match("alpha 1 beta", &hits, scanner.get());
  EXPECT_THAT(hits, ElementsAre(0));
}

}  // namespace
}  // namespace fleet::diagnosis
