// The classifier benchmark runs grep on the same patterns as our classifier, to compare their
// throughput (bench/run.sh). Re2ToEre translates one RE2 pattern of the signature catalogue into
// the POSIX extended regexp with GNU extensions that `grep -E` runs.
//
// RE2 syntax to POSIX ERE with GNU extensions (grep -E), for the benchmark that runs grep on the
// same patterns. Exact in the C locale for the syntax the catalogue uses: classes and escapes
// become byte sets written as bracket expressions (RE2's \s is [\t\n\f\r ]; [[:space:]] would add
// \v), (?i) and (?i:...) fold ASCII letters within their group (classes included), named and
// non-capturing groups become plain groups, and non-greedy quantifiers lose their '?' (the same
// lines match). A line never holds '\n', so '\n' is dropped from byte sets: [^\n] becomes '.'.
// Syntax it does not know (\p{..}, other flags) is copied as it is, for grep to reject.
#pragma once

#include <string>
#include <string_view>

namespace fleet::bench {

std::string Re2ToEre(std::string_view re2_pattern);

}  // namespace fleet::bench
