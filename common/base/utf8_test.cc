#include "common/base/utf8.h"

#include "gtest/gtest.h"

namespace fleet {
namespace {

TEST(Utf8, ValidTextIsKeptAsItIs) {
  for (const char* s :
       {"", "plain", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(SanitizeUtf8(s), s);
  }
}

TEST(Utf8, EachByteOfAnInvalidSequenceBecomesOneReplacement) {
  constexpr char kR[] = "\xEF\xBF\xBD";
  for (const auto& [in, want] : std::vector<std::pair<std::string, std::string>>{
           {"\x80", kR},
           {"a\xE2\x82", std::string("a") + kR + kR},
           {"\xC0\xAF", std::string(kR) + kR},                    // overlong
           {"\xED\xA0\x80", std::string(kR) + kR + kR},           // surrogate
           {"\xF4\x90\x80\x80", std::string(kR) + kR + kR + kR},  // past U+10FFFF
           {"\xFF"
            "a",
            std::string(kR) + "a"}}) {
    EXPECT_FALSE(IsValidUtf8(in));
    EXPECT_EQ(SanitizeUtf8(in), want);
  }
}

}  // namespace
}  // namespace fleet
