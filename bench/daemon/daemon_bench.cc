// daemon_bench: one real fleetd against N simulated agents x 8 servers (issue 4, "Benchmarks";
// bench/daemon/run.sh runs it for N = 10, 100, 1000; BENCHMARKS.md, "fleetd at scale"). Real
// gRPC on unix sockets, the real fleetd and fleetctl binaries, fleetd's real record: fleet.db
// (SQLite, the default), or with --store postgres a real PostgreSQL server started for the run
// (tests/testing/postgres_server.h: its own temp dir, a unix socket only, as `nobody` under root)
// whose URL fleetd reads from a 0600 file (--store-file). The driver follows and checks the
// record through common/sql's Connection, with one set of SQL for both engines.
//
//   1. starts fleet-sim-agents (N agents, one unix socket each) and writes a fleet config with N
//      containers of 8 GPUs pointing at them (docs/config.md);
//   2. starts `fleetd --config FILE --state-dir DIR`: it deploys the config, follows every agent
//      and launches all 8N servers; each simulated server then plays its startup as events at the
//      simulator's rate (--rate, events/s for all servers together);
//   3. while the events flow: Fleet.Status over fleetd's socket every --status-interval-ms (RPC
//      latency), `fleetctl status -o json` every --cli-interval-ms (the CLI's wall time: process
//      start, call, JSON out), fleetd's /proc/PID/{status,stat} and the record's progress (the sum
//      of the stored agent cursors) every 250 ms;
//      every server must have started (be STARTING .. READY in fleetd's table) within
//      --start-timeout seconds of fleetd serving, or the run fails at once, naming how many have
//      not (a fleetd that launches nothing, e.g. a preflight the simulated agents do not satisfy,
//      would otherwise only time out);
//   4. once the simulator reports every server READY and the record holds every event: checks
//      that each container's events are stored exactly once (count, distinct sequences, 1..last,
//      the agent's incarnation, no gap rows, the cursor at the last sequence), every server READY
//      and every attempt `ready`; then stops both (and PostgreSQL).
//
// With PostgreSQL, the server's own footprint is sampled too: RSS and PSS summed over the
// postmaster and its processes (PSS counts the shared buffers once), and their CPU time.
//
// It prints a summary and one JSON line (also to --json). Exit status 1 when a check fails or
// something times out (a missed target is reported, not a failure); 2 on bad flags; 77 (ctest's
// skip) with --store postgres when no PostgreSQL is installed.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/flag_set.h"
#include "common/base/json_text.h"
#include "common/sql/connection.h"
#include "common/sql/postgres_connection.h"
#include "common/sql/sqlite_connection.h"
#include "grpcpp/grpcpp.h"
#include "proto/fleet.grpc.pb.h"
#include "tests/testing/postgres_server.h"
#include "tests/testing/subprocess.h"

namespace fleet::bench {
namespace {

constexpr int kGpus = 8;

struct Options {
  int64_t containers = 10;
  std::string fleetd;
  std::string fleetctl;
  std::string sim;
  double rate = 25000;
  int64_t events_per_server = 100;
  int64_t steps_per_op = 8;
  int64_t break_ms = 0;
  int64_t status_interval_ms = 100;
  // fleetd --metrics-listen 127.0.0.1:0, scraped every N ms while the events flow (0: no metrics).
  int64_t scrape_interval_ms = 0;
  int64_t cli_interval_ms = 1000;
  int64_t timeout_s = 600;
  int64_t start_timeout_s = 120;
  std::string work_dir;
  std::string json_path;
  std::string timeline_path;
  bool keep = false;
  std::string db_synchronous;  // fleetd --db-synchronous (empty: fleetd's default, full)
  // Where fleetd keeps its record: sqlite (STATE_DIR/fleet.db) or postgres (a server of the run's
  // own, given to fleetd with --store-file).
  std::string store = "sqlite";
  // CPUs (taskset's list) fleetd, and the simulated agents, run on; empty: any.
  std::string fleetd_cpus;
  std::string agents_cpus;
};

// `argv` run on `cpus` (taskset -c; empty: as it is).
std::vector<std::string> PinnedTo(const std::string& cpus, std::vector<std::string> argv) {
  if (cpus.empty()) return argv;
  std::vector<std::string> pinned = {"taskset", "-c", cpus};
  pinned.insert(pinned.end(), argv.begin(), argv.end());
  return pinned;
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// --- fleetd's /proc.

struct ProcSample {
  int64_t at_ms = 0;
  int64_t rss_kib = -1;
  int64_t hwm_kib = -1;
  int64_t cpu_ticks = -1;  // utime + stime
  int64_t threads = -1;
};

ProcSample SampleProc(pid_t pid) {
  ProcSample s;
  s.at_ms = NowMs();
  const std::string status = ReadAll(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    for (auto [key, slot] : {std::pair{"VmRSS:", &s.rss_kib}, std::pair{"VmHWM:", &s.hwm_kib},
                             std::pair{"Threads:", &s.threads}}) {
      if (absl::StartsWith(line, key)) {
        std::vector<absl::string_view> f =
            absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
        if (f.size() >= 2) {
          int64_t v;
          if (absl::SimpleAtoi(f[1], &v)) *slot = v;
        }
      }
    }
  }
  const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::vector<absl::string_view> f =
        absl::StrSplit(absl::string_view(stat).substr(close + 2), ' ', absl::SkipEmpty());
    // utime and stime are fields 14 and 15 of proc(5): 11 and 12 after "(comm) ".
    int64_t u, st;
    if (f.size() > 12 && absl::SimpleAtoi(f[11], &u) && absl::SimpleAtoi(f[12], &st)) {
      s.cpu_ticks = u + st;
    }
  }
  return s;
}

// --- PostgreSQL's processes: the postmaster and its children (backends, checkpointer, WAL
// writer, ...).

struct PostgresSample {
  int64_t rss_kib = 0;  // summed: the shared buffers are counted once per process that maps them
  int64_t pss_kib = 0;  // summed proportional set sizes: what the server takes, shared once
  // The live processes' utime + stime, and those of the children the postmaster reaped.
  int64_t cpu_ticks = 0;
  int64_t processes = 0;
};

// `key:` of /proc/PID/smaps_rollup in KiB (0 when absent).
int64_t RollupKib(const std::string& rollup, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(rollup, '\n')) {
    if (!absl::StartsWith(line, key)) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t v = 0;
    if (f.size() >= 2 && absl::SimpleAtoi(f[1], &v)) return v;
  }
  return 0;
}

// The fields of /proc/PID/stat after "(comm) ", empty when it is gone.
std::vector<std::string> StatFields(pid_t pid) {
  const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return {};
  return absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
}

PostgresSample SamplePostgres(pid_t postmaster) {
  PostgresSample s;
  if (postmaster <= 0) return s;
  std::vector<pid_t> pids = {postmaster};
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      int pid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &pid) || pid == postmaster) continue;
      const std::vector<std::string> f = StatFields(pid);
      int ppid = 0;  // the second field after the name
      if (f.size() > 1 && absl::SimpleAtoi(f[1], &ppid) && ppid == postmaster) pids.push_back(pid);
    }
    closedir(proc);
  }
  for (pid_t pid : pids) {
    const std::vector<std::string> f = StatFields(pid);
    // utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 after "(comm) ".
    if (f.size() <= 14) continue;
    int64_t t = 0;
    for (int i = 11; i <= (pid == postmaster ? 14 : 12); ++i) {
      if (absl::SimpleAtoi(f[i], &t)) s.cpu_ticks += t;
    }
    const std::string rollup = ReadAll(absl::StrCat("/proc/", pid, "/smaps_rollup"));
    s.rss_kib += RollupKib(rollup, "Rss:");
    s.pss_kib += RollupKib(rollup, "Pss:");
    ++s.processes;
  }
  return s;
}

