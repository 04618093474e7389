#include "common/diagnosis/signature_catalogue.h"

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/signature_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(std::string_view text) {
  auto parsed = ParseSignatureCatalogue(text, "my.conf");
  if (!parsed.ok()) return std::string(parsed.status().message());
  auto matcher = SignatureMatcher::Create(*std::move(parsed));
  if (!matcher.ok()) return std::string(matcher.status().message());
  return "";
}

TEST(SignatureCatalogue, BuiltinParsesAndCompiles) {
  auto parsed = ParseSignatureCatalogue(BuiltinSignatureCatalogue(), "builtin");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_GT(parsed->size(), 50u);
  auto matcher = SignatureMatcher::Create(*std::move(parsed));
  ASSERT_TRUE(matcher.ok()) << matcher.status();
}

TEST(SignatureCatalogue, EveryClassOfTheTableExceptDerivedOnesHasASignature) {
  auto parsed = ParseSignatureCatalogue(BuiltinSignatureCatalogue(), "builtin");
  ASSERT_TRUE(parsed.ok());
  for (const DiagnosisClassInfo& c : AllDiagnosisClasses()) {
    // Derived from timers, the stall rule or the absence of a failure: no signature names them.
    if (c.name == "startup_stalled" || c.name == "startup_deadline_exceeded" || c.name == "none") {
      continue;
    }
    bool found = false;
    for (const Signature& s : *parsed) found |= s.diagnosis_class == c.name;
    EXPECT_TRUE(found) << "no signature for class " << c.name;
  }
}

TEST(SignatureCatalogue, ErrorsNameFileLineAndField) {
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\npattern = x\n"), "");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_eror\npattern = x\n"),
            "my.conf:3: field 'class': 'link_eror' is not a diagnosis class");
  EXPECT_EQ(ErrorOf("[a]\nrole = rootcause\n"),
            "my.conf:2: field 'role': 'rootcause' is not one of root_cause, symptom, phase, "
            "progress, context");
  EXPECT_EQ(ErrorOf("[a]\nrole = context\npatern = x\n"), "my.conf:3: unknown field 'patern'");
  EXPECT_EQ(ErrorOf("role = context\n"),
            "my.conf:1: 'key = value' before the first [signature] header");
  EXPECT_EQ(ErrorOf("[a]\nrole = context\npattern = x\n[a]\n"),
            "my.conf:4: duplicate signature id 'a'");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\npattern = x\n"),
            "my.conf:1: signature a: field 'class' is required for root_cause and symptom "
            "signatures");
  EXPECT_THAT(ErrorOf("[a]\nrole = context\n\npattern = (unclosed\n"),
              HasSubstr("my.conf:4: signature a: field 'pattern': missing )"));
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\npattern = (?P<x>y)\n"
                    "summary = {y} failed\n"),
            "my.conf:4: signature a: field 'summary': {y} is not captured by the pattern");
  EXPECT_EQ(ErrorOf("[a]\nrole = progress\npattern = \\[(\\d+)\\]\n"),
            "my.conf:3: signature a: field 'pattern': a progress pattern captures 'step' and "
            "'total'");
  EXPECT_EQ(ErrorOf(""), "my.conf: no signatures");
}

TEST(SignatureCatalogue, ProgressCountsTheStepsOfOnePhase) {
  const char kShards[] = "[a]\nrole = progress\npattern = (?P<step>\\d+)/(?P<total>\\d+)\n";
  EXPECT_EQ(ErrorOf(absl::StrCat(kShards, "phase = loading\n")), "");
  EXPECT_EQ(ErrorOf(absl::StrCat(kShards, "phase = ready\n")),
            "my.conf:1: signature a: field 'phase': a progress signature counts loading, "
            "jit_compiling or capturing_graphs");
  EXPECT_EQ(ErrorOf(absl::StrCat(kShards, "ends = loading\n")),
            "my.conf:1: signature a: fields 'ends' and 'failure_class' apply only to phase "
            "signatures");
  EXPECT_EQ(ErrorOf("[a]\nrole = context\npattern = x\nphase = loading\n"),
            "my.conf:1: signature a: fields 'phase', 'ends' and 'failure_class' apply only to "
            "phase and progress signatures");
}

