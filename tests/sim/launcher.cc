#include "tests/sim/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/json_text.h"
#include "tests/sim/gpu_info.h"
#include "tests/sim/toolchain.h"
#include "tests/sim/tracebacks.h"

namespace fleet::sim {
namespace {

constexpr char kSigquitLine[] =
    "Received sigquit from a child process. It usually means the child failed.";
constexpr char kDefaultFlashinferVersion[] = "0.5.3";

// The installed flashinfer's version, from its dist-info (what `flashinfer.__version__` says).
std::string FlashinferVersion(const std::string& site) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(site, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "flashinfer_python-";
    const std::string suffix = ".dist-info";
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() + suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    }
  }
  return kDefaultFlashinferVersion;
}

CacheState CachedLibraryState(const std::string& path) {
  absl::StatusOr<std::string> content = ReadSmallFile(path);
  if (!content.ok()) return CacheState::kMissing;
  return content->rfind(kSimLibraryMagic, 0) == 0 ? CacheState::kValid : CacheState::kStale;
}

bool WriteCommand(int fd, int32_t command) {
  ssize_t n = 0;
  while ((n = write(fd, &command, sizeof(command))) < 0 && errno == EINTR) {
  }
  return n == static_cast<ssize_t>(sizeof(command));
}

int64_t UnixSeconds() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

Launcher::Launcher(LauncherConfig config) : config_(std::move(config)), log_(STDERR_FILENO) {}

Launcher::~Launcher() {
  StopSchedulers();
  if (signal_fd_ >= 0) close(signal_fd_);
}

int Launcher::Run() {
  if (Exit e = SetUpSignals()) return *e;
  if (Exit e = Pause(kImportSeconds)) return *e;
  // `import sgl_kernel` loads its extension, which needs libnvrtc from the loader path.
  if (FindInDirs(kNvrtcLibrary, config_.env.List("LD_LIBRARY_PATH")).empty()) {
    log_.Raw(SglKernelImportError(config_.site_packages, kNvrtcLibrary));
    return 1;
  }
  log_.Record(FormatServerArgs(config_.args));
  if (Exit e = CheckModel()) return *e;
  PrepareJit();
  if (Exit e = StartSchedulers()) return *e;
  for (size_t i = 0; i < setup_.script.size(); ++i) {
    if (setup_.script[i].kind != StepKind::kPause) {
      if (Exit e = RunOnRanks(static_cast<int32_t>(i))) return *e;
    }
    if (Exit e = Pause(setup_.script[i].seconds_after)) return *e;
  }
  const int status = ServeHttp();
  StopSchedulers();
  return status;
}

Launcher::Exit Launcher::SetUpSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGCHLD}) sigaddset(&set, sig);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return 1;
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  if (signal_fd_ < 0) {
    log_.Raw(absl::StrCat("sglang-server-sim: signalfd: ", std::strerror(errno)));
    return 1;
  }
  // A scheduler that died leaves a broken pipe: write() says so, no signal needed.
  signal(SIGPIPE, SIG_IGN);
  return std::nullopt;
}

Launcher::Exit Launcher::CheckModel() {
  const std::string& model = config_.args.model_path;
  if (IsFile(absl::StrCat(model, "/config.json"))) return std::nullopt;
  if (IsDirectory(model)) {
    log_.Raw(absl::StrCat("Traceback (most recent call last):\n  File \"", config_.site_packages,
                          "/transformers/configuration_utils.py\", line 721, in "
                          "_get_config_dict\n    resolved_config_file = cached_file(\n",
                          "OSError: ", model,
                          " does not appear to have a file named config.json. Checkout "
                          "'https://huggingface.co/",
                          model, "/tree/None' for available files."));
  } else {
    // Not a directory: transformers takes it for a Hub id, which this offline container lacks.
    log_.Raw(ModelNotFoundError(config_.site_packages, model));
  }
  return 1;
}

void Launcher::PrepareJit() {
  setup_.launcher = getpid();
  setup_.log_fd = STDERR_FILENO;
  setup_.args = config_.args;
  setup_.fault = config_.fault;
  setup_.speed = config_.speed;
  setup_.env = config_.env;
  setup_.site_packages = config_.site_packages;
  setup_.gpus = QueryGpus(config_.env);
  std::string arch = "120";
  if (setup_.gpus.ok()) {
    absl::StatusOr<GpuInfo> gpu = VisibleGpu(*setup_.gpus, config_.env, config_.args.base_gpu_id);
    if (gpu.ok()) arch = gpu->ArchDigits();
  }
  std::string workspace = config_.env.Get("FLASHINFER_WORKSPACE_BASE");
  if (workspace.empty()) workspace = config_.env.Get("HOME");
  setup_.build =
      JitBuild(workspace, FlashinferVersion(config_.site_packages), arch, config_.site_packages);
  setup_.ops = JitOpsForBackend(EffectiveAttentionBackend(config_.args));
  for (const JitOp& op : setup_.ops) {
    setup_.cache.push_back(setup_.build.cache_enabled()
                               ? CachedLibraryState(setup_.build.LibraryPath(op))
                               : CacheState::kMissing);
  }
  setup_.script = BuildStartupScript(config_.args, setup_.ops, setup_.cache);
}

