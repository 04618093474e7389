// agent_bench: the agent's two benchmarks (issue 3, "Benchmarks"; bench/agent/run.sh runs it,
// BENCHMARKS.md has the results). It starts the real fleet-agent binary, talks to it over gRPC on
// loopback as the daemon would, and measures:
//
//   detection latency  for each trial, a `fleet-test-child quiet` server is launched (attempt
//                      t<i>); once its STARTING event has arrived and it has written its first
//                      line, one root-cause line is appended to its log with a single write(2)
//                      (t0, just before it), and t1 is when the EventBatches stream's reader thread
//                      gets the provisional DiagnosisEvent of that attempt (t0 -> the event's own
//                      timestamp, stamped inside the agent, splits it). The server is then
//                      stopped (STOPPED awaited) before the next one.
//   footprint          8 simulated SGLang servers (one fixed world, GPUs 0-7) under a fresh agent;
//                      once all are READY, the agent's RSS and peak RSS, and its CPU time and
//                      context switches (its wake-ups) over --idle-seconds of following them with
//                      nothing happening.
//
// It prints a summary and one JSON line (also written to --json). Exit status 1 when a trial or
// a server times out or fails (a missed target is reported, not a failure); 2 on bad flags.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/flag_set.h"
#include "common/base/json_text.h"
#include "common/base/status_macros.h"
#include "common/base/string_view.h"
#include "common/base/unique_fd.h"
#include "grpcpp/grpcpp.h"
#include "proto/agent.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace fleet::bench {
namespace {

using fleet::v1::AgentEvent;
using SteadyTime = std::chrono::steady_clock::time_point;

// The line a server writes when sgl_kernel cannot load libnvrtc: a root cause on its own.
constexpr char kRootCauseLine[] =
    "ImportError: libnvrtc.so.13: cannot open shared object file: No such file or directory\n";
// What `fleet-test-child quiet` writes first.
constexpr char kFirstLine[] = "loading\n";
constexpr absl::Duration kTrialTimeout = absl::Seconds(10);
constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

struct Paths {
  std::string agent;
  std::string test_child;
  std::string sim_server;
  std::string free_ports;
  std::string make_world;
};

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(d);
}

double Ms(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e6; }

absl::Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(AsAbsl(what), ": ", s.error_message()));
}

// --- /proc readings of one process (all of its threads).

struct ThreadSample {
  std::string comm;
  uint64_t cpu_ticks = 0;  // utime + stime
  uint64_t cpu_ns = 0;     // schedstat: time on a CPU, ns
  uint64_t voluntary = 0;
  uint64_t nonvoluntary = 0;
};

struct ProcSample {
  SteadyTime at;
  uint64_t cpu_ticks = 0;  // /proc/PID/stat utime + stime: every thread, dead ones included
  // VmRSS, VmHWM, RssAnon, RssFile, RssShmem, VmSize (status); Pss, Private (smaps_rollup)
  std::map<std::string, int64_t> status_kib;
  int64_t threads = 0;
  std::map<int, ThreadSample> tasks;  // by tid
  // Resident KiB by mapping: a file's name, [heap], [stack], or "[anon]".
  std::map<std::string, int64_t> rss_by_mapping;

  // A status_kib value; -1 when it was not read.
  int64_t Kib(const std::string& key) const {
    auto it = status_kib.find(key);
    return it == status_kib.end() ? -1 : it->second;
  }
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fields of a /proc stat line after "(comm)": index 0 is the state (field 3 of proc(5)).
std::vector<std::string> StatFields(const std::string& stat, std::string* comm) {
  const size_t open = stat.find('(');
  const size_t close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return {};
  if (comm != nullptr) *comm = stat.substr(open + 1, close - open - 1);
  return absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
}

uint64_t CpuTicksOf(const std::vector<std::string>& fields) {
  // utime and stime are fields 14 and 15 of proc(5): indexes 11 and 12 here.
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return utime + stime;
}

// The number in "KEY:   123 kB" of a /proc status file; -1 when absent.
int64_t StatusField(const std::string& status, std::string_view key) {
  std::istringstream in(status);
  std::string line;
  const std::string prefix = absl::StrCat(AsAbsl(key), ":");
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::string digits;
    for (char c : line.substr(prefix.size())) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    int64_t v = -1;
    return absl::SimpleAtoi(digits, &v) ? v : -1;
  }
  return -1;
}

