// What the simulated server finds in its container when it needs CUDA: the facts that decide, in
// the seed's order (docs/design.md), whether a start gets past the sgl_kernel import and through
// flashinfer's JIT build. Everything is read the way the real stack reads it: libraries from the
// loader path, nvcc from CUDA_HOME or PATH, ninja from PATH, versions by running
// `nvcc --version` / `ptxas --version`, CUDART_VERSION from the header on the include path, link
// libraries from the link line's -L directories.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/sim/sim_os.h"

namespace fleet::sim {

// A major.minor pair: a CUDA release (13.2) or a PTX ISA version (9.2).
struct Version2 {
  int major = 0;
  int minor = 0;
  std::string ToString() const;
  friend bool operator==(const Version2&, const Version2&) = default;
  friend auto operator<=>(const Version2&, const Version2&) = default;
};

// "Cuda compilation tools, release 13.0, V13.0.88" → 13.0.
std::optional<Version2> ParseReleaseBanner(std::string_view banner);
// `#define CUDART_VERSION 13000` in a header's text → 13.0.
std::optional<Version2> ParseCudartVersion(std::string_view header_text);
// The highest PTX ISA that the ptxas of CUDA `release` accepts (13.0 → 9.0, 12.8 → 8.7).
Version2 PtxIsaOfRelease(Version2 release);

// flashinfer's bundled CCCL emits PTX ISA 9.2 (docs/design.md): not visible to a probe, learned
// from the first ptxas failure.
inline constexpr Version2 kFlashinferPtxIsa{9, 2};

// The library sgl_kernel's extension needs from the loader path (LD_LIBRARY_PATH).
inline constexpr char kNvrtcLibrary[] = "libnvrtc.so.13";

// The first problem of a flashinfer JIT build, in the order a real build meets them.
enum class JitProblem {
  kNone,
  kNvccNotFound,       // no CUDA_HOME/bin/nvcc, no nvcc on PATH
  kNvccBroken,         // nvcc found, `nvcc --version` fails
  kNinjaNotFound,      // no ninja on PATH
  kHeadersMissing,     // no cuda_runtime_api.h on the include path
  kHeaderMismatch,     // nvcc major.minor != CUDART_VERSION of the headers
  kPtxasMissing,       // no ptxas next to nvcc
  kPtxUnsupported,     // ptxas older than the PTX ISA it is given
  kLinkLibraryMissing  // -lcuda / -lcudart not on the link path
};

// Whether `problem` fails a compile step (headers, ptxas), as opposed to finding the tools or
// linking.
inline bool IsCompileProblem(JitProblem problem) {
  return problem == JitProblem::kHeaderMismatch || problem == JitProblem::kHeadersMissing ||
         problem == JitProblem::kPtxasMissing || problem == JitProblem::kPtxUnsupported;
}

struct JitToolchain {
  JitProblem problem = JitProblem::kNone;
  std::string cuda_home;     // as flashinfer resolves it ("" when nvcc was not found)
  std::string missing_nvcc;  // CUDA_HOME/bin/nvcc when CUDA_HOME is set but has no nvcc
  std::string nvcc;          // the nvcc the build runs
  std::string ptxas;         // the ptxas next to it
  std::string ninja;         // the ninja the build runs
  std::string nvcc_output;   // what `nvcc --version` printed when it failed
  std::string include_dir;   // where cuda_runtime_api.h was found
  Version2 nvcc_release;
  Version2 header_release;
  Version2 ptxas_release;
  Version2 ptx_wanted = kFlashinferPtxIsa;
  Version2 ptx_supported;
  // The link line's -L directories, in order, and the -l libraries it names that none holds.
  std::vector<std::string> link_dirs;
  std::vector<std::string> missing_link_libraries;  // "-lcuda", "-lcudart"
};

// Inspects the toolchain a JIT build would use and stops at the first problem. Runs nvcc, ptxas
// and ninja (--version) as child processes. `site_packages` is the venv's, for the pip CUDA
// headers and torch's libraries.
JitToolchain InspectJitToolchain(const Environment& env, const std::string& site_packages);

}  // namespace fleet::sim
