#include "daemon/remote/agent_bootstrap.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/base/clock.h"
#include "common/base/spawn.h"
#include "common/base/string_view.h"

namespace fleet::daemon {
namespace {

// How long one health check after a start waits for the agent's channel to connect; and the
// check of an agent found up to date (a bootstrap after a lost stream reuses a channel in
// TRANSIENT_FAILURE: a check failing fast there would miss an agent systemd has restarted, and
// restart it again).
constexpr absl::Duration kHealthWait = absl::Seconds(2);
constexpr absl::Duration kFoundAgentWait = absl::Seconds(1);

// The first line of `binary --version`, run here (no shell).
absl::StatusOr<std::string> LocalVersion(const std::string& binary) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  SpawnSpec spec;
  spec.argv = {binary, "--version"};
  spec.out = SpawnStream::Fd(out[1]);
  const absl::StatusOr<pid_t> pid = SpawnProcess(spec);
  close(out[1]);
  if (!pid.ok()) {
    close(out[0]);
    return absl::FailedPreconditionError(
        absl::StrCat(binary, " --version failed: ", pid.status().message()));
  }
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  if (waitpid(*pid, &status, 0) != *pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(binary, " --version failed"));
  }
  const size_t eol = text.find('\n');
  return std::string(absl::StripAsciiWhitespace(text.substr(0, eol)));
}

std::string FirstLine(const std::string& text) {
  return std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
}

// Runs the steps of one bootstrap, each error prefixed with where and which step.
class Steps {
 public:
  Steps(CommandRunner& host, const BootstrapSpec& spec, BootstrapResult* result)
      : host_(host), spec_(spec), result_(result) {}

  absl::Status Fail(std::string_view step, absl::string_view detail) const {
    return absl::UnavailableError(absl::StrCat("host ", spec_.host, ", container ", spec_.ctid,
                                               ": agent bootstrap, step ", AsAbsl(step), ": ",
                                               detail));
  }

  void Enter(std::string_view step) {
    if (result_->steps.empty() || result_->steps.back() != step) {
      Close();
      result_->steps.emplace_back(step);
      started_ = fleet::SteadyNow();
    }
  }

  // The current step's time, once it ended.
  void Close() {
    if (result_->step_times.size() < result_->steps.size()) {
      result_->step_times.push_back(fleet::SteadyNow() - started_);
    }
  }

  // A command on the host; a non-zero exit is the step's failure (with its stderr).
  absl::StatusOr<CommandResult> Run(std::string_view step, const std::vector<std::string>& argv,
                                    std::string_view stdin_data = {}, bool check = true) {
    Enter(step);
    absl::StatusOr<CommandResult> r = host_.Run(argv, stdin_data, absl::ZeroDuration());
    if (!r.ok()) return Fail(step, r.status().message());
    if (check && r->exit_status != 0) {
      std::string err = FirstLine(r->err.empty() ? r->out : r->err);
      return Fail(step,
                  absl::StrCat(argv[0] == "pct" && argv.size() > 6 ? argv[6] : argv[0], " exited ",
                               r->exit_status,
                               r->exit_signal.empty() ? "" : " (signal " + r->exit_signal + ")",
                               err.empty() ? "" : ": " + err));
    }
    return r;
  }

  // A command inside the container (`stdin_data` on its standard input).
  absl::StatusOr<CommandResult> Exec(std::string_view step, const std::vector<std::string>& argv,
                                     bool check = true, std::string_view stdin_data = {}) {
    absl::StatusOr<std::vector<std::string>> pct = PctExecArgv(spec_.ctid, argv, false);
    if (!pct.ok()) return Fail(step, pct.status().message());
    return Run(step, *pct, stdin_data, check);
  }

 private:
  CommandRunner& host_;
  const BootstrapSpec& spec_;
  BootstrapResult* result_;
  absl::Time started_;
};

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad() || data.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot be read (no such file, no access, or empty)"));
  }
  return data;
}