absl::StatusOr<ProcSample> SampleProcess(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid);
  ProcSample s;
  s.at = std::chrono::steady_clock::now();
  const std::string stat = ReadAll(dir + "/stat");
  const std::string status = ReadAll(dir + "/status");
  if (stat.empty() || status.empty()) {
    return absl::NotFoundError(absl::StrCat("process ", pid, ": gone"));
  }
  s.cpu_ticks = CpuTicksOf(StatFields(stat, nullptr));
  for (const char* key : {"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize"}) {
    s.status_kib[key] = StatusField(status, key);
  }
  s.threads = StatusField(status, "Threads");
  // smaps_rollup: proportional (Pss: shared pages divided among their users) and private (USS).
  const std::string rollup = ReadAll(dir + "/smaps_rollup");
  s.status_kib["Pss"] = StatusField(rollup, "Pss");
  s.status_kib["Private"] =
      StatusField(rollup, "Private_Clean") + StatusField(rollup, "Private_Dirty");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/task", ec)) {
    int tid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &tid)) continue;
    const std::string tdir = entry.path().string();
    ThreadSample t;
    t.cpu_ticks = CpuTicksOf(StatFields(ReadAll(tdir + "/stat"), &t.comm));
    const std::string tstatus = ReadAll(tdir + "/status");
    t.voluntary = static_cast<uint64_t>(
        std::max<int64_t>(0, StatusField(tstatus, "voluntary_ctxt_switches")));
    t.nonvoluntary = static_cast<uint64_t>(
        std::max<int64_t>(0, StatusField(tstatus, "nonvoluntary_ctxt_switches")));
    const std::vector<std::string> sched =
        absl::StrSplit(ReadAll(tdir + "/schedstat"), ' ', absl::SkipEmpty());
    if (!sched.empty()) static_cast<void>(absl::SimpleAtoi(sched[0], &t.cpu_ns));
    s.tasks[tid] = std::move(t);
  }
  // smaps: a mapping header line starts with an address range; its Rss: line follows.
  std::istringstream smaps(ReadAll(dir + "/smaps"));
  std::string line, current;
  while (std::getline(smaps, line)) {
    if (line.empty()) continue;
    const bool header = std::isxdigit(static_cast<unsigned char>(line[0])) &&
                        line.find('-') != std::string::npos && line.find(':') > line.find(' ');
    if (header) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      current = parts.size() >= 6 ? parts[5] : "[anon]";
      if (current.rfind("[stack", 0) == 0) current = "[stack]";
      continue;
    }
    if (line.rfind("Rss:", 0) == 0) {
      int64_t kib = 0;
      std::string v = line.substr(4);
      v.erase(std::remove_if(v.begin(), v.end(), [](char c) { return !(c >= '0' && c <= '9'); }),
              v.end());
      if (absl::SimpleAtoi(v, &kib)) s.rss_by_mapping[current] += kib;
    }
  }
  return s;
}

// --- the agent under test, as a child process.

class AgentProcess {
 public:
  // Starts fleet-agent with a port file in `dir` and its state in dir/state; returns once it
  // serves (the port file appears), or an error with the tail of its output.
  static absl::StatusOr<std::unique_ptr<AgentProcess>> Start(
      const std::string& binary, const std::string& dir, const std::vector<std::string>& extra) {
    std::filesystem::create_directories(dir);
    const std::string port_file = dir + "/port";
    const std::string output = dir + "/agent.out";
    // Plaintext TCP (the benchmark's client dials a port): --insecure-listen says so.
    std::vector<std::string> argv = {binary,        "--listen", "127.0.0.1:0", "--insecure-listen",
                                     "--port-file", port_file,  "--state-dir", dir + "/state"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    // Watch the directory before the agent can write the file: no event is missed.
    const int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (in < 0) return absl::InternalError("inotify_init1 failed");
    absl::Cleanup close_in = [in] { close(in); };
    inotify_add_watch(in, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
    FLEET_ASSIGN_OR_RETURN(const pid_t pid, fleet::testing::Spawn(argv, {.output_path = output}));
    std::unique_ptr<AgentProcess> agent(new AgentProcess(pid, output));
    if (!agent->pidfd_.valid()) return absl::InternalError("pidfd_open of fleet-agent failed");
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (true) {
      int port = 0;
      std::string text = fleet::testing::ReadFile(port_file);
      while (!text.empty() && (text.back() == '\n')) text.pop_back();
      if (absl::SimpleAtoi(text, &port) && port > 0) {
        agent->port_ = port;
        return agent;
      }
      // Woken by the port file landing (inotify) or by the agent exiting (its pidfd).
      pollfd fds[2] = {{in, POLLIN, 0}, {agent->pidfd_.get(), POLLIN, 0}};
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) {
        return absl::DeadlineExceededError(absl::StrCat(
            "fleet-agent did not write its port file in 30 s: ", fleet::testing::ReadFile(output)));
      }
      poll(fds, 2, static_cast<int>(left));
      if (fds[1].revents & POLLIN) {
        int status = 0;
        waitpid(pid, &status, 0);
        agent->pid_ = 0;
        return absl::UnavailableError(
            absl::StrCat("fleet-agent exited before serving: ", fleet::testing::ReadFile(output)));
      }
      char buf[4096];
      while (read(in, buf, sizeof(buf)) > 0) {
      }
    }
  }

  ~AgentProcess() { Kill(); }

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& output() const { return output_; }

  // SIGTERM, then SIGKILL after 5 s; reaped. The agent's servers are not its to stop when it
  // goes: callers stop them first.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    pollfd p{pidfd_.get(), POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }

 private:
  AgentProcess(pid_t pid, std::string output)
      : pid_(pid),
        pidfd_(static_cast<int>(syscall(SYS_pidfd_open, pid, 0))),
        output_(std::move(output)) {}

  pid_t pid_;
  UniqueFd pidfd_;  // readable once the agent has exited
  int port_ = 0;
  std::string output_;
};

// --- the EventBatches stream, read on a thread of its own.

struct Received {
  AgentEvent event;
  SteadyTime at;  // when Read() returned it
};

class EventStreamClient {
 public:
  EventStreamClient(fleet::v1::Agent::Stub* stub, const std::string& incarnation, uint64_t after)
      : stub_(stub) {
    request_.set_incarnation(incarnation);
    request_.set_after_sequence(after);
    // The stream lives as long as the benchmark; the deadline only bounds a hung run.
    context_.set_deadline(Deadline(absl::Hours(6)));
    thread_ = std::thread([this] { Run(); });
  }

