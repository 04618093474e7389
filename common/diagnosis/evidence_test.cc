#include "common/diagnosis/evidence.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

using ::testing::HasSubstr;

TEST(EvidenceBuilder, SmallUnitIsKeptWhole) {
  EvidenceBuilder b(20);
  for (int i = 5; i < 15; ++i) b.Add(i, "line", false);
  const auto out = b.Build();
  ASSERT_EQ(out.size(), 10u);
  EXPECT_EQ(out.front().line, 5);
  EXPECT_EQ(out.back().line, 14);
}

TEST(EvidenceBuilder, ElidesTheMiddleKeepingKeyLinesAndSayingHowMany) {
  EvidenceBuilder b(10);  // head 4, tail 4, 2 key lines from the middle
  for (int i = 1; i <= 100; ++i)
    b.Add(i, i == 50 || i == 60 ? "error" : "noise", i == 50 || i == 60);
  const auto out = b.Build();
  std::vector<int64_t> lines;
  for (const auto& l : out) lines.push_back(l.line);
  EXPECT_EQ(lines, (std::vector<int64_t>{1, 2, 3, 4, 0, 50, 0, 60, 0, 97, 98, 99, 100}));
  EXPECT_EQ(out[4].text, "[... 45 lines elided ...]");
  EXPECT_EQ(out[6].text, "[... 9 lines elided ...]");
  EXPECT_EQ(out[8].text, "[... 36 lines elided ...]");
}

TEST(EvidenceBuilder, ClipKeepsStartAndEnd) {
  std::string text = "START" + std::string(20000, 'm') + "END\r";
  const std::string clipped = EvidenceBuilder::ClipLine(text);
  EXPECT_LE(clipped.size(), EvidenceBuilder::kMaxLineBytes + 40);
  EXPECT_EQ(clipped.substr(0, 5), "START");
  EXPECT_EQ(clipped.substr(clipped.size() - 3), "END");
  EXPECT_THAT(clipped, HasSubstr("bytes cut"));
  EXPECT_EQ(EvidenceBuilder::ClipLine("short\r"), "short");
}

}  // namespace
}  // namespace fleet::diagnosis
