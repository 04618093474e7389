#include "agent/gpu_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <functional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/proc.h"
#include "common/base/clock.h"
#include "common/base/pidfd.h"
#include "common/base/unique_fd.h"

namespace fleet::agent {
namespace {

// Bounds on what outside input can make the guard hold.
constexpr size_t kMaxProcesses = 64;  // holders, leftovers, apps kept per check
constexpr size_t kMaxNameBytes = 64;

bool IsDead(const ProcStat& s) { return s.state == 'Z' || s.state == 'X'; }

std::string Bounded(absl::string_view s) {
  std::string out(s.substr(0, kMaxNameBytes));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return out;
}

// A number field of nvidia-smi's csv: "70123", " 70123 MiB", "[N/A]" (-1).
bool ParseField(absl::string_view field, int64_t* out) {
  field = absl::StripAsciiWhitespace(field);
  if (absl::ConsumeSuffix(&field, "MiB")) field = absl::StripAsciiWhitespace(field);
  if (field == "[N/A]" || field == "N/A" || field == "[Not Supported]") {
    *out = -1;
    return true;
  }
  return absl::SimpleAtoi(field, out);
}

std::string Describe(const GpuProcess& p) {
  return absl::StrCat("pid ", p.pid, " (", p.comm.empty() ? "?" : p.comm, ")");
}

// Whether `previous`'s session is still the one the agent recorded: its id is the leader's pid,
// which the kernel does not give to another process while any member of the session lives. A
// leader that is there must be the recorded one (same start time).
bool SessionIsStillPrevious(const PreviousServer& previous, const std::string& proc_root) {
  if (previous.session <= 1) return false;
  const std::optional<ProcStat> leader = ReadProcStat(previous.session, proc_root);
  return !leader || leader->start_ticks == previous.start_ticks;
}

}  // namespace

namespace {

// The live processes under `proc_root` (this one left out) for which `match(pid)` holds, at most
// kMaxProcesses, by pid.
std::vector<GpuProcess> ScanProcesses(const std::string& proc_root,
                                      const std::function<bool(pid_t)>& match) {
  std::vector<GpuProcess> out;
  DIR* dir = opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(dir)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid <= 0 || pid > INT_MAX || pid == self) continue;
    if (!match(static_cast<pid_t>(pid))) continue;
    const std::optional<ProcStat> s = ReadProcStat(static_cast<pid_t>(pid), proc_root);
    if (!s || IsDead(*s)) continue;
    out.push_back({s->pid, s->start_ticks, s->session, Bounded(s->comm)});
    if (out.size() >= kMaxProcesses) break;
  }
  closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const GpuProcess& a, const GpuProcess& b) { return a.pid < b.pid; });
  return out;
}

// Whether a descriptor of `pid` links to `device`.
bool HoldsDevice(const std::string& proc_root, pid_t pid, const std::string& device) {
  const std::string fd_dir = absl::StrCat(proc_root, "/", pid, "/fd");
  DIR* fds = opendir(fd_dir.c_str());
  if (fds == nullptr) return false;  // gone, or a kernel thread
  bool holds = false;
  while (dirent* f = readdir(fds)) {
    if (f->d_name[0] == '.') continue;
    char target[PATH_MAX];
    const ssize_t n =
        readlink(absl::StrCat(fd_dir, "/", f->d_name).c_str(), target, sizeof(target) - 1);
    if (n > 0 && absl::string_view(target, static_cast<size_t>(n)) == device) {
      holds = true;
      break;
    }
  }
  closedir(fds);
  return holds;
}

}  // namespace

std::vector<GpuProcess> FindDeviceHolders(const std::string& proc_root, const std::string& device) {
  return ScanProcesses(proc_root, [&](pid_t pid) { return HoldsDevice(proc_root, pid, device); });
}

