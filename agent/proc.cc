#include "agent/proc.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fleet::agent {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<ProcStat> ReadProcStat(pid_t pid, const std::string& proc_root) {
  const std::string text = ReadSmallFile(absl::StrCat(proc_root, "/", pid, "/stat"));
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses; it ends at the last ')'.
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcStat s;
  s.pid = pid;
  s.comm = text.substr(open + 1, close - open - 1);
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(text).substr(close + 2), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state); field N is f[N - 3].
  if (f.size() < 20 || f[0].empty()) return std::nullopt;
  s.state = f[0][0];
  auto field = [&](int n, auto* out) { return absl::SimpleAtoi(f[n - 3], out); };
  int64_t ppid = 0, pgrp = 0, session = 0;
  if (!field(4, &ppid) || !field(5, &pgrp) || !field(6, &session) || !field(14, &s.utime) ||
      !field(15, &s.stime) || !field(22, &s.start_ticks)) {
    return std::nullopt;
  }
  int64_t cutime = 0, cstime = 0;
  if (field(16, &cutime) && cutime > 0) s.cutime = static_cast<uint64_t>(cutime);
  if (field(17, &cstime) && cstime > 0) s.cstime = static_cast<uint64_t>(cstime);
  s.ppid = static_cast<pid_t>(ppid);
  s.pgrp = static_cast<pid_t>(pgrp);
  s.session = static_cast<pid_t>(session);
  return s;
}

bool IsSameLiveProcess(pid_t pid, uint64_t start_ticks, const std::string& proc_root) {
  const std::optional<ProcStat> s = ReadProcStat(pid, proc_root);
  return s && s->start_ticks == start_ticks && s->state != 'Z' && s->state != 'X';
}

namespace {

// The processes whose session (by_group false) or process group (true) is `id`, `id` first.
std::vector<SessionProcess> ListBy(pid_t id, bool by_group, const std::string& proc_root,
                                   bool include_zombies) {
  const pid_t sid = id;
  std::vector<SessionProcess> out;
  DIR* dir = opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::optional<ProcStat> s = ReadProcStat(static_cast<pid_t>(pid), proc_root);
    if (!s || (by_group ? s->pgrp : s->session) != sid) continue;
    if (!include_zombies && (s->state == 'Z' || s->state == 'X')) continue;
    std::string cmdline = ReadSmallFile(absl::StrCat(proc_root, "/", pid, "/cmdline"));
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
    if (cmdline.size() > 256) cmdline.resize(256);
    out.push_back({*std::move(s), std::move(cmdline)});
  }
  closedir(dir);
  std::sort(out.begin(), out.end(), [sid](const SessionProcess& a, const SessionProcess& b) {
    if ((a.stat.pid == sid) != (b.stat.pid == sid)) return a.stat.pid == sid;
    return a.stat.pid < b.stat.pid;
  });
  return out;
}

uint64_t CpuTicksOf(const std::vector<SessionProcess>& processes) {
  uint64_t ticks = 0;
  for (const SessionProcess& p : processes) {
    ticks += p.stat.utime + p.stat.stime + p.stat.cutime + p.stat.cstime;
  }
  return ticks;
}

}  // namespace

std::vector<SessionProcess> ListSession(pid_t sid, const std::string& proc_root,
                                        bool include_zombies) {
  return ListBy(sid, /*by_group=*/false, proc_root, include_zombies);
}

uint64_t SessionCpuTicks(pid_t sid, const std::string& proc_root) {
  return CpuTicksOf(ListSession(sid, proc_root));
}

std::vector<SessionProcess> ListGroup(pid_t pgid, const std::string& proc_root,
                                      bool include_zombies) {
  return ListBy(pgid, /*by_group=*/true, proc_root, include_zombies);
}

uint64_t GroupCpuTicks(pid_t pgid, const std::string& proc_root) {
  return CpuTicksOf(ListGroup(pgid, proc_root));
}

}  // namespace fleet::agent
