// SQLite's placeholders in PostgreSQL's spelling, so that one SQL text can serve both stores where
// the rest of the dialect allows: `?` becomes `$N` (N one more than the largest number so far, as
// SQLite numbers it) and `?N` becomes `$N`. Text inside string literals ('...', E'...' with
// backslash escapes, $tag$...$tag$), quoted identifiers ("...") and comments (--, nested /* */)
// is copied as it is, so `'?'` stays a question mark. PostgreSQL's own `$N` pass through and count.
// A `?` outside those is always a placeholder: jsonb's `?`, `?|` and `?&` operators cannot be
// written in SQL given here (use jsonb_exists() and friends).
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fleet::postgres {

struct TranslatedSql {
  std::string sql;      // with $1..$N
  int param_count = 0;  // the largest N
};

// InvalidArgument for `?0` or a number too large (over 65535, PostgreSQL's limit).
absl::StatusOr<TranslatedSql> TranslatePlaceholders(std::string_view sql);

}  // namespace fleet::postgres
