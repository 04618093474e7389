// FlagSet: the command-line parser shared by fleetd, fleet-agent and fleetctl.
//
// Long flags (`--name=value`, `--name value`), one-letter aliases (`-o json`, `-f`), boolean flags
// (`--watch`, `--watch=false`), repeated flags, positional arguments, `--` to end flags, and a
// built-in `-h/--help`. It exists because the CLI has verbs with their own flags (`fleetctl explain
// -o json FILE`), which Abseil's process-global flags do not model.
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
