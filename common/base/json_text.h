// JSON text for our output contracts (`fleetctl ... -o json`, docs/cli.md; the explain object,
// docs/design.md): values are built with nlohmann/json's ordered_json (fields in the order the
// code sets them, snake_case names, every field present; never protobuf's JSON printer, which
// renames fields and drops zero values) and written by JsonText.
//
// JsonText is nlohmann's dump() plus the three places where its bytes differ from the contract the
// golden files pin (cli/testdata/json), so that any bytes in a string give the same text as before:
//   - invalid UTF-8: each byte of an invalid sequence is one U+FFFD. nlohmann's `replace` handler
//     writes one U+FFFD per maximal invalid subsequence (a truncated 3-byte sequence is one U+FFFD
//     there, two here), so strings are made valid (SanitizeUtf8) before the dump;
//   - \b and \f are written \u0008 and \u000c (nlohmann writes the two-character forms);
//   - DEL (0x7F) is written \u007f (nlohmann writes the byte as it is).
// Everything else is nlohmann's: other control bytes as \u00XX (lower-case hex), \n \r \t \" \\,
// '/' unescaped, integers in decimal, true/false/null. Doubles are nlohmann's shortest round-trip
// form (no contract output has one). Pure functions.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace fleet {

using Json = nlohmann::ordered_json;

// One line of JSON text, no newline. An object key that is not valid UTF-8 is made valid too
// (two keys that become equal then keep the first one's place and the last one's value).
std::string JsonText(const Json& value);

}  // namespace fleet
