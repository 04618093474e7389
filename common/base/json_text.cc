#include "common/base/json_text.h"

#include <string_view>
#include <utility>

#include "common/base/utf8.h"

namespace fleet {
namespace {

// Makes every string and key in `value` valid UTF-8 the way SanitizeUtf8 does; copies only what
// must change.
void SanitizeStrings(Json& value) {
  if (value.is_string()) {
    std::string& s = value.get_ref<std::string&>();
    if (!IsValidUtf8(s)) s = SanitizeUtf8(s);
  } else if (value.is_array()) {
    for (Json& item : value) SanitizeStrings(item);
  } else if (value.is_object()) {
    bool keys_valid = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      SanitizeStrings(it.value());
      keys_valid = keys_valid && IsValidUtf8(it.key());
    }
    if (keys_valid) return;
    Json fixed = Json::object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      fixed[SanitizeUtf8(it.key())] = std::move(it.value());
    }
    value = std::move(fixed);
  }
}

}  // namespace

std::string JsonText(Json value) {
  SanitizeStrings(value);
  // `replace` only as a guard: nothing invalid is left for it.
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  // Outside strings a dump has no backslash and no DEL, and inside them every backslash starts an
  // escape: a walk that takes escapes in pairs rewrites exactly the three forms. Spans between
  // them are copied whole (a status of 8,000 servers is megabytes with no DEL and few escapes).
  constexpr std::string_view kSpecial("\\\x7f", 2);
  std::string out;
  size_t copied = 0;
  for (size_t i = text.find_first_of(kSpecial); i != std::string::npos;
       i = text.find_first_of(kSpecial, i)) {
    std::string_view replacement;
    size_t length = 1;
    if (text[i] == '\x7f') {
      replacement = "\\u007f";
    } else if (i + 1 < text.size()) {
      length = 2;
      if (text[i + 1] == 'b') replacement = "\\u0008";
      if (text[i + 1] == 'f') replacement = "\\u000c";
    }
    if (!replacement.empty()) {
      if (out.empty()) out.reserve(text.size() + 64);
      out.append(text, copied, i - copied);
      out.append(replacement);
      copied = i + length;
    }
    i += length;
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

}  // namespace fleet
