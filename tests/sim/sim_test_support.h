// Helpers for the tests of the simulated world: building a world with make_sim_world.sh in a
// test's temp dir, running the simulated server (to its end, or in the background with waits on
// conditions, never on fixed sleeps), a free port, a tiny HTTP client, and classifying a log with
// the real diagnosis engine.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/diagnosis/diagnosis.h"
#include "tests/testing/subprocess.h"

namespace fleet::sim::testing {

using Env = std::map<std::string, std::string>;

// A world made by tests/sim/make_sim_world.sh under `dir`.
class SimWorld {
 public:
  // `state` is "seed" or "fixed"; `breaks` are seed problems put back into a fixed world
  // (loader_path nvcc ninja headers ptxas link_stub).
  static absl::StatusOr<SimWorld> Create(const std::string& dir, const std::string& state,
                                         const std::vector<std::string>& breaks = {});

  const std::string& root() const { return root_; }
  std::string Path(const std::string& relative) const { return root_ + "/" + relative; }
  std::string CudaDir() const;
  std::string Model() const { return Path("models/tiny"); }
  // The world's device dir with its GPU device nodes (sim-world.conf's dev_root): "" when the
  // world was made without root, which mknod needs.
  std::string DevRoot() const;

  // server.env as a map, plus what a test run needs: GPU `gpu`, speed `speed`.
  Env ServerEnv(int gpu = 0, double speed = 500) const;
  // `python -m sglang.launch_server` on the world's model, host 127.0.0.1, port `port`.
  std::vector<std::string> ServerArgv(int port) const;
  // `vllm serve` on the world's model, host 127.0.0.1, port `port`.
  std::vector<std::string> VllmArgv(int port) const;

  // The world's pip (pip-sim) and apt-get (apt-get-sim), output in the result.
  absl::StatusOr<fleet::testing::RunResult> Pip(const std::vector<std::string>& args) const;
  absl::StatusOr<fleet::testing::RunResult> AptGet(const std::vector<std::string>& args) const;

 private:
  explicit SimWorld(std::string root) : root_(std::move(root)) {}
  absl::StatusOr<fleet::testing::RunResult> RunTool(const std::string& tool,
                                                    const std::vector<std::string>& args) const;

  std::string root_;
};

struct ExitInfo {
  bool exited = false;  // false: killed by `signal`
  int exit_code = -1;
  int signal = 0;
};

// A process started in its own process group with an explicit environment, stdout and stderr
// appended to a log file. The destructor kills the group and reaps the process if still running.
class BackgroundProcess {
 public:
  static absl::StatusOr<std::unique_ptr<BackgroundProcess>> Start(
      const std::vector<std::string>& argv, const Env& env, const std::string& log_path);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const { return fleet::testing::ReadFile(log_path_); }

  // Waits until `holds(log)` is true (re-checked whenever the log changes), or the process has
  // exited, or `timeout` passed. DeadlineExceeded / FailedPrecondition (exited) say which.
  absl::Status WaitForLog(const std::function<bool(const std::string&)>& holds,
                          std::chrono::milliseconds timeout);
  // Waits until `holds()` is true, re-checking every `every` (for conditions with no event to
  // wait on, like CPU time), or the process has exited, or `timeout` passed.
  absl::Status WaitUntil(const std::function<bool()>& holds, std::chrono::milliseconds timeout,
                         std::chrono::milliseconds every = std::chrono::milliseconds(20));
  // Waits for the process to exit (at most `timeout`) and reaps it.
  absl::StatusOr<ExitInfo> Wait(std::chrono::milliseconds timeout);
  // Sends `sig` to the process (not its group) and waits for its exit.
  absl::StatusOr<ExitInfo> Stop(int sig, std::chrono::milliseconds timeout);
  // Whether any process of its process group is alive (children included).
  bool GroupAlive() const;
  // CPU time (user + system, seconds) of the process's children that are alive, from /proc.
  double ChildrenCpuSeconds() const;

 private:
  BackgroundProcess(pid_t pid, int pidfd, std::string log_path)
      : pid_(pid), pidfd_(pidfd), log_path_(std::move(log_path)) {}

  pid_t pid_;
  int pidfd_;
  std::string log_path_;
  bool reaped_ = false;
};

// A TCP port of 127.0.0.1 that was free a moment ago, outside the ephemeral range
// (tests/sim/port_pick.h), for a server the test starts to bind.
absl::StatusOr<int> FreePort();

// A listening socket on 127.0.0.1, port chosen by the kernel; closed on destruction.
class HeldPort {
 public:
  static absl::StatusOr<std::unique_ptr<HeldPort>> Listen();
  ~HeldPort();
  int port() const { return port_; }

 private:
  HeldPort(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

struct HttpReply {
  int status = 0;
  std::string body;
};
// One HTTP/1.1 request to 127.0.0.1:port (Connection: close), with a deadline.
absl::StatusOr<HttpReply> HttpRequest(int port, const std::string& method, const std::string& path,
                                      const std::string& body = "");

// The log at `path` through the real classifier (built-in catalogue), as `fleetctl explain` does.
absl::StatusOr<fleet::diagnosis::Diagnosis> Classify(const std::string& path);

// Whether `facts` has `value` among the values of `key`.
bool HasFact(const fleet::diagnosis::Facts& facts, const std::string& key,
             const std::string& value);

}  // namespace fleet::sim::testing
