// CudaReleaseTable: the CUDA facts the remediation planner reasons with, kept as data
// (daemon/planner/cuda_releases.conf, compiled in): the highest PTX ISA each release's ptxas
// accepts, the pip packages of each release's toolkit pieces (the cu13 layout), the lowest release
// a GPU family needs, and the packages that provide ninja. Immutable after Parse; thread-safe.
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace fleet::daemon {

// A CUDA release or PTX ISA version: major.minor.
struct CudaVersion {
  int major = 0;
  int minor = 0;
  auto operator<=>(const CudaVersion&) const = default;
  std::string ToString() const;
};

// "13.2", "13.2.78", "13.0.96" → 13.2 / 13.0; nullopt unless it starts with two numbers.
std::optional<CudaVersion> ParseCudaVersion(std::string_view text);

// The toolkit pieces that must come from one release (nvcc checks CUDART_VERSION of the runtime's
// headers; nvvm emits the PTX ptxas, shipped with nvcc, must accept; crt holds nvcc's own
// headers), in the order the planner installs and names them.
inline constexpr std::string_view kToolkitPieces[] = {"nvcc",    "crt",   "nvvm",
                                                      "runtime", "nvrtc", "cupti"};

struct CudaRelease {
  CudaVersion version;
  CudaVersion ptx_isa;
  // piece → name==version; empty when the release is known but not installable by pip.
  std::map<std::string, fleet::v1::Requirement> pip;
};

class CudaReleaseTable {
 public:
  // InvalidArgument naming `origin`:LINE for any malformed, unknown or out-of-order entry.
  static absl::StatusOr<CudaReleaseTable> Parse(std::string_view text, std::string_view origin);
  // The compiled-in table; aborts if it does not parse (a build bug, caught by its test).
  static const CudaReleaseTable& Builtin();

  const std::vector<CudaRelease>& releases() const { return releases_; }  // ascending
  const CudaRelease* Find(CudaVersion release) const;
  // The highest PTX ISA the ptxas of `release` accepts: its row, else the row below it.
  std::optional<CudaVersion> PtxIsaOf(CudaVersion release) const;
  // The lowest release whose ptxas accepts `ptx_isa`; nullopt when none in the table does.
  std::optional<CudaVersion> MinReleaseForPtx(CudaVersion ptx_isa) const;
  // The lowest release for GPUs of `compute_capability` (its major), if the table says one.
  std::optional<CudaVersion> MinReleaseForGpu(CudaVersion compute_capability) const;
  // The piece a pip package (canonical name) provides, or "".
  std::string PieceOfPackage(std::string_view package) const;

  const fleet::v1::Requirement& ninja_pip() const { return ninja_pip_; }
  const std::string& ninja_apt() const { return ninja_apt_; }

 private:
  std::vector<CudaRelease> releases_;
  std::map<int, CudaVersion> min_cuda_for_sm_;  // compute capability major → release
  fleet::v1::Requirement ninja_pip_;
  std::string ninja_apt_;
};

// The text of daemon/planner/cuda_releases.conf (generated source).
std::string_view BuiltinCudaReleaseText();

}  // namespace fleet::daemon