// --- Statistics.

struct Dist {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

// Nearest-rank percentiles.
Dist Percentiles(std::vector<double> v) {
  Dist d;
  d.n = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(k, 1, v.size()) - 1];
  };
  d.p50 = rank(50);
  d.p90 = rank(90);
  d.p99 = rank(99);
  d.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / static_cast<double>(v.size());
  return d;
}

struct Sample {
  int64_t at_ms;  // when the call started (unix ms)
  double ms;      // how long it took
  bool ok;
};

// --- The simulator's report.

struct SimContainer {
  std::string incarnation;
  int64_t last_sequence = 0;
  int64_t launches = 0;
};

struct SimReport {
  std::map<std::string, int64_t> times;  // first_launch_ms, last_launch_ms, first_event_ms, ...
  std::map<std::string, SimContainer> containers;
  int64_t total_events = 0;
};

SimReport ParseReport(const std::string& text) {
  SimReport r;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() == 5 && f[0] == "container") {
      SimContainer c;
      c.incarnation = f[2];
      if (!absl::SimpleAtoi(f[3], &c.last_sequence) || !absl::SimpleAtoi(f[4], &c.launches)) {
        continue;
      }
      r.total_events += c.last_sequence;
      r.containers[f[1]] = c;
    } else if (f.size() == 2) {
      int64_t v;
      if (absl::SimpleAtoi(f[1], &v)) r.times[f[0]] = v;
    }
  }
  return r;
}

// --- The run.

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {}

  int Run();

 private:
  std::string Config() const;
  bool WaitFor(const std::string& path, absl::Duration timeout, pid_t child, const char* what);
  Sample CallStatus(fleet::v1::Fleet::Stub* stub);
  Sample CallCli();
  std::unique_ptr<fleet::v1::Fleet::Stub> FleetStub();
  void StatusLoop();
  // GET /metrics every scrape_interval_ms (curl, as a scraper would): its time and size.
  void ScrapeLoop();
  std::string metrics_url_;
  std::vector<Sample> scrapes_;
  int64_t scrape_bytes_ = 0;
  int64_t scrape_failed_ = 0;
  void CliLoop();
  void ProcLoop();
  int64_t StoredSoFar();
  int64_t NotStarted(std::string* states);
  bool Verify(const SimReport& report, Json* json);
  void Stop(pid_t* pid);

  Options o_;
  std::string dir_;
  std::string state_dir_;
  std::string socket_;
  pid_t fleetd_ = -1;
  pid_t sim_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Sample> rpc_;
  std::vector<Sample> cli_;
  std::vector<Sample> rpc_idle_;  // after the flow: every server READY, nothing happening
  std::vector<Sample> cli_idle_;
  std::vector<ProcSample> proc_;
  std::vector<std::pair<int64_t, int64_t>> progress_;  // (unix ms, events stored)
  std::vector<PostgresSample> pg_samples_;             // with ProcLoop's, under mu_
  std::mutex db_mu_;                                   // db_ is used by one thread at a time
  std::unique_ptr<sql::Connection> db_;                // the driver's own connection to the record
  // --store postgres: the server (stopped and removed when the Bench goes, after fleetd).
  std::unique_ptr<testing::PostgresServer> postgres_;
};

std::string Bench::Config() const {
  std::string y =
      "# daemon_bench: N simulated containers of 8 GPUs each, agents on unix sockets.\n"
      "hosts:\n  - name: local\n    containers:\n";
  for (int64_t i = 0; i < o_.containers; ++i) {
    const int64_t ctid = 1000 + i;
    absl::StrAppend(&y, "      - ctid: \"", ctid, "\"\n", "        channel: {kind: loopback, ",
                    "address: \"unix:", dir_, "/a/", ctid, ".sock\"}\n",
                    "        gpus: [0, 1, 2, 3, 4, 5, 6, 7]\n", "        template: sim\n",
                    "        base_port: ", 20000 + kGpus * i, "\n");
  }
  absl::StrAppend(&y,
                  "templates:\n"
                  "  - name: sim\n"
                  "    engine: sglang\n"
                  "    model: /models/simulated\n"
                  "    argv: [/bin/false, --model-path, \"{model}\", --port, \"{port}\"]\n"
                  "    env: {PATH: /usr/bin:/bin}\n"
                  "    log_path: ",
                  dir_,
                  "/logs/sglang_gpu{gpu}_{port}.log\n"
                  "policies:\n"
                  "  - name: default\n"
                  "    stall_timeout: 10m\n"
                  "    startup_deadline: 90m\n");
  return y;
}

