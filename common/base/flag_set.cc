#include "common/base/flag_set.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fleet {
namespace {

// CLI11 reads `--name=` as `--name` (the value is then the next argument, or true for a flag) and
// a flag's `--name={}` as true; ours has always meant the empty value and "not a boolean: '{}'".
// An argv string cannot hold a NUL, so Parse() appends one to every argument with an '=' in it and
// each string CLI11 hands back loses it again (Restore): a value written after '=' then passes
// through CLI11 untouched, and a flag's bare "true" (no NUL) is told apart from `--help=true`.
constexpr char kEmptyMark = '\0';

std::string Restore(std::string s) {
  if (!s.empty() && s.back() == kEmptyMark) s.pop_back();
  return s;
}

// The name of an unknown flag as the old parser wrote it: `--name` without its `=value`, or the
// dash and first letter of a one-letter flag.
std::string ShownName(const std::string& arg) {
  if (arg[1] == '-') return arg.substr(0, arg.find('='));
  return arg.substr(0, 2);
}

// The flag a last argument left without its value: a long one as written, else the last letter of
// a cluster of one-letter flags ("-wo": -o; the ones before it are booleans).
std::string NeedsValueName(const std::string& arg) {
  if (arg[1] == '-') return ShownName(arg);
  return std::string{'-', arg.back()};
}

// CLI11 leaves what it did not bind in remaining(), in command-line order, the first "--" included.
// Before that "--", anything that starts with '-' (and is not "-" alone) is a flag we do not know;
// CLI11 itself would keep "-5" as a positional (a negative number), the old parser did not.
std::optional<std::string> FirstUnknownFlag(const std::vector<std::string>& remaining) {
  for (const std::string& arg : remaining) {
    if (arg == "--") return std::nullopt;
    if (arg.size() >= 2 && arg[0] == '-') return ShownName(arg);
  }
  return std::nullopt;
}

absl::Status UnknownFlag(const std::string& shown) {
  return absl::InvalidArgumentError(absl::StrCat("unknown flag ", shown, " (see --help)"));
}

}  // namespace