  ~EventStreamClient() {
    context_.TryCancel();
    thread_.join();
  }

  // Waits until `done` (called under the lock with every event received so far) returns true;
  // false on timeout or when the stream ended.
  bool Await(const std::function<bool(const std::vector<Received>&)>& done,
             absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (!done(received_)) {
      if (ended_ || cv_.WaitWithDeadline(&mu_, deadline)) {
        if (!done(received_)) return false;
        break;
      }
    }
    return true;
  }

  size_t size() {
    absl::MutexLock lock(&mu_);
    return received_.size();
  }

  std::string end_status() {
    absl::MutexLock lock(&mu_);
    return end_status_;
  }

 private:
  void Run() {
    // EventBatches, as fleetd follows it: each message holds what the agent had queued.
    std::unique_ptr<grpc::ClientReader<fleet::v1::EventBatch>> reader =
        stub_->EventBatches(&context_, request_);
    fleet::v1::EventBatch batch;
    while (reader->Read(&batch)) {
      const SteadyTime now = std::chrono::steady_clock::now();
      absl::MutexLock lock(&mu_);
      for (AgentEvent& e : *batch.mutable_events()) received_.push_back({std::move(e), now});
      cv_.SignalAll();
      batch.Clear();
    }
    const grpc::Status s = reader->Finish();
    absl::MutexLock lock(&mu_);
    ended_ = true;
    end_status_ = s.ok() ? "ok" : s.error_message();
    cv_.SignalAll();
  }

  fleet::v1::Agent::Stub* const stub_;
  fleet::v1::EventsRequest request_;
  grpc::ClientContext context_;
  std::thread thread_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::string end_status_ ABSL_GUARDED_BY(mu_);
};

// A connection to the agent: the stub, its event stream from "now", and the RPCs the benchmark
// makes.
class AgentClient {
 public:
  static absl::StatusOr<std::unique_ptr<AgentClient>> Connect(int port) {
    auto client = std::unique_ptr<AgentClient>(new AgentClient(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials())));
    grpc::ClientContext context;
    context.set_deadline(Deadline(kRpcTimeout));
    fleet::v1::StatusResponse status;
    FLEET_RETURN_IF_ERROR(
        FromGrpc(client->stub_->Status(&context, fleet::v1::StatusRequest(), &status), "status"));
    client->events_ = std::make_unique<EventStreamClient>(client->stub_.get(), status.incarnation(),
                                                          status.sequence());
    return client;
  }

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(Deadline(kRpcTimeout));
    fleet::v1::LaunchResponse response;
    FLEET_RETURN_IF_ERROR(FromGrpc(stub_->Launch(&context, request, &response),
                                   absl::StrCat("launch ", request.attempt_id())));
    return response;
  }

  absl::Status Stop(int32_t gpu) {
    grpc::ClientContext context;
    context.set_deadline(Deadline(kRpcTimeout));
    fleet::v1::StopRequest request;
    request.mutable_server()->set_gpu(gpu);
    request.mutable_grace()->set_seconds(5);
    fleet::v1::StopResponse response;
    return FromGrpc(stub_->Stop(&context, request, &response), absl::StrCat("stop gpu ", gpu));
  }

  EventStreamClient& events() { return *events_; }

 private:
  explicit AgentClient(std::shared_ptr<grpc::Channel> channel)
      : stub_(fleet::v1::Agent::NewStub(channel)) {}

  std::unique_ptr<fleet::v1::Agent::Stub> stub_;
  std::unique_ptr<EventStreamClient> events_;
};

bool IsPhase(const AgentEvent& e, const std::string& attempt, std::string_view state) {
  return e.attempt_id() == attempt && e.has_phase() && e.phase().state() == state;
}

