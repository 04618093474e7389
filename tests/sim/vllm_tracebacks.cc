#include "tests/sim/vllm_tracebacks.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace fleet::sim {
namespace {

std::string V1(const std::string& site, const std::string& file) {
  return absl::StrCat(site, "/vllm/", file);
}

// EngineCoreProc's construction, from run_engine_core down to the executor.
std::vector<Frame> EngineCoreFrames(const std::string& site) {
  const std::string core = V1(site, "v1/engine/core.py");
  return {
      {core, 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"},
      {core, 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"},
  };
}

std::vector<Frame> ExecutorInitFrames(const std::string& site, bool multiproc) {
  std::vector<Frame> frames = {
      {V1(site, "v1/engine/core.py"), 83, "__init__",
       "self.model_executor = executor_class(vllm_config)"},
      {V1(site, "v1/executor/abstract.py"), 101, "__init__", "self._init_executor()"},
  };
  if (multiproc) {
    Append(&frames, {{V1(site, "v1/executor/multiproc_executor.py"), 106, "_init_executor",
                      "self.workers = WorkerProc.wait_for_ready(unready_workers)"}});
  }
  return frames;
}

// EngineCore's KV cache set-up, down to the executor's collective RPC for `phase`.
std::vector<Frame> KvCacheFrames(const std::string& site, VllmPhase phase) {
  const std::string core = V1(site, "v1/engine/core.py");
  std::vector<Frame> frames = {
      {core, 92, "__init__",
       "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches("}};
  if (phase == VllmPhase::kCapture) {
    Append(&frames, {{core, 199, "_initialize_kv_caches",
                      "self.model_executor.initialize_from_config(kv_cache_configs)"},
                     {V1(site, "v1/executor/abstract.py"), 64, "initialize_from_config",
                      "self.collective_rpc(\"compile_or_warm_up_model\")"}});
  } else {
    Append(&frames, {{core, 179, "_initialize_kv_caches",
                      "available_gpu_memory = self.model_executor.determine_available_memory()"},
                     {V1(site, "v1/executor/abstract.py"), 76, "determine_available_memory",
                      "return self.collective_rpc(\"determine_available_memory\")"}});
  }
  return frames;
}

// The worker's frames from the entry its phase runs in down to the failing call.
std::vector<Frame> GpuEntryFrames(const std::string& site, VllmPhase phase, bool in_worker) {
  const std::string mp = V1(site, "v1/executor/multiproc_executor.py");
  const std::string base = V1(site, "worker/worker_base.py");
  const bool busy = phase == VllmPhase::kProfile || phase == VllmPhase::kCapture;
  std::vector<Frame> frames;
  if (in_worker) {
    if (busy) {
      frames = {{mp, 654, "worker_busy_loop", "output = func(*args, **kwargs)"}};
    } else {
      frames = {{mp, 571, "worker_main", "worker = WorkerProc(*args, **kwargs)"},
                {mp, 437, "__init__",
                 phase == VllmPhase::kInitDevice ? "self.worker.init_device()"
                                                 : "self.worker.load_model()"}};
    }
  } else {
    frames = EngineCoreFrames(site);
    if (busy) {
      Append(&frames, KvCacheFrames(site, phase));
      Append(&frames,
             {{V1(site, "v1/executor/uniproc_executor.py"), 58, "collective_rpc",
               "answer = run_method(self.driver_worker, method, args, kwargs)"},
              {V1(site, "utils/__init__.py"), 2985, "run_method", "return func(*args, **kwargs)"}});
    } else {
      Append(&frames, ExecutorInitFrames(site, /*multiproc=*/false));
      Append(&frames, {{V1(site, "v1/executor/uniproc_executor.py"), 48, "_init_executor",
                        phase == VllmPhase::kInitDevice ? "self.driver_worker.init_device()"
                                                        : "self.driver_worker.load_model()"}});
    }
  }
  const std::string worker = V1(site, "v1/worker/gpu_worker.py");
  const std::string runner = V1(site, "v1/worker/gpu_model_runner.py");
  switch (phase) {
    case VllmPhase::kInitDevice:
      Append(&frames, {{base, 603, "init_device", "self.worker.init_device()  # type: ignore"},
                       {worker, 172, "init_device", "torch.cuda.set_device(self.device)"},
                       {absl::StrCat(site, "/torch/cuda/__init__.py"), 567, "set_device",
                        "torch._C._cuda_setDevice(device)"}});
      break;
    case VllmPhase::kLoadModel:
      Append(
          &frames,
          {{worker, 213, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"},
           {runner, 2570, "load_model", "self.model = model_loader.load_model("},
           {V1(site, "model_executor/model_loader/base_loader.py"), 45, "load_model",
            "model = initialize_model(vllm_config=vllm_config,"},
           {V1(site, "model_executor/models/llama.py"), 176, "__init__", "self.attn = Attention("},
           {V1(site, "attention/layer.py"), 185, "__init__",
            "self.attn_backend = get_attn_backend(head_size,"},
           {V1(site, "attention/selector.py"), 154, "get_attn_backend",
            "return _cached_get_attn_backend("},
           {V1(site, "attention/selector.py"), 193, "_cached_get_attn_backend",
            "raise ValueError("}});
      break;
    case VllmPhase::kProfile:
      Append(&frames,
             {{absl::StrCat(site, "/torch/utils/_contextlib.py"), 120, "decorate_context",
               "return func(*args, **kwargs)"},
              {worker, 263, "determine_available_memory", "self.model_runner.profile_run()"},
              {runner, 3017, "profile_run", "hidden_states, last_hidden_states = self._dummy_run("},
              {runner, 2786, "_dummy_run", "attn_metadata_i = builder.build("},
              {V1(site, "v1/attention/backends/flashinfer.py"), 716, "build",
               "attn_metadata.decode_wrapper.plan("}});
      break;
    case VllmPhase::kCapture:
      Append(&frames, {{worker, 347, "compile_or_warm_up_model",
                        "cuda_graph_memory_bytes = "
                        "self.model_runner.capture_model()"},
                       {runner, 3297, "capture_model", "self._capture_cudagraphs("},
                       {runner, 3368, "_capture_cudagraphs", "self._dummy_run("},
                       {runner, 2829, "_dummy_run", "outputs = self.model("},
                       {V1(site, "compilation/cuda_graph.py"), 186, "__call__",
                        "with torch.cuda.graph(cudagraph, pool=self.graph_pool):"},
                       {absl::StrCat(site, "/torch/cuda/graphs.py"), 186, "__exit__",
                        "self.cuda_graph.capture_end()"}});
      break;
  }
  return frames;
}

std::string Backends() {
  std::vector<std::string> quoted;
  for (const std::string& b : VllmAttentionBackends()) quoted.push_back(absl::StrCat("'", b, "'"));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

}  // namespace

const std::vector<std::string>& VllmAttentionBackends() {
  static const auto* backends = new std::vector<std::string>{
      "FLASH_ATTN",     "TRITON_ATTN",    "XFORMERS",       "ROCM_FLASH", "ROCM_AITER_MLA",
      "TORCH_SDPA",     "FLASHINFER",     "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA",
      "FLASHMLA",       "FLASH_ATTN_MLA", "PALLAS",         "IPEX",       "NO_ATTENTION",
      "FLEX_ATTENTION", "TREE_ATTN"};
  return *backends;
}

std::string VllmGpuTraceback(const std::string& site, const VllmFailureDetail& d, bool in_worker) {
  std::vector<Frame> frames = GpuEntryFrames(site, d.phase, in_worker);
  switch (d.failure) {
    case VllmFailure::kNoDriver:
      Append(&frames, {{absl::StrCat(site, "/torch/cuda/__init__.py"), 410, "_lazy_init",
                        "torch._C._cuda_init()"}});
      return absl::StrCat(kTracebackHead, Render(frames),
                          "RuntimeError: Found no NVIDIA driver on your system. Please check that "
                          "you have an NVIDIA GPU and installed a driver from "
                          "http://www.nvidia.com/Download/index.aspx\n");
    case VllmFailure::kInvalidDevice:
      return absl::StrCat(kTracebackHead, Render(frames),
                          "torch.AcceleratorError: CUDA error: invalid device ordinal\nCUDA kernel "
                          "errors might be asynchronously reported at some other API call, so the "
                          "stacktrace below might be incorrect.\n");
    case VllmFailure::kInvalidBackend:
      return absl::StrCat(kTracebackHead, Render(frames),
                          "ValueError: Invalid attention backend: '", d.backend,
                          "'. Valid backends are: ", Backends(), "\n");
    case VllmFailure::kBackendUnsupported:
      return absl::StrCat(kTracebackHead, Render(frames),
                          "ValueError: Selected backend AttentionBackendEnum.", d.backend,
                          " is not valid for this configuration. Reason: ['compute capability not "
                          "supported']\n");
    case VllmFailure::kJit:
      Append(&frames, FlashinferOpFrames(site, *d.jit->op));
      return absl::StrCat(kTracebackHead, JitFailureTraceback(site, *d.jit, frames));
    case VllmFailure::kGraphCapture:
      return absl::StrCat(
          kTracebackHead, Render(frames),
          "torch.AcceleratorError: CUDA error: operation failed due to a previous error during "
          "capture\nCUDA kernel errors might be asynchronously reported at some other API call, "
          "so the stacktrace below might be incorrect.\nFor debugging consider passing "
          "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
          "assertions.\n");
    case VllmFailure::kNcclAborted: {
      // The rank went on to the layer's all-reduce, which its failed peer never joined.
      for (size_t i = 0; i < frames.size(); ++i) {
        if (frames[i].function == "_dummy_run") {
          frames.resize(i);
          break;
        }
      }
      const std::string runner = V1(site, "v1/worker/gpu_model_runner.py");
      Append(&frames,
             {{runner, 2829, "_dummy_run", "outputs = self.model("},
              {V1(site, "model_executor/layers/linear.py"), 1392, "forward",
               "output = tensor_model_parallel_all_reduce(output_parallel)"},
              {V1(site, "distributed/communication_op.py"), 14, "tensor_model_parallel_all_reduce",
               "return get_tp_group().all_reduce(input_)"},
              {V1(site, "distributed/parallel_state.py"), 488, "all_reduce",
               "return self._all_reduce_out_place(input_)"},
              {V1(site, "distributed/device_communicators/pynccl.py"), 146, "all_reduce",
               "self.nccl.ncclAllReduce(buffer_type(in_tensor.data_ptr()),"}});
      return absl::StrCat(kTracebackHead, Render(frames),
                          "torch.distributed.DistBackendError: NCCL communicator was aborted on "
                          "rank ",
                          d.rank, ".\n");
    }
  }
  return absl::StrCat(kTracebackHead, Render(frames));
}

std::string AsProcessExit(const std::string& site, const std::string& traceback) {
  const std::string mp = "/usr/lib/python3.12/multiprocessing/process.py";
  const std::string frames =
      Render({{mp, 314, "_bootstrap", "self.run()"},
              {mp, 108, "run", "self._target(*self._args, **self._kwargs)"},
              {V1(site, "v1/engine/core.py"), 712, "run_engine_core", "raise e"}});
  const size_t head = traceback.rfind(kTracebackHead);
  if (head == std::string::npos) return traceback;
  const size_t body = head + std::string_view(kTracebackHead).size();
  return absl::StrCat(traceback.substr(0, body), frames, traceback.substr(body));
}

std::string EngineCoreTraceback(const std::string& site, EngineFailure failure, VllmPhase phase,
                                const std::string& worker_error) {
  std::vector<Frame> frames = EngineCoreFrames(site);
  std::string exception;
  switch (failure) {
    case EngineFailure::kWorkersNotReady:
      Append(&frames, ExecutorInitFrames(site, /*multiproc=*/true));
      Append(&frames, {{V1(site, "v1/executor/multiproc_executor.py"), 509, "wait_for_ready",
                        "raise e from None"}});
      exception =
          "Exception: WorkerProc initialization failed due to an exception in a background "
          "process. See stack trace for root cause.\n";
      break;
    case EngineFailure::kWorkerFailed: {
      const std::string mp = V1(site, "v1/executor/multiproc_executor.py");
      Append(&frames, KvCacheFrames(site, phase));
      Append(&frames, {{mp, 243, "collective_rpc", "result = get_response(w, dequeue_timeout)"},
                       {mp, 226, "get_response", "raise RuntimeError("}});
      exception = absl::StrCat("RuntimeError: Worker failed with error '", worker_error,
                               "', please check the stack trace above for the root cause\n");
      break;
    }
    case EngineFailure::kNoKvCacheMemory: {
      const std::string utils = V1(site, "v1/core/kv_cache_utils.py");
      Append(&frames,
             {{V1(site, "v1/engine/core.py"), 92, "__init__",
               "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches("},
              {V1(site, "v1/engine/core.py"), 190, "_initialize_kv_caches",
               "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,"},
              {utils, 1119, "get_kv_cache_configs",
               "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,"},
              {utils, 699, "check_enough_kv_cache_memory", "raise ValueError("}});
      exception =
          "ValueError: No available memory for the cache blocks. Try increasing "
          "`gpu_memory_utilization` when initializing the engine.\n";
      break;
    }
  }
  return absl::StrCat(kTracebackHead, Render(frames), exception);
}

std::string ApiServerEngineFailure(const std::string& site, const std::string& venv_bin) {
  const std::vector<Frame> frames = {
      {absl::StrCat(venv_bin, "/vllm"), 10, "<module>", "sys.exit(main())"},
      {V1(site, "entrypoints/cli/main.py"), 54, "main", "args.dispatch_function(args)"},
      {V1(site, "entrypoints/cli/serve.py"), 57, "cmd", "uvloop.run(run_server(args))"},
      {V1(site, "entrypoints/openai/api_server.py"), 1884, "run_server",
       "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"},
      {V1(site, "entrypoints/openai/api_server.py"), 1902, "run_server_worker",
       "async with build_async_engine_client("},
      {V1(site, "entrypoints/openai/api_server.py"), 180,
       "build_async_engine_client_from_engine_args", "async_llm = AsyncLLM.from_vllm_config("},
      {V1(site, "v1/engine/async_llm.py"), 134, "__init__",
       "self.engine_core = EngineCoreClient.make_async_mp_client("},
      {V1(site, "v1/engine/core_client.py"), 448, "__init__",
       "with launch_core_engines(vllm_config, executor_class,"},
      {"/usr/lib/python3.12/contextlib.py", 144, "__exit__", "next(self.gen)"},
      {V1(site, "v1/engine/utils.py"), 729, "launch_core_engines", "wait_for_engine_startup("},
      {V1(site, "v1/engine/utils.py"), 782, "wait_for_engine_startup",
       "raise RuntimeError(\"Engine core initialization failed. \""},
  };
  return absl::StrCat(kTracebackHead, Render(frames),
                      "RuntimeError: Engine core initialization failed. See root cause above. "
                      "Failed core proc(s): {}\n");
}

std::string VllmModelNotFound(const std::string& site, const std::string& venv_bin,
                              const std::string& model) {
  const std::vector<Frame> frames = {
      {absl::StrCat(venv_bin, "/vllm"), 10, "<module>", "sys.exit(main())"},
      {V1(site, "entrypoints/cli/main.py"), 54, "main", "args.dispatch_function(args)"},
      {V1(site, "entrypoints/cli/serve.py"), 57, "cmd", "uvloop.run(run_server(args))"},
      {V1(site, "engine/arg_utils.py"), 1128, "create_model_config", "return ModelConfig("},
      {V1(site, "transformers_utils/config.py"), 432, "get_config",
       "config_dict, _ = PretrainedConfig.get_config_dict("},
      {absl::StrCat(site, "/transformers/utils/hub.py"), 511, "cached_files", "raise OSError("},
  };
  return absl::StrCat(kTracebackHead, Render(frames), HubOsErrorLine(model));
}

std::string ExceptionMessage(const std::string& traceback) {
  std::vector<std::string> lines = absl::StrSplit(traceback, '\n', absl::SkipEmpty());
  size_t first = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("  ", 0) == 0 || lines[i].rfind("Traceback", 0) == 0) first = i + 1;
  }
  if (first >= lines.size()) return "";
  std::string text = absl::StrJoin(lines.begin() + static_cast<long>(first), lines.end(), "\n");
  const size_t colon = text.find(": ");
  return colon == std::string::npos ? "" : text.substr(colon + 2);
}

}  // namespace fleet::sim
