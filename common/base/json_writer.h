// JsonWriter: writes JSON text deliberately, field by field, in the order the caller gives, with
// the caller's names. It exists because protobuf's JSON printer picks camelCase names and drops
// zero values, while our output formats (`fleetctl explain -o json`, `-o json` listings) are
// contracts with fixed snake_case fields that are always present.
//
// Strings may hold any bytes: invalid UTF-8 becomes U+FFFD and control characters are escaped, so
// the output is always valid JSON whatever a log contained. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fleet {

class JsonWriter {
 public:
  // Appends to `*out`, which must outlive the writer.
  explicit JsonWriter(std::string* out) : out_(out) {}

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Inside an object, each value is preceded by Key().
  void Key(std::string_view key);
  void String(std::string_view value);
  void Int(int64_t value);
  void Double(double value);
  void Bool(bool value);
  void Null();

 private:
  void BeforeValue();

  std::string* out_;
  // One entry per open container: whether it already holds an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// Appends `value` as a quoted JSON string (escaped, invalid UTF-8 replaced by U+FFFD).
void AppendJsonString(std::string_view value, std::string* out);

// Returns `text` with every invalid UTF-8 sequence replaced by U+FFFD; for terminals and files
// that must hold valid text.
std::string SanitizeUtf8(std::string_view text);

}  // namespace fleet
