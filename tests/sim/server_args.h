// ServerArgs: the command line of `python -m sglang.launch_server` (and of `vllm serve`, in the
// same terms) as the simulated servers understand it. It accepts the flags a supervisor passes
// (model, host, port, tensor parallelism, attention backend, CUDA graph switch, memory fraction,
// log level, ...) and rejects anything else the way SGLang's argparse does: usage plus
// `launch_server.py: error: ...` on stderr, exit 2.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::sim {

inline constexpr int kArgparseExitCode = 2;

struct ServerArgs {
  std::string model_path;
  std::string tokenizer_path;  // empty: the model path
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 30000;
  int tp_size = 1;
  int base_gpu_id = 0;
  std::string attention_backend;  // empty: SGLang picks flashinfer on this GPU
  bool disable_cuda_graph = false;
  double mem_fraction_static = 0;  // 0: SGLang picks
  std::string log_level = "info";
  bool trust_remote_code = false;
  std::string dtype = "auto";
  int context_length = 0;  // 0: from the model's config
  bool skip_server_warmup = false;
  bool help = false;  // -h/--help: print Usage() and exit 0
};

// Parses the arguments after `-m sglang.launch_server`. InvalidArgument carries the whole text
// argparse would print on stderr (usage line and error line); the caller exits 2 with it.
absl::StatusOr<ServerArgs> ParseServerArgs(const std::vector<std::string>& args);

// Parses the arguments after `vllm serve` (the model positional, vLLM's flags) into the same
// struct: --enforce-eager sets disable_cuda_graph, --gpu-memory-utilization mem_fraction_static
// (default 0.9), --max-model-len context_length; host 0.0.0.0 and port 8000 by default. Errors as
// vLLM's argparse prints them ("vllm serve: error: unrecognized arguments: --foo").
absl::StatusOr<ServerArgs> ParseVllmServeArgs(const std::vector<std::string>& args);

// "usage: vllm serve [model_tag] [options]".
std::string VllmUsage();

// argparse's usage line ("usage: launch_server.py [-h] --model-path MODEL_PATH ...").
std::string Usage();

// The `server_args=ServerArgs(...)` record SGLang logs first, in Python's repr.
std::string FormatServerArgs(const ServerArgs& args);

// The attention backend in effect: the flag, else flashinfer (SGLang's choice for SM 12.x).
std::string EffectiveAttentionBackend(const ServerArgs& args);

}  // namespace fleet::sim
