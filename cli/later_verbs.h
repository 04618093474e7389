// The verbs of DESIGN.md's CLI surface whose daemon side comes with a later issue: `hosts trust`
// (SSH reach, issue 6). It says so on standard error and exits 1, so scripts see a failure.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace fleet::cli {

// True for the verb above.
bool IsLaterVerb(std::string_view verb);
int RunLaterVerb(std::string_view verb, const std::vector<std::string>& args, std::ostream& err);

}  // namespace fleet::cli