namespace {

// Whether the environment of `pid` holds kMarkAgent=owner and kMarkServer=server, and
// kMarkAttempt=attempt unless `attempt` is empty (read up to 1 MiB).
bool CarriesMarks(const std::string& proc_root, pid_t pid, const std::string& owner,
                  const std::string& server, const std::string& attempt) {
  const int fd = open(absl::StrCat(proc_root, "/", pid, "/environ").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  constexpr size_t kMaxEnviron = 1 << 20;
  std::string env;
  char buf[16384];
  while (env.size() < kMaxEnviron) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    env.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const std::string agent = absl::StrCat(kMarkAgent, "=", owner);
  const std::string server_mark = absl::StrCat(kMarkServer, "=", server);
  const std::string attempt_mark = absl::StrCat(kMarkAttempt, "=", attempt);
  bool agent_seen = false;
  bool server_seen = false;
  bool attempt_seen = attempt.empty();
  for (absl::string_view var : absl::StrSplit(env, '\0')) {
    agent_seen = agent_seen || var == agent;
    server_seen = server_seen || var == server_mark;
    attempt_seen = attempt_seen || var == attempt_mark;
  }
  return agent_seen && server_seen && attempt_seen;
}

// The real uid of `pid` (the first field of status's Uid line), or -1.
int64_t RealUid(const std::string& proc_root, pid_t pid) {
  const int fd = open(absl::StrCat(proc_root, "/", pid, "/status").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(buf, static_cast<size_t>(n)), '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    const std::vector<absl::string_view> ids =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t uid = -1;
    return !ids.empty() && absl::SimpleAtoi(ids[0], &uid) ? uid : -1;
  }
  return -1;
}

}  // namespace

std::vector<GpuProcess> FindMarkedProcesses(const std::string& proc_root, const std::string& owner,
                                            const std::string& server, uid_t uid,
                                            const std::string& attempt) {
  if (owner.empty() || server.empty()) return {};
  return ScanProcesses(proc_root, [&](pid_t pid) {
    return CarriesMarks(proc_root, pid, owner, server, attempt) &&
           RealUid(proc_root, pid) == static_cast<int64_t>(uid);
  });
}

absl::StatusOr<int64_t> ParseMemoryUsed(absl::string_view csv) {
  const absl::string_view line = csv.substr(0, csv.find('\n'));
  const std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
  int64_t used = 0;
  if (fields.empty() || !ParseField(fields[0], &used) || used < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvidia-smi memory.used: not a number: '", Bounded(line), "'"));
  }
  return used;
}

std::vector<ComputeApp> ParseComputeApps(absl::string_view csv) {
  std::vector<ComputeApp> out;
  for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != 3) continue;
    ComputeApp app;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(f[0]), &app.pid) || app.pid <= 0) continue;
    app.name = Bounded(absl::StripAsciiWhitespace(f[1]));
    if (!ParseField(f[2], &app.used_mib)) app.used_mib = -1;
    out.push_back(std::move(app));
    if (out.size() >= kMaxProcesses) break;
  }
  return out;
}