std::string UnitFile(const BootstrapSpec& spec) {
  // systemd's own quoting: each word in double quotes, `"` and `\` escaped, `%` doubled.
  std::vector<std::string> words;
  for (const std::string& arg : RemoteAgentArgv(spec)) {
    std::string w = "\"";
    for (char c : arg) {
      if (c == '"' || c == '\\') w += '\\';
      if (c == '%') w += '%';
      w += c;
    }
    words.push_back(w + "\"");
  }
  return absl::StrCat(
      "# Written by fleetd (gpu-fleet agent bootstrap); rewritten on upgrade.\n"
      "[Unit]\nDescription=gpu-fleet agent\nAfter=network-online.target\n\n"
      "[Service]\nExecStart=",
      absl::StrJoin(words, " "),
      "\n# Servers run in their own sessions and outlive the agent; only the agent stops.\n"
      "KillMode=process\nRestart=always\nRestartSec=2\n\n"
      "[Install]\nWantedBy=multi-user.target\n");
}

}  // namespace

absl::StatusOr<AgentPackage> FindAgentPackage(const std::string& fleetd_path,
                                              const std::string& agent_binary_flag) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (!agent_binary_flag.empty()) {
    candidates.emplace_back(agent_binary_flag);
  } else {
    const fs::path dir = fs::path(fleetd_path).parent_path();
    candidates = {dir / "fleet-agent", dir / ".." / "agent" / "fleet-agent",
                  dir / ".." / "libexec" / "fleet-agent"};
  }
  std::vector<std::string> tried;
  for (const fs::path& agent : candidates) {
    const fs::path probe = agent.parent_path() / "fleet-http-probe";
    tried.push_back(agent.string());
    if (access(agent.c_str(), X_OK) != 0 || access(probe.c_str(), X_OK) != 0) continue;
    AgentPackage package;
    package.agent_binary = fs::weakly_canonical(agent).string();
    package.probe_binary = fs::weakly_canonical(probe).string();
    absl::StatusOr<std::string> version = LocalVersion(package.agent_binary);
    if (!version.ok()) return version.status();
    package.version = *std::move(version);
    return package;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no fleet-agent with fleet-http-probe next to it to install in containers "
                   "(looked at ",
                   absl::StrJoin(tried, ", "), "; fleetd --agent-binary names it)"));
}

std::vector<std::string> RemoteAgentArgv(const BootstrapSpec& spec) {
  return {kRemoteAgent,
          "--listen",
          spec.listen,
          "--state-dir",
          kRemoteStateDir,
          "--host",
          spec.host,
          "--container",
          spec.ctid,
          "--tls-ca",
          absl::StrCat(kRemoteTlsDir, "/ca.crt"),
          "--tls-cert",
          absl::StrCat(kRemoteTlsDir, "/agent.crt"),
          "--tls-key",
          absl::StrCat(kRemoteTlsDir, "/agent.key"),
          "--pid-file",
          kRemotePidFile};
}