TEST(SignatureCatalogue, CustomCatalogueDrivesTheClassifier) {
  auto parsed = ParseSignatureCatalogue(
      "[custom]\nrole = root_cause\nclass = port_in_use\n"
      "pattern = socket (?P<port>\\d+) busy\nsummary = port {port} is busy\n",
      "custom.conf");
  ASSERT_TRUE(parsed.ok());
  auto matcher = SignatureMatcher::Create(*std::move(parsed));
  ASSERT_TRUE(matcher.ok());
  Classifier c(matcher->get());
  c.AddBytes("hello\nsocket 8080 busy\n");
  const Diagnosis d = c.Finish();
  EXPECT_EQ(d.diagnosis_class, "port_in_use");
  EXPECT_EQ(d.root_cause_line, 2);
  EXPECT_EQ(d.summary, "port 8080 is busy");
  EXPECT_FALSE(d.toolchain_fix);
}

TEST(SignatureMatcher, APatternThatThrashesTheDfaCacheStillMatches) {
  // [ab]*a[ab]{22} needs about 2^22 DFA states: on a long random line of a and b the set's DFA
  // cache fills and resets many times. (Match() also checks the set's error info and falls back
  // to pattern-by-pattern matching when the DFA gives up; RE2 20220601 only gives up when one
  // state outgrows the whole budget, which no catalogue that compiles reaches.)
  auto parsed = ParseSignatureCatalogue(
      "[blowup]\nrole = root_cause\nclass = unknown\npattern = [ab]*a[ab]{22}c\n", "blowup.conf");
  ASSERT_TRUE(parsed.ok());
  auto matcher = SignatureMatcher::Create(*std::move(parsed));
  ASSERT_TRUE(matcher.ok());
  std::string line;
  uint32_t x = 12345;
  for (int i = 0; i < 400000; ++i) {
    x = x * 1103515245 + 12345;
    line.push_back((x >> 16) & 1 ? 'a' : 'b');
  }
  line += "a" + std::string(22, 'b') + "c";
  std::vector<int> hits;
  (*matcher)->Match(line, &hits);
  EXPECT_EQ(hits, std::vector<int>{0});
}

TEST(SignatureMatcher, TheAlternationsBudgetGrowsWithTheCatalogue) {
  // A catalogue three times the built-in one must get a budget big enough for its program (a
  // budget too small makes RE2 fall back to its NFA silently).
  std::string text(BuiltinSignatureCatalogue());
  std::string bigger = text;
  for (int copy = 1; copy <= 2; ++copy) {
    std::string renamed = text;
    for (size_t pos = 0; (pos = renamed.find("\n[", pos)) != std::string::npos; pos += 2) {
      renamed.insert(pos + 2, "copy" + std::to_string(copy) + "_");
    }
    bigger += renamed;
  }
  auto small = SignatureMatcher::Load("");
  auto parsed = ParseSignatureCatalogue(bigger, "bigger");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto large = SignatureMatcher::Create(*std::move(parsed));
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_GE((*small)->alternation_budget(), 8 << 20);
  EXPECT_GT((*large)->alternation_budget(), 2 * (*small)->alternation_budget());
}

