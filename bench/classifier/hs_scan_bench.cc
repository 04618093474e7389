// hs_scan_bench: raw Vectorscan throughput of the signature catalogue on logs, the bound on what a
// Vectorscan prefilter in front of the RE2 matcher can give (issue 15; BENCHMARKS.md, "Raw
// Vectorscan throughput of the catalogue").
//
//   hs_scan_bench [--signatures FILE] [--min-seconds S] [--generate-bytes N [--jit-percent P]]
//                 [--skip-check] [--per-pattern] LOG...
//
// Compiles the catalogue (common/diagnosis/vectorscan_patterns.h) into two block-mode databases,
// timing the compile and the database's serialisation and deserialisation (the prefilter would load
// it serialised): one for a scan per line (HS_FLAG_SINGLEMATCH: each pattern reported once per
// line) and one for a whole buffer of lines (HS_FLAG_MULTILINE, every match reported, since a
// prefilter needs every line). Then, for each log, read into memory, three scans, each repeated
// for at least S seconds: the whole buffer in one hs_scan with every match; the same with the
// per-line database (each pattern's first match only: the scan's own cost, almost no callbacks);
// and one hs_scan per line ('\n' excluded, found with memchr). The callbacks only count. Prints
// MB/s (10^6 bytes per second) by wall and by CPU time, matches, peak RSS (the log's buffer
// included).
//
// Unless --skip-check, each log is also checked (untimed) against SignatureMatcher::Match line
// by line: every pattern RE2 matches on a line must be reported on that line by both scans, or
// the run fails (exit 3). It prints how many lines RE2 matches and how many the prefilter passes.
// --generate-bytes adds a log made in memory by StartupLogGenerator (seed 1), for the smoke run.
// --per-pattern also times each pattern alone (one scan per line) and the catalogue without the
// slowest 1, 3, 5 and 10 of them: which patterns bound the prefilter.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/classifier/startup_log_generator.h"
#include "common/base/errno_status.h"
#include "common/base/flag_set.h"
#include "common/diagnosis/signature_matcher.h"
#include "common/diagnosis/vectorscan_patterns.h"

namespace {

using ::fleet::diagnosis::CompileVectorscanCatalogue;
using ::fleet::diagnosis::HsScratch;
using ::fleet::diagnosis::SignatureMatcher;
using ::fleet::diagnosis::VectorscanCatalogue;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t PeakRssKib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fleet::ErrnoToStatus(errno, absl::StrCat("log ", path, ": open"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st {};
  if (fstat(fd, &st) != 0) return fleet::ErrnoToStatus(errno, absl::StrCat("log ", path, ": stat"));
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fleet::ErrnoToStatus(errno, absl::StrCat("log ", path, ": read"));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

struct Database {
  const char* name;
  VectorscanCatalogue catalogue;
  HsScratch scratch;
};

// Compiles, allocates the scratch, and prints the database's costs: compile, size, serialised
// size, serialise and deserialise time (median of 21).
absl::StatusOr<Database> Build(const char* name, const std::vector<std::string>& patterns,
                               unsigned int mode_flags) {
  absl::StatusOr<VectorscanCatalogue> c = CompileVectorscanCatalogue(patterns, mode_flags);
  if (!c.ok()) return c.status();
  Database db{name, *std::move(c), nullptr};
  hs_database_t* raw = db.catalogue.database.get();
  hs_scratch_t* scratch = nullptr;
  if (hs_alloc_scratch(raw, &scratch) != HS_SUCCESS) {
    return absl::InternalError(absl::StrCat("vectorscan: ", name, ": cannot allocate scratch"));
  }
  db.scratch.reset(scratch);
  size_t db_size = 0, scratch_size = 0;
  hs_database_size(raw, &db_size);
  hs_scratch_size(scratch, &scratch_size);

  char* bytes = nullptr;
  size_t length = 0;
  const Clock::time_point s0 = Clock::now();
  if (hs_serialize_database(raw, &bytes, &length) != HS_SUCCESS) {
    return absl::InternalError(absl::StrCat("vectorscan: ", name, ": cannot serialise"));
  }
  const double serialise_ms = Seconds(Clock::now() - s0) * 1e3;
  absl::Cleanup free_bytes = [bytes] { std::free(bytes); };
  std::vector<double> deserialise_ms;
  for (int i = 0; i < 21; ++i) {
    hs_database_t* copy = nullptr;
    const Clock::time_point d0 = Clock::now();
    if (hs_deserialize_database(bytes, length, &copy) != HS_SUCCESS) {
      return absl::InternalError(absl::StrCat("vectorscan: ", name, ": cannot deserialise"));
    }
    deserialise_ms.push_back(Seconds(Clock::now() - d0) * 1e3);
    hs_free_database(copy);
  }
  std::sort(deserialise_ms.begin(), deserialise_ms.end());
  if (name == nullptr) return db;  // a trial database, not reported
  std::cout << absl::StrFormat(
      "database %s: %zu patterns, compile_ms=%.1f size=%zu serialised=%zu serialise_ms=%.3f "
      "deserialise_ms=%.3f scratch=%zu\n",
      name, db.catalogue.ids.size(), db.catalogue.compile_ms, db_size, length, serialise_ms,
      deserialise_ms[deserialise_ms.size() / 2], scratch_size);
  return db;
}

struct Counts {
  uint64_t matches = 0;
  uint64_t lines = 0;  // lines with a match (line by line)
  bool line_hit = false;
};

int CountMatch(unsigned int, unsigned long long, unsigned long long, unsigned int, void* ctx) {
  auto* c = static_cast<Counts*>(ctx);
  ++c->matches;
  c->line_hit = true;
  return 0;
}

bool ScanWhole(const Database& db, std::string_view text, Counts* counts) {
  return hs_scan(db.catalogue.database.get(), text.data(), static_cast<unsigned int>(text.size()),
                 0, db.scratch.get(), CountMatch, counts) == HS_SUCCESS;
}

bool ScanLines(const Database& db, std::string_view text, Counts* counts) {
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p));
    const char* line_end = nl != nullptr ? static_cast<const char*>(nl) : end;
    counts->line_hit = false;
    if (hs_scan(db.catalogue.database.get(), p, static_cast<unsigned int>(line_end - p), 0,
                db.scratch.get(), CountMatch, counts) != HS_SUCCESS) {
      return false;
    }
    counts->lines += counts->line_hit;
    p = line_end + 1;
  }
  return true;
}

