#include "common/base/json_text.h"

#include <string>

#include "gtest/gtest.h"

namespace fleet {
namespace {

TEST(JsonText, WritesFieldsInTheOrderTheyWereSet) {
  Json json = Json::object();
  json["file"] = "a.log";
  json["root_cause_line"] = 0;
  Json line = Json::object();
  line["line"] = 3;
  line["text"] = "x";
  json["evidence"] = Json::array({std::move(line), Json::object()});
  json["ok"] = false;
  json["none"] = nullptr;
  json["big"] = int64_t{-9007199254740993};
  EXPECT_EQ(JsonText(std::move(json)),
            R"({"file":"a.log","root_cause_line":0,"evidence":[{"line":3,"text":"x"},{}],)"
            R"("ok":false,"none":null,"big":-9007199254740993})");
}

TEST(JsonText, EscapesEveryControlByteAsTheContractSays) {
  std::string all;
  for (int c = 0; c < 0x20; ++c) all.push_back(static_cast<char>(c));
  all += "\x7f\"\\/";
  EXPECT_EQ(JsonText(all),
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\u0008\\t\\n\\u000b"
            "\\u000c\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017"
            "\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\u007f\\\"\\\\/\"");
  // nlohmann's own bytes differ for \b, \f and DEL: the reason JsonText rewrites them.
  EXPECT_EQ(Json("\b\f\x7f").dump(), "\"\\b\\f\x7f\"");
  // A backslash before 'b' or 'f' in the text is not an escape to rewrite.
  EXPECT_EQ(JsonText("\\b\\f"), R"("\\b\\f")");
  EXPECT_EQ(JsonText("\\\b"), R"("\\\u0008")");
}

TEST(JsonText, ReplacesEachByteOfAnInvalidSequenceAndKeepsValidOnes) {
  // Valid 2-, 3- and 4-byte sequences, then a lone continuation byte, a truncated sequence, an
  // overlong encoding, a surrogate and a truncated sequence at the end.
  const std::string text = JsonText(
      "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80|\x80|\xE2\x82|\xC0\xAF|\xED\xA0\x80|\xF0\x9F\x98");
  EXPECT_EQ(text,
            "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80|\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD|"
            "\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|"
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
  // nlohmann's `replace` alone writes one U+FFFD for the truncated "\xE2\x82": the reason
  // JsonText makes strings valid first.
  EXPECT_EQ(Json("\xE2\x82|").dump(-1, ' ', false, Json::error_handler_t::replace),
            "\"\xEF\xBF\xBD|\"");
}

TEST(JsonText, SanitizesStringsAtEveryDepthAndInKeys) {
  Json json = Json::object();
  json["a"] = Json::array({"x\xFF", Json::object({{"b", "\xC0"}})});
  json["k\xFE"] = 1;
  json["z"] = 2;
  EXPECT_EQ(JsonText(std::move(json)),
            "{\"a\":[\"x\xEF\xBF\xBD\",{\"b\":\"\xEF\xBF\xBD\"}],\"k\xEF\xBF\xBD\":1,\"z\":2}");
}

TEST(JsonText, NulBytesAreEscaped) { EXPECT_EQ(JsonText(std::string("a\0b", 3)), R"("a\u0000b")"); }

}  // namespace
}  // namespace fleet