// Waits for the first event at or after *cursor that `match` accepts; moves *cursor past it.
std::optional<Received> AwaitEvent(EventStreamClient& events, size_t* cursor,
                                   const std::function<bool(const AgentEvent&)>& match,
                                   absl::Duration timeout) {
  std::optional<Received> found;
  events.Await(
      [&](const std::vector<Received>& all) {
        for (; *cursor < all.size(); ++*cursor) {
          if (match(all[*cursor].event)) {
            found = all[*cursor];
            ++*cursor;
            return true;
          }
        }
        return false;
      },
      timeout);
  return found;
}

// Kills what is left of the servers' sessions (pgid = the server's pid) when a run fails halfway.
class ServerReaper {
 public:
  void Add(int pid) {
    if (pid > 0) pids_.insert(pid);
  }
  // The server was seen STOPPED: its group is gone, and its pid may be reused.
  void Forget(int pid) { pids_.erase(pid); }
  void ForgetAll() { pids_.clear(); }
  ~ServerReaper() {
    for (int pid : pids_) kill(-pid, SIGKILL);
  }

 private:
  std::set<int> pids_;
};

// --- detection latency

// Waits until the file at `path` holds at least `bytes` bytes (inotify wakes the wait; no
// polling of the size). False after `timeout`.
bool AwaitFileSize(const std::string& path, off_t bytes, absl::Duration timeout) {
  const int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in < 0) return false;
  // Watched before the size is looked at, so a write in between still wakes the wait.
  inotify_add_watch(in, path.c_str(), IN_MODIFY);
  const absl::Time deadline = absl::Now() + timeout;
  bool reached = false;
  while (true) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && st.st_size >= bytes) {
      reached = true;
      break;
    }
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) break;
    pollfd p{in, POLLIN, 0};
    poll(&p, 1, static_cast<int>(left));
    char buf[4096];
    while (read(in, buf, sizeof(buf)) > 0) {
    }
  }
  close(in);
  return reached;
}

struct LatencyResult {
  std::vector<double> ms;        // t0 -> provisional diagnosis at the client
  std::vector<double> agent_ms;  // t0 -> the event's `at` (stamped inside the agent)
  // How many trials got each "class at line N": one entry when every trial was diagnosed alike.
  std::map<std::string, int64_t> diagnoses;
  int64_t rss_after_kib = 0;
  int64_t hwm_after_kib = 0;
  double seconds = 0;
};

absl::StatusOr<LatencyResult> RunLatency(const Paths& paths, const std::string& dir, int64_t trials,
                                         bool verbose) {
  FLEET_ASSIGN_OR_RETURN(std::unique_ptr<AgentProcess> agent,
                         AgentProcess::Start(paths.agent, dir + "/agent", {}));
  FLEET_ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> client, AgentClient::Connect(agent->port()));
  EventStreamClient& events = client->events();
  ServerReaper reaper;
  LatencyResult result;
  size_t cursor = 0;
  const std::string log_dir = dir + "/logs";
  std::filesystem::create_directories(log_dir);
  const SteadyTime begin = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < trials; ++i) {
    const std::string attempt = absl::StrCat("t", i);
    fleet::v1::LaunchRequest launch;
    launch.set_attempt_id(attempt);
    launch.set_attempt_number(i + 1);
    fleet::v1::ServerSpec* spec = launch.mutable_spec();
    spec->mutable_server()->set_gpu(0);
    spec->add_argv(paths.test_child);
    spec->add_argv("quiet");
    spec->set_log_path(absl::StrCat(log_dir, "/", attempt, ".log"));
    FLEET_ASSIGN_OR_RETURN(fleet::v1::LaunchResponse launched, client->Launch(launch));
    reaper.Add(launched.status().pid());
    if (!AwaitEvent(
            events, &cursor, [&](const AgentEvent& e) { return IsPhase(e, attempt, "STARTING"); },
            kTrialTimeout)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "trial ", i, ": no STARTING event in 10 s (stream: ", events.end_status(), ")"));
    }
    // The server is up and has written its first line ("loading"), so the line below is read
    // by a follower that is already past the start of the file, as in a real start, and the
    // child's own exec does not compete for the CPU with the measurement.
    if (!AwaitFileSize(spec->log_path(), sizeof(kFirstLine) - 1, kTrialTimeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("trial ", i, ": the server wrote no first line in 10 s"));
    }
    const int fd = open(spec->log_path().c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat("open ", spec->log_path()));
    const auto wall0 = std::chrono::system_clock::now();
    const SteadyTime t0 = std::chrono::steady_clock::now();
    const ssize_t n = write(fd, kRootCauseLine, sizeof(kRootCauseLine) - 1);
    close(fd);
    if (n != static_cast<ssize_t>(sizeof(kRootCauseLine) - 1)) {
      return absl::InternalError(absl::StrCat("write ", spec->log_path()));
    }
    std::optional<Received> diagnosis = AwaitEvent(
        events, &cursor,
        [&](const AgentEvent& e) {
          return e.attempt_id() == attempt && e.has_diagnosis() && !e.diagnosis().final();
        },
        kTrialTimeout);
    if (!diagnosis) {
      return absl::DeadlineExceededError(absl::StrCat(
          "trial ", i, ": no provisional diagnosis in 10 s (stream: ", events.end_status(), ")"));
    }
    result.ms.push_back(Ms(diagnosis->at - t0));
    const auto& at = diagnosis->event.at();
    const auto stamped = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds(at.seconds()) + std::chrono::nanoseconds(at.nanos())));
    result.agent_ms.push_back(Ms(stamped - wall0));
    const fleet::v1::Diagnosis& d = diagnosis->event.diagnosis().diagnosis();
    ++result.diagnoses[absl::StrCat(d.diagnosis_class(), " at line ", d.root_cause_line())];
    FLEET_RETURN_IF_ERROR(client->Stop(0));
    if (!AwaitEvent(
            events, &cursor, [&](const AgentEvent& e) { return IsPhase(e, attempt, "STOPPED"); },
            kTrialTimeout)) {
      return absl::DeadlineExceededError(absl::StrCat("trial ", i, ": not STOPPED in 10 s"));
    }
    reaper.Forget(launched.status().pid());
    if (verbose && (i + 1) % 100 == 0) {
      std::fprintf(stderr, "  %lld trials, last %.2f ms\n", static_cast<long long>(i + 1),
                   result.ms.back());
    }
  }
  result.seconds = Ms(std::chrono::steady_clock::now() - begin) / 1000;
  FLEET_ASSIGN_OR_RETURN(ProcSample after, SampleProcess(agent->pid()));
  result.rss_after_kib = after.Kib("VmRSS");
  result.hwm_after_kib = after.Kib("VmHWM");
  return result;
}

