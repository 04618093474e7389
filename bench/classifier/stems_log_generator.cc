#include "bench/classifier/stems_log_generator.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace fleet::bench {
namespace {

constexpr const char* kSite = "/usr/local/lib/python3.12/dist-packages";
constexpr const char* kJitRoot = "/root/.cache/flashinfer/0.5.3/120a";
constexpr const char* kLibraries[] = {"libcudart.so.13", "libnvrtc.so.13", "libcublas.so.12",
                                      "libnccl.so.2",    "libcuda.so.1",   "libtorch_cuda.so"};
constexpr const char* kArchs[] = {"compute_120a", "compute_100a", "compute_120f", "sm_120a"};
constexpr const char* kOps[] = {
    "sampling", "norm", "rope", "fused_moe_sm100", "gemm_sm120", "batch_prefill_with_kv_cache",
    "topk"};
constexpr const char* kModules[] = {"sgl_kernel", "flashinfer", "vllm._C",
                                    "triton",     "xgrammar",   "cuda.bindings"};
constexpr const char* kSymbols[] = {"cuLaunchKernelEx", "cuTensorMapEncodeTiled", "nvrtcGetCUBIN",
                                    "cublasLtMatmul", "ncclCommInitRankConfig"};
constexpr const char* kLinkLibraries[] = {"cuda", "nvrtc", "cudart", "cublas", "nccl"};
constexpr int kExitCodes[] = {1, 2, 255};
constexpr const char* kCublas[] = {"CUBLAS_STATUS_EXECUTION_FAILED", "CUBLAS_STATUS_NOT_SUPPORTED",
                                   "CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_INTERNAL_ERROR"};

// "[2026-11-29 10:00:00" at the start of an SGLang line: the stamp inserted lines reuse, so that
// time runs on as it does in the body.
std::string_view LeadingStamp(std::string_view line) {
  if (line.size() < 21 || line[0] != '[' || line[5] != '-' || line[11] != ' ') return {};
  return line.substr(1, 19);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadStemsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("stems file ", path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> stems;
  for (absl::string_view line : absl::StrSplit(ss.str(), '\n')) {
    if (!line.empty()) stems.emplace_back(line.data(), line.size());
  }
  if (stems.empty())
    return absl::InvalidArgumentError(absl::StrCat("stems file ", path, ": empty"));
  return stems;
}

absl::StatusOr<std::unique_ptr<StemsLogGenerator>> StemsLogGenerator::Create(
    StemsLogOptions options, const std::vector<std::string>& stems, int64_t target_bytes) {
  if (stems.empty()) return absl::InvalidArgumentError("stems: none given");
  if (options.stem_percent < 1 || options.stem_percent > 99) {
    return absl::InvalidArgumentError("stems: stem_percent must be in 1-99");
  }
  // POSIX syntax, longest match, case-sensitive and without Perl classes: what LC_ALL=C grep -E
  // reads (the stems are ERE).
  RE2::Options re2_options;
  re2_options.set_posix_syntax(true);
  re2_options.set_longest_match(true);
  re2_options.set_log_errors(false);
  re2_options.set_max_mem(64 << 20);
  auto set = std::make_unique<re2::RE2::Set>(re2_options, RE2::UNANCHORED);
  for (const std::string& stem : stems) {
    std::string error;
    if (set->Add(stem, &error) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("stem '", stem, "': ", error));
    }
  }
  if (!set->Compile()) return absl::InvalidArgumentError("stems: the set does not compile");
  return std::unique_ptr<StemsLogGenerator>(
      new StemsLogGenerator(options, std::move(set), target_bytes));
}

StemsLogGenerator::StemsLogGenerator(StemsLogOptions options, std::unique_ptr<re2::RE2::Set> stems,
                                     int64_t target_bytes)
    : options_(options),
      stems_(std::move(stems)),
      body_(
          [&] {
            StartupLogOptions o;
            o.seed = options.seed;
            o.jit_percent = options.jit_percent;
            // One failed start: one failure, early, so that even a small log is mostly after it
            // and reaches its share of matching lines.
            o.mean_failure_spacing_bytes = std::numeric_limits<int64_t>::max() / 4;
            o.first_failure_within_bytes = 256 << 10;
            return o;
          }(),
          target_bytes),
      state_(options.seed * 0x2545f4914f6cdd1dULL + 0x5851f42d4c957f2dULL) {}

uint64_t StemsLogGenerator::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool StemsLogGenerator::Matches(std::string_view line) const {
  return stems_->Match(re2::StringPiece(line.data(), line.size()), nullptr);
}

void StemsLogGenerator::Line(std::string* out, std::string_view text) {
  out->append(text);
  out->push_back('\n');
  bytes_ += static_cast<int64_t>(text.size()) + 1;
  ++lines_;
  matching_lines_ += Matches(text);
}

void StemsLogGenerator::AppendBlock(std::string* out) {
  // Lines go in only after the block that holds the first failure.
  const bool insert = body_.first_failure().has_value();
  body_block_.clear();
  body_.AppendBlock(&body_block_);
  std::string_view rest = body_block_;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');  // the body writes whole lines
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    Line(out, line);
    if (std::string_view stamp = LeadingStamp(line); !stamp.empty()) stamp_ = std::string(stamp);
    // Behind the share: a stem line, most of the time (the gaps between them vary).
    if (insert && matching_lines_ * 100 < lines_ * options_.stem_percent && Below(100) < 60) {
      Line(out, StemLine());
      ++inserted_lines_;
    }
  }
}