absl::StatusOr<BootstrapResult> EnsureAgent(CommandRunner& host, const AgentPackage& package,
                                            const BootstrapSpec& spec,
                                            const AgentHealthCheck& healthy) {
  BootstrapResult result;
  Steps steps(host, spec, &result);

  // 0. The container runs (else nothing below can work, and pct's error says why).
  absl::StatusOr<CommandResult> status =
      steps.Run("status", {"pct", "status", spec.ctid}, {}, /*check=*/false);
  if (!status.ok()) return status.status();
  if (status->exit_status != 0 || !absl::StrContains(status->out, "status: running")) {
    const std::string why = FirstLine(status->err.empty() ? status->out : status->err);
    return steps.Fail("status", why.empty() ? "the container is not running" : why);
  }

  // 1. What runs there now.
  absl::StatusOr<CommandResult> version = steps.Exec("version", {kRemoteAgent, "--version"},
                                                     /*check=*/false);
  if (!version.ok()) return version.status();
  if (version->exit_status == 0) result.previous_version = FirstLine(version->out);
  const bool current = result.previous_version == package.version;
  // The host's staging directory: a fixed one per container, in the SSH user's home (root's:
  // 0700), so that what a bootstrap cut off mid-way left there (it could not clean up over a
  // lost connection) is found and removed by a later one.
  auto stage_dir = [&]() -> absl::StatusOr<std::string> {
    absl::StatusOr<CommandResult> home = steps.Run("stage", {"pwd"});
    if (!home.ok()) return home.status();
    const std::string home_dir = FirstLine(home->out);
    if (home_dir.empty() || home_dir[0] != '/' || absl::StrContains(home_dir, "/../")) {
      return steps.Fail("stage", "pwd printed no absolute directory");
    }
    return absl::StrCat(home_dir == "/" ? "" : home_dir, "/", kHostStageRoot, "/", spec.ctid);
  };
  // Best effort: a removal that fails is reported (stage_left), for the next bootstrap to redo.
  auto remove_stage = [&](const std::string& stage) {
    absl::StatusOr<CommandResult> rm = host.Run({"rm", "-rf", "--", stage}, {}, absl::Seconds(30));
    result.stage_left = !rm.ok() || rm->exit_status != 0;
  };
  if (current && healthy(kFoundAgentWait).ok()) {
    if (spec.remove_stale_stage) {
      absl::StatusOr<std::string> stage = stage_dir();
      if (stage.ok()) {
        result.stage_dir = *stage;
        remove_stage(*stage);
      } else {
        result.stage_left = true;
      }
    }
    steps.Close();
    return result;
  }

  // 2. Its init.
  absl::StatusOr<CommandResult> init =
      steps.Exec("init", {"test", "-d", "/run/systemd/system"}, /*check=*/false);
  if (!init.ok()) return init.status();
  result.systemd = init->exit_status == 0;

  // 3. Stage on the host: the binaries when they change, the TLS files and the unit always (a
  // renewed certificate is installed by the next start).
  struct File {
    std::string local;  // empty: `data`
    std::string data;
    std::string name;
    std::string dest;
    const char* mode;
  };
  std::vector<File> files;
  if (!current) {
    files.push_back(
        {package.probe_binary, "", "fleet-http-probe", absl::StrCat(kRemoteProbe, ".new"), "0755"});
    files.push_back(
        {package.agent_binary, "", "fleet-agent", absl::StrCat(kRemoteAgent, ".new"), "0755"});
  }
  files.push_back({spec.ca_file, "", "ca.crt", absl::StrCat(kRemoteTlsDir, "/ca.crt"), "0644"});
  files.push_back(
      {spec.agent_cert_file, "", "agent.crt", absl::StrCat(kRemoteTlsDir, "/agent.crt"), "0644"});
  if (result.systemd) files.push_back({"", UnitFile(spec), "unit", kRemoteUnit, "0644"});
  // The agent's private key is never a file on the host: it goes straight into the container
  // (step 4), so a bootstrap cut off anywhere leaves no key behind on the host.
  absl::StatusOr<std::string> key = ReadWhole(spec.agent_key_file);
  if (!key.ok()) return steps.Fail("stage", key.status().message());

  // The staging directory, made 0700 and emptied first: what a bootstrap cut off mid-way left
  // there is removed, and two bootstraps of one container never share it.
  absl::StatusOr<std::string> stage_path = stage_dir();
  if (!stage_path.ok()) return stage_path.status();
  const std::string stage = *std::move(stage_path);
  const std::string stage_root = stage.substr(0, stage.rfind('/'));
  result.stage_dir = stage;
  for (std::vector<std::string> argv :
       {std::vector<std::string>{"rm", "-rf", "--", stage},
        std::vector<std::string>{"mkdir", "-p", "-m", "0700", "--", stage_root},
        std::vector<std::string>{"mkdir", "-m", "0700", "--", stage}}) {
    if (absl::StatusOr<CommandResult> r = steps.Run("stage", argv); !r.ok()) return r.status();
  }
  // On the way out of a failed bootstrap (its caller takes the directory to be left); a
  // successful one removes it below and says whether that worked.
  absl::Cleanup remove_on_failure = [&] { remove_stage(stage); };
  for (File& f : files) {
    if (!f.local.empty()) {
      absl::StatusOr<std::string> data = ReadWhole(f.local);
      if (!data.ok()) return steps.Fail("stage", data.status().message());
      f.data = *std::move(data);
    }
    absl::StatusOr<CommandResult> r = steps.Run(
        "stage", {"dd", absl::StrCat("of=", stage, "/", f.name), "bs=1M", "status=none"}, f.data);
    if (!r.ok()) return r.status();
  }

  // 4. Into the container.
  absl::StatusOr<CommandResult> r =
      steps.Exec("push", {"mkdir", "-p", kRemoteAgentDir, kRemoteTlsDir, kRemoteStateDir});
  if (!r.ok()) return r.status();
  for (const File& f : files) {
    absl::StatusOr<std::vector<std::string>> push =
        PctPushArgv(spec.ctid, absl::StrCat(stage, "/", f.name), f.dest, f.mode);
    if (!push.ok()) return steps.Fail("push", push.status().message());
    if (r = steps.Run("push", *push); !r.ok()) return r.status();
  }
  // The key: an empty 0600 file first (dd keeps the mode of the file it truncates), its bytes
  // on dd's standard input, then renamed into place.
  const std::string key_dest = absl::StrCat(kRemoteTlsDir, "/agent.key");
  const std::string key_new = absl::StrCat(key_dest, ".new");
  if (r = steps.Exec("push", {"install", "-m", "0600", "/dev/null", key_new}); !r.ok()) {
    return r.status();
  }
  if (r = steps.Exec("push", {"dd", absl::StrCat("of=", key_new), "status=none"}, true, *key);
      !r.ok()) {
    return r.status();
  }
  if (r = steps.Exec("push", {"mv", "-f", key_new, key_dest}); !r.ok()) return r.status();
  if (!current) {
    for (const char* dest : {kRemoteProbe, kRemoteAgent}) {
      if (r = steps.Exec("push", {"mv", "-f", absl::StrCat(dest, ".new"), dest}); !r.ok()) {
        return r.status();
      }
    }
    result.pushed = true;
  }

  // 5. Start.
  if (result.systemd) {
    for (std::vector<std::string> argv :
         {std::vector<std::string>{"systemctl", "daemon-reload"},
          std::vector<std::string>{"systemctl", "enable", "gpu-fleet-agent.service"},
          std::vector<std::string>{"systemctl", "restart", "gpu-fleet-agent.service"}}) {
      if (r = steps.Exec("start", argv); !r.ok()) return r.status();
    }
  } else {
    std::vector<std::string> argv = RemoteAgentArgv(spec);
    for (const char* extra : {"--detach", "--replace", "--log-file", kRemoteLog}) {
      argv.emplace_back(extra);
    }
    if (r = steps.Exec("start", argv); !r.ok()) return r.status();
  }
  result.started = true;

  // 6. It answers.
  steps.Enter("health");
  // Each check waits for the connection (up to kHealthWait, the span left at most): a check
  // that failed fast could leave a slow agent's connection unattended (GrpcAgentClient::Answers).
  const absl::Time deadline = fleet::SteadyNow() + spec.health_timeout;
  absl::Duration pause = absl::Milliseconds(100);
  absl::Status health;
  while (!(health = healthy(std::max(std::min(kHealthWait, deadline - fleet::SteadyNow()),
                                     absl::Milliseconds(1))))
              .ok()) {
    if (fleet::SteadyNow() + pause > deadline) {
      return steps.Fail("health",
                        absl::StrCat("no answer within ", absl::FormatDuration(spec.health_timeout),
                                     ": ", health.message()));
    }
    // A retry interval after a check that found no agent, not a synchronisation guess.
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(pause));
    pause = std::min(pause * 2, absl::Seconds(1));
  }
  std::move(remove_on_failure).Cancel();
  remove_stage(stage);
  steps.Close();
  return result;
}

}  // namespace fleet::daemon
