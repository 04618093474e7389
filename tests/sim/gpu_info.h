// The GPUs the simulated server runs on. A real server learns them from the driver; the simulated
// one asks its world's fake nvidia-smi (found on PATH, as a container would have it), so the
// world's data decides the GPU's name, compute capability and memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/sim/sim_os.h"

namespace fleet::sim {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string compute_capability;  // "12.0"
  int64_t memory_mib = 0;

  // "120" for compute capability 12.0: flashinfer's arch directory and sm_120a.
  std::string ArchDigits() const;
  double MemoryGb() const { return static_cast<double>(memory_mib) / 1024.0; }
};

// Runs `nvidia-smi --query-gpu=index,name,compute_cap,memory.total --format=csv,noheader,nounits`
// from PATH. FailedPrecondition when there is no driver to ask (no nvidia-smi, or it fails).
absl::StatusOr<std::vector<GpuInfo>> QueryGpus(const Environment& env);

// The GPU that CUDA device `ordinal` of this process is: CUDA_VISIBLE_DEVICES (a list of
// indexes) picks and orders the physical GPUs, unset means all. OutOfRange for an ordinal past
// the visible devices ("invalid device ordinal").
absl::StatusOr<GpuInfo> VisibleGpu(const std::vector<GpuInfo>& gpus, const Environment& env,
                                   int ordinal);

// The simulated driver's record of GPU memory held by this process (tests/sim/tools/nvidia-smi
// reads it): WORLD/run/gpu-mem/INDEX/PID holding "MIB START_TICKS python3", WORLD being the folder
// above the nvidia-smi on PATH. Like the driver's, it counts only while this process lives. The
// process also opens WORLD/dev/nvidiaINDEX (the world's character device, never made when the
// world's other nodes are there and it is not; else a plain file standing in for it) and keeps it
// open, so a /proc scan sees it as the GPU's holder. Best effort: nothing happens in a world
// without nvidia-smi.
void HoldGpuMemory(const Environment& env, int index, int64_t mib);

}  // namespace fleet::sim
