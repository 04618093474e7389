#include "common/base/json_writer.h"

#include "gtest/gtest.h"

namespace fleet {
namespace {

TEST(JsonWriter, WritesNestedStructuresInOrder) {
  std::string out;
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("file");
  w.String("a.log");
  w.Key("root_cause_line");
  w.Int(0);
  w.Key("evidence");
  w.BeginArray();
  w.BeginObject();
  w.Key("line");
  w.Int(3);
  w.Key("text");
  w.String("x");
  w.EndObject();
  w.BeginObject();
  w.EndObject();
  w.EndArray();
  w.Key("ok");
  w.Bool(false);
  w.Key("none");
  w.Null();
  w.EndObject();
  EXPECT_EQ(out, R"({"file":"a.log","root_cause_line":0,"evidence":[{"line":3,"text":"x"},{}],)"
                 R"("ok":false,"none":null})");
}

TEST(JsonWriter, EscapesControlCharactersAndQuotes) {
  std::string out;
  AppendJsonString(std::string_view("a\"b\\c\n\r\t\x01\x7f", 10), &out);
  EXPECT_EQ(out, R"("a\"b\\c\n\r\t\u0001\u007f")");
}

TEST(JsonWriter, ReplacesInvalidUtf8AndKeepsValid) {
  std::string out;
  // Valid 2-, 3- and 4-byte sequences, then a lone continuation byte, a truncated sequence, an
  // overlong encoding and a surrogate.
  AppendJsonString("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80|\x80|\xE2\x82|\xC0\xAF|\xED\xA0\x80",
                   &out);
  EXPECT_EQ(out,
            "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80|\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD|"
            "\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(JsonWriter, NulBytesAreEscaped) {
  std::string out;
  AppendJsonString(std::string_view("a\0b", 3), &out);
  EXPECT_EQ(out, R"("a\u0000b")");
}

}  // namespace
}  // namespace fleet
