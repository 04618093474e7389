// gen_stems_log: writes the log of the benchmark's stems comparison (see stems_log_generator.h):
// a startup log over which bench/classifier/stems.txt matches about a quarter of the lines. Prints
// one JSON line that says what it wrote: the matching lines (what `LC_ALL=C grep -E -c -f
// stems.txt` must count) and the injected failure (the class `fleetctl explain` must report).
//
//   gen_stems_log --stems bench/classifier/stems.txt --size-mib 256 --output .bench/stems.log
//   {"file":".bench/stems.log","bytes":...,"lines":...,"matching_lines":...,"inserted_lines":...,
//    "first_failure":{"kind":"...","class":"...","root_cause_line":...}}
#include <iostream>
#include <string>

#include "bench/classifier/stems_log_generator.h"
#include "bench/classifier/write_generated.h"
#include "common/base/flag_set.h"
#include "common/base/json_text.h"

int main(int argc, char** argv) {
  std::string stems_path;
  int64_t size_mib = 64;
  int64_t bytes = 0;
  int64_t seed = 1;
  int64_t jit_percent = fleet::bench::StemsLogOptions().jit_percent;
  int64_t stem_percent = fleet::bench::StemsLogOptions().stem_percent;
  std::string output;
  fleet::FlagSet flags(
      "gen_stems_log --stems FILE [flags] --output FILE",
      "Writes a startup log with one injected failure in which about a quarter of the lines\n"
      "match a stem of FILE (grep -E -f patterns), the same bytes for the same seed, and prints\n"
      "a JSON line with the matching-line count and the failure.");
  flags.AddString("stems", '\0', &stems_path, "the stems, one POSIX ERE a line", "FILE");
  flags.AddInt("size-mib", '\0', &size_mib, "size to write, in MiB (rounded up to a whole block)");
  flags.AddInt("bytes", '\0', &bytes, "size to write, in bytes; overrides --size-mib when > 0");
  flags.AddInt("seed", '\0', &seed, "PRNG seed: same seed, same file");
  flags.AddInt("jit-percent", '\0', &jit_percent, "the body's share of JIT-build blocks, 0-100");
  flags.AddInt("stem-percent", '\0', &stem_percent, "share of lines that match a stem, 1-99");
  flags.AddString("output", 'o', &output, "file to write, or '-' for standard output", "FILE");
  if (absl::Status s = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !s.ok()) {
    std::cerr << "gen_stems_log: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  const int64_t target = bytes > 0 ? bytes : size_mib << 20;
  if (output.empty() || stems_path.empty() || target <= 0 || jit_percent < 0 || jit_percent > 100 ||
      !flags.positional().empty()) {
    std::cerr << "gen_stems_log: need --stems FILE, --output FILE, a positive size and "
                 "--jit-percent in 0-100 (see --help)\n";
    return 1;
  }
  auto stems = fleet::bench::ReadStemsFile(stems_path);
  if (!stems.ok()) {
    std::cerr << "gen_stems_log: " << stems.status().message() << "\n";
    return 1;
  }
  fleet::bench::StemsLogOptions options;
  options.seed = static_cast<uint64_t>(seed);
  options.jit_percent = static_cast<int>(jit_percent);
  options.stem_percent = static_cast<int>(stem_percent);
  auto generator = fleet::bench::StemsLogGenerator::Create(options, *stems, target);
  if (!generator.ok()) {
    std::cerr << "gen_stems_log: " << generator.status().message() << "\n";
    return 1;
  }
  fleet::bench::StemsLogGenerator& gen = **generator;

  if (absl::Status s = fleet::bench::WriteGenerated(gen, target, output); !s.ok()) {
    std::cerr << "gen_stems_log: " << s.message() << "\n";
    return 2;
  }

  using fleet::Json;
  Json manifest = Json::object();
  manifest["file"] = output;
  manifest["seed"] = seed;
  manifest["jit_percent"] = jit_percent;
  manifest["stems"] = static_cast<int64_t>(stems->size());
  manifest["bytes"] = gen.bytes();
  manifest["lines"] = gen.lines();
  manifest["matching_lines"] = gen.matching_lines();
  manifest["inserted_lines"] = gen.inserted_lines();
  manifest["failures"] = int64_t{gen.first_failure().has_value() ? 1 : 0};
  manifest["first_failure"] = fleet::bench::FirstFailureJson(gen.first_failure());
  (output == "-" ? std::cerr : std::cout) << fleet::JsonText(std::move(manifest)) << "\n";
  return 0;
}
