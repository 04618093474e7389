#include "bench/classifier/startup_log_generator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fleet::bench {
namespace {

constexpr const char* kSite = "/usr/local/lib/python3.12/dist-packages";
constexpr const char* kJitRoot = "/root/.cache/flashinfer/0.5.3/120a";

// Days since 1970-01-01 of a civil date, and back (H. Hinnant's algorithms): timestamps advance
// through month and year ends on a long log without a time library.
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, int* m, int* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  *d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  *m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

const int64_t kStartDay = DaysFromCivil(2026, 11, 29);
constexpr int64_t kStartMs = 10 * 3600 * 1000;  // 10:00:00

constexpr const char* kModels[] = {"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B",
                                   "deepseek-ai/DeepSeek-V3", "Qwen/Qwen2.5-72B-Instruct",
                                   "mistralai/Mistral-Small-3.1-24B-Instruct-2503"};
constexpr const char* kDtypes[] = {"bf16", "f16"};
constexpr const char* kKvDtypes[] = {"bf16", "f16", "e4m3"};
constexpr int kHeadDims[] = {64, 128, 256};
constexpr const char* kBools[] = {"False", "True"};
constexpr const char* kSimpleOps[] = {"sampling",
                                      "norm",
                                      "rope",
                                      "activation",
                                      "cascade",
                                      "page",
                                      "quantization",
                                      "fused_moe_sm100",
                                      "gemm_sm120",
                                      "trtllm_comm",
                                      "fp4_quantization_sm120",
                                      "topk"};
constexpr const char* kArchs[] = {"90a", "100a", "120a", "120f"};
constexpr const char* kUnusedVariables[] = {"kv_idx_base", "num_iters",   "lane_idx",
                                            "warp_idx",    "smem_offset", "qo_packed_idx_base",
                                            "chunk_size"};
constexpr const char* kCudaHeaders[] = {"flashinfer/attention/prefill.cuh",
                                        "flashinfer/attention/decode.cuh",
                                        "flashinfer/attention/cascade.cuh",
                                        "flashinfer/sampling.cuh",
                                        "flashinfer/norm.cuh",
                                        "flashinfer/pos_enc.cuh",
                                        "flashinfer/attention/mla.cuh"};
constexpr const char* kNvccWarnings[] = {"177", "550", "186", "128", "2361"};
constexpr const char* kCudaDtypes[] = {"__nv_bfloat16", "half", "__nv_fp8_e4m3", "float"};
constexpr const char* kMaskModes[] = {"kNone", "kCausal", "kCustom", "kMultiItemScoring"};
constexpr int kTileSizes[] = {16, 64, 128};
constexpr const char* kPosEncodings[] = {"kNone", "kRoPELlama", "kALiBi"};
constexpr const char* kKernels[] = {
    "BatchPrefillWithPagedKVCacheKernel",     "BatchPrefillWithRaggedKVCacheKernel",
    "BatchDecodeWithPagedKVCacheKernel",      "SinglePrefillWithKVCacheKernel",
    "BatchPrefillWithPagedKVCacheDispatched", "MergeStatesKernel"};
constexpr const char* kGccWarnings[] = {
    "'c10::detail::_str' declared with greater visibility than the type of its field "
    "[-Wattributes]",
    "unused variable 'stream' [-Wunused-variable]",
    "comparison of integer expressions of different signedness: 'int' and 'long unsigned int' "
    "[-Wsign-compare]",
    "'at::Tensor::data() const' is deprecated: Tensor.data<T>() is deprecated. Please use "
    "Tensor.data_ptr<T>() instead. [-Wdeprecated-declarations]",
    "ignoring attributes on template argument 'cudaStream_t' [-Wignored-attributes]"};
constexpr const char* kTorchHeaders[] = {
    "torch/include/ATen/core/TensorBody.h", "torch/include/c10/util/Exception.h",
    "torch/include/torch/csrc/api/include/torch/nn/module.h",
    "torch/include/ATen/cuda/CUDAContext.h", "torch/include/pybind11/pybind11.h"};
constexpr const char* kHttpPaths[] = {"/health", "/v1/models", "/get_model_info",
                                      "/v1/chat/completions", "/generate"};

}  // namespace

