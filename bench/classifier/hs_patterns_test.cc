#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bench/classifier/startup_log_generator.h"
#include "common/diagnosis/signature_matcher.h"
#include "common/diagnosis/vectorscan_patterns.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::bench {
namespace {

using ::fleet::diagnosis::CompileVectorscanCatalogue;
using ::fleet::diagnosis::HsScratch;
using ::fleet::diagnosis::Re2ToVectorscan;
using ::fleet::diagnosis::RefusedPattern;
using ::fleet::diagnosis::SignatureMatcher;
using ::fleet::diagnosis::VectorscanCatalogue;
using ::fleet::diagnosis::VectorscanPattern;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The ids a block-mode scan of `text` reports, ascending, each once.
std::vector<int> Scan(const VectorscanCatalogue& c, hs_scratch_t* scratch, std::string_view text) {
  std::vector<int> hits;
  const auto on_match = [](unsigned int id, unsigned long long, unsigned long long, unsigned int,
                           void* ctx) {
    static_cast<std::vector<int>*>(ctx)->push_back(static_cast<int>(id));
    return 0;
  };
  EXPECT_EQ(hs_scan(c.database.get(), text.data(), static_cast<unsigned int>(text.size()), 0,
                    scratch, on_match, &hits),
            HS_SUCCESS);
  std::sort(hits.begin(), hits.end());
  hits.erase(std::unique(hits.begin(), hits.end()), hits.end());
  return hits;
}

HsScratch ScratchFor(const VectorscanCatalogue& c) {
  hs_scratch_t* s = nullptr;
  EXPECT_EQ(hs_alloc_scratch(c.database.get(), &s), HS_SUCCESS);
  return HsScratch(s);
}

TEST(Re2ToVectorscan, NamedGroupsBecomeNonCapturing) {
  EXPECT_EQ(Re2ToVectorscan("ld: cannot find (?P<library>/x+)").expression,
            "ld: cannot find (?:/x+)");
  EXPECT_EQ(Re2ToVectorscan("(?<a>b)(?:c)").expression, "(?:b)(?:c)");
}

TEST(Re2ToVectorscan, LeadingCaseFoldingBecomesAFlag) {
  const VectorscanPattern leading = Re2ToVectorscan("(?i)address already in use");
  EXPECT_EQ(leading.expression, "address already in use");
  EXPECT_EQ(leading.flags, static_cast<unsigned int>(HS_FLAG_CASELESS));
  // A group's own flag is Vectorscan syntax too, and stays where it is.
  const VectorscanPattern inner = Re2ToVectorscan("ninja(?i:could not find)");
  EXPECT_EQ(inner.expression, "ninja(?i:could not find)");
  EXPECT_EQ(inner.flags, 0u);
}

TEST(Re2ToVectorscan, NothingCanReachTheNextLine) {
  EXPECT_EQ(Re2ToVectorscan(R"(a\s+b)").expression, R"(a[\t\f\r ]+b)");
  EXPECT_EQ(Re2ToVectorscan(R"(\S\D\W)").expression, R"([^\t\n\f\r ][^0-9\n][^0-9A-Za-z_\n])");
  EXPECT_EQ(Re2ToVectorscan(R"([^\s:']*)").expression, R"([^\n\t\f\r :']*)");
  EXPECT_EQ(Re2ToVectorscan(R"([^]x])").expression, R"([^]\nx])");
  EXPECT_EQ(Re2ToVectorscan(R"([^\s'"-])").expression, R"([^\n\t\f\r '"-])");  // '-' stays last
  EXPECT_EQ(Re2ToVectorscan(R"([\s#>|])").expression, R"([\t\f\r #>|])");
  EXPECT_EQ(Re2ToVectorscan(R"([\w./+-]\d[[:alpha:]])").expression, R"([\w./+-]\d[[:alpha:]])");
}

TEST(CompileVectorscanCatalogue, RefusesWhatCannotCompileAndKeepsTheRest) {
  // A pattern that matches the empty string is refused by Vectorscan, prefilter or not.
  auto c = CompileVectorscanCatalogue({"(?i)alpha", "(?:x)?", R"(beta\s+(?P<n>\d+))"},
                                      HS_FLAG_SINGLEMATCH);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->ids, ElementsAre(0, 2));
  ASSERT_EQ(c->refused.size(), 1u);
  EXPECT_EQ(c->refused[0].index, 1);
  EXPECT_THAT(c->refused[0].error, HasSubstr("empty"));
  HsScratch scratch = ScratchFor(*c);
  EXPECT_THAT(Scan(*c, scratch.get(), "ALPHA and beta  12"), ElementsAre(0, 2));
  EXPECT_THAT(Scan(*c, scratch.get(), "beta x"), IsEmpty());
}

TEST(CompileVectorscanCatalogue, NoPatternThatCompilesIsAnError) {
  auto c = CompileVectorscanCatalogue({"(?:x)?"}, 0);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

// Vectorscan 5.4.9 (Debian 12) misses `x "[^"]*", y` when the class runs over more than 64 bytes
// (a negated class of one byte between literals); with a second byte excluded it finds it. The
// '\n' every negated class gets is also what keeps the catalogue's frame pattern working.
TEST(CompileVectorscanCatalogue, FindsANegatedClassRunLongerThan64Bytes) {
  const std::string path(100, 'a');
  const std::string line = absl::StrCat(R"(  File "/)", path, R"(.py", line 12, in f)");
  auto c = CompileVectorscanCatalogue({R"(File "[^"]*", line \d+)"}, HS_FLAG_SINGLEMATCH);
  ASSERT_TRUE(c.ok()) << c.status();
  HsScratch scratch = ScratchFor(*c);
  EXPECT_THAT(Scan(*c, scratch.get(), line), ElementsAre(0));
}

TEST(CompileVectorscanCatalogue, TheBuiltinCatalogueCompilesWhole) {
  const SignatureMatcher& m = SignatureMatcher::Builtin();
  auto c = CompileVectorscanCatalogue(m.patterns(), HS_FLAG_SINGLEMATCH);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const RefusedPattern& r : c->refused) ADD_FAILURE() << r.pattern << ": " << r.error;
  EXPECT_EQ(c->ids.size(), m.patterns().size());
}

// What makes it a prefilter: on every line, each pattern RE2 matches is reported, scanned line by
// line and scanned as one buffer (HS_FLAG_MULTILINE). Text: a generated log of both mixes and the
// fuzz seeds (real log shapes: CRLF, binary bytes, old ninja forms), as written and upper-cased.
TEST(CompileVectorscanCatalogue, ReportsEveryPatternRe2MatchesOnEveryLine) {
  const SignatureMatcher& m = SignatureMatcher::Builtin();
  auto per_line = CompileVectorscanCatalogue(m.patterns(), HS_FLAG_SINGLEMATCH);
  auto whole = CompileVectorscanCatalogue(m.patterns(), HS_FLAG_MULTILINE);
  ASSERT_TRUE(per_line.ok()) << per_line.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  HsScratch line_scratch = ScratchFor(*per_line);
  HsScratch whole_scratch = ScratchFor(*whole);

  std::string text;
  for (int jit_percent : {17, 60}) {
    StartupLogOptions options;
    options.jit_percent = jit_percent;
    options.mean_failure_spacing_bytes = 64 << 10;
    StartupLogGenerator gen(options, 1 << 20);
    while (gen.bytes() < (1 << 20)) gen.AppendBlock(&text);
  }
  for (const char* seed :
       {"ninja_link", "ready_then_port", "misc_causes", "sglang_sigquit", "ninja_old_form",
        "jit_stalled", "crlf_binary", "ninja_ptxas", "vllm_worker"}) {
    std::ifstream in(fleet::testing::SourcePath(absl::StrCat("tests/fuzz/seeds/", seed, ".log")),
                     std::ios::binary);
    ASSERT_TRUE(in) << seed;
    std::ostringstream s;
    s << in.rdbuf();
    std::string seed_text = s.str();
    if (!seed_text.empty() && seed_text.back() != '\n') seed_text.push_back('\n');
    text += seed_text;
    // Upper-cased too: only the case-insensitive patterns still match those lines.
    absl::AsciiStrToUpper(&seed_text);
    text += seed_text;
  }

  // Whole buffer: which patterns end a match in which line.
  std::vector<size_t> line_starts;
  for (size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) line_starts.push_back(at);
  struct WholeHits {
    const std::vector<size_t>* starts;
    std::vector<std::vector<int>> by_line;
  } whole_hits{&line_starts, std::vector<std::vector<int>>(line_starts.size())};
  const auto on_match = [](unsigned int id, unsigned long long, unsigned long long to, unsigned int,
                           void* ctx) {
    auto* w = static_cast<WholeHits*>(ctx);
    // The match's last byte is at to - 1; its line is the last that starts at or before it.
    const size_t line = static_cast<size_t>(
        std::upper_bound(w->starts->begin(), w->starts->end(), to - 1) - w->starts->begin() - 1);
    w->by_line[line].push_back(static_cast<int>(id));
    return 0;
  };
  ASSERT_EQ(hs_scan(whole->database.get(), text.data(), static_cast<unsigned int>(text.size()), 0,
                    whole_scratch.get(), on_match, &whole_hits),
            HS_SUCCESS);

  int lines_re2_matched = 0;
  std::vector<int> re2_hits;
  for (size_t n = 0; n < line_starts.size(); ++n) {
    const size_t end = text.find('\n', line_starts[n]);
    const std::string_view line(text.data() + line_starts[n], end - line_starts[n]);
    re2_hits.clear();
    m.Match(line, &re2_hits);
    lines_re2_matched += !re2_hits.empty();
    const std::vector<int> hs_hits = Scan(*per_line, line_scratch.get(), line);
    std::vector<int>& whole_line = whole_hits.by_line[n];
    std::sort(whole_line.begin(), whole_line.end());
    for (int h : re2_hits) {
      EXPECT_TRUE(std::binary_search(hs_hits.begin(), hs_hits.end(), h))
          << m.patterns()[static_cast<size_t>(h)] << " on line " << n + 1 << ": " << line;
      EXPECT_TRUE(std::binary_search(whole_line.begin(), whole_line.end(), h))
          << m.patterns()[static_cast<size_t>(h)] << " in the buffer, line " << n + 1 << ": "
          << line;
    }
    // And the buffer's matches stay within their lines: the same lines as line by line.
    EXPECT_EQ(whole_line.empty(), hs_hits.empty()) << "line " << n + 1 << ": " << line;
  }
  EXPECT_GT(lines_re2_matched, 500);  // the text exercises the catalogue
}

}  // namespace
}  // namespace fleet::bench