std::string GpuCheck::Summary() const {
  std::vector<std::string> parts;
  if (used_mib >= 0) {
    parts.push_back(absl::StrCat("gpu ", gpu, ": ", used_mib, " MiB used (free below ",
                                 threshold_mib, " MiB)"));
  } else {
    parts.push_back(absl::StrCat("gpu ", gpu, ": memory not known"));
  }
  if (!apps.empty()) {
    std::vector<std::string> held;
    for (const ComputeApp& a : apps) {
      held.push_back(absl::StrCat(
          "pid ", a.pid, " (", a.name.empty() ? "?" : a.name,
          a.used_mib >= 0 ? absl::StrCat(", ", a.used_mib, " MiB") : std::string(), ")"));
    }
    parts.push_back(absl::StrCat("held by ", absl::StrJoin(held, ", "),
                                 " (nvidia-smi's pids: the host's inside a container; "
                                 "not signalled)"));
  } else if (!free && used_mib >= 0) {
    parts.push_back("nvidia-smi lists no process on it (another container's, or freeing)");
  }
  if (!others.empty()) {
    std::vector<std::string> held;
    for (const GpuProcess& p : others) {
      held.push_back(absl::StrCat(Describe(p), ", session ", p.session));
    }
    parts.push_back(absl::StrCat(device, " open in the container by ", absl::StrJoin(held, ", "),
                                 " (not the server's: not signalled)"));
  }
  if (!reclaimed.empty()) {
    std::vector<std::string> killed;
    for (const GpuProcess& p : reclaimed) killed.push_back(Describe(p));
    parts.push_back(
        absl::StrCat("killed the previous server's leftovers: ", absl::StrJoin(killed, ", ")));
  }
  if (!orphans.empty()) {
    std::vector<std::string> killed;
    for (const GpuProcess& p : orphans) killed.push_back(Describe(p));
    parts.push_back(absl::StrCat("killed servers of this agent's that its record had lost (",
                                 kMarkAgent, " and ", kMarkServer,
                                 " in their environment): ", absl::StrJoin(killed, ", ")));
  }
  if (!stuck.empty()) {
    std::vector<std::string> left;
    for (const GpuProcess& p : stuck) left.push_back(Describe(p));
    parts.push_back(absl::StrCat("still dying after SIGKILL: ", absl::StrJoin(left, ", ")));
  }
  for (const std::string& n : notes) parts.push_back(n);
  return absl::StrJoin(parts, "; ");
}

GpuGuard::GpuGuard(GpuGuardOptions options, CommandRunner* runner, const Clock* clock)
    : options_(std::move(options)), runner_(runner), clock_(clock) {}

GpuGuard::~GpuGuard() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool GpuGuard::Reclaim(const GpuProcess& p, const std::function<bool(const ProcStat&)>& verify,
                       bool* gone) {
  *gone = false;
  UniqueFd pidfd(PidfdOpen(p.pid));
  if (!pidfd.valid()) {
    *gone = errno == ESRCH;
    return *gone;
  }
  // Verified after the pidfd is open: it pins the process, so the one checked is the one killed.
  const std::optional<ProcStat> s = ReadProcStat(p.pid, options_.proc_root);
  if (!s) {
    *gone = true;
    return true;
  }
  if (s->start_ticks != p.start_ticks || !verify(*s)) return false;
  if (!IsDead(*s) && PidfdSendSignal(pidfd.get(), SIGKILL) != 0 && errno != ESRCH) return false;
  // The pidfd is readable once the process has exited.
  pollfd pfd{pidfd.get(), POLLIN, 0};
  const absl::Time deadline = fleet::SteadyNow() + options_.reap_timeout;
  int rc = 0;
  while (true) {
    const int64_t ms =
        std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - fleet::SteadyNow()));
    rc = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    if (rc < 0 && errno == EINTR) continue;
    break;
  }
  if (rc <= 0) return false;
  // The agent is the container's subreaper: orphans of the server are its children.
  if (s->ppid == getpid()) {
    while (waitpid(p.pid, nullptr, WNOHANG) < 0 && errno == EINTR) {
    }
  }
  *gone = true;
  return true;
}

GpuCheck GpuGuard::Check(const GpuRequest& request) {
  const std::vector<int32_t> gpus =
      request.gpus.empty() ? std::vector<int32_t>{request.gpu} : request.gpus;
  GpuCheck merged = CheckOne(request, gpus.front());
  for (size_t i = 1; i < gpus.size(); ++i) {
    GpuCheck one = CheckOne(request, gpus[i]);
    for (auto [from, to] : {std::pair{&one.reclaimed, &merged.reclaimed},
                            {&one.orphans, &merged.orphans},
                            {&one.others, &merged.others},
                            {&one.stuck, &merged.stuck}}) {
      to->insert(to->end(), from->begin(), from->end());
    }
    merged.notes.insert(merged.notes.end(), one.notes.begin(), one.notes.end());
    if (one.free) continue;
    if (merged.free) {
      // The first busy GPU is the one the summary names, with its holders.
      merged.gpu = one.gpu;
      merged.used_mib = one.used_mib;
      merged.device = one.device;
      merged.apps = std::move(one.apps);
      merged.free = false;
    } else {
      merged.notes.push_back(
          absl::StrCat("gpu ", one.gpu, " is busy too: ", one.used_mib, " MiB used"));
    }
  }
  return merged;
}

