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

// Whether every string and key in `value` is valid UTF-8 already (the usual case: nothing to copy).
bool AllStringsValid(const Json& value) {
  if (value.is_string()) return IsValidUtf8(value.get_ref<const std::string&>());
  if (value.is_array()) {
    for (const Json& item : value) {
      if (!AllStringsValid(item)) return false;
    }
  } else if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!IsValidUtf8(it.key()) || !AllStringsValid(it.value())) return false;
    }
  }
  return true;
}

}  // namespace

std::string JsonText(const Json& value) {
  std::string text;
  if (AllStringsValid(value)) {
    text = value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  } else {
    Json valid = value;
    SanitizeStrings(valid);
    // `replace` only as a guard: nothing invalid is left for it.
    text = valid.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  }
  // Outside strings a dump has no backslash and no DEL, and inside them every backslash starts an
  // escape: a walk that takes escapes in pairs rewrites exactly the three forms. Spans between
  // them are copied whole (a status of 8,000 servers is megabytes with no DEL and few escapes).
  // (A plain scan: find_first_of over a set calls memchr once per byte of the text.)
  auto next_special = [&text](size_t from) {
    for (size_t i = from; i < text.size(); ++i) {
      if (text[i] == '\\' || text[i] == '\x7f') return i;
    }
    return std::string::npos;
  };
  std::string out;
  size_t copied = 0;
  for (size_t i = next_special(0); i != std::string::npos; i = next_special(i)) {
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
