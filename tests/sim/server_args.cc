#include "tests/sim/server_args.h"

#include <cstdlib>
#include <functional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fleet::sim {
namespace {

constexpr char kProg[] = "launch_server.py";

const std::vector<std::string>& AttentionBackends() {
  static const auto* backends =
      new std::vector<std::string>{"flashinfer", "triton",   "torch_native", "fa3",
                                   "fa4",        "flashmla", "trtllm_mha",   "cutlass_mla"};
  return *backends;
}

// One flag: its spellings, whether it takes a value, and how the value is stored. `set` returns
// an argparse error fragment ("invalid int value: 'x'") or "" when the value is accepted.
struct FlagSpec {
  std::vector<std::string> names;
  std::string metavar;  // empty: a switch without value
  std::function<std::string(ServerArgs*, const std::string&)> set;
};

std::function<std::string(ServerArgs*, const std::string&)> IntInto(int ServerArgs::*field) {
  return [field](ServerArgs* a, const std::string& v) -> std::string {
    if (!absl::SimpleAtoi(v, &(a->*field))) return absl::StrCat("invalid int value: '", v, "'");
    return "";
  };
}
std::function<std::string(ServerArgs*, const std::string&)> StringInto(
    std::string ServerArgs::*field) {
  return [field](ServerArgs* a, const std::string& v) -> std::string {
    a->*field = v;
    return "";
  };
}
std::function<std::string(ServerArgs*, const std::string&)> SwitchOn(bool ServerArgs::*field) {
  return [field](ServerArgs* a, const std::string&) -> std::string {
    a->*field = true;
    return "";
  };
}
// Flags a supervisor may pass that change nothing in the simulation.
std::function<std::string(ServerArgs*, const std::string&)> Ignored() {
  return [](ServerArgs*, const std::string&) -> std::string { return ""; };
}

const std::vector<FlagSpec>& Flags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {{"--model-path", "--model"}, "MODEL_PATH", StringInto(&ServerArgs::model_path)},
      {{"--tokenizer-path"}, "TOKENIZER_PATH", StringInto(&ServerArgs::tokenizer_path)},
      {{"--served-model-name"}, "SERVED_MODEL_NAME", StringInto(&ServerArgs::served_model_name)},
      {{"--host"}, "HOST", StringInto(&ServerArgs::host)},
      {{"--port"},
       "PORT",
       [](ServerArgs* a, const std::string& v) -> std::string {
         if (!absl::SimpleAtoi(v, &a->port)) return absl::StrCat("invalid int value: '", v, "'");
         if (a->port < 1 || a->port > 65535) return absl::StrCat("invalid port: '", v, "'");
         return "";
       }},
      {{"--tp-size", "--tp", "--tensor-parallel-size"},
       "TP_SIZE",
       [](ServerArgs* a, const std::string& v) -> std::string {
         if (!absl::SimpleAtoi(v, &a->tp_size)) return absl::StrCat("invalid int value: '", v, "'");
         if (a->tp_size < 1 || a->tp_size > 8) return absl::StrCat("invalid tp size: '", v, "'");
         return "";
       }},
      {{"--base-gpu-id"}, "BASE_GPU_ID", IntInto(&ServerArgs::base_gpu_id)},
      {{"--attention-backend"},
       "{flashinfer,triton,torch_native,fa3,fa4,flashmla,trtllm_mha,cutlass_mla}",
       [](ServerArgs* a, const std::string& v) -> std::string {
         for (const std::string& b : AttentionBackends()) {
           if (b == v) {
             a->attention_backend = v;
             return "";
           }
         }
         std::vector<std::string> quoted;
         for (const std::string& b : AttentionBackends())
           quoted.push_back(absl::StrCat("'", b, "'"));
         return absl::StrCat("invalid choice: '", v, "' (choose from ", absl::StrJoin(quoted, ", "),
                             ")");
       }},
      {{"--disable-cuda-graph"}, "", SwitchOn(&ServerArgs::disable_cuda_graph)},
      {{"--mem-fraction-static"},
       "MEM_FRACTION_STATIC",
       [](ServerArgs* a, const std::string& v) -> std::string {
         if (!absl::SimpleAtod(v, &a->mem_fraction_static) || a->mem_fraction_static <= 0 ||
             a->mem_fraction_static > 1) {
           return absl::StrCat("invalid float value: '", v, "'");
         }
         return "";
       }},
      {{"--log-level"}, "LOG_LEVEL", StringInto(&ServerArgs::log_level)},
      {{"--trust-remote-code"}, "", SwitchOn(&ServerArgs::trust_remote_code)},
      {{"--dtype"}, "DTYPE", StringInto(&ServerArgs::dtype)},
      {{"--context-length"}, "CONTEXT_LENGTH", IntInto(&ServerArgs::context_length)},
      {{"--skip-server-warmup"}, "", SwitchOn(&ServerArgs::skip_server_warmup)},
      {{"--chunked-prefill-size"}, "CHUNKED_PREFILL_SIZE", Ignored()},
      {{"--max-running-requests"}, "MAX_RUNNING_REQUESTS", Ignored()},
      {{"--cuda-graph-max-bs"}, "CUDA_GRAPH_MAX_BS", Ignored()},
      {{"--kv-cache-dtype"}, "KV_CACHE_DTYPE", Ignored()},
      {{"--random-seed"}, "RANDOM_SEED", Ignored()},
      {{"--watchdog-timeout"}, "WATCHDOG_TIMEOUT", Ignored()},
      {{"--enable-metrics"}, "", Ignored()},
      {{"--disable-radix-cache"}, "", Ignored()},
      {{"--disable-piecewise-cuda-graph"}, "", Ignored()},
  };
  return *flags;
}