StartupLogGenerator::StartupLogGenerator(StartupLogOptions options, int64_t target_bytes)
    : options_(options) {
  uint64_t s = options_.seed;
  for (uint64_t& word : state_) {
    s += 0x9e3779b97f4a7c15ULL;  // splitmix64
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    word = z ^ (z >> 31);
  }
  tp_size_ = static_cast<int>(1 << Between(0, 3));
  // The first failure lands in the middle half of the window, so even a small file has one.
  const int64_t window =
      std::max<int64_t>(4096, std::min(options_.first_failure_within_bytes, target_bytes));
  next_failure_at_ = window / 4 + static_cast<int64_t>(Below(static_cast<uint64_t>(window / 2)));
}

uint64_t StartupLogGenerator::Next() {
  const auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

uint64_t StartupLogGenerator::Below(uint64_t n) {
  // Multiply-shift on the top 32 bits (n is always far below 2^32 here): portable, and the bias
  // (n / 2^32) does not matter for a log generator.
  return ((Next() >> 32) * n) >> 32;
}

int64_t StartupLogGenerator::Between(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo + 1)));
}

void StartupLogGenerator::Line(std::string* out, std::string_view text) {
  out->append(text);
  out->push_back('\n');
  bytes_ += static_cast<int64_t>(text.size()) + 1;
  ++lines_;
}

void StartupLogGenerator::Advance(int64_t min_ms, int64_t max_ms) {
  clock_ms_ += Between(min_ms, max_ms);
}

std::string StartupLogGenerator::Stamp() const {
  const int64_t ms = kStartMs + clock_ms_;
  int64_t year;
  int month, day;
  CivilFromDays(kStartDay + ms / 86400000, &year, &month, &day);
  const int64_t in_day = ms % 86400000 / 1000;
  return absl::StrFormat("%04d-%02d-%02d %02d:%02d:%02d", year, month, day, in_day / 3600,
                         in_day / 60 % 60, in_day % 60);
}

std::string StartupLogGenerator::SglangPrefix(int rank) {
  return absl::StrCat("[", Stamp(), " TP", rank, "] ");
}

std::string StartupLogGenerator::SglangPrefix() { return absl::StrCat("[", Stamp(), "] "); }

std::string StartupLogGenerator::FlashinferPrefix() {
  return absl::StrCat(Stamp(), ",", absl::StrFormat("%03d", (kStartMs + clock_ms_) % 1000),
                      " - INFO - flashinfer.jit: ");
}

std::string StartupLogGenerator::JitOpName() {
  if (Chance(40)) return Pick(kSimpleOps);
  const int qk = Pick(kHeadDims);
  return absl::StrCat(Chance(50) ? "batch_prefill_with_kv_cache" : "batch_decode_with_kv_cache",
                      "_dtype_q_", Pick(kDtypes), "_dtype_kv_", Pick(kKvDtypes), "_dtype_o_",
                      Pick(kDtypes), "_dtype_idx_i32_head_dim_qk_", qk, "_head_dim_vo_", qk,
                      "_posenc_", Below(2), "_use_swa_", Pick(kBools), "_use_logits_cap_",
                      Pick(kBools), "_f16qk_False");
}