GpuCheck GpuGuard::CheckOne(const GpuRequest& request, int32_t gpu) {
  GpuCheck check;
  check.gpu = gpu;
  check.threshold_mib = options_.free_threshold_mib;
  Command query;
  query.argv =
      request.nvidia_smi.empty() ? std::vector<std::string>{"nvidia-smi"} : request.nvidia_smi;
  query.env = request.env;
  query.timeout = options_.nvidia_smi_timeout;
  const size_t prefix = query.argv.size();
  // Runs nvidia-smi with `args`; its output, or a note saying why there is none.
  auto smi = [&](std::vector<std::string> args, bool quiet = false) -> std::optional<std::string> {
    query.argv.resize(prefix);
    for (std::string& a : args) query.argv.push_back(std::move(a));
    absl::StatusOr<CommandResult> r = runner_->Run(query);
    if (!r.ok()) {
      check.notes.push_back(absl::StrCat("nvidia-smi: ", r.status().message()));
      return std::nullopt;
    }
    if (!r->ok()) {
      if (quiet) return std::nullopt;
      std::string tail = r->output.substr(0, r->output.find('\n'));
      check.notes.push_back(absl::StrCat("nvidia-smi ", query.argv[prefix], ": ",
                                         r->timed_out ? "timed out"
                                         : r->exited  ? absl::StrCat("exit ", r->exit_code)
                                                      : absl::StrCat("signal ", r->signal),
                                         tail.empty() ? "" : absl::StrCat(": ", Bounded(tail))));
      return std::nullopt;
    }
    return r->output;
  };
  const std::string index = absl::StrCat(gpu);
  auto memory_used = [&]() -> int64_t {
    std::optional<std::string> out =
        smi({"--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", index});
    if (!out) return -1;
    absl::StatusOr<int64_t> used = ParseMemoryUsed(*out);
    if (!used.ok()) {
      check.notes.push_back(std::string(used.status().message()));
      return -1;
    }
    return *used;
  };

  // The device node: /dev/nvidiaN is named by the GPU's minor number, which need not be its
  // index. Drivers that do not know the field (an H200's 580 refused it: "not a valid field to
  // query") leave the index, quietly: it is the minor number on every machine seen so far.
  int64_t minor = gpu;
  if (std::optional<std::string> out =
          smi({"--query-gpu=minor_number", "--format=csv,noheader,nounits", "-i", index}, true)) {
    int64_t m = -1;
    const absl::string_view first = absl::string_view(*out).substr(0, out->find('\n'));
    if (ParseField(first, &m) && m >= 0 && m < 4096) minor = m;
  }
  check.device = absl::StrReplaceAll(options_.device_pattern, {{"%d", absl::StrCat(minor)}});

  // Leftovers inside the container: the previous server's session, and the device's holders.
  const PreviousServer& previous = request.previous;
  const bool session_ours = SessionIsStillPrevious(previous, options_.proc_root);
  std::map<pid_t, GpuProcess> ours;
  if (session_ours) {
    for (const SessionProcess& p : ListSession(previous.session, options_.proc_root)) {
      if (p.stat.start_ticks < previous.start_ticks) continue;
      ours[p.stat.pid] = {p.stat.pid, p.stat.start_ticks, p.stat.session, Bounded(p.stat.comm)};
      if (ours.size() >= kMaxProcesses) break;
    }
  }
  // The agent's own servers on this GPU that its record lost: marked, of its uid.
  std::map<pid_t, GpuProcess> orphans;
  for (GpuProcess& m :
       FindMarkedProcesses(options_.proc_root, request.owner, request.server, geteuid())) {
    if (ours.count(m.pid) == 0) orphans.emplace(m.pid, std::move(m));
  }
  for (GpuProcess& h : FindDeviceHolders(options_.proc_root, check.device)) {
    if (session_ours && h.session == previous.session && h.start_ticks >= previous.start_ticks) {
      ours.emplace(h.pid, h);
    } else if (h.pid != getpid() && orphans.count(h.pid) == 0) {
      check.others.push_back(std::move(h));
    }
  }
  const auto still_previous = [&](const ProcStat& s) {
    return s.session == previous.session && s.start_ticks >= previous.start_ticks &&
           SessionIsStillPrevious(previous, options_.proc_root);
  };
  const auto still_marked = [&](const ProcStat& s) {
    return CarriesMarks(options_.proc_root, s.pid, request.owner, request.server, "");
  };
  for (const auto& [pid, p] : ours) {
    bool gone = false;
    if (Reclaim(p, still_previous, &gone)) {
      if (gone) check.reclaimed.push_back(p);
    } else if (!gone) {
      check.stuck.push_back(p);
    }
  }
  for (const auto& [pid, p] : orphans) {
    bool gone = false;
    if (Reclaim(p, still_marked, &gone)) {
      if (gone) check.orphans.push_back(p);
    } else if (!gone) {
      check.stuck.push_back(p);
    }
  }

  check.used_mib = memory_used();
  check.free = check.used_mib < 0 || check.used_mib < options_.free_threshold_mib;
  if (check.used_mib < 0) check.notes.push_back("memory not checked: launching anyway");
  if (!check.free) {
    if (std::optional<std::string> out = smi({"--query-compute-apps=pid,process_name,used_memory",
                                              "--format=csv,noheader,nounits", "-i", index})) {
      check.apps = ParseComputeApps(*out);
    }
  }
  return check;
}

