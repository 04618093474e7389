#include "tests/sim/sim_test_support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/errno_status.h"
#include "common/diagnosis/log_file.h"
#include "common/diagnosis/signature_matcher.h"
#include "tests/sim/port_pick.h"

namespace fleet::sim::testing {
namespace {

using Clock = std::chrono::steady_clock;

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

ExitInfo Decode(int status) {
  ExitInfo info;
  if (WIFEXITED(status)) {
    info.exited = true;
    info.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    info.signal = WTERMSIG(status);
  }
  return info;
}

}  // namespace

absl::StatusOr<SimWorld> SimWorld::Create(const std::string& dir, const std::string& state,
                                          const std::vector<std::string>& breaks) {
  std::vector<std::string> argv = {
      "bash",     fleet::testing::SourcePath("tests/sim/make_sim_world.sh"), dir, "--state", state,
      "--server", fleet::testing::BuildPath("tests/sim/sglang-server-sim")};
  for (const std::string& b : breaks) {
    argv.push_back("--break");
    argv.push_back(b);
  }
  const std::string out = absl::StrCat(dir, ".make_sim_world.out");
  absl::StatusOr<fleet::testing::RunResult> ran = fleet::testing::Run(argv, {.output_path = out});
  if (!ran.ok()) return ran.status();
  if (!ran->exited || ran->exit_code != 0) {
    return absl::InternalError(absl::StrCat("make_sim_world.sh failed: ", ran->output));
  }
  return SimWorld(dir);
}

std::string SimWorld::CudaDir() const {
  return Path("venv/lib/python3.12/site-packages/nvidia/cu13");
}

std::string SimWorld::DevRoot() const {
  std::istringstream in(fleet::testing::ReadFile(Path("sim-world.conf")));
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "dev_root=")) return line.substr(line.find('=') + 1);
  }
  return "";
}

Env SimWorld::ServerEnv(int gpu, double speed) const {
  Env env;
  std::istringstream in(fleet::testing::ReadFile(Path("server.env")));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  env["CUDA_VISIBLE_DEVICES"] = absl::StrCat(gpu);
  env["FLEET_SIM_SPEED"] = absl::StrCat(speed);
  return env;
}

std::vector<std::string> SimWorld::ServerArgv(int port) const {
  return {Path("venv/bin/python"),
          "-m",
          "sglang.launch_server",
          "--model-path",
          Model(),
          "--host",
          "127.0.0.1",
          "--port",
          absl::StrCat(port)};
}

std::vector<std::string> SimWorld::VllmArgv(int port) const {
  return {Path("venv/bin/vllm"), "serve",  Model(),           "--host",
          "127.0.0.1",           "--port", absl::StrCat(port)};
}

absl::StatusOr<fleet::testing::RunResult> SimWorld::RunTool(
    const std::string& tool, const std::vector<std::string>& args) const {
  static std::atomic<int> calls{0};
  std::vector<std::string> argv = {tool};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = Path(absl::StrCat("logs/tool.", calls++, ".out"));
  return fleet::testing::Run(argv, {.output_path = out});
}

absl::StatusOr<fleet::testing::RunResult> SimWorld::Pip(
    const std::vector<std::string>& args) const {
  return RunTool(Path("venv/bin/pip"), args);
}

absl::StatusOr<fleet::testing::RunResult> SimWorld::AptGet(
    const std::vector<std::string>& args) const {
  return RunTool(Path("bin/apt-get"), args);
}

absl::StatusOr<std::unique_ptr<BackgroundProcess>> BackgroundProcess::Start(
    const std::vector<std::string>& argv, const Env& env, const std::string& log_path) {
  // The log exists before the process does, so a watch on it can start at once.
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", log_path));
  close(log_fd);
  absl::StatusOr<pid_t> spawned =
      fleet::testing::Spawn(argv, {.env = env, .output_path = log_path});
  if (!spawned.ok()) return spawned.status();
  const pid_t pid = *spawned;
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int err = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return ErrnoToStatus(err, "pidfd_open");
  }
  return std::unique_ptr<BackgroundProcess>(new BackgroundProcess(pid, pidfd, log_path));
}

BackgroundProcess::~BackgroundProcess() {
  kill(-pid_, SIGKILL);
  if (!reaped_) waitpid(pid_, nullptr, 0);
  close(pidfd_);
}