std::string StartupLogGenerator::NvccCommand(const std::string& op, const std::string& stem) {
  // flashinfer's verbose JIT build: one nvcc invocation per generated source, with the include
  // path, defines and -gencode list that make real lines 1-4 KB long.
  std::string s = absl::StrCat(
      "/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile --dependency-output ", op, "/",
      stem, ".cuda.o.d -DTORCH_EXTENSION_NAME=", op,
      " -DTORCH_API_INCLUDE_EXTENSION_H -DPy_LIMITED_API=0x03090000 -D_GLIBCXX_USE_CXX11_ABI=1"
      " -isystem /usr/include/python3.12 -isystem /usr/local/cuda/include -isystem "
      "/usr/local/cuda/include/cccl");
  for (const char* dir :
       {"tvm_ffi/include", "flashinfer/data/include", "flashinfer/data/csrc",
        "flashinfer/data/cutlass/include", "flashinfer/data/cutlass/tools/util/include",
        "flashinfer/data/spdlog/include", "torch/include",
        "torch/include/torch/csrc/api/include"}) {
    absl::StrAppend(&s, " -isystem ", kSite, "/", dir);
  }
  for (int64_t i = Between(0, 12); i > 0; --i) {
    absl::StrAppend(&s, " -I", kSite, "/flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/",
                    Pick(kSimpleOps), "/include");
  }
  absl::StrAppend(&s, " --compiler-options=-fPIC --expt-relaxed-constexpr");
  for (int64_t i = Between(1, 3); i > 0; --i) {
    const char* arch = Pick(kArchs);
    absl::StrAppend(&s, " -gencode=arch=compute_", arch, ",code=sm_", arch);
  }
  absl::StrAppend(&s,
                  " -O3 -std=c++17 --threads=4 -use_fast_math -DFLASHINFER_ENABLE_F16"
                  " -DFLASHINFER_ENABLE_BF16 -DFLASHINFER_ENABLE_FP8_E4M3"
                  " -DFLASHINFER_ENABLE_FP8_E5M2 -DNDEBUG");
  for (int64_t i = Between(0, 10); i > 0; --i) {
    absl::StrAppend(&s, " -DFLASHINFER_", Pick(kSimpleOps), "_TILE_", Between(16, 256), "=1");
  }
  absl::StrAppend(&s, " -c ", kJitRoot, "/generated/", op, "/", stem, ".cu -o ", kJitRoot,
                  "/cached_ops/", op, "/", stem, ".cuda.o");
  return s;
}

std::string StartupLogGenerator::LinkCommand(const std::string& op, int objects) {
  std::string s = "/usr/bin/c++";
  for (int i = 0; i < objects; ++i) {
    absl::StrAppend(&s, " ", kJitRoot, "/cached_ops/", op, "/", op, "_", i, ".cuda.o");
  }
  absl::StrAppend(&s, " -shared -L", kSite, "/torch/lib -lc10 -ltorch -L/usr/local/cuda/lib64",
                  " -lcudart -lcuda -o ", kJitRoot, "/cached_ops/", op, "/", op, ".so");
  return s;
}

void StartupLogGenerator::AppendBlock(std::string* out) {
  if (!prologue_done_) {
    prologue_done_ = true;
    Prologue(out);
    return;
  }
  if (bytes_ >= next_failure_at_) {
    Failure(out);
    const int64_t spacing = options_.mean_failure_spacing_bytes;
    next_failure_at_ = bytes_ + spacing / 2 + static_cast<int64_t>(Below(spacing + 1));
    return;
  }
  // Blocks by count: jit_percent JIT builds, the rest SGLang records, progress bars and, rarely, a
  // logged traceback (660:165:5). JIT blocks are large, so at the default 17% they are about 70%
  // of the bytes: ninja steps ~37%, compiler warnings ~34%; SGLang records ~21%, progress ~5%.
  const uint64_t jit_end = static_cast<uint64_t>(options_.jit_percent) * 10;
  const uint64_t rest = 1000 - jit_end;
  const uint64_t roll = Below(1000);
  if (roll < jit_end) {
    JitBuild(out);
  } else if (roll < jit_end + rest * 660 / 830) {
    SglangRecords(out);
  } else if (roll < jit_end + rest * 825 / 830) {
    ProgressBar(out);
  } else {
    HarmlessTraceback(out);
  }
}