bool Bench::WaitFor(const std::string& path, absl::Duration timeout, pid_t child,
                    const char* what) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!Exists(path)) {
    int status;
    if (child > 0 && waitpid(child, &status, WNOHANG) == child) {
      std::cerr << "daemon_bench: " << what << " exited before " << path << " appeared\n";
      if (child == fleetd_) fleetd_ = -1;
      if (child == sim_) sim_ = -1;
      return false;
    }
    if (absl::Now() > deadline) {
      std::cerr << "daemon_bench: " << what << ": no " << path << " after "
                << absl::FormatDuration(timeout) << "\n";
      return false;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

Sample Bench::CallStatus(fleet::v1::Fleet::Stub* stub) {
  const absl::Time start = absl::Now();
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  fleet::v1::FleetStatusResponse r;
  const grpc::Status s = stub->Status(&c, fleet::v1::FleetStatusRequest(), &r);
  const absl::Time end = absl::Now();
  return {absl::ToUnixMillis(start), absl::ToDoubleMilliseconds(end - start),
          s.ok() && r.servers_size() == o_.containers * kGpus};
}

Sample Bench::CallCli() {
  const std::string out = dir_ + "/fleetctl-status.json";
  const absl::Time start = absl::Now();
  unlink(out.c_str());
  testing::RunOptions options;
  options.output_path = out;
  auto r = testing::Run({o_.fleetctl, "--socket", socket_, "status", "-o", "json"}, options);
  const absl::Time end = absl::Now();
  bool ok = r.ok() && r->exited && r->exit_code == 0;
  if (ok) {
    // One object per server.
    int64_t rows = 0;
    for (size_t pos = 0; (pos = r->output.find("\"server\":", pos)) != std::string::npos; ++pos) {
      ++rows;
    }
    ok = rows == o_.containers * kGpus;
  }
  return {absl::ToUnixMillis(start), absl::ToDoubleMilliseconds(end - start), ok};
}

std::unique_ptr<fleet::v1::Fleet::Stub> Bench::FleetStub() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel =
      grpc::CreateCustomChannel("unix:" + socket_, grpc::InsecureChannelCredentials(), args);
  return fleet::v1::Fleet::NewStub(channel);
}

void Bench::StatusLoop() {
  auto stub = FleetStub();
  while (!stop_.load()) {
    const Sample s = CallStatus(stub.get());
    {
      std::lock_guard<std::mutex> lock(mu_);
      rpc_.push_back(s);
    }
    absl::SleepFor(absl::Milliseconds(o_.status_interval_ms) - absl::Milliseconds(s.ms));
  }
}

void Bench::ScrapeLoop() {
  while (!stop_.load()) {
    const absl::Time t0 = absl::Now();
    testing::RunOptions options;
    options.output_path = dir_ + "/scrape.size";
    std::remove(options.output_path.c_str());
    auto r = testing::Run({"curl", "-sS", "-f", "--max-time", "30", "-o", dir_ + "/scrape.txt",
                           "-w", "%{size_download}", metrics_url_},
                          options);
    Sample sample{absl::ToUnixMillis(t0), absl::ToDoubleMilliseconds(absl::Now() - t0), false};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.ok() && r->exit_code == 0) {
        sample.ok = true;
        scrapes_.push_back(sample);
        int64_t bytes = 0;
        if (absl::SimpleAtoi(absl::StripAsciiWhitespace(r->output), &bytes)) scrape_bytes_ = bytes;
      } else {
        ++scrape_failed_;
      }
    }
    absl::SleepFor(absl::Milliseconds(o_.scrape_interval_ms) - absl::Milliseconds(sample.ms));
  }
}

void Bench::CliLoop() {
  while (!stop_.load()) {
    const Sample s = CallCli();
    {
      std::lock_guard<std::mutex> lock(mu_);
      cli_.push_back(s);
    }
    absl::SleepFor(absl::Milliseconds(o_.cli_interval_ms) - absl::Milliseconds(s.ms));
  }
}

int64_t Bench::StoredSoFar() {
  std::lock_guard<std::mutex> lock(db_mu_);
  if (!db_) return -1;
  // PostgreSQL's sum of bigints is a numeric; its text reads as the integer.
  auto st = db_->Prepare("SELECT coalesce(sum(sequence), 0) FROM agent_cursors");
  if (!st.ok()) return -1;
  auto row = st->Step();
  if (!row.ok() || !*row) return -1;
  return st->ColumnInt(0);
}

