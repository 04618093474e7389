#include "bench/classifier/startup_log_generator.h"

#include <set>
#include <string>

#include "common/diagnosis/classifier.h"
#include "common/diagnosis/signature_matcher.h"
#include "gtest/gtest.h"

namespace fleet::bench {
namespace {

using ::fleet::diagnosis::Classifier;
using ::fleet::diagnosis::Diagnosis;
using ::fleet::diagnosis::SignatureMatcher;

std::string Generate(StartupLogOptions options, int64_t target) {
  StartupLogGenerator generator(options, target);
  std::string text;
  while (generator.bytes() < target) generator.AppendBlock(&text);
  return text;
}

TEST(StartupLogGenerator, SameSeedSameBytes) {
  StartupLogOptions options;
  options.seed = 7;
  EXPECT_EQ(Generate(options, 1 << 20), Generate(options, 1 << 20));
  options.seed = 8;
  EXPECT_NE(Generate(options, 1 << 20), Generate(StartupLogOptions{.seed = 7}, 1 << 20));
}

TEST(StartupLogGenerator, CountsWhatItWrites) {
  StartupLogGenerator generator(StartupLogOptions{}, 1 << 20);
  std::string text;
  while (generator.bytes() < (1 << 20)) generator.AppendBlock(&text);
  EXPECT_EQ(generator.bytes(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(generator.lines(), static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')));
  EXPECT_EQ(text.back(), '\n');
  EXPECT_LT(generator.bytes() - (1 << 20), 256 << 10) << "overshoot is one block at most";
}

// The benchmark's correctness check, through the real classifier and many seeds so that every
// kind of injected failure comes first at least once: the class and line it reports are the
// first injected failure's.
TEST(StartupLogGenerator, ClassifierReportsFirstInjectedFailure) {
  auto matcher = SignatureMatcher::Load("");
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  std::set<std::string> kinds;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    StartupLogOptions options;
    options.seed = seed;
    options.mean_failure_spacing_bytes = 256 << 10;
    options.first_failure_within_bytes = 512 << 10;
    StartupLogGenerator generator(options, 2 << 20);
    std::string text;
    while (generator.bytes() < (2 << 20)) generator.AppendBlock(&text);
    ASSERT_TRUE(generator.first_failure().has_value());
    EXPECT_GT(generator.failures(), 3);
    const InjectedFailure& first = *generator.first_failure();
    kinds.emplace(first.kind);

    Classifier classifier(matcher->get());
    // Odd chunk sizes, so that lines straddle chunks as they do when read from a file.
    for (size_t pos = 0; pos < text.size(); pos += 100003) {
      classifier.AddBytes(std::string_view(text).substr(pos, 100003));
    }
    const Diagnosis d = classifier.Finish();
    EXPECT_EQ(d.diagnosis_class, first.diagnosis_class) << "seed " << seed << " " << first.kind;
    EXPECT_EQ(d.root_cause_line, first.root_cause_line) << "seed " << seed << " " << first.kind;
    EXPECT_EQ(d.lines, generator.lines());
  }
  EXPECT_EQ(kinds.size(), 7u) << "every failure kind decided at least one seed";
}

// The benchmark may shift the mix (bench/run.sh JIT_PERCENT): the promise holds for any of it,
// from no JIT builds to nothing else.
TEST(StartupLogGenerator, FirstInjectedFailureDecidesWhateverTheMix) {
  auto matcher = SignatureMatcher::Load("");
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  for (int jit_percent : {0, 60, 100}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      StartupLogOptions options;
      options.seed = seed;
      options.jit_percent = jit_percent;
      StartupLogGenerator generator(options, 3 << 20);
      std::string text;
      while (generator.bytes() < (3 << 20)) generator.AppendBlock(&text);
      ASSERT_TRUE(generator.first_failure().has_value());
      Classifier classifier(matcher->get());
      classifier.AddBytes(text);
      const Diagnosis d = classifier.Finish();
      EXPECT_EQ(d.diagnosis_class, generator.first_failure()->diagnosis_class)
          << "jit " << jit_percent << "% seed " << seed;
      EXPECT_EQ(d.root_cause_line, generator.first_failure()->root_cause_line)
          << "jit " << jit_percent << "% seed " << seed;
    }
  }
}

}  // namespace
}  // namespace fleet::bench