TEST(SignatureMatcher, StripsCommonLogPrefixes) {
  auto m = SignatureMatcher::Load("");
  ASSERT_TRUE(m.ok());
  for (const auto& [line, want] : std::vector<std::pair<std::string, std::string>>{
           {"(EngineCore pid=1) ERROR 10-30 18:49:38 [core.py:708]   File \"x\"", "  File \"x\""},
           {"[2026-06-28 14:02:26 TP5] Scheduler hit", "Scheduler hit"},
           {"Oct 04 13:19:39 llm webui[394]: RuntimeError: x", "RuntimeError: x"},
           {"1979:2026-08-18T19:04:34+0200 sys0 vllm[66900]: (EngineCore pid=66900) FAILED: a",
            "FAILED: a"},
           {"2025-07-02 16:41:32 | ERROR | stderr |   File \"y\"", "  File \"y\""},
           {"    plain indented", "    plain indented"},
           {"ERROR:    [Errno 98] in use", "[Errno 98] in use"},
           {"> ImportError: x", "ImportError: x"},
           {"E       AssertionError", "       AssertionError"},  // keeps its indentation
           {"  | RuntimeError: z", "RuntimeError: z"},
           {"2023-07-27 13:17:05.422836: W tensorflow", "W tensorflow"},
           {"", ""},
           {"deepseek  | ERROR 01-28 22:58:15 engine.py:387]   File \"w\"", "  File \"w\""},
           // Older vLLM (file:line without brackets) and a worker's rank.
           {"(VllmWorkerProcess pid=55933) ERROR 11-25 08:17:34 multiproc_worker_utils.py:229]   "
            "File \"z\"",
            "  File \"z\""},
           {"(VllmWorker rank=1 pid=2699412) ERROR 08-11 10:45:36 [multiproc_executor.py:511] "
            "RuntimeError: y",
            "RuntimeError: y"},
       }) {
    EXPECT_EQ((*m)->StripLogPrefixes(line), want) << line;
  }
}
TEST(SignatureCatalogue, ConfidenceIsHighUnlessALowOneSaysSo) {
  auto parsed = ParseSignatureCatalogue(
      "[a]\nrole = root_cause\nclass = link_error\npattern = x\n"
      "[b]\nrole = root_cause\nclass = link_error\npattern = y\nconfidence = low\n",
      "my.conf");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[0].confidence, Confidence::kHigh);
  EXPECT_EQ((*parsed)[1].confidence, Confidence::kLow);
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\npattern = x\nconfidence = "
                    "some\n"),
            "my.conf:5: field 'confidence': 'some' is not one of high, low");
  EXPECT_EQ(ErrorOf("[a]\nrole = context\npattern = x\nconfidence = low\n"),
            "my.conf:1: signature a: field 'confidence' applies only to root_cause and symptom "
            "signatures");
}

TEST(SignatureCatalogue, ALowConfidenceCauseIsReportedButIsNoToolchainFix) {
  // link_error's fix is a toolchain change: the same class from a stem must not claim it.
  for (const Confidence confidence : {Confidence::kHigh, Confidence::kLow}) {
    auto parsed = ParseSignatureCatalogue(
        absl::StrCat("[a]\nrole = root_cause\nclass = link_error\npattern = cannot fnd\n"
                     "confidence = ",
                     AsAbsl(ConfidenceName(confidence)), "\n"),
        "my.conf");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto matcher = SignatureMatcher::Create(*std::move(parsed));
    ASSERT_TRUE(matcher.ok()) << matcher.status();
    Classifier c(matcher->get());
    c.AddBytes("ld: cannot fnd -lcuda\n");
    const Diagnosis d = c.Finish();
    EXPECT_EQ(d.diagnosis_class, "link_error");
    EXPECT_EQ(d.confidence, confidence);
    EXPECT_EQ(d.toolchain_fix, confidence == Confidence::kHigh);
  }
}

// A cut signature with `after`, a cut_text and a minimum: what its generated pattern matches.
constexpr char kCutCatalogue[] =
    "[ptx_cut]\nrole = root_cause\nclass = ptx_version_unsupported\ninfer = cut\n"
    "after = ptxas\\b.*fatal\\s*:\\s*\ncut_text = Unsupported .version\ncut_min = 13\n"
    "summary = ptxas rejects the PTX version\n"
    "[arch_cut]\nrole = root_cause\nclass = unsupported_gpu_arch\ninfer = cut\n"
    "cut_text = Unsupported gpu architecture '\ncut_min = 13\ncut_tail = \\w*\n";

