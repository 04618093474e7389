#include "daemon/ssh/remote_command.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fleet::daemon {
namespace {

// Characters that mean nothing to a POSIX shell in any position of a word. `=` is left out (a
// first word `A=b` would be an assignment), `~` (tilde expansion), `%` and `^` to be safe.
bool IsShellSafe(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@' || c == '+' ||
         c == ':' || c == ',' || c == '.' || c == '/' || c == '-';
}

constexpr uint64_t kMinCtid = 100;
constexpr uint64_t kMaxCtid = 999999999;

}  // namespace

absl::StatusOr<std::string> ShellQuote(std::string_view arg) {
  if (arg.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("remote command: an argument holds a NUL byte");
  }
  bool safe = !arg.empty();
  for (char c : arg) safe = safe && IsShellSafe(c);
  if (safe) return std::string(arg);
  // Inside single quotes every byte is literal, newlines included; only `'` itself needs care:
  // close the quote, add an escaped quote, reopen.
  std::string quoted = "'";
  for (char c : arg) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

absl::StatusOr<std::string> RemoteQuote(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("remote command: empty argv");
  std::vector<std::string> words;
  words.reserve(argv.size());
  for (const std::string& arg : argv) {
    absl::StatusOr<std::string> word = ShellQuote(arg);
    if (!word.ok()) return word.status();
    words.push_back(*std::move(word));
  }
  return absl::StrJoin(words, " ");
}

absl::Status ValidateCtid(std::string_view ctid) {
  const auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat("container id \"", std::string(ctid),
                                                   "\": not a Proxmox CTID (", kMinCtid, "..",
                                                   kMaxCtid, ")"));
  };
  // Ten digits already exceed kMaxCtid; checking the length first keeps the sum from overflowing.
  if (ctid.empty() || ctid.size() > 9 || ctid[0] == '0') return invalid();
  uint64_t value = 0;
  for (char c : ctid) {
    if (c < '0' || c > '9') return invalid();
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value < kMinCtid || value > kMaxCtid) return invalid();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PctExecArgv(std::string_view ctid,
                                                     const std::vector<std::string>& argv,
                                                     bool keep_env) {
  if (absl::Status valid = ValidateCtid(ctid); !valid.ok()) return valid;
  if (argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("container ", std::string(ctid), ": pct exec: empty argv"));
  }
  std::vector<std::string> out = {
      "pct", "exec", std::string(ctid), "--keep-env", keep_env ? "1" : "0", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> PctPushArgv(std::string_view ctid, std::string_view src,
                                                     std::string_view dst, std::string_view perms) {
  if (absl::Status valid = ValidateCtid(ctid); !valid.ok()) return valid;
  if (!perms.empty() &&
      (perms.size() > 4 || perms.find_first_not_of("01234567") != std::string_view::npos)) {
    return absl::InvalidArgumentError(absl::StrCat("container ", std::string(ctid),
                                                   ": pct push: mode \"", std::string(perms),
                                                   "\" is not octal"));
  }
  for (std::string_view path : {src, dst}) {
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat("container ", std::string(ctid),
                                                     ": pct push: path \"", std::string(path),
                                                     "\" is not absolute"));
    }
  }
  std::vector<std::string> argv{"pct", "push", std::string(ctid), std::string(src),
                                std::string(dst)};
  if (!perms.empty()) {
    argv.push_back("--perms");
    argv.emplace_back(perms);
  }
  return argv;
}

}  // namespace fleet::daemon
