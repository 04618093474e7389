#include "bench/classifier/re2_to_ere.h"

#include <string>

#include "common/diagnosis/signature_matcher.h"
#include "gtest/gtest.h"

namespace fleet::bench {
namespace {

using ::fleet::diagnosis::SignatureMatcher;

// Every pattern of the built-in catalogue comes out without RE2-only syntax, so grep can run it.
TEST(Re2ToEre, EveryCataloguePatternHasAnExtendedRegexp) {
  auto m = SignatureMatcher::Load("");
  ASSERT_TRUE(m.ok());
  ASSERT_FALSE((*m)->patterns().empty());
  for (const std::string& p : (*m)->patterns()) {
    const std::string e = Re2ToEre(p);
    for (const char* re2_only : {"(?:", "(?P<", "(?i"}) {
      EXPECT_EQ(e.find(re2_only), std::string::npos) << p << " -> " << e;
    }
    EXPECT_EQ(e.find("\\d"), std::string::npos) << p << " -> " << e;
  }
}

TEST(Re2ToEre, TranslatesClassesGroupsAndCaseFolding) {
  EXPECT_EQ(Re2ToEre(R"(\d+)"), "[0-9]+");
  EXPECT_EQ(Re2ToEre("(?:ab|cd)"), "(ab|cd)");
  EXPECT_EQ(Re2ToEre("(?i)ab"), "[Aa][Bb]");
  EXPECT_EQ(Re2ToEre("x+?"), "x+");
}

}  // namespace
}  // namespace fleet::bench