void GpuGuard::SetListener(Listener listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = std::move(listener);
}

void GpuGuard::Submit(GpuRequest request, bool checked_now) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  const int32_t gpu = request.gpu;
  waiting_[gpu] =
      Waiting{std::move(request), now, checked_now ? now + options_.recheck_interval : now};
  ++generation_;
}

void GpuGuard::Cancel(int32_t gpu, const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = waiting_.find(gpu);
  if (it == waiting_.end() || it->second.request.key != key) return;
  waiting_.erase(it);
  ++generation_;
}

absl::Time GpuGuard::Step() {
  std::vector<Waiting> due;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (const auto& [gpu, w] : waiting_) {
      if (w.next_check <= now) due.push_back(w);
    }
  }
  for (const Waiting& w : due) {
    const GpuCheck check = Check(w.request);
    const absl::Time now = clock_->Now();
    Verdict verdict = Verdict::kWaiting;
    if (check.free) {
      verdict = Verdict::kFree;
    } else if (now - w.since >= options_.max_wait) {
      verdict = Verdict::kGaveUp;
    }
    {
      absl::MutexLock lock(&mu_);
      auto it = waiting_.find(w.request.gpu);
      // Cancelled or replaced while it was checked: the answer is nobody's.
      if (it == waiting_.end() || it->second.request.key != w.request.key) continue;
      if (verdict == Verdict::kWaiting) {
        it->second.next_check = now + options_.recheck_interval;
      } else {
        waiting_.erase(it);
      }
    }
    absl::MutexLock lock(&listener_mu_);
    if (listener_) listener_(w.request, check, verdict);
  }
  absl::MutexLock lock(&mu_);
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [gpu, w] : waiting_) next = std::min(next, w.next_check);
  return next;
}

void GpuGuard::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void GpuGuard::Loop() {
  while (true) {
    const absl::Time next = Step();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    const uint64_t generation = generation_;
    // Until the next check is due, or a request comes or goes, or the guard stops.
    const absl::Duration wait =
        std::clamp(next - clock_->Now(), absl::ZeroDuration(), absl::Minutes(1));
    struct Seen {
      GpuGuard* guard;
      uint64_t generation;
    } seen{this, generation};
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Seen* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->guard->mu_) {
                               return s->guard->stopping_ || s->guard->generation_ != s->generation;
                             },
                             &seen),
                         wait);
    if (stopping_) return;
  }
}

}  // namespace fleet::agent
