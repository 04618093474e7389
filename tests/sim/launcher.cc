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

}  // namespace

Launcher::Launcher(LauncherConfig config)
    : config_(std::move(config)),
      log_(STDERR_FILENO),
      pacer_(config_.speed, [this](int signo) { return OnSignal(signo); }) {}

Launcher::~Launcher() = default;

int Launcher::Run() {
  if (absl::Status s = pacer_.SetUpSignals(); !s.ok()) {
    log_.Raw(absl::StrCat("sglang-server-sim: ", s.message()));
    return 1;
  }
  if (Exit e = pacer_.Pause(kImportSeconds)) return *e;
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
    if (Exit e = pacer_.Pause(setup_.script[i].seconds_after)) return *e;
  }
  const int status = ServeHttp();
  pacer_.StopAll();
  return status;
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
    absl::Status forked = pacer_.Fork([&](int command_fd, int reply_fd) {
      SchedulerSetup mine = setup_;
      mine.rank = rank;
      RunScheduler(mine, command_fd, reply_fd);
    });
    if (!forked.ok()) {
      log_.Raw(absl::StrCat("sglang-server-sim: ", forked.message()));
      return 1;
    }
  }
  return std::nullopt;
}

Launcher::Exit Launcher::RunOnRanks(int32_t command) {
  for (int rank = 0; rank < pacer_.size(); ++rank) {
    char answer = 0;
    if (Exit e = pacer_.Command(rank, command, &answer)) return e;
    if (answer != kStepDone) return RankDied(rank);
  }
  return std::nullopt;
}

Launcher::Exit Launcher::OnSignal(int signo) {
  switch (signo) {
    case SIGQUIT:
      log_.Record(kSigquitLine);
      pacer_.StopAll();
      return 0;
    case SIGTERM:
    case SIGINT:
      log_.Record(absl::StrCat("Received ", signo == SIGTERM ? "SIGTERM" : "SIGINT",
                               ". Shutting down the server."));
      pacer_.StopAll();
      return 0;
    default:
      return std::nullopt;
  }
}

Launcher::Exit Launcher::RankDied(int rank) {
  const int code = pacer_.Reap(rank);
  log_.Record(
      absl::StrCat("Rank ", rank, " scheduler is dead. Please check if there are relevant logs."));
  log_.Record(absl::StrCat("Exit code: ", code));
  pacer_.StopAll();
  return 1;
}

int Launcher::ServeHttp() {
  if (Exit e = pacer_.Pause(kUvicornSeconds)) return *e;
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
    if (Exit e = pacer_.Pause(1.0)) return *e;
  }
  log_.Record("The server is fired up and ready to roll!");

  std::vector<int> watched = {pacer_.signal_fd()};
  for (int rank = 0; rank < pacer_.size(); ++rank) watched.push_back(pacer_.reply_fd(rank));
  std::optional<int> exit_status;
  (*server)->Serve(watched, [&](int fd) {
    if (fd == pacer_.signal_fd()) {
      const std::optional<int> signo = pacer_.ReadSignal();
      if (!signo) return true;
      if (*signo == SIGTERM || *signo == SIGINT) {
        log_.Record("INFO:     Shutting down");
        log_.Record("INFO:     Waiting for application shutdown.");
        log_.Record("INFO:     Application shutdown complete.");
        log_.Record(absl::StrCat("INFO:     Finished server process [", getpid(), "]"));
        exit_status = 0;
        return false;
      }
      if (*signo == SIGQUIT) {
        log_.Record(kSigquitLine);
        exit_status = 0;
        return false;
      }
      return true;
    }
    for (int rank = 0; rank < pacer_.size(); ++rank) {
      if (pacer_.reply_fd(rank) == fd) {
        exit_status = RankDied(rank);
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

}  // namespace fleet::sim