void StartupLogGenerator::Prologue(std::string* out) {
  // An earlier attempt that reached READY and served a little: the classifier must forget it.
  const std::string model = Pick(kModels);
  std::string args = absl::StrCat(
      SglangPrefix(), "server_args=ServerArgs(model_path='", model, "', tokenizer_path='", model,
      "', tokenizer_mode='auto', skip_tokenizer_init=False, "
      "load_format='auto', trust_remote_code=False, dtype='auto', "
      "kv_cache_dtype='auto', quantization=None, context_length=None,"
      " device='cuda', served_model_name='",
      model, "', host='0.0.0.0', port=30000, mem_fraction_static=0.", Between(70, 90),
      ", max_running_requests=None, tp_size=", tp_size_,
      ", stream_interval=1, random_seed=", Below(1u << 30));
  for (const char* field :
       {"attention_backend='flashinfer'", "sampling_backend='flashinfer'",
        "grammar_backend='xgrammar'", "disable_cuda_graph=False", "disable_radix_cache=False",
        "enable_torch_compile=False", "cuda_graph_max_bs=160", "chunked_prefill_size=8192",
        "schedule_policy='fcfs'", "log_level='info'", "watchdog_timeout=300",
        "enable_metrics=False", "decode_log_interval=40"}) {
    absl::StrAppend(&args, ", ", field);
  }
  args.push_back(')');
  Line(out, args);
  for (int rank = 0; rank < tp_size_; ++rank) {
    Advance(10, 200);
    Line(out, absl::StrCat(SglangPrefix(rank), "Init torch distributed begin."));
  }
  for (int rank = 0; rank < tp_size_; ++rank) {
    Advance(100, 900);
    Line(out, absl::StrCat(SglangPrefix(rank), "Load weight begin. avail mem=",
                           absl::StrFormat("%.2f", 93.0 - Below(300) / 100.0), " GB"));
  }
  ProgressBar(out);
  for (int rank = 0; rank < tp_size_; ++rank) {
    Advance(100, 900);
    Line(out,
         absl::StrCat(SglangPrefix(rank), "Load weight end. type=LlamaForCausalLM, ",
                      "dtype=torch.bfloat16, avail mem=", Between(20, 80), ".", Between(10, 99),
                      " GB, mem usage=", Between(5, 70), ".", Between(10, 99), " GB."));
  }
  JitBuild(out);
  Line(out, absl::StrCat(SglangPrefix(0),
                         "Capture cuda graph begin. This can take up to several minutes. "
                         "avail mem=19.01 GB"));
  ProgressBar(out);
  Line(out, absl::StrCat(SglangPrefix(0), "Capture cuda graph end. Time elapsed: ", Between(5, 40),
                         ".", Between(10, 99), " s. mem usage=0.81 GB."));
  Advance(500, 2000);
  Line(out,
       absl::StrCat(SglangPrefix(), "INFO:     Started server process [", Between(40, 9000), "]"));
  Line(out, absl::StrCat(SglangPrefix(), "INFO:     Waiting for application startup."));
  Line(out, absl::StrCat(SglangPrefix(), "INFO:     Application startup complete."));
  Line(out, absl::StrCat(SglangPrefix(),
                         "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to "
                         "quit)"));
  Line(out, absl::StrCat(SglangPrefix(), "The server is fired up and ready to roll!"));
  SglangRecords(out);
  Advance(60000, 600000);
  Line(out, absl::StrCat(SglangPrefix(), "Received SIGTERM: shutting down, restarting with ",
                         "new launch flags"));
}