// Throughput of one kind of scan: by wall time, and by the process's CPU time (on a busy machine
// the time the scan waited for a CPU is not its own).
struct Rate {
  double mbps = 0;
  double cpu_mbps = 0;
  Counts counts;  // of one scan
};

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Runs `scan` once untimed, then until `min_seconds` have passed.
template <typename Scan>
absl::StatusOr<Rate> Measure(std::string_view text, double min_seconds, Scan scan) {
  Rate rate;
  if (!scan(text, &rate.counts)) return absl::InternalError("vectorscan: hs_scan failed");
  int64_t runs = 0;
  Counts ignored;
  const Clock::time_point start = Clock::now();
  const double cpu_start = CpuSeconds();
  double elapsed = 0;
  do {
    if (!scan(text, &ignored)) return absl::InternalError("vectorscan: hs_scan failed");
    ++runs;
    elapsed = Seconds(Clock::now() - start);
  } while (elapsed < min_seconds);
  const double bytes = static_cast<double>(text.size()) * static_cast<double>(runs);
  rate.mbps = bytes / elapsed / 1e6;
  rate.cpu_mbps = bytes / std::max(CpuSeconds() - cpu_start, 1e-9) / 1e6;
  return rate;
}

struct CheckResult {
  int64_t re2_lines = 0;     // lines RE2 matches (any pattern)
  int64_t passed_lines = 0;  // lines the per-line scan passes
  int64_t missed = 0;        // (line, pattern) pairs RE2 matches that a scan did not report
  int64_t whole_lines = 0;   // lines with a match of the whole-buffer scan
};