Launcher::Exit Launcher::StartSchedulers() {
  for (int rank = 0; rank < config_.args.tp_size; ++rank) {
    int command[2], reply[2];
    if (pipe2(command, O_CLOEXEC) != 0 || pipe2(reply, O_CLOEXEC) != 0) {
      log_.Raw(absl::StrCat("sglang-server-sim: pipe: ", std::strerror(errno)));
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      log_.Raw(absl::StrCat("sglang-server-sim: fork: ", std::strerror(errno)));
      return 1;
    }
    if (pid == 0) {
      // The scheduler: dies with the launcher, takes signals the default way, keeps only its
      // own ends of its own pipes.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != setup_.launcher) _exit(1);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGPIPE, SIG_DFL);
      close(signal_fd_);
      for (const Rank& r : ranks_) {
        close(r.command_fd);
        close(r.reply_fd);
      }
      close(command[1]);
      close(reply[0]);
      SchedulerSetup mine = setup_;
      mine.rank = rank;
      RunScheduler(mine, command[0], reply[1]);
    }
    close(command[0]);
    close(reply[1]);
    ranks_.push_back({pid, command[1], reply[0]});
  }
  return std::nullopt;
}

Launcher::Exit Launcher::RunOnRanks(int32_t command) {
  for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
    const Rank& r = ranks_[static_cast<size_t>(rank)];
    if (!WriteCommand(r.command_fd, command)) return RankDied(rank);
    for (;;) {
      pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {r.reply_fd, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return 1;
      }
      // A failing scheduler logs, then signals: the signal decides before its pipe's state.
      if (fds[0].revents & POLLIN) {
        if (Exit e = OnSignal()) return e;
        continue;
      }
      if (fds[1].revents != 0) {
        char done = 0;
        if (read(r.reply_fd, &done, 1) != 1) return RankDied(rank);
        break;
      }
    }
  }
  return std::nullopt;
}

Launcher::Exit Launcher::Pause(double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds / config_.speed));
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{signal_fd_, POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno != EINTR) return 1;
    if (rc > 0) {
      if (Exit e = OnSignal()) return e;
    }
  }
}

Launcher::Exit Launcher::OnSignal() {
  signalfd_siginfo info{};
  if (read(signal_fd_, &info, sizeof(info)) != static_cast<ssize_t>(sizeof(info))) {
    return std::nullopt;
  }
  switch (info.ssi_signo) {
    case SIGQUIT:
      log_.Record(kSigquitLine);
      StopSchedulers();
      return 0;
    case SIGTERM:
    case SIGINT:
      log_.Record(absl::StrCat("Received ", info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
                               ". Shutting down the server."));
      StopSchedulers();
      return 0;
    default:  // SIGCHLD: a dead scheduler shows as the end of its pipe.
      return std::nullopt;
  }
}

Launcher::Exit Launcher::RankDied(int rank) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  int status = 0;
  while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.pid = -1;
  const int code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
  log_.Record(
      absl::StrCat("Rank ", rank, " scheduler is dead. Please check if there are relevant logs."));
  log_.Record(absl::StrCat("Exit code: ", code));
  StopSchedulers();
  return 1;
}

