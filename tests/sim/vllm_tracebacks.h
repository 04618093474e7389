// The Python tracebacks of the simulated `vllm serve` (vLLM V1), shaped like CPython's, with the
// frames of vLLM, torch and flashinfer that real failures show: a GPU process's failure (a worker
// of the multiprocess executor, or EngineCore with one GPU), a worker's symptom of a peer's
// failure, EngineCore's own failures and the API server's last words. Each function returns the
// whole text from "Traceback (most recent call last):" on; the caller decorates and writes it as
// one record. The flashinfer part is the SGLang simulator's (tracebacks.h).
#pragma once

#include <string>
#include <vector>

#include "tests/sim/tracebacks.h"

namespace fleet::sim {

// The attention backends VLLM_ATTENTION_BACKEND may name (vLLM's _Backend members).
const std::vector<std::string>& VllmAttentionBackends();

// Where a GPU process's exception was raised.
enum class VllmPhase {
  kInitDevice,  // Worker.init_device()
  kLoadModel,   // Worker.load_model()
  kProfile,     // Worker.determine_available_memory(): the profile run (flashinfer's JIT)
  kCapture,     // Worker.compile_or_warm_up_model(): CUDA graph capture
};

enum class VllmFailure {
  kNoDriver,            // no GPU driver
  kInvalidDevice,       // CUDA_VISIBLE_DEVICES leaves no GPU for this rank
  kInvalidBackend,      // VLLM_ATTENTION_BACKEND names no backend
  kBackendUnsupported,  // the backend does not run on this GPU (FLASH_ATTN on SM 12.x)
  kJit,                 // flashinfer's JIT build failed (`jit` says how)
  kGraphCapture,        // CUDA graph capture failed
  kNcclAborted,         // symptom: a peer left the collective this rank was in
};

struct VllmFailureDetail {
  VllmFailure failure;
  VllmPhase phase;
  const SchedulerFailureDetail* jit = nullptr;  // kJit
  std::string backend;                          // kInvalidBackend, kBackendUnsupported
  int rank = 0;                                 // kNcclAborted: this rank
};

// The traceback of a GPU process's failure: from a worker (`in_worker`: its WorkerProc.__init__ or
// busy loop, by phase) or from EngineCore running the GPU itself (UniProcExecutor).
std::string VllmGpuTraceback(const std::string& site, const VllmFailureDetail& detail,
                             bool in_worker);

// EngineCore's failures, as its run_engine_core() raises them.
enum class EngineFailure {
  kWorkersNotReady,  // a worker failed to start (WorkerProc.wait_for_ready)
  kWorkerFailed,     // a worker answered a collective RPC with a failure
  kNoKvCacheMemory,  // no memory left for the KV cache blocks
};

// EngineCore's traceback for `failure`, raised from `phase` (kProfile or kCapture for
// kWorkerFailed). `worker_error` is str() of the first failed worker's exception, in rank order.
std::string EngineCoreTraceback(const std::string& site, EngineFailure failure, VllmPhase phase,
                                const std::string& worker_error);

// The API server's traceback when the model is neither a directory with config.json nor a Hub id
// this offline container can fetch (transformers' OSError).
std::string VllmModelNotFound(const std::string& site, const std::string& venv_bin,
                              const std::string& model);

// The API server's traceback when EngineCore did not start.
std::string ApiServerEngineFailure(const std::string& site, const std::string& venv_bin);

// `traceback` as multiprocessing prints it when a process's target raised it: its last section
// starts at the process's _bootstrap.
std::string AsProcessExit(const std::string& site, const std::string& traceback);

// str() of the exception a traceback ends with: its last line after "Name: ".
std::string ExceptionMessage(const std::string& traceback);

}  // namespace fleet::sim