// --- footprint

struct FootprintResult {
  int servers = 0;
  double ready_seconds = 0;
  double idle_seconds = 0;
  ProcSample empty;  // the agent serving, before the first Launch
  ProcSample before, after;
  uint64_t events_while_idle = 0;
  int64_t clock_ticks_per_second = 100;
};

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> env;
  const std::string text = fleet::testing::ReadFile(path);
  for (std::string_view line : fleet::testing::SplitLines(text)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return env;
}

absl::StatusOr<FootprintResult> RunFootprint(const Paths& paths, const std::string& dir,
                                             int servers, double idle_seconds,
                                             const std::string& sim_speed) {
  FootprintResult result;
  result.servers = servers;
  result.clock_ticks_per_second = sysconf(_SC_CLK_TCK);
  const std::string world = dir + "/world";
  std::filesystem::create_directories(dir);
  FLEET_ASSIGN_OR_RETURN(
      fleet::testing::RunResult made,
      fleet::testing::Run({"bash", paths.make_world, world, "--state", "fixed", "--server",
                           paths.sim_server, "--gpus", absl::StrCat(servers)},
                          {.output_path = dir + "/make-world.out"}));
  if (!made.exited || made.exit_code != 0) {
    return absl::InternalError(absl::StrCat("make_sim_world.sh failed: ",
                                            fleet::testing::ReadFile(dir + "/make-world.out")));
  }
  FLEET_ASSIGN_OR_RETURN(fleet::testing::RunResult ports_run,
                         fleet::testing::Run({paths.free_ports, absl::StrCat(servers)},
                                             {.output_path = dir + "/ports"}));
  std::vector<int> ports;
  for (std::string_view line : fleet::testing::SplitLines(ports_run.output)) {
    int port = 0;
    if (absl::SimpleAtoi(AsAbsl(line), &port) && port > 0) ports.push_back(port);
  }
  if (!ports_run.exited || ports_run.exit_code != 0 || static_cast<int>(ports.size()) != servers) {
    return absl::InternalError(absl::StrCat("sim-free-ports: ", ports_run.output));
  }
  std::map<std::string, std::string> env = ReadEnvFile(world + "/server.env");
  env["FLEET_SIM_SPEED"] = sim_speed;

  FLEET_ASSIGN_OR_RETURN(std::unique_ptr<AgentProcess> agent,
                         AgentProcess::Start(paths.agent, dir + "/agent", {}));
  FLEET_ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> client, AgentClient::Connect(agent->port()));
  EventStreamClient& events = client->events();
  ServerReaper reaper;
  auto attempt_of = [](int gpu) { return absl::StrCat("sim-", gpu); };
  FLEET_ASSIGN_OR_RETURN(result.empty, SampleProcess(agent->pid()));
  const SteadyTime begin = std::chrono::steady_clock::now();
  for (int gpu = 0; gpu < servers; ++gpu) {
    fleet::v1::LaunchRequest launch;
    launch.set_attempt_id(attempt_of(gpu));
    launch.set_attempt_number(1);
    fleet::v1::ServerSpec* spec = launch.mutable_spec();
    spec->mutable_server()->set_gpu(gpu);
    for (const std::string& a :
         {world + "/venv/bin/python", std::string("-m"), std::string("sglang.launch_server"),
          std::string("--model-path"), world + "/models/tiny", std::string("--host"),
          std::string("127.0.0.1"), std::string("--port"), absl::StrCat(ports[gpu])}) {
      spec->add_argv(a);
    }
    spec->set_port(ports[gpu]);
    spec->mutable_env()->insert(env.begin(), env.end());
    spec->set_log_path(absl::StrCat(world, "/logs/sglang_gpu", gpu, ".log"));
    spec->mutable_readiness()->set_path("/health_generate");
    FLEET_ASSIGN_OR_RETURN(fleet::v1::LaunchResponse launched, client->Launch(launch));
    reaper.Add(launched.status().pid());
  }
  // Every server READY, or the first one that failed.
  std::string failed;
  const bool all_ready = events.Await(
      [&](const std::vector<Received>& all) {
        int ready = 0;
        for (const Received& r : all) {
          if (!r.event.has_phase()) continue;
          if (r.event.phase().state() == "READY") ++ready;
          if (r.event.phase().state() == "FAILED") {
            failed = r.event.attempt_id();
            return true;
          }
        }
        return ready == servers;
      },
      absl::Seconds(300));
  auto stop_all = [&]() -> absl::Status {
    for (int gpu = 0; gpu < servers; ++gpu) FLEET_RETURN_IF_ERROR(client->Stop(gpu));
    const bool stopped = events.Await(
        [&](const std::vector<Received>& all) {
          int n = 0;
          for (const Received& r : all)
            n += r.event.has_phase() && r.event.phase().state() == "STOPPED";
          return n == servers;
        },
        absl::Seconds(60));
    return stopped ? absl::OkStatus()
                   : absl::DeadlineExceededError("servers not STOPPED 60 s after Stop");
  };
  if (!failed.empty() || !all_ready) {
    stop_all().IgnoreError();
    return absl::InternalError(
        failed.empty() ? absl::StrCat("not all ", servers, " servers READY in 300 s")
                       : absl::StrCat("server ", failed, " FAILED; see ", world, "/logs"));
  }
  result.ready_seconds = Ms(std::chrono::steady_clock::now() - begin) / 1000;
  // A moment for the agent to finish what READY set off (the record write, the stream) before
  // the idle window opens.
  absl::SleepFor(absl::Seconds(1));
  const size_t events_before = events.size();
  FLEET_ASSIGN_OR_RETURN(result.before, SampleProcess(agent->pid()));
  // The measurement itself: nothing happens for this long.
  absl::SleepFor(absl::Milliseconds(static_cast<int64_t>(idle_seconds * 1000)));
  FLEET_ASSIGN_OR_RETURN(result.after, SampleProcess(agent->pid()));
  result.events_while_idle = events.size() - events_before;
  // For a closer look at what is resident (bench/agent/run.sh keeps the work dir's copies).
  std::ofstream(dir + "/agent.smaps") << ReadAll(absl::StrCat("/proc/", agent->pid(), "/smaps"));
  std::ofstream(dir + "/agent.status") << ReadAll(absl::StrCat("/proc/", agent->pid(), "/status"));
  result.idle_seconds = Ms(result.after.at - result.before.at) / 1000;
  FLEET_RETURN_IF_ERROR(stop_all());
  reaper.ForgetAll();
  return result;
}