FlagSet::FlagSet(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {}

void FlagSet::Add(Flag flag) { flags_.push_back(std::move(flag)); }

void FlagSet::AddString(std::string name, char short_name, std::string* value, std::string help,
                        std::string value_name) {
  Add({std::move(name), short_name, Kind::kString, value, std::move(help), std::move(value_name),
       *value});
}

void FlagSet::AddInt(std::string name, char short_name, int64_t* value, std::string help,
                     std::string value_name) {
  Add({std::move(name), short_name, Kind::kInt, value, std::move(help), std::move(value_name),
       absl::StrCat(*value)});
}

void FlagSet::AddDouble(std::string name, char short_name, double* value, std::string help,
                        std::string value_name) {
  Add({std::move(name), short_name, Kind::kDouble, value, std::move(help), std::move(value_name),
       absl::StrCat(*value)});
}

void FlagSet::AddBool(std::string name, char short_name, bool* value, std::string help) {
  Add({std::move(name), short_name, Kind::kBool, value, std::move(help), "", *value ? "true" : ""});
}

void FlagSet::AddRepeated(std::string name, char short_name, std::vector<std::string>* values,
                          std::string help, std::string value_name) {
  Add({std::move(name), short_name, Kind::kRepeated, values, std::move(help), std::move(value_name),
       ""});
}

// Values are converted here, not by CLI11's lexical_cast: that one reads "010" as octal, "0x10" as
// hex and "on"/"enable" as true, none of which our flags have ever accepted.
absl::Status FlagSet::Assign(const Flag& flag, std::string_view shown, std::string_view value) {
  const absl::string_view v(value.data(), value.size());
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.target) = std::string(value);
      return absl::OkStatus();
    case Kind::kRepeated:
      static_cast<std::vector<std::string>*>(flag.target)->emplace_back(value);
      return absl::OkStatus();
    case Kind::kInt:
      if (!absl::SimpleAtoi(v, static_cast<int64_t*>(flag.target))) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", std::string(shown), ": not an integer: '", v, "'"));
      }
      return absl::OkStatus();
    case Kind::kDouble:
      if (!absl::SimpleAtod(v, static_cast<double*>(flag.target))) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", std::string(shown), ": not a number: '", v, "'"));
      }
      return absl::OkStatus();
    case Kind::kBool:
      if (value == "true" || value == "1" || value == "yes") {
        *static_cast<bool*>(flag.target) = true;
      } else if (value == "false" || value == "0" || value == "no") {
        *static_cast<bool*>(flag.target) = false;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", std::string(shown), ": not a boolean: '", v, "'"));
      }
      return absl::OkStatus();
  }
  return absl::InternalError("unreachable flag kind");
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  positional_.clear();
  // Built per call from flags_, so CLI11 stays out of the header and a FlagSet can parse again.
  CLI::App app;
  app.set_help_flag();  // ours below: -h/--help sets help_requested_, it does not throw.
  app.allow_extras();   // positionals and unknown flags come back in order through remaining().
  absl::Status error;   // the first bad value, set by a callback that then stops the parse

  // Each name is its own CLI11 option so that messages name the flag as it was written (`-n` or
  // `--count`). trigger_on_parse() runs the callback at each occurrence, in command-line order:
  // the last value wins, repeated flags append, and the parse stops at the first bad value.
  auto bind = [&](const Flag& flag, std::string cli_name) {
    const bool is_bool = flag.kind == Kind::kBool;
    auto assign = [&app, &error, &flag, shown = cli_name](const CLI::results_t& results) {
      // An unknown flag earlier on the command line is the first error: assign nothing more.
      if (FirstUnknownFlag(app.remaining())) return false;
      for (const std::string& value : results) {
        error = Assign(flag, shown, Restore(value));
        if (!error.ok()) return false;
      }
      return true;
    };
    CLI::Option* opt = app.add_option(cli_name, std::move(assign));
    opt->expected(is_bool ? 0 : 1);
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    opt->trigger_on_parse();
  };
  try {
    for (const Flag& flag : flags_) {
      bind(flag, absl::StrCat("--", flag.name));
      if (flag.short_name != '\0') bind(flag, std::string{'-', flag.short_name});
    }
    // `--help=VALUE` was never ours: it stays an unknown flag.
    app.add_option("-h,--help",
                   [this, &app, &error](const CLI::results_t& results) {
                     if (FirstUnknownFlag(app.remaining())) return false;
                     for (const std::string& value : results) {
                       if (value != "true") {
                         error = UnknownFlag("--help");
                         return false;
                       }
                     }
                     help_requested_ = true;
                     return true;
                   })
        ->expected(0)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->trigger_on_parse();
  } catch (const CLI::ConstructionError& e) {
    return absl::InternalError(absl::StrCat("flag definitions: ", e.what()));
  }

  // CLI11 takes its arguments reversed.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  for (std::string& arg : reversed) {
    if (arg.find('=') != std::string::npos) arg.push_back(kEmptyMark);
  }
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::ParseError& e) {
    if (!error.ok()) return error;
    if (std::optional<std::string> unknown = FirstUnknownFlag(app.remaining())) {
      return UnknownFlag(*unknown);
    }
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && !args.empty()) {
      // A flag runs out of values only as the last argument: CLI11 takes any next one.
      return absl::InvalidArgumentError(
          absl::StrCat("flag ", NeedsValueName(args.back()), " needs a value"));
    }
    return absl::InvalidArgumentError(absl::StrCat("command line: ", e.what()));
  }
  if (std::optional<std::string> unknown = FirstUnknownFlag(app.remaining())) {
    return UnknownFlag(*unknown);
  }
  bool after_mark = false;
  for (std::string& arg : app.remaining()) {
    if (arg == "--" && !after_mark) {
      after_mark = true;
      continue;
    }
    positional_.push_back(Restore(std::move(arg)));
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n");
  if (!summary_.empty()) absl::StrAppend(&out, "\n", summary_, "\n");
  absl::StrAppend(&out, "\nflags:\n");
  std::vector<std::pair<std::string, const Flag*>> rows;
  size_t width = 0;
  for (const Flag& f : flags_) {
    std::string left = f.short_name != '\0' ? absl::StrFormat("-%c, --%s", f.short_name, f.name)
                                            : absl::StrCat("    --", f.name);
    if (f.kind != Kind::kBool) absl::StrAppend(&left, " ", f.value_name);
    width = std::max(width, left.size());
    rows.emplace_back(std::move(left), &f);
  }
  std::string help_left = "-h, --help";
  width = std::max(width, help_left.size());
  for (const auto& [left, f] : rows) {
    absl::StrAppend(&out, "  ", left, std::string(width - left.size() + 2, ' '), f->help);
    if (!f->default_text.empty()) absl::StrAppend(&out, " (default: ", f->default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  ", help_left, std::string(width - help_left.size() + 2, ' '),
                  "show this help\n");
  return out;
}

}  // namespace fleet
