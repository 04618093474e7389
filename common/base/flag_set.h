// FlagSet: the command-line parser shared by fleetd, fleet-agent and fleetctl, an adapter from our
// small API to CLI11 (Debian's libcli11-dev, header-only).
//
// Long flags (`--name=value`, `--name value`), one-letter aliases (`-o json`, `-ojson`, `-f`),
// boolean flags (`--watch`, `--watch=false`; values true/false, yes/no, 1/0), repeated flags,
// positional arguments, `--` to end flags, and a built-in `-h/--help` that sets help_requested()
// (it does not exit). A flag's value is the next argument whatever it looks like (`--attempt -3`);
// `--name=` is the empty value; a word starting with '-' before `--` is an unknown flag (also
// `-5`). One-letter booleans cluster (`-wf` is `-w -f`), so a value cannot be glued to one.
// Errors are InvalidArgument naming the first bad argument: "unknown flag --x (see --help)",
// "flag --x needs a value", "flag --x: not an integer: 'y'".
//
// CLI11 and not Abseil's flags: the CLI has verbs with their own flags (`fleetctl explain -o json
// FILE`), and Abseil's flags are process-global, one set per binary. CLI11 scans and matches the
// arguments; values are converted here with Abseil (CLI11's conversions read "010" as octal and
// "on" as true), CLI11's exceptions are caught inside Parse(), and Help() is formatted here so its
// text stays the one docs/cli.md and the tests show.
//
// A FlagSet binds flags to caller-owned variables; the variables must outlive Parse(). Not
// thread-safe; build and parse on one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace fleet {

class FlagSet {
 public:
  // `usage` is the synopsis line, e.g. "fleetctl explain [flags] FILE... | -".
  // `summary` is one paragraph shown under it in Help().
  FlagSet(std::string usage, std::string summary);

  // `short_name` is '\0' for none. `value_name` names the value in Help() ("FILE", "N").
  void AddString(std::string name, char short_name, std::string* value, std::string help,
                 std::string value_name = "VALUE");
  void AddInt(std::string name, char short_name, int64_t* value, std::string help,
              std::string value_name = "N");
  void AddDouble(std::string name, char short_name, double* value, std::string help,
                 std::string value_name = "X");
  void AddBool(std::string name, char short_name, bool* value, std::string help);
  void AddRepeated(std::string name, char short_name, std::vector<std::string>* values,
                   std::string help, std::string value_name = "VALUE");

  // Parses `args` (the program name and verb already removed). On success the bound variables
  // hold the values given and positional() the rest. InvalidArgument names the offending flag.
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }

  // The usage, summary and one line per flag with its help and current (default) value.
  std::string Help() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kRepeated };
  struct Flag {
    std::string name;
    char short_name;
    Kind kind;
    void* target;
    std::string help;
    std::string value_name;
    std::string default_text;
  };

  void Add(Flag flag);
  const Flag* FindLong(std::string_view name) const;
  const Flag* FindShort(char c) const;
  static absl::Status Assign(const Flag& flag, std::string_view shown, std::string_view value);

  std::string usage_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace fleet
