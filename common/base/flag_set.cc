#include "common/base/flag_set.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fleet {

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

const FlagSet::Flag* FlagSet::FindLong(std::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::FindShort(char c) const {
  for (const Flag& f : flags_) {
    if (f.short_name != '\0' && f.short_name == c) return &f;
  }
  return nullptr;
}

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
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      continue;
    }
    // "-" alone is a positional (standard input).
    if (arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    const Flag* flag = nullptr;
    std::string shown;
    std::string_view inline_value;
    bool has_inline = false;
    if (arg[1] == '-') {
      std::string_view body = std::string_view(arg).substr(2);
      const size_t eq = body.find('=');
      if (eq != std::string_view::npos) {
        inline_value = body.substr(eq + 1);
        has_inline = true;
        body = body.substr(0, eq);
      }
      flag = FindLong(body);
      shown = absl::StrCat("--", std::string(body));
    } else {
      if (arg.size() > 2) {
        // -ojson style: value glued to a one-letter flag.
        inline_value = std::string_view(arg).substr(2);
        has_inline = true;
      }
      flag = FindShort(arg[1]);
      shown = std::string(arg.substr(0, 2));
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", shown, " (see --help)"));
    }
    if (flag->kind == Kind::kBool) {
      if (has_inline) {
        absl::Status s = Assign(*flag, shown, inline_value);
        if (!s.ok()) return s;
      } else {
        *static_cast<bool*>(flag->target) = true;
      }
      continue;
    }
    std::string_view value;
    if (has_inline) {
      value = inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag ", shown, " needs a value"));
    }
    absl::Status s = Assign(*flag, shown, value);
    if (!s.ok()) return s;
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