absl::Status BackgroundProcess::WaitForLog(const std::function<bool(const std::string&)>& holds,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const int inotify = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (inotify < 0) return ErrnoToStatus(errno, "inotify_init1");
  if (inotify_add_watch(inotify, log_path_.c_str(), IN_MODIFY) < 0) {
    const int err = errno;
    close(inotify);
    return ErrnoToStatus(err, absl::StrCat("watch ", log_path_));
  }
  absl::Status result = absl::OkStatus();
  for (;;) {
    // Read after arming the watch: a write between the two is seen either way.
    if (holds(Log())) break;
    pollfd fds[2] = {{inotify, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    if (fds[1].fd >= 0 && poll(&fds[1], 1, 0) > 0) {
      result = holds(Log()) ? absl::OkStatus()
                            : absl::FailedPreconditionError("the process exited first");
      break;
    }
    const int wait_ms = MillisLeft(deadline);
    if (wait_ms == 0) {
      result = absl::DeadlineExceededError("the log never showed what was awaited");
      break;
    }
    if (poll(fds, 2, wait_ms) < 0 && errno != EINTR) {
      result = ErrnoToStatus(errno, "poll");
      break;
    }
    char drain[4096];
    while (read(inotify, drain, sizeof(drain)) > 0) {
    }
  }
  close(inotify);
  return result;
}

absl::Status BackgroundProcess::WaitUntil(const std::function<bool()>& holds,
                                          std::chrono::milliseconds timeout,
                                          std::chrono::milliseconds every) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (holds()) return absl::OkStatus();
    const int wait_ms = std::min(MillisLeft(deadline), static_cast<int>(every.count()));
    if (wait_ms == 0) return absl::DeadlineExceededError("the condition never held");
    // The process's exit ends the wait early.
    pollfd p{pidfd_, POLLIN, 0};
    if (poll(&p, 1, wait_ms) > 0) {
      return holds() ? absl::OkStatus() : absl::FailedPreconditionError("the process exited first");
    }
  }
}

absl::StatusOr<ExitInfo> BackgroundProcess::Wait(std::chrono::milliseconds timeout) {
  if (reaped_) return absl::FailedPreconditionError("already reaped");
  pollfd p{pidfd_, POLLIN, 0};
  int rc = 0;
  const auto deadline = Clock::now() + timeout;
  while ((rc = poll(&p, 1, MillisLeft(deadline))) < 0 && errno == EINTR) {
  }
  if (rc == 0) return absl::DeadlineExceededError("the process did not exit in time");
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, "waitpid");
  }
  reaped_ = true;
  return Decode(status);
}

absl::StatusOr<ExitInfo> BackgroundProcess::Stop(int sig, std::chrono::milliseconds timeout) {
  if (kill(pid_, sig) != 0) return ErrnoToStatus(errno, "kill");
  return Wait(timeout);
}

bool BackgroundProcess::GroupAlive() const { return kill(-pid_, 0) == 0; }

double BackgroundProcess::ChildrenCpuSeconds() const {
  double seconds = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  while (const dirent* entry = readdir(proc)) {
    int child = 0;
    if (!absl::SimpleAtoi(entry->d_name, &child)) continue;
    const std::string stat = fleet::testing::ReadFile(absl::StrCat("/proc/", child, "/stat"));
    // Fields after the command name, which ends with the last ')': state ppid ... utime stime.
    const size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close_paren + 2), ' ', absl::SkipEmpty());
    int ppid = 0;
    double utime = 0, stime = 0;
    if (fields.size() < 13 || !absl::SimpleAtoi(fields[1], &ppid) || ppid != pid_ ||
        !absl::SimpleAtod(fields[11], &utime) || !absl::SimpleAtod(fields[12], &stime)) {
      continue;
    }
    seconds += (utime + stime) / ticks;
  }
  closedir(proc);
  return seconds;
}

absl::StatusOr<int> FreePort() { return ConsecutiveFreePorts(1); }

absl::StatusOr<std::unique_ptr<HeldPort>> HeldPort::Listen() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoToStatus(err, "bind 127.0.0.1:0");
  }
  return std::unique_ptr<HeldPort>(new HeldPort(fd, ntohs(addr.sin_port)));
}

HeldPort::~HeldPort() { close(fd_); }

absl::StatusOr<HttpReply> HttpRequest(int port, const std::string& method, const std::string& path,
                                      const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  timeval deadline{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof(deadline));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &deadline, sizeof(deadline));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoToStatus(err, absl::StrCat("connect 127.0.0.1:", port));
  }
  const std::string request = absl::StrCat(
      method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
      "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string response;
  char buf[4096];
  ssize_t n = 0;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  HttpReply reply;
  const size_t space = response.find(' ');
  const size_t header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 ", 0) != 0 || space == std::string::npos ||
      header_end == std::string::npos ||
      !absl::SimpleAtoi(response.substr(space + 1, 3), &reply.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP response: ", response));
  }
  reply.body = response.substr(header_end + 4);
  return reply;
}

absl::StatusOr<fleet::diagnosis::Diagnosis> Classify(const std::string& path) {
  return fleet::diagnosis::ClassifyFile(path, fleet::diagnosis::SignatureMatcher::Builtin());
}

bool HasFact(const fleet::diagnosis::Facts& facts, const std::string& key,
             const std::string& value) {
  for (const auto& [k, values] : facts.entries()) {
    if (k != key) continue;
    for (const std::string& v : values) {
      if (v == value) return true;
    }
  }
  return false;
}

}  // namespace fleet::sim::testing