void StartupLogGenerator::JitBuild(std::string* out) {
  const std::string op = JitOpName();
  Advance(5, 200);
  Line(out, absl::StrCat(FlashinferPrefix(), "Loading JIT ops: ", op));
  const int steps = static_cast<int>(Between(2, 12));
  const int total = steps + 1;
  for (int i = 1; i <= steps; ++i) {
    Advance(500, 30000);
    Line(out,
         absl::StrCat("[", i, "/", total, "] ", NvccCommand(op, absl::StrCat(op, "_", i - 1))));
    // Compilers talk: most steps print a few warnings, nvcc's with a remark after them.
    int nvcc_warnings = 0;
    for (int64_t w = Between(0, 4); w > 0; --w) {
      if (Chance(70)) {
        NvccWarning(out, op);
        ++nvcc_warnings;
      } else {
        GccWarning(out);
      }
    }
    if (nvcc_warnings > 0) {
      Line(out, "Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"");
      Line(out, "");
    }
  }
  Advance(500, 5000);
  Line(out, absl::StrCat("[", total, "/", total, "] ", LinkCommand(op, steps)));
  Line(out, absl::StrCat(FlashinferPrefix(), "Finished loading JIT ops: ", op));
}

void StartupLogGenerator::NvccWarning(std::string* out, const std::string& op) {
  // What nvcc prints for flashinfer's templates: the warning, the source line and caret, and the
  // chain of instantiations, each naming the full template arguments (lines of 300-900 bytes).
  const char* variable = Pick(kUnusedVariables);
  Line(out, absl::StrCat(kSite, "/flashinfer/data/include/", Pick(kCudaHeaders), "(",
                         Between(40, 2800), "): warning #", Pick(kNvccWarnings), "-D: variable \"",
                         variable, "\" was declared but never referenced"));
  Line(out, absl::StrCat("      const uint32_t ", variable, " = blockIdx.x * num_rows_per_cta;"));
  Line(out, "                     ^");
  Line(out, "          detected during:");
  const auto traits = [&]() {
    const char* dtype = Pick(kCudaDtypes);
    return absl::StrCat(
        "flashinfer::KernelTraits<flashinfer::MaskMode::", Pick(kMaskModes), ", ", Pick(kTileSizes),
        "U, 1U, 4U, 8U, 8U, 1U, 1U, flashinfer::PosEncodingMode::", Pick(kPosEncodings), ", ",
        dtype, ", ", dtype, ", ", dtype,
        ", float, int32_t, flashinfer::DefaultAttention<false, false, false, "
        "false>>");
  };
  for (int64_t depth = Between(1, 4); depth > 0; --depth) {
    const char* dtype = Pick(kCudaDtypes);
    Line(out, absl::StrCat(
                  "            instantiation of \"", depth > 1 ? "cudaError_t" : "void",
                  " flashinfer::", Pick(kKernels), "<KTraits,Params>(Params) [with KTraits=",
                  traits(), ", Params=flashinfer::BatchPrefillPagedParams<", dtype, ", ", dtype,
                  ", ", dtype, ", int32_t>]\" at line ", Between(60, 2600), " of ",
                  depth > 1 ? absl::StrCat(kSite, "/flashinfer/data/include/", Pick(kCudaHeaders))
                            : absl::StrCat(kJitRoot, "/generated/", op, "/", op, "_0.cu")));
  }
  Line(out, "");
}

void StartupLogGenerator::GccWarning(std::string* out) {
  const char* header = Pick(kTorchHeaders);
  Line(out, absl::StrCat("In file included from ", kSite, "/", header, ":", Between(3, 60), ","));
  Line(out, absl::StrCat("                 from ", kSite,
                         "/flashinfer/data/csrc/pytorch_extension_utils.h:", Between(3, 40), ":"));
  const int64_t line = Between(20, 900);
  Line(out, absl::StrCat(kSite, "/", header, ":", line, ":", Between(3, 40),
                         ": warning: ", Pick(kGccWarnings)));
  Line(out, absl::StrFormat("  %4d |   auto stream = at::cuda::getCurrentCUDAStream();", line));
  Line(out, "       |        ^~~~~~");
}

void StartupLogGenerator::SglangRecords(std::string* out) {
  for (int64_t n = Between(4, 60); n > 0; --n) {
    Advance(1, 300);
    const int rank = static_cast<int>(Below(static_cast<uint64_t>(tp_size_)));
    switch (Below(9)) {
      case 0:
        Line(out, absl::StrCat(SglangPrefix(rank),
                               "KV Cache is allocated. #tokens: ", Between(100000, 900000),
                               ", K size: ", Between(2, 40), ".", Between(10, 99),
                               " GB, V size: ", Between(2, 40), ".", Between(10, 99), " GB"));
        break;
      case 1:
        Line(out, absl::StrCat(SglangPrefix(rank), "Memory pool end. avail mem=", Between(5, 30),
                               ".", Between(10, 99), " GB"));
        break;
      case 2:
        Line(out, absl::StrCat(SglangPrefix(rank), "max_total_num_tokens=", Between(100000, 900000),
                               ", chunked_prefill_size=8192, max_prefill_tokens=16384, "
                               "max_running_requests=4096, context_len=131072, "
                               "available_gpu_mem=",
                               Between(5, 30), ".", Between(10, 99), " GB"));
        break;
      case 3:
        Line(out,
             absl::StrCat(SglangPrefix(rank), "Decode batch. #running-req: ", Between(1, 256),
                          ", #token: ", Between(100, 90000), ", token usage: 0.", Between(10, 99),
                          ", cuda graph: True, gen throughput (token/s): ", Between(100, 9000), ".",
                          Between(10, 99), ", #queue-req: ", Between(0, 40)));
        break;
      case 4:
        Line(out,
             absl::StrCat(SglangPrefix(rank), "Prefill batch. #new-seq: ", Between(1, 16),
                          ", #new-token: ", Between(1, 8192), ", #cached-token: ", Between(0, 8192),
                          ", token usage: 0.", Between(10, 99), ", #running-req: ", Between(0, 256),
                          ", #queue-req: ", Between(0, 40)));
        break;
      case 5:
        Line(out,
             absl::StrCat(SglangPrefix(), "INFO:     127.0.0.1:", Between(30000, 65000), " - \"",
                          Chance(50) ? "GET " : "POST ", Pick(kHttpPaths), " HTTP/1.1\" 200 OK"));
        break;
      case 6:
        Line(out, absl::StrCat(SglangPrefix(rank), "Using KV cache dtype: torch.bfloat16"));
        break;
      case 7:
        Line(out, absl::StrCat(SglangPrefix(rank), "Init torch distributed ends. mem usage=",
                               Between(0, 3), ".", Between(10, 99), " GB"));
        break;
      default:
        Line(out, absl::StrCat(SglangPrefix(rank), "Attention backend not explicitly specified. ",
                               "Use flashinfer backend by default."));
        break;
    }
  }
}

void StartupLogGenerator::ProgressBar(std::string* out) {
  // tqdm redraws with '\r': one "line" holds every redraw, several KB of it.
  std::string bar;
  const bool shards = Chance(40);
  const int64_t total = shards ? Between(4, 64) : Between(20, 52);
  const int64_t redraws = std::min<int64_t>(total, 40);
  for (int64_t i = 0; i <= redraws; ++i) {
    const int64_t done = total * i / redraws;
    const int64_t percent = 100 * done / total;
    if (i > 0) bar.push_back('\r');
    if (shards) {
      absl::StrAppend(
          &bar, "Loading safetensors checkpoint shards: ", absl::StrFormat("%3d", percent),
          "% Completed | ", done, "/", total, " [00:", absl::StrFormat("%02d", i % 60),
          "<00:", absl::StrFormat("%02d", (redraws - i) % 60), ",  1.", Between(10, 99), "it/s]");
    } else {
      // The bar itself is UTF-8 block characters, as tqdm draws it.
      std::string blocks;
      for (int64_t b = 0; b < 10; ++b) blocks += b < percent / 10 ? "\u2588" : " ";
      absl::StrAppend(&bar, "Capturing batches (bs=", 160 - 3 * i, " avail_mem=", Between(10, 30),
                      ".", Between(10, 99), " GB): ", absl::StrFormat("%3d", percent), "%|", blocks,
                      "| ", done, "/", total, " [00:", absl::StrFormat("%02d", i % 60),
                      "<00:", absl::StrFormat("%02d", (redraws - i) % 60), ",  ", Between(1, 9),
                      ".", Between(10, 99), "it/s]");
    }
  }
  Advance(1000, 20000);
  Line(out, bar);
}

void StartupLogGenerator::HarmlessTraceback(std::string* out) {
  // Logged and survived: an optional tool or import that is missing. A symptom, never the cause.
  Line(out, absl::StrCat(SglangPrefix(0), "Failed to get GPU memory capacity from nvidia-smi, ",
                         "falling back to torch:"));
  Line(out, "Traceback (most recent call last):");
  Line(out, absl::StrCat("  File \"", kSite, "/sglang/srt/utils/common.py\", line ",
                         Between(100, 3000), ", in get_nvgpu_memory_capacity"));
  Line(out, "    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)");
  Line(out, "  File \"/usr/lib/python3.12/subprocess.py\", line 548, in run");
  Line(out, "    with Popen(*popenargs, **kwargs) as process:");
  Line(out, "         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^");
  Line(out, "FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'");
}

void StartupLogGenerator::RootCauseLine(std::string* out, std::string_view text,
                                        std::string_view kind, std::string_view diagnosis_class) {
  Line(out, text);
  if (!first_failure_) first_failure_ = InjectedFailure{kind, diagnosis_class, lines_};
}

void StartupLogGenerator::Failure(std::string* out) {
  ++failures_;
  const std::string op = JitOpName();
  const std::string stem = absl::StrCat(op, "_0");
  const std::string object = absl::StrCat(kJitRoot, "/cached_ops/", op, "/", stem, ".cuda.o");
  const int rank = static_cast<int>(Below(static_cast<uint64_t>(tp_size_)));
  // SGLang's parent often reports the dead child before the child's own output arrives.
  const bool sigquit_first = Chance(50);
  const auto sigquit = [&]() {
    Line(out, absl::StrCat(SglangPrefix(),
                           "Received sigquit from a child process. It usually means the child "
                           "failed."));
  };
  const auto ninja_tail = [&]() {
    Line(out, "ninja: build stopped: subcommand failed.");
    Line(out, absl::StrCat(SglangPrefix(rank), "Scheduler hit an exception: Traceback (most ",
                           "recent call last):"));
    Line(out, absl::StrCat("  File \"", kSite, "/flashinfer/jit/cpp_ext.py\", line ",
                           Between(200, 400), ", in run_ninja"));
    Line(out, "    subprocess.run(");
    Line(out, "  File \"/usr/lib/python3.12/subprocess.py\", line 571, in run");
    Line(out, "    raise CalledProcessError(retcode, process.args,");
    Line(out, absl::StrCat("subprocess.CalledProcessError: Command '['ninja', '-v', '-C', '",
                           kJitRoot, "/cached_ops', '-f', '", kJitRoot, "/cached_ops/", op,
                           "/build.ninja']' returned non-zero exit status 1."));
    Line(out, "");
    Line(out, "The above exception was the direct cause of the following exception:");
    Line(out, "");
    Line(out, "Traceback (most recent call last):");
    Line(out, absl::StrCat("  File \"", kSite, "/flashinfer/jit/core.py\", line ",
                           Between(100, 300), ", in build_and_load"));
    Line(out, "    self.build(verbose)");
    Line(out, absl::StrCat("RuntimeError: Ninja build failed. Ninja output:"));
  };

  if (sigquit_first) sigquit();
  switch (Below(7)) {
    case 0: {
      Line(out, absl::StrCat("FAILED: [code=255] ", object));
      Line(out, NvccCommand(op, stem));
      RootCauseLine(out,
                    absl::StrFormat("ptxas /tmp/tmpxft_%08x_00000000-6_%s.ptx, line 5; fatal   : "
                                    "Unsupported .version 9.2; current version is '9.0'",
                                    static_cast<unsigned>(Below(1u << 28)), stem),
                    "ptxas_unsupported_version", "ptx_version_unsupported");
      Line(out, "ptxas fatal   : Ptx assembly aborted due to errors");
      ninja_tail();
      break;
    }
    case 1: {
      Line(out, absl::StrCat("FAILED: [code=1] ", kJitRoot, "/cached_ops/", op, "/", op, ".so"));
      Line(out, LinkCommand(op, static_cast<int>(Between(1, 6))));
      RootCauseLine(out, "/usr/bin/ld: cannot find -lcuda: No such file or directory",
                    "link_cannot_find_lcuda", "link_error");
      Line(out, "collect2: error: ld returned 1 exit status");
      ninja_tail();
      break;
    }
    case 2: {
      Line(out, absl::StrCat(SglangPrefix(rank), "Scheduler hit an exception: Traceback (most ",
                             "recent call last):"));
      Line(out, absl::StrCat("  File \"", kSite, "/sglang/srt/managers/scheduler.py\", line ",
                             Between(2000, 3000), ", in run_scheduler_process"));
      Line(out,
           "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, "
           "pp_rank, dp_rank)");
      Line(out, absl::StrCat("  File \"", kSite, "/flashinfer/jit/env.py\", line ", Between(20, 90),
                             ", in <module>"));
      Line(out, "    from cuda.bindings import nvrtc");
      RootCauseLine(out,
                    "ImportError: libnvrtc.so.13: cannot open shared object file: No such file "
                    "or directory",
                    "import_error_libnvrtc", "missing_shared_library");
      break;
    }
    case 3: {
      RootCauseLine(out, absl::StrCat("FAILED: [code=137] ", object), "ninja_step_killed",
                    "jit_oom_killed");
      Line(out, NvccCommand(op, stem));
      Line(out, "Killed");
      ninja_tail();
      break;
    }
    case 4: {
      Line(out, absl::StrCat(SglangPrefix(rank), "Scheduler hit an exception: Traceback (most ",
                             "recent call last):"));
      Line(out,
           absl::StrCat("  File \"", kSite, "/sglang/srt/model_executor/model_runner.py\", line ",
                        Between(1000, 2500), ", in init_memory_pool"));
      Line(out, "    self.token_to_kv_pool = MHATokenToKVPool(");
      RootCauseLine(out,
                    absl::StrCat("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
                                 Between(1, 9), ".00 GiB. GPU ", rank,
                                 " has a total capacity of 93.10 GiB of which 1.06 GiB is free."),
                    "cuda_out_of_memory", "cuda_out_of_memory");
      break;
    }
    case 5: {
      Line(out, absl::StrCat("FAILED: [code=1] ", object));
      Line(out, NvccCommand(op, stem));
      RootCauseLine(out, "nvcc fatal   : Unsupported gpu architecture 'compute_120a'",
                    "nvcc_unsupported_arch", "unsupported_gpu_arch");
      ninja_tail();
      break;
    }
    default: {
      Line(out, absl::StrCat("FAILED: [code=1] ", object));
      Line(out, NvccCommand(op, stem));
      RootCauseLine(out,
                    "/usr/local/cuda/include/cccl/cuda/std/__cccl/preprocessor.h(23): error: "
                    "#error directive: \"CUDA compiler and CUDA toolkit headers are "
                    "incompatible, please check your include paths\"",
                    "cccl_header_mismatch", "cuda_header_mismatch");
      Line(out, "1 error detected in the compilation of \"" + stem + ".cu\".");
      ninja_tail();
      break;
    }
  }
  if (!sigquit_first) sigquit();
}

}  // namespace fleet::bench