// Every pattern RE2 matches on a line (those compiled) must be reported on that line by both
// scans.
CheckResult Check(const SignatureMatcher& m, const Database& per_line, const Database& whole,
                  std::string_view text) {
  std::vector<size_t> starts;
  for (size_t at = 0; at < text.size();) {
    starts.push_back(at);
    const size_t nl = text.find('\n', at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  struct Hits {
    const std::vector<size_t>* starts;
    std::vector<std::vector<int>> by_line;
  } whole_hits{&starts, std::vector<std::vector<int>>(starts.size())};
  const auto on_whole = [](unsigned int id, unsigned long long, unsigned long long to, unsigned int,
                           void* ctx) {
    auto* h = static_cast<Hits*>(ctx);
    const auto line =
        std::upper_bound(h->starts->begin(), h->starts->end(), to - 1) - h->starts->begin() - 1;
    h->by_line[static_cast<size_t>(line)].push_back(static_cast<int>(id));
    return 0;
  };
  const auto on_line = [](unsigned int id, unsigned long long, unsigned long long, unsigned int,
                          void* ctx) {
    static_cast<std::vector<int>*>(ctx)->push_back(static_cast<int>(id));
    return 0;
  };
  CheckResult r;
  if (hs_scan(whole.catalogue.database.get(), text.data(), static_cast<unsigned int>(text.size()),
              0, whole.scratch.get(), on_whole, &whole_hits) != HS_SUCCESS) {
    r.missed = -1;
    return r;
  }
  const std::vector<int>& compiled = per_line.catalogue.ids;
  std::vector<int> re2_hits, hs_hits;
  for (size_t n = 0; n < starts.size(); ++n) {
    const size_t nl = text.find('\n', starts[n]);
    const std::string_view line =
        text.substr(starts[n], (nl == std::string_view::npos ? text.size() : nl) - starts[n]);
    re2_hits.clear();
    hs_hits.clear();
    m.Match(line, &re2_hits);
    hs_scan(per_line.catalogue.database.get(), line.data(), static_cast<unsigned int>(line.size()),
            0, per_line.scratch.get(), on_line, &hs_hits);
    std::vector<int>& w = whole_hits.by_line[n];
    r.re2_lines += !re2_hits.empty();
    r.passed_lines += !hs_hits.empty();
    r.whole_lines += !w.empty();
    for (int h : re2_hits) {
      if (!std::binary_search(compiled.begin(), compiled.end(), h)) continue;  // refused
      const bool in_line = std::find(hs_hits.begin(), hs_hits.end(), h) != hs_hits.end();
      const bool in_whole = std::find(w.begin(), w.end(), h) != w.end();
      if (!in_line || !in_whole) {
        ++r.missed;
        std::cerr << "hs_scan_bench: pattern " << h << " matches line " << n + 1 << " but the "
                  << (in_line ? "whole-buffer" : "per-line") << " scan does not report it\n";
      }
    }
  }
  return r;
}

// Which patterns bound the scan: each compiled pattern alone over `text` (one scan per line,
// the prefilter's shape), slowest first; then the catalogue without the slowest k of them.
bool RankPatterns(const std::vector<std::string>& patterns, const std::vector<int>& ids,
                  std::string_view text, double min_seconds) {
  std::vector<std::pair<double, int>> alone;  // MB/s, index
  for (int id : ids) {
    absl::StatusOr<Database> db =
        Build(nullptr, {patterns[static_cast<size_t>(id)]}, HS_FLAG_SINGLEMATCH);
    if (!db.ok()) return false;
    auto r = Measure(text, min_seconds,
                     [&](std::string_view t, Counts* c) { return ScanLines(*db, t, c); });
    if (!r.ok()) return false;
    alone.emplace_back(r->cpu_mbps, id);
  }
  std::sort(alone.begin(), alone.end());
  for (size_t i = 0; i < alone.size() && i < 12; ++i) {
    std::cout << absl::StrFormat("  alone %d: per_line_cpu_mbps=%.1f  %s\n", alone[i].second,
                                 alone[i].first, patterns[static_cast<size_t>(alone[i].second)]);
  }
  for (size_t k : {1, 3, 5, 10}) {
    if (k >= alone.size()) break;
    std::vector<std::string> rest;
    for (size_t i = k; i < alone.size(); ++i) {
      rest.push_back(patterns[static_cast<size_t>(alone[i].second)]);
    }
    absl::StatusOr<Database> db = Build(nullptr, rest, HS_FLAG_SINGLEMATCH);
    if (!db.ok()) return false;
    auto r = Measure(text, min_seconds,
                     [&](std::string_view t, Counts* c) { return ScanLines(*db, t, c); });
    if (!r.ok()) return false;
    std::cout << absl::StrFormat("  without the slowest %d: per_line_mbps=%.1f cpu=%.1f\n", k,
                                 r->mbps, r->cpu_mbps);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string signatures;
  double min_seconds = 1.0;
  int64_t generate_bytes = 0;
  int64_t jit_percent = 17;
  bool skip_check = false;
  bool per_pattern = false;
  fleet::FlagSet flags(
      "hs_scan_bench [flags] LOG...",
      "Raw Vectorscan (hs_scan) throughput of the signature catalogue on each LOG: the whole\n"
      "buffer in one call and one call per line; database compile, serialise and deserialise\n"
      "costs; peak RSS. Checks that every line RE2 matches is reported (exit 3 if not).");
  flags.AddString("signatures", '\0', &signatures,
                  "use this signature catalogue instead of the built-in one", "FILE");
  flags.AddDouble("min-seconds", '\0', &min_seconds, "time each scan for at least this long", "S");
  flags.AddInt("generate-bytes", '\0', &generate_bytes,
               "also scan a startup log of N bytes generated in memory (seed 1)");
  flags.AddInt("jit-percent", '\0', &jit_percent, "the generated log's JIT share (0-100)");
  flags.AddBool("skip-check", '\0', &skip_check, "do not compare with RE2 line by line");
  flags.AddBool("per-pattern", '\0', &per_pattern,
                "also time each pattern alone per line, and the catalogue without the slowest");
  if (absl::Status s = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !s.ok()) {
    std::cerr << "hs_scan_bench: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (flags.positional().empty() && generate_bytes <= 0) {
    std::cerr << "hs_scan_bench: no log to scan (see --help)\n";
    return 1;
  }
  auto matcher = SignatureMatcher::Load(signatures);
  if (!matcher.ok()) {
    std::cerr << "hs_scan_bench: " << matcher.status().message() << "\n";
    return 1;
  }
  const std::vector<std::string>& patterns = (*matcher)->patterns();
  std::cout << "vectorscan " << hs_version() << "; catalogue of " << patterns.size()
            << " patterns\n";
  absl::StatusOr<Database> per_line = Build("per-line", patterns, HS_FLAG_SINGLEMATCH);
  absl::StatusOr<Database> whole =
      per_line.ok() ? Build("whole-buffer", patterns, HS_FLAG_MULTILINE) : per_line.status();
  if (!whole.ok()) {
    std::cerr << "hs_scan_bench: " << whole.status().message() << "\n";
    return 2;
  }
  for (const auto& r : per_line->catalogue.refused) {
    std::cout << "refused " << r.index << ": " << r.pattern << " (" << r.error << ")\n";
  }
  for (int i : per_line->catalogue.inexact) {
    std::cout << "prefilter only " << i << ": " << patterns[static_cast<size_t>(i)] << "\n";
  }
  std::cout << "peak_rss_kib after compiling: " << PeakRssKib() << "\n";

  std::vector<std::pair<std::string, std::string>> logs;  // name, path ("" = generated)
  if (generate_bytes > 0) {
    logs.emplace_back(absl::StrCat("generated:", generate_bytes, ":jit", jit_percent), "");
  }
  for (const std::string& path : flags.positional()) logs.emplace_back(path, path);
  bool missed = false;
  for (const auto& [name, path] : logs) {
    std::string text;
    if (path.empty()) {
      fleet::bench::StartupLogOptions options;
      options.jit_percent = static_cast<int>(jit_percent);
      fleet::bench::StartupLogGenerator gen(options, generate_bytes);
      while (gen.bytes() < generate_bytes) gen.AppendBlock(&text);
    } else {
      absl::StatusOr<std::string> read = ReadWhole(path);
      if (!read.ok()) {
        std::cerr << "hs_scan_bench: " << read.status().message() << "\n";
        return 2;
      }
      text = *std::move(read);
    }
    if (text.size() > 0xffffffffu) {
      std::cerr << "hs_scan_bench: " << name << ": over 4 GiB, more than one hs_scan takes\n";
      return 2;
    }
    const int64_t lines =
        std::count(text.begin(), text.end(), '\n') + (!text.empty() && text.back() != '\n' ? 1 : 0);
    auto all = Measure(text, min_seconds,
                       [&](std::string_view t, Counts* c) { return ScanWhole(*whole, t, c); });
    auto first = Measure(text, min_seconds,
                         [&](std::string_view t, Counts* c) { return ScanWhole(*per_line, t, c); });
    auto by_line = Measure(text, min_seconds, [&](std::string_view t, Counts* c) {
      return ScanLines(*per_line, t, c);
    });
    if (!all.ok() || !first.ok() || !by_line.ok()) {
      std::cerr << "hs_scan_bench: " << name << ": hs_scan failed\n";
      return 2;
    }
    std::cout << absl::StrFormat(
        "log %s: bytes=%zu lines=%d whole_mbps=%.1f (cpu %.1f) whole_matches=%d "
        "first_match_mbps=%.1f (cpu %.1f) per_line_mbps=%.1f (cpu %.1f) per_line_matches=%d "
        "per_line_lines=%d",
        name, text.size(), lines, all->mbps, all->cpu_mbps, all->counts.matches, first->mbps,
        first->cpu_mbps, by_line->mbps, by_line->cpu_mbps, by_line->counts.matches,
        by_line->counts.lines);
    // Before the check, whose per-line bookkeeping is not the scan's.
    std::cout << " peak_rss_kib=" << PeakRssKib();
    if (!skip_check) {
      const CheckResult r = Check(**matcher, *per_line, *whole, text);
      std::cout << absl::StrFormat(" re2_lines=%d passed_lines=%d whole_lines=%d missed=%d",
                                   r.re2_lines, r.passed_lines, r.whole_lines, r.missed);
      missed = missed || r.missed != 0;
    }
    std::cout << std::endl;
    if (per_pattern && !RankPatterns(patterns, per_line->catalogue.ids, text, min_seconds)) {
      std::cerr << "hs_scan_bench: " << name << ": ranking the patterns failed\n";
      return 2;
    }
  }
  return missed ? 3 : 0;
}
