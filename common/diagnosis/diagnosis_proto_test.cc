#include "common/diagnosis/diagnosis_proto.h"

#include "common/diagnosis/diagnosis_format.h"
#include "common/diagnosis/test_util.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

TEST(DiagnosisProto, RoundTripKeepsTheExplainJson) {
  const Diagnosis d = ClassifyText(
      "Received sigquit from a child process. It usually means the child failed.\n"
      "FAILED: [code=1] x.o\n/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
      "/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
      "collect2: error: ld returned 1 exit status\nnvidia-cuda-nvcc 13.2.51\n"
      "ninja: build stopped: subcommand failed.\n");
  ASSERT_EQ(d.diagnosis_class, "link_error");
  fleet::v1::Diagnosis wire;
  ToProto(d, &wire);
  const Diagnosis back = FromProto(wire);
  std::string a, b;
  AppendExplainJson("f", d, &a);
  AppendExplainJson("f", back, &b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(back.unit, d.unit);
  EXPECT_EQ(back.fix, d.fix);
  EXPECT_EQ(back.phase, d.phase);
  EXPECT_EQ(FormatExplainText("f", back, false), FormatExplainText("f", d, false));
}

TEST(DiagnosisProto, ConfidenceTravelsAndAnOlderAgentsReadsHigh) {
  Diagnosis d = ClassifyText("ImportError: libnvrtc.so.13: cannot open shared object file\n");
  d.confidence = Confidence::kLow;
  fleet::v1::Diagnosis wire;
  ToProto(d, &wire);
  EXPECT_EQ(wire.confidence(), "low");
  EXPECT_EQ(FromProto(wire).confidence, Confidence::kLow);
  wire.clear_confidence();  // what an agent before issue 15 sends
  EXPECT_EQ(FromProto(wire).confidence, Confidence::kHigh);
}

}  // namespace
}  // namespace fleet::diagnosis
