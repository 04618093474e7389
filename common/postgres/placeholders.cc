#include "common/postgres/placeholders.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::postgres {

namespace {

constexpr int kMaxParams = 65535;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// The end (one past) of the literal, identifier or comment starting at `i`, or `i` when none
// starts there. An unterminated one runs to the end: the server reports it.
size_t SkipQuoted(std::string_view sql, size_t i) {
  const size_t n = sql.size();
  const char c = sql[i];
  if (c == '\'' || c == '"') {
    // E'...' (checked by the caller's look-behind) allows backslash escapes; '' and "" double.
    const bool escapes = c == '\'' && i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') &&
                         (i < 2 || !IsIdentChar(sql[i - 2]));
    for (size_t j = i + 1; j < n; ++j) {
      if (escapes && sql[j] == '\\') {
        ++j;
        continue;
      }
      if (sql[j] == c) {
        if (j + 1 < n && sql[j + 1] == c) {
          ++j;
          continue;
        }
        return j + 1;
      }
    }
    return n;
  }
  if (c == '-' && i + 1 < n && sql[i + 1] == '-') {
    const size_t end = sql.find('\n', i);
    return end == std::string_view::npos ? n : end + 1;
  }
  if (c == '/' && i + 1 < n && sql[i + 1] == '*') {
    int depth = 0;
    for (size_t j = i; j + 1 < n; ++j) {
      if (sql[j] == '/' && sql[j + 1] == '*') {
        ++depth;
        ++j;
      } else if (sql[j] == '*' && sql[j + 1] == '/') {
        ++j;
        if (--depth == 0) return j + 1;
      }
    }
    return n;
  }
  if (c == '$' && (i == 0 || !IsIdentChar(sql[i - 1]))) {
    // $tag$ ... $tag$, the tag empty or an identifier (not starting with a digit: that is $N).
    size_t j = i + 1;
    if (j < n && IsDigit(sql[j])) return i;
    while (j < n && IsIdentChar(sql[j]) && sql[j] != '$') ++j;
    if (j >= n || sql[j] != '$') return i;
    const std::string_view tag = sql.substr(i, j - i + 1);
    const size_t end = sql.find(tag, j + 1);
    return end == std::string_view::npos ? n : end + tag.size();
  }
  return i;
}

}  // namespace

absl::StatusOr<TranslatedSql> TranslatePlaceholders(std::string_view sql) {
  TranslatedSql out;
  out.sql.reserve(sql.size() + 16);
  size_t i = 0;
  while (i < sql.size()) {
    const size_t skipped = SkipQuoted(sql, i);
    if (skipped != i) {
      out.sql.append(sql.substr(i, skipped - i));
      i = skipped;
      continue;
    }
    const char c = sql[i];
    if (c != '?' && c != '$') {
      out.sql.push_back(c);
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < sql.size() && IsDigit(sql[j])) ++j;
    const std::string_view digits = sql.substr(i + 1, j - i - 1);
    if (c == '$' && (digits.empty() || (i > 0 && IsIdentChar(sql[i - 1])))) {
      out.sql.push_back(c);  // part of an identifier (a$b), not a parameter
      ++i;
      continue;
    }
    int number = 0;
    if (digits.empty()) {
      number = out.param_count + 1;
    } else {
      if (digits.size() > 5) number = kMaxParams + 1;
      for (char d : digits) number = std::min(number * 10 + (d - '0'), kMaxParams + 1);
      if (number == 0 || number > kMaxParams) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sql placeholder ", AsAbsl(sql.substr(i, j - i)), ": numbers run 1 to ", kMaxParams));
      }
    }
    if (number > kMaxParams) {
      return absl::InvalidArgumentError(
          absl::StrCat("sql: more than ", kMaxParams, " placeholders"));
    }
    out.param_count = std::max(out.param_count, number);
    absl::StrAppend(&out.sql, "$", number);
    i = j;
  }
  return out;
}

}  // namespace fleet::postgres
