// UTF-8 checks for text that came from outside (logs, a daemon's answer): whether it is valid, and
// a copy where each byte of an invalid sequence is one U+FFFD, for terminals, files and JSON that
// must hold valid text. Pure functions.
#pragma once

#include <string>
#include <string_view>

namespace fleet {

// Whether `text` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view text);

// `text` with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD: a
// truncated 3-byte sequence becomes two U+FFFD, a lone continuation byte one.
std::string SanitizeUtf8(std::string_view text);

}  // namespace fleet