TEST(SignatureCatalogue, ACutSignatureMatchesALongEnoughPrefixThatEndsTheLine) {
  auto parsed = ParseSignatureCatalogue(kCutCatalogue, "my.conf");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[0].confidence, Confidence::kLow);
  EXPECT_EQ((*parsed)[0].infer, Inference::kCut);
  EXPECT_THAT((*parsed)[0].summary, HasSubstr("cut off"));
  auto m = SignatureMatcher::Create(*std::move(parsed));
  ASSERT_TRUE(m.ok()) << m.status();
  auto hits = [&](std::string_view line) {
    std::vector<int> h;
    (*m)->Match(line, &h);
    return h;
  };
  EXPECT_THAT(hits("ptxas /tmp/x.ptx, line 5; fatal   : Unsupported .vers"),
              testing::ElementsAre(0));
  EXPECT_THAT(hits("ptxas fatal : Unsupported .version 9.2 \r"), testing::IsEmpty())
      << "the whole text and more is the intact signature's";
  EXPECT_THAT(hits("ptxas fatal : Unsupported .versio"), testing::ElementsAre(0));
  EXPECT_THAT(hits("ptxas fatal : Unsupported .version"), testing::IsEmpty())
      << "the whole message is not cut";
  EXPECT_THAT(hits("ptxas fatal : Unsupported"), testing::IsEmpty()) << "shorter than cut_min";
  EXPECT_THAT(hits("ptxas fatal : Unsupported .vers and more"), testing::IsEmpty())
      << "a cut prefix ends its line";
  EXPECT_THAT(hits("nvcc fatal   : Unsupported gpu architecture 'compute_12"),
              testing::ElementsAre(1))
      << "the tail follows the whole text";
  EXPECT_THAT(hits("nvcc fatal   : Unsupported gpu archit  "), testing::ElementsAre(1));
  EXPECT_THAT(hits("nvcc fatal   : Unsupported gpu architecture 'compute_120'"),
              testing::IsEmpty());
}

TEST(SignatureCatalogue, InferenceFieldsAreChecked) {
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = cut\npattern = x\n"
                    "cut_text = cannot find\n"),
            "my.conf:1: signature a: an 'infer = cut' signature has no 'pattern': it is made from "
            "'cut_text'");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = cut\n"),
            "my.conf:1: signature a: field 'cut_text' is required for 'infer = cut'");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = cut\n"
                    "cut_text = cannot find\ncut_min = 11\n"),
            "my.conf:1: signature a: field 'cut_min' must be at least 3 and shorter than "
            "'cut_text'");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\npattern = x\n"
                    "cut_text = cannot find\n"),
            "my.conf:1: signature a: fields 'cut_text', 'cut_min', 'cut_tail' and 'after' apply "
            "only to 'infer = cut'");
  EXPECT_EQ(ErrorOf("[a]\nrole = symptom\nclass = link_error\ninfer = frame\npattern = x\n"),
            "my.conf:1: signature a: field 'infer' applies only to root_cause signatures");
  EXPECT_EQ(ErrorOf("[a]\nrole = symptom\nclass = nccl_error\npattern = x\nconsequence = true\n"),
            "my.conf:1: signature a: field 'consequence' applies only to root_cause signatures");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = nccl_error\npattern = x\nconsequence = yes\n"),
            "my.conf:5: field 'consequence': 'yes' is not one of true, false");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\npattern = x\ncaller = y\n"),
            "my.conf:1: signature a: field 'caller' applies only to 'infer = frame' signatures");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = frame\npattern = x\n"
                    "confidence = high\n"),
            "my.conf:1: signature a: an inferred cause ('infer') has confidence low");
  EXPECT_EQ(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = guess\npattern = x\n"),
            "my.conf:4: field 'infer': 'guess' is not one of cut, frame");
  EXPECT_THAT(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = frame\npattern = x\n"
                      "caller = (\n"),
              HasSubstr("field 'caller'"));
  EXPECT_THAT(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = cut\n"
                      "cut_text = cannot find\nafter = (\n"),
              HasSubstr("field 'after'"));
  // Text that would close the generated group and open another is refused, not pasted in.
  EXPECT_THAT(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = cut\n"
                      "cut_text = cannot find\nafter = zzz)|(?:\n"),
              HasSubstr("my.conf:6: signature a: field 'after'"));
  EXPECT_THAT(ErrorOf("[a]\nrole = root_cause\nclass = link_error\ninfer = cut\n"
                      "cut_text = cannot find\ncut_tail = x)|(y\n"),
              HasSubstr("field 'cut_tail'"));
  // An inferred cause without a summary says what it was inferred from in the class's.
  auto parsed = ParseSignatureCatalogue(
      "[a]\nrole = root_cause\nclass = link_error\ninfer = cut\ncut_text = cannot find\n"
      "[b]\nrole = root_cause\nclass = link_error\ninfer = frame\npattern = x\n",
      "my.conf");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT((*parsed)[0].summary, HasSubstr("cut off"));
  EXPECT_THAT((*parsed)[1].summary, HasSubstr("lost its exception line"));
}

}  // namespace
}  // namespace fleet::diagnosis
