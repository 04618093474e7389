#include "common/base/json_text.h"

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
  const std::string text =
      value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  // Outside strings a dump has no backslash and no DEL, and inside them every backslash starts an
  // escape: a left-to-right walk that takes escapes in pairs rewrites exactly the three forms.
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      const char next = text[++i];
      if (next == 'b') {
        out.append("\\u0008");
      } else if (next == 'f') {
        out.append("\\u000c");
      } else {
        out.push_back(c);
        out.push_back(next);
      }
    } else if (c == '\x7f') {
      out.append("\\u007f");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace fleet