int Launcher::ServeHttp() {
  if (Exit e = Pause(kUvicornSeconds)) return *e;
  log_.Record(absl::StrCat("INFO:     Started server process [", getpid(), "]"));
  log_.Record("INFO:     Waiting for application startup.");
  log_.Record("INFO:     Application startup complete.");
  int bind_errno = 0;
  const ServerArgs& args = config_.args;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Listen(
      args.host, args.port, [this](const HttpRequest& r) { return Handle(r); },
      [this](const HttpRequest& r, int status) {
        log_.Record(absl::StrFormat("INFO:     %s - \"%s %s %s\" %d %s", r.peer, r.method, r.target,
                                    r.version, status, ReasonPhrase(status)));
      },
      &bind_errno);
  if (!server.ok()) {
    log_.Record(absl::StrFormat(
        "ERROR:    [Errno %d] error while attempting to bind on address ('%s', %d): %s", bind_errno,
        args.host, args.port,
        bind_errno == EADDRINUSE ? "address already in use" : std::strerror(bind_errno)));
    log_.Record("INFO:     Waiting for application shutdown.");
    log_.Record("INFO:     Application shutdown complete.");
    return 1;
  }
  log_.Record(absl::StrFormat("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)",
                              args.host, args.port));
  if (!args.skip_server_warmup) {
    if (Exit e = RunOnRanks(kWarmupCommand)) return *e;
    if (Exit e = Pause(1.0)) return *e;
  }
  log_.Record("The server is fired up and ready to roll!");

  std::vector<int> watched = {signal_fd_};
  for (const Rank& r : ranks_) watched.push_back(r.reply_fd);
  std::optional<int> exit_status;
  (*server)->Serve(watched, [&](int fd) {
    if (fd == signal_fd_) {
      signalfd_siginfo info{};
      if (read(signal_fd_, &info, sizeof(info)) != static_cast<ssize_t>(sizeof(info))) return true;
      if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) {
        log_.Record("INFO:     Shutting down");
        log_.Record("INFO:     Waiting for application shutdown.");
        log_.Record("INFO:     Application shutdown complete.");
        log_.Record(absl::StrCat("INFO:     Finished server process [", getpid(), "]"));
        exit_status = 0;
        return false;
      }
      if (info.ssi_signo == SIGQUIT) {
        log_.Record(kSigquitLine);
        exit_status = 0;
        return false;
      }
      return true;
    }
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
      if (ranks_[rank].reply_fd == fd) {
        exit_status = RankDied(static_cast<int>(rank));
        return false;
      }
    }
    return true;
  });
  return exit_status.value_or(1);
}

HttpResponse Launcher::Handle(const HttpRequest& request) const {
  const ServerArgs& args = config_.args;
  const std::string model =
      args.served_model_name.empty() ? args.model_path : args.served_model_name;
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  if (path == "/health" && get) return {200, "text/plain", ""};
  if (path == "/health_generate" && get) return {200, "text/plain", "OK"};
  if (path == "/get_model_info" && get) {
    Json json = Json::object();
    json["model_path"] = args.model_path;
    json["tokenizer_path"] = args.tokenizer_path.empty() ? args.model_path : args.tokenizer_path;
    json["is_generation"] = true;
    return {200, "application/json", JsonText(std::move(json))};
  }
  if (path == "/v1/models" && get) {
    Json entry = Json::object();
    entry["id"] = model;
    entry["object"] = "model";
    entry["created"] = UnixSeconds();
    entry["owned_by"] = "sglang";
    entry["root"] = model;
    entry["max_model_len"] = args.context_length > 0 ? args.context_length : 4096;
    Json json = Json::object();
    json["object"] = "list";
    json["data"] = Json::array({std::move(entry)});
    return {200, "application/json", JsonText(std::move(json))};
  }
  if ((path == "/v1/completions" || path == "/generate") && post) {
    // The tiny model always answers the same: serving is not what is simulated here.
    const std::string text = " Paris.";
    const int64_t prompt_tokens = static_cast<int64_t>(request.body.size() / 4) + 1;
    Json json = Json::object();
    if (path == "/generate") {
      json["text"] = text;
      json["meta_info"] = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", 2}};
    } else {
      json["id"] = "cmpl-sim-0001";
      json["object"] = "text_completion";
      json["created"] = UnixSeconds();
      json["model"] = model;
      Json choice = Json::object();
      choice["index"] = 0;
      choice["text"] = text;
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = "length";
      json["choices"] = Json::array({std::move(choice)});
      json["usage"] = {{"prompt_tokens", prompt_tokens},
                       {"completion_tokens", 2},
                       {"total_tokens", prompt_tokens + 2}};
    }
    return {200, "application/json", JsonText(std::move(json))};
  }
  const bool known = path == "/health" || path == "/health_generate" || path == "/get_model_info" ||
                     path == "/v1/models" || path == "/v1/completions" || path == "/generate";
  if (known) return {405, "application/json", "{\"detail\":\"Method Not Allowed\"}"};
  return {404, "application/json", "{\"detail\":\"Not Found\"}"};
}

void Launcher::StopSchedulers() {
  // SGLang's kill_process_tree: SIGKILL, then every child reaped.
  for (Rank& r : ranks_) {
    if (r.pid > 0) {
      kill(r.pid, SIGKILL);
      while (waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      r.pid = -1;
    }
    if (r.command_fd >= 0) close(r.command_fd);
    if (r.reply_fd >= 0) close(r.reply_fd);
    r.command_fd = r.reply_fd = -1;
  }
}

}  // namespace fleet::sim