std::string StemsLogGenerator::StemLine() {
  const std::string sg =
      absl::StrCat("[", stamp_, " TP", Below(8), "] ");  // an SGLang record's prefix
  const std::string op = Pick(kOps);
  switch (Below(30)) {
    case 0:
      return absl::StrCat(sg, "ImportError: ", Pick(kLibraries),
                          ": cannot open shared object file: No such file or directory");
    case 1:
      return absl::StrCat("nvcc fatal   : Unsupported gpu architecture '", Pick(kArchs), "'");
    case 2:
      return "ninja: build stopped: subcommand failed.";
    case 3:
      return absl::StrCat(sg, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
                          Between(2, 900), ".00 MiB. GPU ", Below(8),
                          " has a total capacity of 93.10 GiB of which ", Between(10, 900),
                          ".00 MiB is free.");
    case 4:
      return absl::StrCat(sg, "ERROR:    [Errno 98] error while attempting to bind on address ",
                          "('0.0.0.0', ", Between(30000, 30010), "): Address already in use");
    case 5:
      return absl::StrCat("/usr/bin/ld: ", kJitRoot, "/cached_ops/", op, "/", op,
                          "_0.cuda.o: in function `run': undefined reference to `", Pick(kSymbols),
                          "'");
    case 6:
      return absl::StrCat("FileNotFoundError: [Errno 2] No such file or directory: '",
                          "/usr/local/cuda/bin/nvcc'");
    case 7:
      return absl::StrCat(sg, "Scheduler hit an exception: Traceback (most recent call last):");
    case 8:
      return absl::StrCat("Fatal Python error: Segmentation fault");
    case 9:
      return absl::StrFormat(
          "[%d.%06d] Out of memory: Killed process %d (python3) total-vm:%dkB, "
          "anon-rss:%dkB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:%dkB oom_score_adj:0",
          Between(1000, 99999), Below(1000000), Between(1000, 90000), Between(1 << 20, 1 << 26),
          Between(1 << 20, 1 << 25), Between(1000, 90000));
    case 10:
      return absl::StrCat(
          sg, "torch.distributed.DistBackendError: NCCL error in: ",
          "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:", Between(1000, 3000),
          ", unhandled cuda error (run with NCCL_DEBUG=INFO for details)");
    case 11:
      return "RuntimeError: CUDA error: an illegal memory access was encountered";
    case 12:
      return absl::StrCat("ModuleNotFoundError: No module named '", Pick(kModules), "'");
    case 13:
      return absl::StrCat(sg, "ImportError: cannot import name '", op, "' from '", Pick(kModules),
                          "'");
    case 14:
      return absl::StrCat("ptxas fatal   : Unresolved extern function '", Pick(kSymbols), "'");
    case 15:
      return "collect2: error: ld returned 1 exit status";
    case 16:
      return absl::StrCat("/usr/bin/ld: cannot find -l", Pick(kLinkLibraries),
                          ": No such file or directory");
    case 17:
      return absl::StrCat(
          "/usr/local/cuda/include/cccl/cuda/std/__cccl/preprocessor.h(23): error: #error "
          "directive: \"CUDA compiler and CUDA toolkit headers are incompatible, please check "
          "your include paths\"");
    case 18:
      return "RuntimeError: CUDA driver version is insufficient for CUDA runtime version";
    case 19:
      return "RuntimeError: CUDA error: no kernel image is available for execution on the device";
    case 20:
      return absl::StrCat(sg, "Health check failed: HTTPConnectionPool(host='127.0.0.1', port=",
                          Between(30000, 30010), "): Max retries exceeded with url: /health ",
                          "(Caused by NewConnectionError(': Failed to establish a new ",
                          "connection: [Errno 111] Connection refused'))");
    case 21:
      return absl::StrCat("PermissionError: [Errno 13] Permission denied: '", kJitRoot,
                          "/cached_ops/", op, "/build.ninja'");
    case 22:
      return absl::StrCat("OSError: [Errno 28] No space left on device: '", kJitRoot, "/generated/",
                          op, "'");
    case 23:
      return absl::StrCat("FAILED: [code=", Pick(kExitCodes), "] ", kJitRoot, "/cached_ops/", op,
                          "/", op, "_", Below(12), ".cuda.o");
    case 24:
      return absl::StrCat(sg, "Timed out waiting for the NCCL communicator of rank ", Below(8),
                          " after ", Between(60, 600), " s");
    case 25:
      return absl::StrCat("Exception in thread Thread-", Between(1, 40), " (_read_loop):");
    case 26:
      return absl::StrCat("RuntimeError: CUDA error: ", Pick(kCublas),
                          " when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, "
                          "CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, "
                          "CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`");
    case 27:
      return "RuntimeError: CUDA error: device-side assert triggered";
    case 28:
      return absl::StrCat(kSite, "/sglang/srt/layers/sampler.py:", Between(50, 300),
                          ": UserWarning: ", Pick(kLibraries),
                          ": cannot open shared object file: No such file or directory");
    default:
      return absl::StrCat(sg, "Load weight failed: [Errno 2] No such file or directory: '/models/",
                          Pick(kModules), "/config.json'");
  }
}

}  // namespace fleet::bench
