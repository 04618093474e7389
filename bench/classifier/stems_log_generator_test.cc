#include "bench/classifier/stems_log_generator.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/signature_matcher.h"
#include "gtest/gtest.h"
#include "re2/re2.h"
#include "tests/testing/subprocess.h"

namespace fleet::bench {
namespace {

using ::fleet::diagnosis::Classifier;
using ::fleet::diagnosis::Diagnosis;
using ::fleet::diagnosis::SignatureMatcher;

std::vector<std::string> Stems() {
  auto stems = ReadStemsFile(fleet::testing::SourcePath("bench/classifier/stems.txt"));
  EXPECT_TRUE(stems.ok()) << stems.status();
  return stems.ok() ? *stems : std::vector<std::string>{};
}

struct Generated {
  std::string text;
  std::unique_ptr<StemsLogGenerator> generator;
};

Generated Generate(StemsLogOptions options, int64_t target) {
  auto generator = StemsLogGenerator::Create(options, Stems(), target);
  EXPECT_TRUE(generator.ok()) << generator.status();
  Generated g;
  if (!generator.ok()) return g;
  g.generator = *std::move(generator);
  while (g.generator->bytes() < target) g.generator->AppendBlock(&g.text);
  return g;
}

// Lines of `text` that match one of the stems, counted apart from the generator: one POSIX
// alternation of them all (as grep -E -f reads a pattern file), not the generator's set.
int64_t CountMatchingLines(const std::string& text, const std::vector<std::string>& stems) {
  RE2::Options options;
  options.set_posix_syntax(true);
  options.set_longest_match(true);
  const RE2 any(absl::StrCat("(", absl::StrJoin(stems, ")|("), ")"), options);
  EXPECT_TRUE(any.ok()) << any.error();
  int64_t n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    n += RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), any);
  }
  return n;
}

TEST(StemsLogGenerator, StemsFileIsThirtyPatterns) {
  const std::vector<std::string> stems = Stems();
  EXPECT_EQ(stems.size(), 30u);
  for (const std::string& stem : stems) {
    EXPECT_NE(stem.front(), '#') << "a grep -f file has no comments: " << stem;
    EXPECT_NE(stem.back(), ' ') << "trailing blank: " << stem;
  }
}

TEST(StemsLogGenerator, SameSeedSameBytes) {
  StemsLogOptions options;
  options.seed = 7;
  const Generated a = Generate(options, 1 << 20);
  const Generated b = Generate(options, 1 << 20);
  EXPECT_EQ(a.text, b.text);
  options.seed = 8;
  EXPECT_NE(Generate(options, 1 << 20).text, a.text);
}

TEST(StemsLogGenerator, AQuarterOfTheLinesMatchAStem) {
  const std::vector<std::string> stems = Stems();
  for (int jit_percent : {17, 60}) {
    StemsLogOptions options;
    options.jit_percent = jit_percent;
    const Generated g = Generate(options, 4 << 20);
    ASSERT_NE(g.generator, nullptr);
    EXPECT_EQ(g.generator->bytes(), static_cast<int64_t>(g.text.size()));
    EXPECT_EQ(g.generator->lines(),
              static_cast<int64_t>(std::count(g.text.begin(), g.text.end(), '\n')));
    // The text ends with '\n': the split's last piece is empty and matches nothing.
    const int64_t matching = CountMatchingLines(g.text, stems);
    EXPECT_EQ(matching, g.generator->matching_lines()) << "jit " << jit_percent;
    const double share = static_cast<double>(matching) / static_cast<double>(g.generator->lines());
    EXPECT_GE(share, 0.2) << "jit " << jit_percent;
    EXPECT_LE(share, 0.3) << "jit " << jit_percent;
    EXPECT_GT(g.generator->inserted_lines(), 0);
  }
}

// The class explain must report is the injected failure's: no line that a stem matches comes
// before it, and none after it takes the decision away.
TEST(StemsLogGenerator, ClassifierReportsTheInjectedFailure) {
  auto matcher = SignatureMatcher::Load("");
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    StemsLogOptions options;
    options.seed = seed;
    options.jit_percent = seed % 2 == 0 ? 60 : 17;
    const Generated g = Generate(options, 2 << 20);
    ASSERT_NE(g.generator, nullptr);
    ASSERT_TRUE(g.generator->first_failure().has_value()) << "seed " << seed;
    const InjectedFailure& failure = *g.generator->first_failure();
    Classifier classifier(matcher->get());
    for (size_t pos = 0; pos < g.text.size(); pos += 100003) {
      classifier.AddBytes(std::string_view(g.text).substr(pos, 100003));
    }
    const Diagnosis d = classifier.Finish();
    EXPECT_EQ(d.diagnosis_class, failure.diagnosis_class) << "seed " << seed << " " << failure.kind;
    EXPECT_EQ(d.root_cause_line, failure.root_cause_line) << "seed " << seed << " " << failure.kind;
    EXPECT_EQ(d.lines, g.generator->lines());
  }
}

TEST(StemsLogGenerator, RejectsAStemThatIsNotAnEre) {
  auto generator = StemsLogGenerator::Create(StemsLogOptions{}, {"ok", "broken("}, 1 << 20);
  EXPECT_EQ(generator.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fleet::bench
