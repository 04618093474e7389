#include "tests/sim/toolchain.h"

#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fleet::sim {
namespace {

// Where flashinfer finds the CUDA toolkit: CUDA_HOME when set (its bin/nvcc then must exist),
// else the directory above the nvcc on PATH.
void ResolveNvcc(const Environment& env, JitToolchain* tc) {
  const std::string cuda_home = env.Get("CUDA_HOME");
  if (!cuda_home.empty()) {
    const std::string nvcc = absl::StrCat(cuda_home, "/bin/nvcc");
    if (IsExecutable(nvcc)) {
      tc->cuda_home = cuda_home;
      tc->nvcc = nvcc;
    } else {
      tc->missing_nvcc = nvcc;
    }
    return;
  }
  const std::string nvcc = FindExecutable("nvcc", env.List("PATH"));
  if (nvcc.empty()) return;
  tc->nvcc = nvcc;
  tc->cuda_home = nvcc.substr(0, nvcc.size() - std::string_view("/bin/nvcc").size());
}

// The ninja that `subprocess.run(["ninja", ...])` would start: first on PATH, and it must run.
bool FindNinja(const Environment& env, JitToolchain* tc) {
  const std::string ninja = FindExecutable("ninja", env.List("PATH"));
  if (ninja.empty()) return false;
  absl::StatusOr<ToolResult> ran = RunTool({ninja, "--version"});
  if (!ran.ok()) return false;
  tc->ninja = ninja;
  return true;
}

std::optional<Version2> ToolRelease(const std::string& tool, std::string* output) {
  absl::StatusOr<ToolResult> ran = RunTool({tool, "--version"});
  if (!ran.ok()) {
    *output = std::string(ran.status().message());
    return std::nullopt;
  }
  *output = ran->output;
  if (ran->exit_code != 0) return std::nullopt;
  return ParseReleaseBanner(ran->output);
}

// cuda_runtime_api.h on the include path: the toolkit's include dir, then the pip headers.
bool FindHeaders(const std::string& site_packages, JitToolchain* tc) {
  for (const std::string& dir : {absl::StrCat(tc->cuda_home, "/include"),
                                 absl::StrCat(site_packages, "/nvidia/cu13/include")}) {
    absl::StatusOr<std::string> text = ReadSmallFile(absl::StrCat(dir, "/cuda_runtime_api.h"));
    if (!text.ok()) continue;
    std::optional<Version2> version = ParseCudartVersion(*text);
    if (!version) continue;
    tc->include_dir = dir;
    tc->header_release = *version;
    return true;
  }
  return false;
}

// flashinfer's link line: `-L$CUDA_HOME/lib64/stubs -lcuda -L<torch>/lib ... -L$CUDA_HOME/lib64
// -lcudart`; ld searches every -L directory, then LIBRARY_PATH, for lib<name>.so.
void CheckLink(const Environment& env, const std::string& site_packages, JitToolchain* tc) {
  tc->link_dirs = {absl::StrCat(tc->cuda_home, "/lib64/stubs"),
                   absl::StrCat(site_packages, "/torch/lib"),
                   absl::StrCat(tc->cuda_home, "/lib64")};
  std::vector<std::string> search = tc->link_dirs;
  for (const std::string& dir : env.List("LIBRARY_PATH")) search.push_back(dir);
  for (const char* lib : {"cuda", "cudart"}) {
    if (FindInDirs(absl::StrCat("lib", lib, ".so"), search).empty()) {
      tc->missing_link_libraries.push_back(absl::StrCat("-l", lib));
    }
  }
}

}  // namespace

std::string Version2::ToString() const { return absl::StrCat(major, ".", minor); }

std::optional<Version2> ParseReleaseBanner(std::string_view banner) {
  static const std::regex kRelease(R"(release (\d+)\.(\d+),)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(banner.begin(), banner.end(), m, kRelease)) return std::nullopt;
  Version2 v;
  if (!absl::SimpleAtoi(m[1].str(), &v.major) || !absl::SimpleAtoi(m[2].str(), &v.minor)) {
    return std::nullopt;
  }
  return v;
}

std::optional<Version2> ParseCudartVersion(std::string_view header_text) {
  static const std::regex kDefine(R"(#define\s+CUDART_VERSION\s+(\d+))");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(header_text.begin(), header_text.end(), m, kDefine)) return std::nullopt;
  int value = 0;
  if (!absl::SimpleAtoi(m[1].str(), &value)) return std::nullopt;
  return Version2{value / 1000, (value % 1000) / 10};
}

Version2 PtxIsaOfRelease(Version2 release) {
  // PTX ISA per CUDA release (NVIDIA's PTX ISA release notes). CUDA 13.x: ISA 9.x.
  struct Row {
    Version2 release;
    Version2 isa;
  };
  static constexpr Row kTable[] = {
      {{11, 8}, {7, 8}}, {{12, 0}, {8, 0}}, {{12, 1}, {8, 1}}, {{12, 2}, {8, 2}}, {{12, 3}, {8, 3}},
      {{12, 4}, {8, 4}}, {{12, 5}, {8, 5}}, {{12, 6}, {8, 5}}, {{12, 8}, {8, 7}}, {{12, 9}, {8, 8}},
      {{13, 0}, {9, 0}}, {{13, 1}, {9, 1}}, {{13, 2}, {9, 2}},
  };
  if (release.major == 13) return Version2{9, release.minor};
  Version2 isa{7, 0};
  for (const Row& row : kTable) {
    if (row.release <= release) isa = row.isa;
  }
  return isa;
}

JitToolchain InspectJitToolchain(const Environment& env, const std::string& site_packages) {
  JitToolchain tc;
  ResolveNvcc(env, &tc);
  if (tc.nvcc.empty()) {
    tc.problem = JitProblem::kNvccNotFound;
    return tc;
  }
  // flashinfer asks nvcc for its version while it writes the build file, before ninja runs.
  std::optional<Version2> nvcc = ToolRelease(tc.nvcc, &tc.nvcc_output);
  if (!nvcc) {
    tc.problem = JitProblem::kNvccBroken;
    return tc;
  }
  tc.nvcc_release = *nvcc;
  if (!FindNinja(env, &tc)) {
    tc.problem = JitProblem::kNinjaNotFound;
    return tc;
  }
  if (!FindHeaders(site_packages, &tc)) {
    tc.problem = JitProblem::kHeadersMissing;
    return tc;
  }
  // CCCL's guard (cuda/std/__cccl/cuda_toolkit.h) compares the compiler's major.minor with the
  // CUDART_VERSION of the headers it includes.
  if (tc.header_release != tc.nvcc_release) {
    tc.problem = JitProblem::kHeaderMismatch;
    return tc;
  }
  tc.ptxas = absl::StrCat(tc.nvcc.substr(0, tc.nvcc.rfind('/')), "/ptxas");
  std::string ptxas_output;
  std::optional<Version2> ptxas = ToolRelease(tc.ptxas, &ptxas_output);
  if (!ptxas) {
    tc.problem = JitProblem::kPtxasMissing;
    return tc;
  }
  tc.ptxas_release = *ptxas;
  tc.ptx_supported = PtxIsaOfRelease(*ptxas);
  if (tc.ptx_supported < tc.ptx_wanted) {
    tc.problem = JitProblem::kPtxUnsupported;
    return tc;
  }
  CheckLink(env, site_packages, &tc);
  if (!tc.missing_link_libraries.empty()) tc.problem = JitProblem::kLinkLibraryMissing;
  return tc;
}

}  // namespace fleet::sim