// `vllm serve`'s flags (vLLM's EngineArgs and frontend arguments) that a supervisor passes, in
// ServerArgs' terms: --enforce-eager is SGLang's --disable-cuda-graph, --gpu-memory-utilization
// its --mem-fraction-static, --max-model-len its --context-length.
const std::vector<FlagSpec>& VllmFlags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {{"--model"}, "MODEL", StringInto(&ServerArgs::model_path)},
      {{"--tokenizer"}, "TOKENIZER", StringInto(&ServerArgs::tokenizer_path)},
      {{"--served-model-name"}, "SERVED_MODEL_NAME", StringInto(&ServerArgs::served_model_name)},
      {{"--host"}, "HOST", StringInto(&ServerArgs::host)},
      {{"--port"}, "PORT", IntInto(&ServerArgs::port)},
      {{"--tensor-parallel-size", "-tp"},
       "TENSOR_PARALLEL_SIZE",
       [](ServerArgs* a, const std::string& v) -> std::string {
         if (!absl::SimpleAtoi(v, &a->tp_size)) return absl::StrCat("invalid int value: '", v, "'");
         return "";
       }},
      {{"--enforce-eager"}, "", SwitchOn(&ServerArgs::disable_cuda_graph)},
      {{"--gpu-memory-utilization"},
       "GPU_MEMORY_UTILIZATION",
       [](ServerArgs* a, const std::string& v) -> std::string {
         if (!absl::SimpleAtod(v, &a->mem_fraction_static)) {
           return absl::StrCat("invalid float value: '", v, "'");
         }
         return "";
       }},
      {{"--max-model-len"}, "MAX_MODEL_LEN", IntInto(&ServerArgs::context_length)},
      {{"--dtype"}, "DTYPE", StringInto(&ServerArgs::dtype)},
      {{"--trust-remote-code"}, "", SwitchOn(&ServerArgs::trust_remote_code)},
      {{"--uvicorn-log-level"}, "UVICORN_LOG_LEVEL", StringInto(&ServerArgs::log_level)},
      {{"--max-num-seqs"}, "MAX_NUM_SEQS", Ignored()},
      {{"--max-num-batched-tokens"}, "MAX_NUM_BATCHED_TOKENS", Ignored()},
      {{"--kv-cache-dtype"}, "KV_CACHE_DTYPE", Ignored()},
      {{"--seed"}, "SEED", Ignored()},
      {{"--disable-log-requests"}, "", Ignored()},
      {{"--disable-log-stats"}, "", Ignored()},
      {{"--enable-prefix-caching"}, "", Ignored()},
      {{"--no-enable-prefix-caching"}, "", Ignored()},
  };
  return *flags;
}

// One dialect of argparse: the program name its errors carry, its usage line and its flags.
struct Dialect {
  std::string prog;
  std::string usage;
  const std::vector<FlagSpec>* flags;
  bool positional_model;  // vLLM: `serve MODEL`
};

const FlagSpec* FindFlag(const Dialect& dialect, std::string_view name) {
  for (const FlagSpec& f : *dialect.flags) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

absl::Status ArgparseError(const Dialect& dialect, std::string_view error) {
  return absl::InvalidArgumentError(
      absl::StrCat(dialect.usage, "\n", dialect.prog, ": error: ", std::string(error), "\n"));
}

std::string PyStr(const std::string& s) { return s.empty() ? "None" : absl::StrCat("'", s, "'"); }
std::string PyBool(bool b) { return b ? "True" : "False"; }

}  // namespace

std::string VllmUsage() { return "usage: vllm serve [model_tag] [options]"; }

std::string Usage() {
  std::string usage = absl::StrCat("usage: ", kProg, " [-h]");
  for (const FlagSpec& f : Flags()) {
    absl::StrAppend(&usage, f.names[0] == "--model-path" ? " " : " [", f.names[0]);
    if (!f.metavar.empty()) absl::StrAppend(&usage, " ", f.metavar);
    if (f.names[0] != "--model-path") absl::StrAppend(&usage, "]");
  }
  return usage;
}

