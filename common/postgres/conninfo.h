// Connection strings as they may be shown: in a log line, an error message, `fleetctl`'s output.
// A store URL can carry a password (postgresql://user:secret@host/db, or password=... in either
// form); it is read from a file or the environment, never from argv, and shown only redacted.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fleet::postgres {

// `conninfo` (a postgresql:// URI or key=value pairs) as key=value pairs libpq reads the same way,
// with the value of every secret keyword (password, sslpassword) replaced by "****". Built from
// libpq's own parse (percent-decoding and quoting done as libpq does them), so no spelling of the
// password survives. A string libpq cannot parse is not echoed at all: "(unparsable connection
// string)".
std::string RedactConninfo(std::string_view conninfo);

// The secret values `conninfo` carries (its password and sslpassword), to scrub from messages
// that libpq or the server wrote; empty when none or unparsable.
std::vector<std::string> ConninfoSecrets(std::string_view conninfo);

// `text` with every occurrence of each non-empty secret replaced by "****".
std::string ScrubSecrets(std::string text, const std::vector<std::string>& secrets);

}  // namespace fleet::postgres
