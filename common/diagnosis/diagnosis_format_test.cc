#include "common/diagnosis/diagnosis_format.h"

#include "common/diagnosis/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ExplainJson, HasExactlyTheContractFieldsInOrder) {
  const Diagnosis d = ClassifyText(
      "x\n/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
      "/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
      "collect2: error: ld returned 1 exit status\n"
      "nvidia-cuda-runtime 13.0.96\n");
  std::string json;
  AppendExplainJson("a \"b\".log", d, &json);
  EXPECT_EQ(json,
            R"({"file":"a \"b\".log","class":"link_error","root_cause_line":2,)"
            R"("summary":"the JIT link step cannot find -lcudart: its directory (CUDA lib64, the )"
            R"(libcuda stub) is not on the link path",)"
            R"("facts":{"link_library":["-lcudart","-lcuda"],)"
            R"("packages":{"nvidia-cuda-runtime":"13.0.96"}},)"
            R"("evidence":[{"line":2,"text":"/usr/bin/ld: cannot find -lcudart: No such file or )"
            R"(directory"},{"line":3,"text":"/usr/bin/ld: cannot find -lcuda: No such file or )"
            R"(directory"},{"line":4,"text":"collect2: error: ld returned 1 exit status"},)"
            R"({"line":5,"text":"nvidia-cuda-runtime 13.0.96"}],)"
            R"("symptoms":[{"line":4,"class":"link_error"}],"toolchain_fix":true})");
}

TEST(ExplainJson, NoneStillHasEveryField) {
  std::string json;
  AppendExplainJson("ok.log", ClassifyText("all good\n"), &json);
  EXPECT_EQ(json, R"({"file":"ok.log","class":"none","root_cause_line":0,)"
                  R"("summary":"the log shows no failure","facts":{},"evidence":[],"symptoms":[],)"
                  R"("toolchain_fix":false})");
}

TEST(ExplainJson, ConfidenceIsAddedOnlyWhenAskedForAndLast) {
  Diagnosis d = ClassifyText("all good\n");
  std::string plain, with;
  AppendExplainJson("ok.log", d, &plain);
  AppendExplainJson("ok.log", d, &with, /*with_confidence=*/true);
  EXPECT_EQ(with, plain.substr(0, plain.size() - 1) + R"(,"confidence":"high"})");
  d.confidence = Confidence::kLow;
  with.clear();
  AppendExplainJson("ok.log", d, &with, /*with_confidence=*/true);
  EXPECT_THAT(with, HasSubstr(R"("toolchain_fix":false,"confidence":"low"})"));
}

TEST(ExplainText, SaysALowConfidenceAndNothingForAHighOne) {
  Diagnosis d = ClassifyText("ImportError: libnvrtc.so.13: cannot open shared object file\n");
  ASSERT_EQ(d.diagnosis_class, "missing_shared_library");
  EXPECT_THAT(FormatExplainText("a.log", d, false), Not(HasSubstr("confidence")));
  d.confidence = Confidence::kLow;
  EXPECT_THAT(FormatExplainText("a.log", d, false),
              HasSubstr("\n  confidence: low (inferred from a message's stem"));
}

TEST(ExplainText, MarksTheRootCauseLineAndListsSkippedSymptoms) {
  const std::string text = FormatExplainText(
      "gpu0.log",
      ClassifyText("Received sigquit from a child process. It usually means the child failed.\n"
                   "ImportError: libnvrtc.so.13: cannot open shared object file: No such file or "
                   "directory\n"),
      /*color=*/false);
  EXPECT_THAT(text, HasSubstr("gpu0.log: missing_shared_library"));
  EXPECT_THAT(text, HasSubstr("  > 2  ImportError: libnvrtc.so.13"));
  EXPECT_THAT(text, HasSubstr("fix:       toolchain change inside the container [toolchain fix]"));
  EXPECT_THAT(text, HasSubstr("symptoms seen and skipped:\n    line 1: child_process_failed"));
  EXPECT_THAT(text, HasSubstr("library: libnvrtc.so.13"));
}

}  // namespace
}  // namespace fleet::diagnosis