namespace {

absl::StatusOr<ServerArgs> Parse(const Dialect& dialect, const std::vector<std::string>& args,
                                 ServerArgs parsed) {
  std::vector<std::string> unrecognized;
  bool have_model = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (dialect.positional_model && !have_model && arg.rfind("-", 0) != 0) {
      parsed.model_path = arg;
      have_model = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.rfind("--", 0) == 0 ? arg.substr(0, eq) : arg;
    const FlagSpec* flag = FindFlag(dialect, name);
    if (flag == nullptr) {
      // argparse lists every argument it could not place, values of unknown flags included.
      unrecognized.push_back(arg);
      continue;
    }
    std::string value;
    if (!flag->metavar.empty()) {
      if (eq != std::string::npos && arg.rfind("--", 0) == 0) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        value = args[++i];
      } else {
        return ArgparseError(dialect, absl::StrCat("argument ", absl::StrJoin(flag->names, "/"),
                                                   ": expected one argument"));
      }
    } else if (eq != std::string::npos) {
      return ArgparseError(dialect,
                           absl::StrCat("argument ", absl::StrJoin(flag->names, "/"),
                                        ": ignored explicit argument '", arg.substr(eq + 1), "'"));
    }
    if (std::string error = flag->set(&parsed, value); !error.empty()) {
      return ArgparseError(dialect,
                           absl::StrCat("argument ", absl::StrJoin(flag->names, "/"), ": ", error));
    }
    if (flag->names[0] == "--model-path" || flag->names[0] == "--model") have_model = true;
  }
  if (!have_model) {
    return ArgparseError(dialect,
                         dialect.positional_model
                             ? "the following arguments are required: model_tag"
                             : "the following arguments are required: --model-path/--model");
  }
  if (!unrecognized.empty()) {
    return ArgparseError(
        dialect, absl::StrCat("unrecognized arguments: ", absl::StrJoin(unrecognized, " ")));
  }
  return parsed;
}

Dialect SglangDialect() { return {kProg, Usage(), &Flags(), false}; }

}  // namespace

absl::StatusOr<ServerArgs> ParseServerArgs(const std::vector<std::string>& args) {
  return Parse(SglangDialect(), args, ServerArgs{});
}

absl::StatusOr<ServerArgs> ParseVllmServeArgs(const std::vector<std::string>& args) {
  ServerArgs defaults;
  defaults.host = "0.0.0.0";
  defaults.port = 8000;
  defaults.mem_fraction_static = 0.9;
  return Parse({"vllm serve", VllmUsage(), &VllmFlags(), true}, args, defaults);
}

std::string EffectiveAttentionBackend(const ServerArgs& args) {
  return args.attention_backend.empty() ? "flashinfer" : args.attention_backend;
}

std::string FormatServerArgs(const ServerArgs& a) {
  const std::string tokenizer = a.tokenizer_path.empty() ? a.model_path : a.tokenizer_path;
  const std::string served = a.served_model_name.empty() ? a.model_path : a.served_model_name;
  return absl::StrFormat(
      "server_args=ServerArgs(model_path=%s, tokenizer_path=%s, tokenizer_mode='auto', "
      "skip_tokenizer_init=False, load_format='auto', trust_remote_code=%s, dtype=%s, "
      "kv_cache_dtype='auto', quantization=None, context_length=%s, device='cuda', "
      "served_model_name=%s, chat_template=None, is_embedding=False, revision=None, host=%s, "
      "port=%d, mem_fraction_static=%s, max_running_requests=None, chunked_prefill_size=8192, "
      "max_prefill_tokens=16384, schedule_policy='fcfs', tp_size=%d, pp_size=1, "
      "stream_interval=1, random_seed=%d, watchdog_timeout=300, log_level=%s, "
      "log_requests=False, base_gpu_id=%d, gpu_id_step=1, dp_size=1, attention_backend=%s, "
      "sampling_backend='flashinfer', disable_cuda_graph=%s, disable_radix_cache=False, "
      "enable_torch_compile=False, cuda_graph_max_bs=None, skip_server_warmup=%s)",
      PyStr(a.model_path), PyStr(tokenizer), PyBool(a.trust_remote_code), PyStr(a.dtype),
      a.context_length > 0 ? absl::StrCat(a.context_length) : "None", PyStr(served), PyStr(a.host),
      a.port, a.mem_fraction_static > 0 ? absl::StrFormat("%g", a.mem_fraction_static) : "0.871",
      a.tp_size, 42, PyStr(a.log_level), a.base_gpu_id, PyStr(a.attention_backend),
      PyBool(a.disable_cuda_graph), PyBool(a.skip_server_warmup));
}

}  // namespace fleet::sim