// --- report

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least p% of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

std::string MachineCpu() {
  std::istringstream in(ReadAll("/proc/cpuinfo"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

int Main(int argc, char** argv) {
  Paths paths{
      .agent = fleet::testing::BuildPath("agent/fleet-agent"),
      .test_child = fleet::testing::BuildPath("tests/testing/fleet-test-child"),
      .sim_server = fleet::testing::BuildPath("tests/sim/sglang-server-sim"),
      .free_ports = fleet::testing::BuildPath("tests/sim/sim-free-ports"),
      .make_world = fleet::testing::SourcePath("tests/sim/make_sim_world.sh"),
  };
  int64_t trials = 1000;
  double idle_seconds = 60;
  int64_t servers = 8;
  std::string sim_speed = "50";
  std::string work_dir;
  std::string json_path;
  bool skip_latency = false;
  bool skip_footprint = false;
  FlagSet flags(
      "agent_bench [flags]",
      "Detection latency (log line -> provisional diagnosis at a gRPC EventBatches client) and "
      "the agent's footprint with 8 ready simulated servers, against the real "
      "fleet-agent binary.");
  flags.AddInt("trials", '\0', &trials, "detection-latency trials");
  flags.AddDouble("idle-seconds", '\0', &idle_seconds, "idle window of the footprint run", "S");
  flags.AddInt("servers", '\0', &servers, "simulated servers of the footprint run (GPUs 0..N-1)");
  flags.AddString("sim-speed", '\0', &sim_speed, "FLEET_SIM_SPEED of the simulated servers", "X");
  flags.AddString("agent", '\0', &paths.agent, "the fleet-agent binary", "PATH");
  flags.AddString("test-child", '\0', &paths.test_child, "the fleet-test-child binary", "PATH");
  flags.AddString("sim-server", '\0', &paths.sim_server, "the sglang-server-sim binary", "PATH");
  flags.AddString("free-ports", '\0', &paths.free_ports, "the sim-free-ports binary", "PATH");
  flags.AddString("make-world", '\0', &paths.make_world, "tests/sim/make_sim_world.sh", "PATH");
  flags.AddString("work-dir", '\0', &work_dir,
                  "keep logs, state and the world here (default: a temp dir, removed)", "DIR");
  flags.AddString("json", '\0', &json_path, "also write the JSON summary line here", "FILE");
  flags.AddBool("skip-latency", '\0', &skip_latency, "run the footprint only");
  flags.AddBool("skip-footprint", '\0', &skip_footprint, "run the latency trials only");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "agent_bench: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (trials < 1 || servers < 1 || servers > 64 || idle_seconds <= 0) {
    std::cerr << "agent_bench: --trials, --servers and --idle-seconds must be positive\n";
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  std::optional<fleet::testing::TempDir> temp;
  if (work_dir.empty()) {
    temp.emplace();
    work_dir = temp->path();
  }
  std::filesystem::create_directories(work_dir);

  Json report = Json::object();
  report["bench"] = "agent";
  report["cpu"] = MachineCpu();
  report["cores"] = static_cast<int64_t>(std::thread::hardware_concurrency());
  bool failed = false;

  if (!skip_latency) {
    std::printf("== detection latency: %lld trials\n", static_cast<long long>(trials));
    absl::StatusOr<LatencyResult> r = RunLatency(paths, work_dir + "/latency", trials, true);
    if (!r.ok()) {
      std::fprintf(stderr, "agent_bench: latency: %s\n", std::string(r.status().message()).c_str());
      failed = true;
    } else {
      const double p50 = Percentile(r->ms, 50), p90 = Percentile(r->ms, 90),
                   p99 = Percentile(r->ms, 99), max = Percentile(r->ms, 100), mean = Mean(r->ms);
      std::string diagnoses;
      for (const auto& [what, n] : r->diagnoses) {
        absl::StrAppend(&diagnoses, diagnoses.empty() ? "" : ", ", what, ": ", n, " trials");
      }
      std::printf("log line -> provisional diagnosis at the gRPC client (%s)\n", diagnoses.c_str());
      if (r->diagnoses.size() > 1) {
        std::printf("  WARNING: the trials were not all diagnosed alike\n");
      }
      std::printf(
          "  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms  mean %.3f ms  (%zu trials, "
          "first %.3f ms, %.1f s)\n",
          p50, p90, p99, max, mean, r->ms.size(), r->ms.front(), r->seconds);
      std::printf(
          "  of which in the agent (t0 -> the event's timestamp): p50 %.3f ms  p99 %.3f ms"
          "  max %.3f ms\n",
          Percentile(r->agent_ms, 50), Percentile(r->agent_ms, 99), Percentile(r->agent_ms, 100));
      std::printf("  agent RSS after the trials: %.1f MiB (peak %.1f MiB)\n",
                  static_cast<double>(r->rss_after_kib) / 1024,
                  static_cast<double>(r->hwm_after_kib) / 1024);
      report["trials"] = static_cast<int64_t>(r->ms.size());
      Json j1 = Json::object();
      for (const auto& [what, n] : r->diagnoses) {
        j1[what] = n;
      }
      report["diagnoses"] = std::move(j1);
      // Microseconds: integers read exactly by any consumer.
      for (auto [key, value] : std::initializer_list<std::pair<const char*, double>>{
               {"latency_p50_us", p50},
               {"latency_p90_us", p90},
               {"latency_p99_us", p99},
               {"latency_max_us", max},
               {"latency_mean_us", mean},
               {"latency_first_us", r->ms.front()},
               {"agent_stamp_p50_us", Percentile(r->agent_ms, 50)},
               {"agent_stamp_p99_us", Percentile(r->agent_ms, 99)}}) {
        report[key] = std::llround(value * 1000);
      }
      report["latency_run_ms"] = std::llround(r->seconds * 1000);
      report["rss_after_trials_kib"] = r->rss_after_kib;
    }
  }

  if (!skip_footprint && !failed) {
    std::printf("== footprint: %lld simulated servers, %.0f s idle\n",
                static_cast<long long>(servers), idle_seconds);
    absl::StatusOr<FootprintResult> r = RunFootprint(
        paths, work_dir + "/footprint", static_cast<int>(servers), idle_seconds, sim_speed);
    if (!r.ok()) {
      std::fprintf(stderr, "agent_bench: footprint: %s\n",
                   std::string(r.status().message()).c_str());
      failed = true;
    } else {
      const ProcSample& a = r->after;
      const ProcSample& b = r->before;
      const double tick_ms = 1000.0 / static_cast<double>(r->clock_ticks_per_second);
      const double cpu_ms = static_cast<double>(a.cpu_ticks - b.cpu_ticks) * tick_ms;
      uint64_t sched_ns = 0, voluntary = 0, nonvoluntary = 0;
      std::vector<std::string> busy_threads;
      for (const auto& [tid, t] : a.tasks) {
        auto old = b.tasks.find(tid);
        const ThreadSample zero;
        const ThreadSample& o = old == b.tasks.end() ? zero : old->second;
        const uint64_t dv = t.voluntary - o.voluntary, dn = t.nonvoluntary - o.nonvoluntary;
        sched_ns += t.cpu_ns - o.cpu_ns;
        voluntary += dv;
        nonvoluntary += dn;
        if (dv + dn > 0 || t.cpu_ns > o.cpu_ns) {
          busy_threads.push_back(absl::StrFormat("%s/%d: %d wake-ups, %.3f ms", t.comm, tid,
                                                 dv + dn,
                                                 static_cast<double>(t.cpu_ns - o.cpu_ns) / 1e6));
        }
      }
      const auto kib = [&](const char* key) { return a.Kib(key); };
      std::printf("all %d servers READY in %.1f s; then %.1f s idle, %llu events meanwhile\n",
                  r->servers, r->ready_seconds, r->idle_seconds,
                  static_cast<unsigned long long>(r->events_while_idle));
      std::printf(
          "  RSS %.1f MiB (peak %.1f MiB): %.1f MiB anonymous, %.1f MiB file-backed, "
          "%.1f MiB shared memory; %lld threads\n",
          static_cast<double>(kib("VmRSS")) / 1024, static_cast<double>(kib("VmHWM")) / 1024,
          static_cast<double>(kib("RssAnon")) / 1024, static_cast<double>(kib("RssFile")) / 1024,
          static_cast<double>(kib("RssShmem")) / 1024, static_cast<long long>(a.threads));
      std::printf(
          "  with no server yet (serving, before the first Launch): RSS %.1f MiB, %.1f MiB "
          "anonymous, %.1f MiB file-backed\n",
          static_cast<double>(r->empty.Kib("VmRSS")) / 1024,
          static_cast<double>(r->empty.Kib("RssAnon")) / 1024,
          static_cast<double>(r->empty.Kib("RssFile")) / 1024);
      std::printf(
          "  PSS %.1f MiB (shared pages divided among the processes mapping them), "
          "private %.1f MiB\n",
          static_cast<double>(kib("Pss")) / 1024, static_cast<double>(kib("Private")) / 1024);
      std::vector<std::pair<int64_t, std::string>> mappings;
      for (const auto& [name, k] : a.rss_by_mapping) mappings.emplace_back(k, name);
      std::sort(mappings.rbegin(), mappings.rend());
      std::printf("  largest resident mappings:\n");
      for (size_t i = 0; i < mappings.size() && i < 12; ++i) {
        std::printf("    %7.2f MiB  %s\n", static_cast<double>(mappings[i].first) / 1024,
                    mappings[i].second.c_str());
      }
      std::printf(
          "  CPU over the idle window: %.0f ms by utime+stime (%lld Hz ticks), %.3f ms by "
          "schedstat; %llu voluntary + %llu involuntary context switches (%.2f wake-ups/s)\n",
          cpu_ms, static_cast<long long>(r->clock_ticks_per_second),
          static_cast<double>(sched_ns) / 1e6, static_cast<unsigned long long>(voluntary),
          static_cast<unsigned long long>(nonvoluntary),
          static_cast<double>(voluntary + nonvoluntary) / r->idle_seconds);
      for (const std::string& t : busy_threads) std::printf("    %s\n", t.c_str());
      report["servers"] = r->servers;
      report["ready_ms"] = std::llround(r->ready_seconds * 1000);
      report["idle_ms"] = std::llround(r->idle_seconds * 1000);
      for (const char* key :
           {"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Pss", "Private"}) {
        report[absl::StrCat(key, "_kib")] = kib(key);
      }
      report["no_server_VmRSS_kib"] = r->empty.Kib("VmRSS");
      report["heap_kib"] = a.rss_by_mapping.count("[heap]") ? a.rss_by_mapping.at("[heap]") : 0;
      report["threads"] = a.threads;
      report["idle_cpu_tick_ms"] = std::llround(cpu_ms);
      report["idle_cpu_us"] = static_cast<int64_t>(sched_ns / 1000);
      report["idle_voluntary_switches"] = static_cast<int64_t>(voluntary);
      report["idle_involuntary_switches"] = static_cast<int64_t>(nonvoluntary);
      report["idle_events"] = static_cast<int64_t>(r->events_while_idle);
    }
  }
  report["ok"] = !failed;
  const std::string json = JsonText(std::move(report));
  std::printf("%s\n", json.c_str());
  if (!json_path.empty()) std::ofstream(json_path) << json << "\n";
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace fleet::bench

int main(int argc, char** argv) { return fleet::bench::Main(argc, argv); }
