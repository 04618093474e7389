// gen_startup_log: writes the benchmark's startup log (see startup_log_generator.h) and prints one
// JSON line that says what it wrote, first of all the first injected failure, which is the class
// `fleetctl explain` must report.
//
//   gen_startup_log --size-mib 1024 --seed 1 --output .bench/startup.log
//   {"file":".bench/startup.log","bytes":1073745123,"lines":...,"failures":...,
//    "first_failure":{"kind":"...","class":"...","root_cause_line":...}}
#include <iostream>
#include <string>

#include "bench/classifier/startup_log_generator.h"
#include "bench/classifier/write_generated.h"
#include "common/base/flag_set.h"
#include "common/base/json_text.h"

int main(int argc, char** argv) {
  int64_t size_mib = 64;
  int64_t bytes = 0;
  int64_t seed = 1;
  int64_t failure_spacing_mib = 4;
  int64_t jit_percent = fleet::bench::StartupLogOptions().jit_percent;
  std::string output;
  fleet::FlagSet flags(
      "gen_startup_log [flags] --output FILE",
      "Writes a large, realistic SGLang/flashinfer startup log with failures sprinkled in, the\n"
      "same bytes for the same seed, and prints a JSON line naming the first injected failure.");
  flags.AddInt("size-mib", '\0', &size_mib, "size to write, in MiB (rounded up to a whole line)");
  flags.AddInt("bytes", '\0', &bytes, "size to write, in bytes; overrides --size-mib when > 0");
  flags.AddInt("seed", '\0', &seed, "PRNG seed: same seed, same file");
  flags.AddInt("failure-spacing-mib", '\0', &failure_spacing_mib,
               "mean distance between injected failures, in MiB");
  flags.AddInt("jit-percent", '\0', &jit_percent,
               "share of blocks that are JIT builds (ninja steps, compiler warnings), 0-100");
  flags.AddString("output", 'o', &output, "file to write, or '-' for standard output", "FILE");
  if (absl::Status s = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !s.ok()) {
    std::cerr << "gen_startup_log: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  const int64_t target = bytes > 0 ? bytes : size_mib << 20;
  if (output.empty() || target <= 0 || failure_spacing_mib <= 0 || jit_percent < 0 ||
      jit_percent > 100 || !flags.positional().empty()) {
    std::cerr << "gen_startup_log: need --output FILE, a positive size and spacing, and "
                 "--jit-percent in 0-100 (see --help)\n";
    return 1;
  }

  fleet::bench::StartupLogOptions options;
  options.seed = static_cast<uint64_t>(seed);
  options.mean_failure_spacing_bytes = failure_spacing_mib << 20;
  options.jit_percent = static_cast<int>(jit_percent);
  fleet::bench::StartupLogGenerator generator(options, target);
  // Whole blocks, written in large pieces: the generator must not be the slow part of a
  // benchmark run, and memory stays small whatever the size.
  if (absl::Status s = fleet::bench::WriteGenerated(generator, target, output); !s.ok()) {
    std::cerr << "gen_startup_log: " << s.message() << "\n";
    return 2;
  }

  // The manifest goes to stderr when the log itself is on stdout.
  using fleet::Json;
  Json manifest = Json::object();
  manifest["file"] = output;
  manifest["seed"] = seed;
  manifest["jit_percent"] = jit_percent;
  manifest["bytes"] = generator.bytes();
  manifest["lines"] = generator.lines();
  manifest["failures"] = generator.failures();
  manifest["first_failure"] = fleet::bench::FirstFailureJson(generator.first_failure());
  (output == "-" ? std::cerr : std::cout) << fleet::JsonText(std::move(manifest)) << "\n";
  return 0;
}
