#include "tests/sim/vllm_server.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/json_text.h"
#include "tests/sim/gpu_info.h"
#include "tests/sim/vllm_tracebacks.h"

namespace fleet::sim {
namespace {

constexpr int kEngineCore = 0;  // the pacer's first child

std::string PyRepr(const std::string& s) { return absl::StrCat("'", s, "'"); }

}  // namespace

VllmApiServer::VllmApiServer(VllmServerConfig config)
    : config_(std::move(config)),
      log_(STDERR_FILENO, "APIServer", getpid()),
      pacer_(config_.speed, [this](int signo) { return OnSignal(signo); }) {}

std::string VllmApiServer::SitePackages() const {
  return absl::StrCat(config_.venv, "/lib/python3.12/site-packages");
}

std::string VllmApiServer::ServedModel() const {
  const ServerArgs& a = config_.args;
  return a.served_model_name.empty() ? a.model_path : a.served_model_name;
}

int VllmApiServer::Run() {
  if (absl::Status s = pacer_.SetUpSignals(); !s.ok()) {
    log_.Raw(absl::StrCat("vllm-server-sim: ", s.message()));
    return 1;
  }
  if (Exit e = pacer_.Pause(kImportSeconds)) return *e;
  const ServerArgs& a = config_.args;
  log_.Info("api_server.py:1839", absl::StrCat("vLLM API server version ", kVllmVersion));
  std::vector<std::string> args = {absl::StrCat("'model_tag': ", PyRepr(a.model_path))};
  if (a.host != "0.0.0.0") args.push_back(absl::StrCat("'host': ", PyRepr(a.host)));
  if (a.port != 8000) args.push_back(absl::StrCat("'port': ", a.port));
  args.push_back(absl::StrCat("'model': ", PyRepr(a.model_path)));
  if (a.context_length > 0) args.push_back(absl::StrCat("'max_model_len': ", a.context_length));
  if (a.disable_cuda_graph) args.push_back("'enforce_eager': True");
  if (a.tp_size != 1) args.push_back(absl::StrCat("'tensor_parallel_size': ", a.tp_size));
  if (a.mem_fraction_static != 0.9) {
    args.push_back(absl::StrFormat("'gpu_memory_utilization': %g", a.mem_fraction_static));
  }
  log_.Info("utils.py:233", absl::StrCat("non-default args: {", absl::StrJoin(args, ", "), "}"));
  if (!IsFile(absl::StrCat(a.model_path, "/config.json"))) {
    log_.Print(VllmModelNotFound(SitePackages(), absl::StrCat(config_.venv, "/bin"), a.model_path));
    return 1;
  }
  log_.Info("model.py:547", "Resolved architecture: LlamaForCausalLM");
  log_.Info("model.py:1510",
            absl::StrCat("Using max model len ", a.context_length > 0 ? a.context_length : 4096));
  Prepare();
  if (Exit e = StartProcesses()) return *e;
  for (size_t i = 0; i < setup_.script.size(); ++i) {
    if (Exit e = RunStep(static_cast<int>(i))) return *e;
    if (Exit e = pacer_.Pause(setup_.script[i].seconds_after)) return *e;
  }
  const int status = ServeHttp();
  pacer_.StopAll();
  return status;
}

void VllmApiServer::Prepare() {
  setup_.args = config_.args;
  setup_.fault = config_.fault;
  setup_.speed = config_.speed;
  setup_.env = config_.env;
  setup_.site_packages = SitePackages();
  setup_.log_fd = STDERR_FILENO;
  setup_.gpus = QueryGpus(config_.env);
  std::string arch = "120";
  std::string capability = "12.0";
  if (setup_.gpus.ok()) {
    absl::StatusOr<GpuInfo> gpu = VisibleGpu(*setup_.gpus, config_.env, 0);
    if (gpu.ok()) {
      arch = gpu->ArchDigits();
      capability = gpu->compute_capability;
    }
  }
  // vLLM's choice without VLLM_ATTENTION_BACKEND: FlashInfer on SM 12.x (FlashAttention has no
  // kernels for it), FlashAttention elsewhere.
  setup_.attention_backend = config_.env.Has("VLLM_ATTENTION_BACKEND")
                                 ? config_.env.Get("VLLM_ATTENTION_BACKEND")
                                 : (capability.rfind("12.", 0) == 0 ? "FLASHINFER" : "FLASH_ATTN");
  std::string workspace = config_.env.Get("FLASHINFER_WORKSPACE_BASE");
  if (workspace.empty()) workspace = config_.env.Get("HOME");
  setup_.build =
      JitBuild(workspace, FlashinferVersion(setup_.site_packages), arch, setup_.site_packages);
  // vLLM samples with its own kernels unless VLLM_USE_FLASHINFER_SAMPLER=1: only flashinfer's
  // attention ops are built.
  if (setup_.attention_backend == "FLASHINFER") {
    for (const JitOp& op : JitOpsForBackend("flashinfer")) {
      if (op.module != "sampling") setup_.ops.push_back(op);
    }
  }
  for (const JitOp& op : setup_.ops) {
    setup_.cache.push_back(setup_.build.cache_enabled()
                               ? CachedLibraryState(setup_.build.LibraryPath(op))
                               : CacheState::kMissing);
  }
  setup_.script = BuildVllmScript(config_.args, setup_.ops, setup_.cache);
}

VllmApiServer::Exit VllmApiServer::StartProcesses() {
  const int workers = config_.args.tp_size > 1 ? config_.args.tp_size : 0;
  for (int rank = -1; rank < workers; ++rank) {
    absl::Status forked = pacer_.Fork(
        [&](int command_fd, int reply_fd) { RunVllmProcess(setup_, rank, command_fd, reply_fd); });
    if (!forked.ok()) {
      log_.Raw(absl::StrCat("vllm-server-sim: ", forked.message()));
      return 1;
    }
  }
  return std::nullopt;
}

std::vector<int> VllmApiServer::GpuChildren() const {
  if (config_.args.tp_size <= 1) return {kEngineCore};
  std::vector<int> children;
  for (int rank = 0; rank < config_.args.tp_size; ++rank) children.push_back(rank + 1);
  return children;
}

std::string VllmApiServer::FailureMessage(int child) {
  std::string message;
  char c = 0;
  while (read(pacer_.reply_fd(child), &c, 1) == 1 && c != '\n') message.push_back(c);
  return message;
}

VllmApiServer::Exit VllmApiServer::RunStep(int index) {
  const VllmStep& step = setup_.script[static_cast<size_t>(index)];
  const std::vector<int> children = step.OnGpu() ? GpuChildren() : std::vector<int>{kEngineCore};
  for (int child : children) {
    char answer = 0;
    if (Exit e = pacer_.Command(child, index, &answer)) return e;
    if (answer == kVllmStepDone) continue;
    if (answer != kVllmStepFailed) {
      // Died without a word.
      log_.Log("ERROR", "core_client.py:564",
               "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.");
      return EngineStartFailed();
    }
    const std::string message = FailureMessage(child);
    // EngineCore logged its own failure (its GPU work, or its KV cache set-up).
    if (child == kEngineCore) {
      TerminateWorkers(-1);
      return EngineStartFailed();
    }
    return WorkerFailed(child - 1, message, index);
  }
  return std::nullopt;
}

int VllmApiServer::WorkerFailed(int rank, const std::string& message, int step_index) {
  const VllmStep& step = setup_.script[static_cast<size_t>(step_index)];
  std::vector<std::string> errors(static_cast<size_t>(config_.args.tp_size));
  errors[static_cast<size_t>(rank)] = message;
  const bool busy = step.InBusyLoop();
  if (busy) {
    // The other ranks went on into the forward pass's all-reduce, which the failed rank never
    // joined: their communicators are aborted.
    for (int other = 0; other < config_.args.tp_size; ++other) {
      if (other == rank) continue;
      char answer = 0;
      if (Exit e = pacer_.Command(other + 1, kVllmSymptomCommand - step_index, &answer)) {
        return e.value_or(1);
      }
      if (answer == kVllmStepFailed) errors[static_cast<size_t>(other)] = FailureMessage(other + 1);
    }
  }
  const VllmPhase phase = PhaseOf(step);
  // EngineCore's collective_rpc reads the answers in rank order: the first failure it meets is
  // the one it names.
  std::string first_error;
  for (const std::string& e : errors) {
    if (!e.empty()) {
      first_error = e;
      break;
    }
  }
  const std::string traceback = EngineCoreTraceback(
      SitePackages(), busy ? EngineFailure::kWorkerFailed : EngineFailure::kWorkersNotReady, phase,
      first_error);
  const VllmLog engine_core(STDERR_FILENO, "EngineCore_DP0", pacer_.pid(kEngineCore));
  engine_core.Log("ERROR", "core.py:708", absl::StrCat("EngineCore failed to start.\n", traceback));
  // A worker that failed to start has returned from worker_main; the others are told to exit.
  TerminateWorkers(busy ? -1 : rank);
  engine_core.Print(
      absl::StrCat("Process EngineCore_DP0:\n", AsProcessExit(SitePackages(), traceback)));
  return EngineStartFailed();
}

void VllmApiServer::TerminateWorkers(int except_rank) {
  if (config_.args.tp_size <= 1) return;
  for (int rank = 0; rank < config_.args.tp_size; ++rank) {
    if (rank == except_rank) continue;
    char answer = 0;
    if (pacer_.Command(rank + 1, kVllmTerminateCommand, &answer)) return;
  }
}

int VllmApiServer::EngineStartFailed() {
  log_.Print(ApiServerEngineFailure(SitePackages(), absl::StrCat(config_.venv, "/bin")));
  pacer_.StopAll();
  return 1;
}

VllmApiServer::Exit VllmApiServer::OnSignal(int signo) {
  if (signo != SIGTERM && signo != SIGINT && signo != SIGQUIT) return std::nullopt;
  // Interrupted while the engine starts: vLLM's handler raises KeyboardInterrupt, the client
  // shuts EngineCore down, and the process ends without an error.
  log_.Info("launcher.py:99", "Shutting down FastAPI HTTP server.");
  pacer_.StopAll();
  return 0;
}

int VllmApiServer::ServeHttp() {
  if (Exit e = pacer_.Pause(kUvicornSeconds)) return *e;
  const ServerArgs& a = config_.args;
  log_.Info("api_server.py:1611", "Supported_tasks: ['generate']");
  log_.Info("api_server.py:1912",
            absl::StrFormat("Starting vLLM API server 0 on http://%s:%d", a.host, a.port));
  log_.Info("launcher.py:34", "Available routes are:");
  for (const char* route :
       {"Route: /health, Methods: GET", "Route: /v1/models, Methods: GET",
        "Route: /version, Methods: GET", "Route: /v1/completions, Methods: POST"}) {
    log_.Info("launcher.py:42", route);
  }
  int bind_errno = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Listen(
      a.host, a.port, [this](const HttpRequest& r) { return Handle(r); },
      [this](const HttpRequest& r, int status) {
        log_.Print(absl::StrFormat("INFO:     %s - \"%s %s %s\" %d %s", r.peer, r.method, r.target,
                                   r.version, status, ReasonPhrase(status)));
      },
      &bind_errno);
  if (!server.ok()) {
    log_.Print(absl::StrFormat(
        "ERROR:    [Errno %d] error while attempting to bind on address ('%s', %d): %s", bind_errno,
        a.host, a.port,
        bind_errno == EADDRINUSE ? "address already in use" : std::strerror(bind_errno)));
    return 1;
  }
  log_.Print(absl::StrCat("INFO:     Started server process [", getpid(), "]\n",
                          "INFO:     Waiting for application startup.\n",
                          "INFO:     Application startup complete."));

  std::vector<int> watched = {pacer_.signal_fd()};
  for (int child = 0; child < pacer_.size(); ++child) watched.push_back(pacer_.reply_fd(child));
  std::optional<int> exit_status;
  (*server)->Serve(watched, [&](int fd) {
    if (fd == pacer_.signal_fd()) {
      const std::optional<int> signo = pacer_.ReadSignal();
      if (!signo || (*signo != SIGTERM && *signo != SIGINT)) return true;
      log_.Info("launcher.py:99", "Shutting down FastAPI HTTP server.");
      log_.Print(absl::StrCat("INFO:     Shutting down\n",
                              "INFO:     Waiting for application shutdown.\n",
                              "INFO:     Application shutdown complete."));
      exit_status = 0;
      return false;
    }
    // A child's pipe ended: it died while the server served.
    log_.Log("ERROR", "core_client.py:564",
             "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.");
    exit_status = 1;
    return false;
  });
  return exit_status.value_or(1);
}

HttpResponse VllmApiServer::Handle(const HttpRequest& request) const {
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  const std::string model = ServedModel();
  if (path == "/health" && get) return {200, "application/json", ""};
  if (path == "/version" && get) {
    return {200, "application/json", JsonText(Json{{"version", kVllmVersion}})};
  }
  if (path == "/v1/models" && get) {
    Json entry = Json::object();
    entry["id"] = model;
    entry["object"] = "model";
    entry["created"] = UnixSeconds();
    entry["owned_by"] = "vllm";
    entry["root"] = config_.args.model_path;
    entry["parent"] = nullptr;
    entry["max_model_len"] = config_.args.context_length > 0 ? config_.args.context_length : 4096;
    Json json = Json::object();
    json["object"] = "list";
    json["data"] = Json::array({std::move(entry)});
    return {200, "application/json", JsonText(json)};
  }
  if (path == "/v1/completions" && post) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object() || !body.contains("prompt")) {
      return {400, "application/json",
              JsonText(Json{{"error",
                             {{"message",
                               "invalid completion request: a JSON object with a "
                               "prompt is required"},
                              {"type", "BadRequestError"},
                              {"param", nullptr},
                              {"code", 400}}}})};
    }
    if (body.contains("model") && body["model"] != model) {
      const std::string asked = body["model"].is_string() ? body["model"].get<std::string>() : "";
      return {404, "application/json",
              JsonText(Json{{"error",
                             {{"message", absl::StrCat("The model `", asked, "` does not exist.")},
                              {"type", "NotFoundError"},
                              {"param", nullptr},
                              {"code", 404}}}})};
    }
    int64_t max_tokens = 16;
    if (body.contains("max_tokens") && body["max_tokens"].is_number_integer()) {
      max_tokens = std::max<int64_t>(1, body["max_tokens"].get<int64_t>());
    }
    // The tiny model always answers the same: serving is not what is simulated here.
    const std::string text = max_tokens == 1 ? " Paris" : " Paris.";
    const int64_t completion_tokens = max_tokens == 1 ? 1 : 2;
    const int64_t prompt_tokens = static_cast<int64_t>(request.body.size() / 4) + 1;
    Json choice = Json::object();
    choice["index"] = 0;
    choice["text"] = text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = "length";
    choice["stop_reason"] = nullptr;
    Json json = Json::object();
    json["id"] = "cmpl-sim0001";
    json["object"] = "text_completion";
    json["created"] = UnixSeconds();
    json["model"] = model;
    json["choices"] = Json::array({std::move(choice)});
    json["usage"] = {{"prompt_tokens", prompt_tokens},
                     {"total_tokens", prompt_tokens + completion_tokens},
                     {"completion_tokens", completion_tokens}};
    return {200, "application/json", JsonText(json)};
  }
  const bool known =
      path == "/health" || path == "/version" || path == "/v1/models" || path == "/v1/completions";
  if (known) return {405, "application/json", "{\"detail\":\"Method Not Allowed\"}"};
  return {404, "application/json", "{\"detail\":\"Not Found\"}"};
}

}  // namespace fleet::sim
