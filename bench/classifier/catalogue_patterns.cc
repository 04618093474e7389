// catalogue_patterns: the signature catalogue's patterns as GNU grep sees them, and our own line
// counts to compare grep's with.
//
//   catalogue_patterns                       one POSIX ERE per line: the file for `grep -E -f`
//   catalogue_patterns --count FILE          "lines=N matched=M bytes=B matched_bytes=MB": lines
//                                            SignatureMatcher::Match hits (what `grep -c -E -f`
//                                            counts), and the bytes in all lines and in those
//   catalogue_patterns --count FILE --per-pattern
//                                            then one line per pattern, in the order printed
//                                            above: how many lines it matches (`grep -c -E -e`)
//
// The benchmark uses the counts to show that grep runs the same patterns, not easier ones.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "bench/classifier/re2_to_ere.h"
#include "common/base/errno_status.h"
#include "common/base/flag_set.h"
#include "common/diagnosis/signature_matcher.h"

namespace {

using ::fleet::diagnosis::SignatureMatcher;

struct LineCounts {
  int64_t lines = 0;
  int64_t matched = 0;
  int64_t bytes = 0;          // of every line, with its '\n'
  int64_t matched_bytes = 0;  // of the matched lines
  std::vector<int64_t> per_pattern;
};

// Counts as grep does: a line is the bytes between '\n's (a last unterminated line counts too),
// matched on its own. Reads in chunks so that any file size works in little memory.
absl::StatusOr<LineCounts> CountLines(const std::string& path, const SignatureMatcher& matcher,
                                      size_t patterns) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fleet::ErrnoToStatus(errno, absl::StrCat("log ", path, ": open"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  LineCounts counts;
  counts.per_pattern.assign(patterns, 0);
  std::vector<int> hits;
  const auto count_line = [&](std::string_view line, bool terminated) {
    ++counts.lines;
    counts.bytes += static_cast<int64_t>(line.size()) + terminated;
    hits.clear();
    matcher.Match(line, &hits);
    if (!hits.empty()) {
      ++counts.matched;
      counts.matched_bytes += static_cast<int64_t>(line.size()) + terminated;
    }
    for (int h : hits) ++counts.per_pattern[static_cast<size_t>(h)];
  };
  constexpr size_t kChunk = 1 << 20;
  auto buffer = std::make_unique<char[]>(kChunk);
  std::string carry;
  while (true) {
    const ssize_t n = read(fd, buffer.get(), kChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fleet::ErrnoToStatus(errno, absl::StrCat("log ", path, ": read"));
    }
    if (n == 0) break;
    std::string_view data(buffer.get(), static_cast<size_t>(n));
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      if (nl == std::string_view::npos) {
        carry.append(data);
        break;
      }
      if (carry.empty()) {
        count_line(data.substr(0, nl), true);
      } else {
        carry.append(data.substr(0, nl));
        count_line(carry, true);
        carry.clear();
      }
      data.remove_prefix(nl + 1);
    }
  }
  if (!carry.empty()) count_line(carry, false);
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  std::string signatures;
  std::string count;
  bool per_pattern = false;
  fleet::FlagSet flags(
      "catalogue_patterns [--signatures FILE] [--count LOG [--per-pattern]]",
      "Prints the signature catalogue's patterns as POSIX extended regexps for `grep -E -f`, one\n"
      "per line; with --count, how many lines of LOG our matcher matches, for comparison.");
  flags.AddString("signatures", '\0', &signatures,
                  "use this signature catalogue instead of the built-in one", "FILE");
  flags.AddString("count", '\0', &count, "count the lines of LOG that the patterns match", "LOG");
  flags.AddBool("per-pattern", '\0', &per_pattern, "with --count: also one count per pattern");
  if (absl::Status s = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !s.ok()) {
    std::cerr << "catalogue_patterns: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (!flags.positional().empty() || (per_pattern && count.empty())) {
    std::cerr << "catalogue_patterns: unexpected arguments (see --help)\n";
    return 1;
  }
  auto matcher = SignatureMatcher::Load(signatures);
  if (!matcher.ok()) {
    std::cerr << "catalogue_patterns: " << matcher.status().message() << "\n";
    return 1;
  }
  std::vector<std::string> patterns;
  for (const std::string& p : (*matcher)->patterns()) patterns.push_back(fleet::bench::Re2ToEre(p));
  if (count.empty()) {
    std::string out;
    for (const std::string& p : patterns) absl::StrAppend(&out, p, "\n");
    std::cout << out;
    return 0;
  }
  absl::StatusOr<LineCounts> counts = CountLines(count, **matcher, patterns.size());
  if (!counts.ok()) {
    std::cerr << "catalogue_patterns: " << counts.status().message() << "\n";
    return 2;
  }
  std::string out =
      absl::StrCat("lines=", counts->lines, " matched=", counts->matched, " bytes=", counts->bytes,
                   " matched_bytes=", counts->matched_bytes, "\n");
  if (per_pattern) {
    for (int64_t c : counts->per_pattern) absl::StrAppend(&out, c, "\n");
  }
  std::cout << out;
  return 0;
}