void Bench::ProcLoop() {
  while (!stop_.load()) {
    ProcSample p = SampleProc(fleetd_);
    const int64_t stored = StoredSoFar();
    const PostgresSample pg = postgres_ ? SamplePostgres(postgres_->pid()) : PostgresSample();
    {
      std::lock_guard<std::mutex> lock(mu_);
      proc_.push_back(p);
      progress_.push_back({p.at_ms, stored});
      if (postgres_) pg_samples_.push_back(pg);
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

// Servers fleetd has not started: in its table in no state of a start (STARTING .. READY), e.g.
// PENDING behind a preflight, REMEDIATING, GAVE_UP; or absent. -1 when Status fails. `states`
// gets fleetd's table as "STATE COUNT, ..." (or why Status failed).
int64_t Bench::NotStarted(std::string* states) {
  auto stub = FleetStub();
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  fleet::v1::FleetStatusResponse r;
  const grpc::Status s = stub->Status(&c, fleet::v1::FleetStatusRequest(), &r);
  if (!s.ok()) {
    *states = absl::StrCat("Fleet.Status failed: ", s.error_message());
    return -1;
  }
  static const std::set<std::string> kStarted = {"STARTING", "LOADING", "JIT_COMPILING",
                                                 "CAPTURING_GRAPHS", "READY"};
  std::map<std::string, int64_t> by_state;
  int64_t started = 0;
  for (const auto& row : r.servers()) {
    ++by_state[row.state()];
    if (kStarted.count(row.state()) > 0) ++started;
  }
  *states = absl::StrJoin(by_state, ", ", absl::PairFormatter(" "));
  return o_.containers * kGpus - started;
}

// Its process group (Spawn gives each child one of its own): a wrapper's children go too.
void Bench::Stop(pid_t* pid) {
  if (*pid <= 0) return;
  kill(-*pid, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int status;
  while (waitpid(*pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(-*pid, SIGKILL);
      waitpid(*pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  *pid = -1;
}

// Runs `sql` and returns its rows as strings.
std::vector<std::vector<std::string>> Query(sql::Connection& db, const std::string& sql,
                                            int columns) {
  std::vector<std::vector<std::string>> rows;
  auto st = db.Prepare(sql);
  if (!st.ok()) {
    std::cerr << "daemon_bench: " << st.status() << "\n";
    return rows;
  }
  while (true) {
    auto row = st->Step();
    if (!row.ok() || !*row) break;
    std::vector<std::string> r;
    for (int i = 0; i < columns; ++i) r.push_back(st->ColumnIsNull(i) ? "" : st->ColumnText(i));
    rows.push_back(std::move(r));
  }
  return rows;
}

int64_t Int(const std::string& s) {
  int64_t v = 0;
  return absl::SimpleAtoi(s, &v) ? v : -1;
}

int Bench::Run() {
  // Short paths: a unix socket path has room for 107 bytes.
  if (o_.work_dir.empty()) {
    char tmpl[] = "/tmp/fdb.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      perror("daemon_bench: mkdtemp");
      return 1;
    }
    dir_ = tmpl;
  } else {
    dir_ = o_.work_dir;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  state_dir_ = dir_ + "/state";
  socket_ = state_dir_ + "/fleetd.sock";
  std::filesystem::create_directories(dir_ + "/a");
  std::filesystem::create_directories(state_dir_);
  const int64_t servers = o_.containers * kGpus;
  std::cerr << "daemon_bench: N=" << o_.containers << " containers, " << servers
            << " servers, rate " << o_.rate << " events/s, " << o_.events_per_server
            << " events per server, record in " << o_.store << "; work dir " << dir_ << "\n";

  // 0. PostgreSQL, when it keeps the record: a server of this run's own, its URL in a file only
  // the owner reads (fleetd takes it from there, never from argv).
  const std::string store_file = dir_ + "/store.url";
  if (o_.store == "postgres") {
    testing::PostgresServer::Options pg_options;
    // PostgreSQL's default, not the tests' 16MB (many servers of tests run side by side).
    pg_options.settings = {"shared_buffers = 128MB"};
    auto pg = testing::PostgresServer::Start(pg_options);
    if (!pg.ok()) {
      std::cerr << "daemon_bench: " << pg.status() << "\n";
      return absl::IsNotFound(pg.status()) ? 77 : 1;
    }
    postgres_ = *std::move(pg);
    const int fd = open(store_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const std::string line = postgres_->url() + "\n";
    const bool written =
        fd >= 0 && write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    if (fd >= 0) close(fd);
    if (!written) {
      std::cerr << "daemon_bench: cannot write " << store_file << ": " << strerror(errno) << "\n";
      return 1;
    }
    std::cerr << "daemon_bench: PostgreSQL " << postgres_->pid() << " on "
              << postgres_->socket_dir() << "\n";
  }

  // 1. The agents.
  testing::RunOptions sim_options;
  sim_options.output_path = dir_ + "/sim.log";
  auto sim = testing::Spawn(
      PinnedTo(o_.agents_cpus,
               {o_.sim, "--containers", absl::StrCat(o_.containers), "--socket-dir", dir_ + "/a",
                "--rate", absl::StrCat(o_.rate), "--events-per-server",
                absl::StrCat(o_.events_per_server), "--steps-per-op", absl::StrCat(o_.steps_per_op),
                "--break-streams-ms", absl::StrCat(o_.break_ms), "--ready-file",
                dir_ + "/sim.ready", "--report", dir_ + "/sim.report"}),
      sim_options);
  if (!sim.ok()) {
    std::cerr << "daemon_bench: " << sim.status() << "\n";
    return 1;
  }
  sim_ = *sim;
  if (!WaitFor(dir_ + "/sim.ready", absl::Seconds(120), sim_, "fleet-sim-agents")) {
    Stop(&sim_);
    return 1;
  }

  // 2. fleetd, with the config.
  const std::string config = dir_ + "/fleet.yaml";
  std::ofstream(config) << Config();
  testing::RunOptions fleetd_options;
  fleetd_options.output_path = dir_ + "/fleetd.log";
  const int64_t started_ms = NowMs();
  std::vector<std::string> fleetd_argv = {o_.fleetd, "--config", config, "--state-dir", state_dir_};
  if (!o_.db_synchronous.empty()) {
    fleetd_argv.push_back(absl::StrCat("--db-synchronous=", o_.db_synchronous));
  }
  if (postgres_) {
    fleetd_argv.push_back("--store-file");
    fleetd_argv.push_back(store_file);
  }
  if (o_.scrape_interval_ms > 0) fleetd_argv.push_back("--metrics-listen=127.0.0.1:0");
  auto fleetd = testing::Spawn(PinnedTo(o_.fleetd_cpus, fleetd_argv), fleetd_options);
  if (!fleetd.ok()) {
    std::cerr << "daemon_bench: " << fleetd.status() << "\n";
    Stop(&sim_);
    return 1;
  }
  fleetd_ = *fleetd;
  if (!WaitFor(socket_, absl::Seconds(120), fleetd_, "fleetd")) {
    std::cerr << ReadAll(dir_ + "/fleetd.log");
    Stop(&fleetd_);
    Stop(&sim_);
    return 1;
  }
  const int64_t serving_ms = NowMs();
  const ProcSample at_serving = SampleProc(fleetd_);
  // fleetd made the tables (its migrations) before it served.
  absl::StatusOr<std::unique_ptr<sql::Connection>> db;
  if (postgres_) {
    db = sql::PostgresConnection::Connect(postgres_->url());
  } else {
    db = sql::SqliteConnection::Open(state_dir_ + "/fleet.db");
  }
  if (db.ok()) {
    db_ = *std::move(db);
  } else {
    std::cerr << "daemon_bench: the record: " << db.status() << "\n";
  }

  if (o_.scrape_interval_ms > 0) {
    // fleetd logs the metrics' address before it serves fleet.proto.
    const std::string log_text = ReadAll(dir_ + "/fleetd.log");
    const size_t at = log_text.find("metrics: http://");
    if (at == std::string::npos) {
      std::cerr << "daemon_bench: fleetd did not say where its metrics are\n" << log_text;
      Stop(&fleetd_);
      Stop(&sim_);
      return 1;
    }
    metrics_url_ = log_text.substr(at + 9, log_text.find(' ', at + 9) - (at + 9));
    std::cerr << "daemon_bench: scraping " << metrics_url_ << " every " << o_.scrape_interval_ms
              << " ms\n";
  }

  // 3. Measure while the events flow.
  std::thread scrape_thread([this] {
    if (o_.scrape_interval_ms > 0) ScrapeLoop();
  });
  std::thread status_thread([this] { StatusLoop(); });
  std::thread cli_thread([this] { CliLoop(); });
  std::thread proc_thread([this] { ProcLoop(); });
  const absl::Time deadline = absl::Now() + absl::Seconds(o_.timeout_s);
  const absl::Time start_deadline = absl::Now() + absl::Seconds(o_.start_timeout_s);
  bool start_checked = false;
  int64_t not_started = 0;
  bool timed_out = false;
  SimReport report;
  bool reported = false;
  int64_t complete_ms = 0;
  while (true) {
    if (!reported && Exists(dir_ + "/sim.report")) {
      report = ParseReport(ReadAll(dir_ + "/sim.report"));
      reported = true;
      std::cerr << "daemon_bench: every server READY at the agents (" << report.total_events
                << " events sent)\n";
    }
    if (reported && StoredSoFar() >= report.total_events) {
      complete_ms = NowMs();
      break;
    }
    int status;
    if (waitpid(fleetd_, &status, WNOHANG) == fleetd_) {
      std::cerr << "daemon_bench: fleetd exited during the run\n" << ReadAll(dir_ + "/fleetd.log");
      fleetd_ = -1;
      timed_out = true;
      break;
    }
    // Once, at the start bound, unless the agents already reported every server through.
    if (!reported && !start_checked && absl::Now() > start_deadline) {
      start_checked = true;
      std::string states;
      not_started = NotStarted(&states);
      if (not_started != 0) {
        if (not_started < 0) not_started = servers;
        std::cerr << "daemon_bench: FAILED: " << not_started << " of " << servers
                  << " servers not started " << o_.start_timeout_s
                  << " s after fleetd began serving (fleetd's table: " << states
                  << "); fleetd's log: " << dir_ << "/fleetd.log\n";
        timed_out = true;
        break;
      }
    }
    if (absl::Now() > deadline) {
      std::cerr << "daemon_bench: timed out after " << o_.timeout_s
                << " s (agents report: " << (reported ? "yes" : "no") << ", stored "
                << StoredSoFar() << ")\n";
      timed_out = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  // A little more of the steady state after the flow, then status with nothing happening.
  absl::SleepFor(absl::Seconds(1));
  stop_ = true;
  status_thread.join();
  cli_thread.join();
  scrape_thread.join();
  if (fleetd_ > 0 && !timed_out) {
    auto stub = FleetStub();
    for (int i = 0; i < 50; ++i) {
      rpc_idle_.push_back(CallStatus(stub.get()));
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (int i = 0; i < 10; ++i) cli_idle_.push_back(CallCli());
  }
  proc_thread.join();
  const ProcSample at_end = fleetd_ > 0 ? SampleProc(fleetd_) : ProcSample();
  const ProcSample sim_end = sim_ > 0 ? SampleProc(sim_) : ProcSample();
  const PostgresSample pg_end = postgres_ ? SamplePostgres(postgres_->pid()) : PostgresSample();

  // 4. Check the record.
  Json verify_json = Json::object();
  bool ok = !timed_out && db_ != nullptr && Verify(report, &verify_json);
  if (o_.scrape_interval_ms > 0 && (scrapes_.empty() || scrape_failed_ > 0)) {
    std::cerr << "daemon_bench: FAILED: " << scrapes_.size() << " scrapes of " << metrics_url_
              << " answered, " << scrape_failed_ << " failed\n";
    ok = false;
  }

  // Times: from the agents' first event to the moment the record holds every event (the
  // stored cursors, looked at every 20 ms).
  const int64_t first_event_ms = report.times["first_event_ms"];
  const int64_t last_event_ms = report.times["last_event_ms"];
  const int64_t last_stored_ms = complete_ms;
  // The most events stored in one second, from the 250 ms samples.
  double peak_rate = 0;
  for (size_t i = 0; i < progress_.size(); ++i) {
    for (size_t j = i + 1; j < progress_.size(); ++j) {
      const int64_t dt = progress_[j].first - progress_[i].first;
      if (dt < 1000) continue;
      if (progress_[i].second >= 0 && progress_[j].second >= 0) {
        peak_rate =
            std::max(peak_rate, static_cast<double>(progress_[j].second - progress_[i].second) *
                                    1000.0 / static_cast<double>(dt));
      }
      break;
    }
  }
  const double flow_s = static_cast<double>(last_stored_ms - first_event_ms) / 1000.0;
  const double emit_s = static_cast<double>(last_event_ms - first_event_ms) / 1000.0;
  const double events = static_cast<double>(report.total_events);
  const double ingest_rate = flow_s > 0 ? events / flow_s : 0;
  const double offered_rate = emit_s > 0 ? events / emit_s : 0;

  // Status latency while events flow: from the agents' first event to the last row stored.
  std::vector<double> rpc_ms, cli_ms, rpc_all_ms;
  int64_t rpc_failed = 0, cli_failed = 0;
  for (const Sample& s : rpc_) {
    if (!s.ok) ++rpc_failed;
    rpc_all_ms.push_back(s.ms);
    if (s.at_ms >= first_event_ms && s.at_ms <= last_stored_ms) rpc_ms.push_back(s.ms);
  }
  for (const Sample& s : cli_) {
    if (!s.ok) ++cli_failed;
    if (s.at_ms >= first_event_ms && s.at_ms <= last_stored_ms) cli_ms.push_back(s.ms);
  }
  const Dist rpc = Percentiles(rpc_ms);
  const Dist rpc_all = Percentiles(rpc_all_ms);
  const Dist cli = Percentiles(cli_ms);
  std::vector<double> rpc_idle_ms, cli_idle_ms;
  for (const Sample& s : rpc_idle_) {
    if (!s.ok) ++rpc_failed;
    rpc_idle_ms.push_back(s.ms);
  }
  for (const Sample& s : cli_idle_) {
    if (!s.ok) ++cli_failed;
    cli_idle_ms.push_back(s.ms);
  }
  const Dist rpc_idle = Percentiles(rpc_idle_ms);
  const Dist cli_idle = Percentiles(cli_idle_ms);

  // CPU in the flow window, from the samples nearest its ends.
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  int64_t cpu_first = -1, cpu_last = -1, t_first = 0, t_last = 0;
  for (const ProcSample& p : proc_) {
    if (p.at_ms >= first_event_ms && cpu_first < 0) {
      cpu_first = p.cpu_ticks;
      t_first = p.at_ms;
    }
    if (p.at_ms <= last_stored_ms + 250) {
      cpu_last = p.cpu_ticks;
      t_last = p.at_ms;
    }
  }
  const double flow_cpu_s = cpu_first >= 0 && cpu_last >= cpu_first
                                ? static_cast<double>(cpu_last - cpu_first) / tick
                                : 0;
  const double flow_wall_s = static_cast<double>(t_last - t_first) / 1000.0;
  const double total_cpu_s = static_cast<double>(at_end.cpu_ticks) / tick;

  Json summary = Json::object();
  summary["containers"] = o_.containers;
  summary["servers"] = servers;
  summary["rate"] = o_.rate;
  summary["events_per_server"] = o_.events_per_server;
  summary["store"] = o_.store;
  // PostgreSQL: fsync and synchronous_commit on, each commit flushed (as SQLite's FULL).
  if (postgres_) {
    summary["db_synchronous"] = "synchronous_commit=on";
  } else {
    summary["db_synchronous"] = o_.db_synchronous.empty() ? "full" : o_.db_synchronous;
  }
  summary["fleetd_cpus"] = o_.fleetd_cpus;
  summary["agents_cpus"] = o_.agents_cpus;
  summary["ok"] = ok;
  summary["servers_not_started"] = not_started;
  summary["events"] = report.total_events;
  summary["streams_broken"] = report.times["streams_broken"];
  summary["serving_after_ms"] = serving_ms - started_ms;
  summary["all_launched_after_ms"] = report.times["last_launch_ms"] - started_ms;
  summary["first_event_after_ms"] = first_event_ms - started_ms;
  summary["emit_s"] = emit_s;
  summary["offered_events_per_s"] = offered_rate;
  summary["flow_s"] = flow_s;
  summary["ingest_events_per_s"] = ingest_rate;
  summary["peak_1s_events_per_s"] = peak_rate;
  summary["stored_lag_ms"] = last_stored_ms - last_event_ms;
  summary["complete_after_ms"] = complete_ms - started_ms;
  for (auto [name, d] : {std::pair{"status_rpc", rpc}, std::pair{"status_rpc_whole_run", rpc_all},
                         std::pair{"status_cli", cli}, std::pair{"status_rpc_idle", rpc_idle},
                         std::pair{"status_cli_idle", cli_idle}}) {
    summary[absl::StrCat(name, "_n")] = static_cast<int64_t>(d.n);
    summary[absl::StrCat(name, "_p50_ms")] = d.p50;
    summary[absl::StrCat(name, "_p90_ms")] = d.p90;
    summary[absl::StrCat(name, "_p99_ms")] = d.p99;
    summary[absl::StrCat(name, "_max_ms")] = d.max;
  }
  if (o_.scrape_interval_ms > 0) {
    std::vector<double> scrape_ms;
    for (const Sample& x : scrapes_) scrape_ms.push_back(x.ms);
    const Dist scrape = Percentiles(scrape_ms);
    summary["scrape_interval_ms"] = o_.scrape_interval_ms;
    summary["scrape_n"] = static_cast<int64_t>(scrape.n);
    summary["scrape_p50_ms"] = scrape.p50;
    summary["scrape_p99_ms"] = scrape.p99;
    summary["scrape_bytes"] = scrape_bytes_;
    summary["scrape_failed"] = scrape_failed_;
  }
  summary["status_rpc_failed"] = rpc_failed;
  summary["status_cli_failed"] = cli_failed;
  summary["rss_serving_kib"] = at_serving.rss_kib;
  summary["rss_end_kib"] = at_end.rss_kib;
  summary["hwm_kib"] = at_end.hwm_kib;
  summary["threads_end"] = at_end.threads;
  summary["cpu_total_s"] = total_cpu_s;
  summary["cpu_flow_s"] = flow_cpu_s;
  summary["cpu_flow_wall_s"] = flow_wall_s;
  summary["cpu_us_per_event"] = events > 0 ? total_cpu_s * 1e6 / events : 0;
  summary["sim_cpu_s"] = static_cast<double>(sim_end.cpu_ticks) / tick;
  summary["sim_rss_kib"] = sim_end.rss_kib;
  if (postgres_) {
    int64_t pss_peak = pg_end.pss_kib, rss_peak = pg_end.rss_kib;
    for (const PostgresSample& p : pg_samples_) {
      pss_peak = std::max(pss_peak, p.pss_kib);
      rss_peak = std::max(rss_peak, p.rss_kib);
    }
    const double pg_cpu_s = static_cast<double>(pg_end.cpu_ticks) / tick;
    summary["pg_processes_end"] = pg_end.processes;
    summary["pg_rss_end_kib"] = pg_end.rss_kib;
    summary["pg_rss_peak_kib"] = rss_peak;
    summary["pg_pss_end_kib"] = pg_end.pss_kib;
    summary["pg_pss_peak_kib"] = pss_peak;
    summary["pg_cpu_total_s"] = pg_cpu_s;
    summary["pg_cpu_us_per_event"] = events > 0 ? pg_cpu_s * 1e6 / events : 0;
  }
  summary["verify"] = std::move(verify_json);
  const std::string json = JsonText(std::move(summary));

  if (!o_.timeline_path.empty()) {
    std::ofstream t(o_.timeline_path);
    t << "# ms_since_fleetd_start rss_kib cpu_ticks events_stored (first event at "
      << first_event_ms - started_ms << " ms, all stored at " << complete_ms - started_ms
      << " ms)\n";
    for (size_t i = 0; i < proc_.size(); ++i) {
      t << proc_[i].at_ms - started_ms << " " << proc_[i].rss_kib << " " << proc_[i].cpu_ticks
        << " " << progress_[i].second << "\n";
    }
    // Then each status call: "rpc|cli MS_SINCE_START LATENCY_MS".
    for (const Sample& s : rpc_) t << "rpc " << s.at_ms - started_ms << " " << s.ms << "\n";
    for (const Sample& s : cli_) t << "cli " << s.at_ms - started_ms << " " << s.ms << "\n";
  }
  std::cout << json << "\n";
  if (!o_.json_path.empty()) std::ofstream(o_.json_path) << json << "\n";
  std::cerr << absl::StrFormat(
      "daemon_bench: N=%d: %d events in %.2f s from the first event to the last row: %.0f "
      "events/s (offered %.0f/s; peak 1 s %.0f/s)\n"
      "  while events flow: Status RPC p50 %.1f p99 %.1f max %.1f ms (n=%d), fleetctl status "
      "p50 %.1f p99 %.1f ms (n=%d)\n"
      "  idle afterwards:   Status RPC p50 %.1f p99 %.1f ms (n=%d), fleetctl status p50 %.1f "
      "p99 %.1f ms (n=%d)\n"
      "  fleetd: RSS %.1f MiB (peak %.1f), CPU %.1f s (%.1f us/event); %s\n%s",
      o_.containers, report.total_events, flow_s, ingest_rate, offered_rate, peak_rate, rpc.p50,
      rpc.p99, rpc.max, rpc.n, cli.p50, cli.p99, cli.n, rpc_idle.p50, rpc_idle.p99, rpc_idle.n,
      cli_idle.p50, cli_idle.p99, cli_idle.n, static_cast<double>(at_end.rss_kib) / 1024,
      static_cast<double>(at_end.hwm_kib) / 1024, total_cpu_s,
      events > 0 ? total_cpu_s * 1e6 / events : 0, ok ? "record checked" : "CHECK FAILED",
      postgres_ ? absl::StrFormat(
                      "  PostgreSQL: %d processes, PSS %.1f MiB (RSS summed %.1f), "
                      "CPU %.1f s (%.1f us/event)\n",
                      pg_end.processes, static_cast<double>(pg_end.pss_kib) / 1024,
                      static_cast<double>(pg_end.rss_kib) / 1024,
                      static_cast<double>(pg_end.cpu_ticks) / tick,
                      events > 0 ? static_cast<double>(pg_end.cpu_ticks) / tick * 1e6 / events : 0)
                : std::string());

  {
    std::lock_guard<std::mutex> lock(db_mu_);
    db_.reset();
  }
  Stop(&fleetd_);
  Stop(&sim_);
  if (postgres_) {
    if (absl::Status s = postgres_->Stop(); !s.ok()) std::cerr << "daemon_bench: " << s << "\n";
    postgres_.reset();  // its dir too; --keep keeps fleetd's state dir, not the server's data
  }
  if (ok && !o_.keep) std::filesystem::remove_all(dir_);
  if (!ok) std::cerr << "daemon_bench: kept " << dir_ << " for a look\n";
  return ok ? 0 : 1;
}

bool Bench::Verify(const SimReport& report, Json* json) {
  bool ok = true;
  auto fail = [&](const std::string& what) {
    if (ok) std::cerr << "daemon_bench: record check failed:\n";
    std::cerr << "  " << what << "\n";
    ok = false;
  };
  // Per container and incarnation: how many rows, distinct sequences, first and last.
  auto rows = Query(*db_,
                    "SELECT c.name, e.incarnation, count(*), count(DISTINCT e.sequence), "
                    "min(e.sequence), max(e.sequence) FROM events e JOIN containers c ON c.id = "
                    "e.container_id WHERE e.kind != 'gap' GROUP BY c.name, e.incarnation",
                    6);
  std::map<std::string, std::vector<std::string>> by_container;
  int64_t stored = 0;
  for (auto& r : rows) {
    stored += Int(r[2]);
    if (by_container.count(r[0])) {
      fail(absl::StrCat(r[0], ": events under more than one incarnation"));
    }
    by_container[r[0]] = r;
  }
  if (report.containers.size() != static_cast<size_t>(o_.containers)) {
    fail(absl::StrCat("the simulator reported ", report.containers.size(), " containers"));
  }
  int64_t checked = 0;
  for (const auto& [name, c] : report.containers) {
    auto it = by_container.find(name);
    if (it == by_container.end()) {
      fail(absl::StrCat(name, ": no events stored, ", c.last_sequence, " sent"));
      continue;
    }
    const auto& r = it->second;
    if (r[1] != c.incarnation || Int(r[2]) != c.last_sequence || Int(r[3]) != c.last_sequence ||
        Int(r[4]) != 1 || Int(r[5]) != c.last_sequence) {
      fail(absl::StrCat(name, ": stored incarnation ", r[1], " rows ", r[2], " distinct ", r[3],
                        " sequences ", r[4], "..", r[5], "; sent ", c.incarnation, " 1..",
                        c.last_sequence));
    } else {
      ++checked;
    }
    if (c.launches != kGpus) fail(absl::StrCat(name, ": ", c.launches, " launches, not 8"));
  }
  if (stored != report.total_events) {
    fail(absl::StrCat(stored, " events stored, ", report.total_events, " sent"));
  }
  auto gaps = Query(*db_, "SELECT count(*) FROM events WHERE kind = 'gap'", 1);
  const int64_t gap_rows = gaps.empty() ? -1 : Int(gaps[0][0]);
  if (gap_rows != 0) fail(absl::StrCat(gap_rows, " gap rows"));
  auto cursors = Query(*db_,
                       "SELECT c.name, k.incarnation, k.sequence FROM agent_cursors k JOIN "
                       "containers c ON c.id = k.container_id",
                       3);
  int64_t cursors_ok = 0;
  for (auto& r : cursors) {
    auto it = report.containers.find(r[0]);
    if (it != report.containers.end() && it->second.incarnation == r[1] &&
        it->second.last_sequence == Int(r[2])) {
      ++cursors_ok;
    }
  }
  if (cursors_ok != o_.containers) {
    fail(absl::StrCat(cursors_ok, " of ", o_.containers, " cursors at the last sequence"));
  }
  auto ready = Query(*db_, "SELECT count(*) FROM servers WHERE state = 'READY'", 1);
  const int64_t ready_servers = ready.empty() ? -1 : Int(ready[0][0]);
  if (ready_servers != o_.containers * kGpus) fail(absl::StrCat(ready_servers, " servers READY"));
  auto attempts = Query(*db_,
                        "SELECT count(*), sum(CASE WHEN outcome = 'ready' THEN 1 ELSE 0 END), "
                        "sum(CASE WHEN time_to_ready_ms > 0 THEN 1 ELSE 0 END) FROM attempts",
                        3);
  const int64_t attempt_rows = attempts.empty() ? -1 : Int(attempts[0][0]);
  const int64_t ready_attempts = attempts.empty() ? -1 : Int(attempts[0][1]);
  if (attempt_rows != o_.containers * kGpus || ready_attempts != attempt_rows) {
    fail(absl::StrCat(attempt_rows, " attempts, ", ready_attempts, " ready"));
  }
  Json summary = Json::object();
  summary["ok"] = ok;
  summary["events_stored"] = stored;
  summary["containers_exact"] = checked;
  summary["gap_rows"] = gap_rows;
  summary["cursors_at_last"] = cursors_ok;
  summary["servers_ready"] = ready_servers;
  summary["attempts"] = attempt_rows;
  summary["attempts_ready"] = ready_attempts;
  *json = std::move(summary);
  return ok;
}

}  // namespace
}  // namespace fleet::bench

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  fleet::bench::Options o;
  fleet::FlagSet flags(
      "daemon_bench --fleetd PATH --fleetctl PATH --sim PATH [flags]",
      "One real fleetd against N simulated agents x 8 servers over gRPC on unix sockets: status\n"
      "latency (RPC and fleetctl) while the servers' startup events flow, the events' ingest\n"
      "rate into fleet.db with every event checked stored exactly once, fleetd's RSS and CPU.");
  flags.AddInt("containers", '\0', &o.containers, "N: simulated containers of 8 GPUs");
  flags.AddString("fleetd", '\0', &o.fleetd, "the fleetd binary", "PATH");
  flags.AddString("fleetctl", '\0', &o.fleetctl, "the fleetctl binary", "PATH");
  flags.AddString("sim", '\0', &o.sim, "the fleet-sim-agents binary", "PATH");
  flags.AddDouble("rate", '\0', &o.rate, "events/s the agents send, all together (0: unpaced)");
  flags.AddInt("events-per-server", '\0', &o.events_per_server,
               "events in each server's startup, STARTING to READY");
  flags.AddInt("steps-per-op", '\0', &o.steps_per_op, "progress events per JIT op");
  flags.AddInt("break-ms", '\0', &o.break_ms,
               "the agents break a tenth of their event streams every N ms (0: never); fleetd "
               "must resume each from its cursor",
               "N");
  flags.AddInt("status-interval-ms", '\0', &o.status_interval_ms, "Fleet.Status every N ms");
  flags.AddInt("scrape-interval-ms", '\0', &o.scrape_interval_ms,
               "fleetd serves metrics, scraped every N ms (0: no metrics)");
  flags.AddInt("cli-interval-ms", '\0', &o.cli_interval_ms, "fleetctl status every N ms");
  flags.AddInt("timeout", '\0', &o.timeout_s, "give up after this many seconds", "S");
  flags.AddInt(
      "start-timeout", '\0', &o.start_timeout_s,
      "fail when a server has not started (is not STARTING .. READY) this many seconds after "
      "fleetd serves",
      "S");
  flags.AddString("work-dir", '\0', &o.work_dir, "emptied and used (default: a new /tmp/fdb.*)",
                  "DIR");
  flags.AddString("json", '\0', &o.json_path, "also write the JSON line here", "FILE");
  flags.AddString("timeline", '\0', &o.timeline_path,
                  "write fleetd's samples here: ms since its start, RSS KiB, CPU ticks, events "
                  "stored; then every status call's start and latency",
                  "FILE");
  flags.AddString("db-synchronous", '\0', &o.db_synchronous,
                  "fleetd's --db-synchronous (full or normal; default: fleetd's, full)",
                  "full|normal");
  flags.AddBool("keep", '\0', &o.keep, "keep the work dir (fleet.db, logs) after a good run");
  flags.AddString("store", '\0', &o.store,
                  "fleetd's record: sqlite (STATE_DIR/fleet.db) or postgres (a PostgreSQL server "
                  "started for the run in a temp dir, unix socket only; fleetd --store-file)",
                  "sqlite|postgres");
  flags.AddString("fleetd-cpus", '\0', &o.fleetd_cpus, "run fleetd on these CPUs (taskset -c)",
                  "LIST");
  flags.AddString("agents-cpus", '\0', &o.agents_cpus,
                  "run the simulated agents on these CPUs (taskset -c)", "LIST");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "daemon_bench: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (o.fleetd.empty() || o.fleetctl.empty() || o.sim.empty() || o.containers < 1) {
    std::cerr << "daemon_bench: --fleetd, --fleetctl and --sim are required\n";
    return 2;
  }
  if (o.store != "sqlite" && o.store != "postgres") {
    std::cerr << "daemon_bench: --store: sqlite or postgres, got '" << o.store << "'\n";
    return 2;
  }
  if (o.store == "postgres" && !o.db_synchronous.empty()) {
    std::cerr << "daemon_bench: --db-synchronous is SQLite's: not with --store postgres\n";
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return fleet::bench::Bench(o).Run();
}
