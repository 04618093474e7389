#include "tests/sim/flashinfer_jit.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/sim/sim_os.h"

namespace fleet::sim {
namespace {

constexpr char kBuildStopped[] = "ninja: build stopped: subcommand failed.\n";
constexpr char kDefaultFlashinferVersion[] = "0.5.3";

std::string Stem(const std::string& file) { return file.substr(0, file.rfind('.')); }

}  // namespace

std::string FlashinferVersion(const std::string& site_packages) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(site_packages, ec)) {
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

std::vector<JitOp> JitOpsForBackend(const std::string& attention_backend) {
  // The tiny model has head dim 64 (hidden 256, 4 heads) and runs in bf16.
  const std::string params =
      "dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_64_head_dim_vo_64_"
      "posenc_0_use_swa_False_use_logits_cap_False";
  JitOp sampling{"sampling", "sampling", {"sampling.cu", "flashinfer_sampling_binding.cu"}, false};
  if (attention_backend != "flashinfer") return {sampling};
  return {
      {absl::StrCat("batch_decode_with_kv_cache_", params),
       "decode",
       {"batch_decode.cu", "batch_decode_jit_binding.cu"},
       true},
      {absl::StrCat("batch_prefill_with_kv_cache_", params, "_f16qk_False"),
       "prefill",
       {"batch_prefill.cu", "batch_prefill_jit_binding.cu"},
       true},
      sampling,
  };
}

JitBuild::JitBuild(std::string workspace, std::string flashinfer_version, std::string arch,
                   std::string site_packages)
    : workspace_(std::move(workspace)),
      version_(std::move(flashinfer_version)),
      arch_(std::move(arch)),
      site_(std::move(site_packages)) {}

std::string JitBuild::BaseDir() const {
  // Without a workspace flashinfer builds in a temporary directory that no later start sees.
  const std::string root = workspace_.empty() ? "/tmp/flashinfer-jit" : workspace_;
  return absl::StrCat(root, "/.cache/flashinfer/", version_, "/", arch_);
}

std::string JitBuild::CachedOpsDir() const { return absl::StrCat(BaseDir(), "/cached_ops"); }

std::string JitBuild::LibraryPath(const JitOp& op) const {
  return absl::StrCat(CachedOpsDir(), "/", op.uri, "/", op.uri, ".so");
}

std::string JitBuild::SourcePath(const JitOp& op, int source) const {
  const std::string& file = op.sources[static_cast<size_t>(source)];
  if (!op.generated) return absl::StrCat(site_, "/flashinfer/data/csrc/", file);
  return absl::StrCat(BaseDir(), "/generated/", op.uri, "/", file);
}

std::string JitBuild::ObjectPath(const JitOp& op, int source) const {
  return absl::StrCat(CachedOpsDir(), "/", op.uri, "/",
                      Stem(op.sources[static_cast<size_t>(source)]), ".cuda.o");
}

std::string JitBuild::CompileCommand(const JitToolchain& tc, const JitOp& op, int source) const {
  const std::string obj = ObjectPath(op, source);
  const std::string include =
      tc.include_dir.empty() ? absl::StrCat(tc.cuda_home, "/include") : tc.include_dir;
  return absl::StrCat(
      tc.nvcc, " --generate-dependencies-with-compile --dependency-output ", obj,
      ".d -DPy_LIMITED_API=0x03090000 -D_GLIBCXX_USE_CXX11_ABI=1 -isystem ", include, " -isystem ",
      site_, "/tvm_ffi/include -isystem ", site_, "/flashinfer/data/include -isystem ", site_,
      "/flashinfer/data/csrc -isystem ", site_,
      "/flashinfer/data/cutlass/include --compiler-options=-fPIC --expt-relaxed-constexpr "
      "-gencode=arch=compute_",
      arch_, "a,code=sm_", arch_,
      "a -O3 -std=c++17 --threads=4 -use_fast_math -DFLASHINFER_ENABLE_F16 "
      "-DFLASHINFER_ENABLE_BF16 -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 -c ",
      SourcePath(op, source), " -o ", obj);
}

std::string JitBuild::LinkCommand(const JitToolchain& tc, const JitOp& op) const {
  std::vector<std::string> objects;
  for (int i = 0; i < static_cast<int>(op.sources.size()); ++i)
    objects.push_back(ObjectPath(op, i));
  // torch.utils.cpp_extension appends its own -L/-lcudart after flashinfer's extra flags.
  return absl::StrCat("c++ ", absl::StrJoin(objects, " "), " -shared -L", tc.cuda_home,
                      "/lib64/stubs -lcuda -L", site_,
                      "/torch/lib -lc10 -lc10_cuda -ltorch_cpu -ltorch_cuda -ltorch -L",
                      tc.cuda_home, "/lib64 -lcudart -o ", LibraryPath(op));
}

std::string JitBuild::StepLine(const JitToolchain& tc, const JitOp& op, int step) const {
  const std::string command = step <= static_cast<int>(op.sources.size())
                                  ? CompileCommand(tc, op, step - 1)
                                  : LinkCommand(tc, op);
  return absl::StrCat("[", step, "/", op.StepCount(), "] ", command);
}

std::string JitBuild::NinjaArgvRepr(const JitOp& op) const {
  return absl::StrCat("['ninja', '-v', '-C', '", CachedOpsDir(), "', '-f', '", CachedOpsDir(), "/",
                      op.uri, "/build.ninja']");
}

std::string JitBuild::CompileFailure(const JitToolchain& tc, const JitOp& op, int source) const {
  const std::string src = SourcePath(op, source);
  std::string out;
  switch (tc.problem) {
    case JitProblem::kHeaderMismatch: {
      const std::string cccl = absl::StrCat(tc.include_dir, "/cccl/cuda/std/__cccl");
      const std::string message =
          "\"CUDA compiler and CUDA toolkit headers are incompatible, please check your include "
          "paths\"";
      absl::StrAppend(&out, "FAILED: [code=1] ", ObjectPath(op, source), "\n",
                      CompileCommand(tc, op, source), "\n",  //
                      "In file included from ", cccl, "/compiler.h:16,\n", "                 from ",
                      tc.include_dir, "/cuda/std/__internal/namespaces.h:14,\n",
                      "                 from ", tc.include_dir, "/cuda_fp16.h:123,\n",
                      "                 from ", src, ":17:\n",  //
                      cccl, "/cuda_toolkit.h:41:8: error: #error ", message, "\n",
                      "   41 | #      error ", message, "\n", "      |        ^~~~~\n");
      break;
    }
    case JitProblem::kHeadersMissing:
      absl::StrAppend(&out, "FAILED: [code=1] ", ObjectPath(op, source), "\n",
                      CompileCommand(tc, op, source), "\n", src,
                      ":17:10: fatal error: cuda_runtime_api.h: No such file or directory\n",
                      "compilation terminated.\n");
      break;
    case JitProblem::kPtxasMissing:
      absl::StrAppend(&out, "FAILED: [code=255] ", ObjectPath(op, source), "\n",
                      CompileCommand(tc, op, source), "\n", "sh: 1: ptxas: not found\n");
      break;
    case JitProblem::kPtxUnsupported:
      absl::StrAppend(&out, "FAILED: [code=255] ", ObjectPath(op, source), "\n",
                      CompileCommand(tc, op, source), "\n", "ptxas fatal   : Unsupported .version ",
                      tc.ptx_wanted.ToString(), "; current version is '",
                      tc.ptx_supported.ToString(), "'\n",
                      "ptxas fatal   : Ptx assembly aborted due to errors\n");
      break;
    default:
      break;
  }
  absl::StrAppend(&out, kBuildStopped);
  return out;
}

std::string JitBuild::LinkFailure(const JitToolchain& tc, const JitOp& op) const {
  std::string out =
      absl::StrCat("FAILED: [code=1] ", LibraryPath(op), "\n", LinkCommand(tc, op), "\n");
  for (const std::string& lib : tc.missing_link_libraries) {
    absl::StrAppend(&out, "/usr/bin/ld: cannot find ", lib, ": No such file or directory\n");
  }
  absl::StrAppend(&out, "collect2: error: ld returned 1 exit status\n", kBuildStopped);
  return out;
}

}  // namespace fleet::sim
