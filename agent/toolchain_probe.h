// ToolchainProbe: reads the CUDA toolchain a server will really use, resolved from the server's
// own environment and argv (PATH, CUDA_HOME, LD_LIBRARY_PATH, the python/venv it runs), the way
// flashinfer and torch resolve it. It runs the tools it finds (nvcc --version, ptxas on a probe
// PTX, nvidia-smi) through a CommandRunner with the server's environment, reads pip dist-info
// (no network) and header files, and looks for the GPU device nodes the server needs (an LXC
// container has only those its config passes in). Missing tools and nodes are facts in the
// snapshot, never errors. Last, it test-compiles a small kernel with that toolchain
// (agent/test_compile.h): what only a build shows is in the snapshot too.
//
// Thread-safe when its CommandRunner is.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/command_runner.h"
#include "agent/test_compile.h"
#include "proto/agent.pb.h"

namespace fleet::agent {

struct ProbeTarget {
  std::vector<std::string> argv;           // the server's argv (its python, its venv)
  std::map<std::string, std::string> env;  // the server's whole environment
  std::string workdir;
  std::vector<std::string> nvidia_smi;       // argv prefix; empty: nvidia-smi on env's PATH
  std::string venv;                          // the venv root when configured; else from argv[0]
  std::vector<std::string> jit_cache_roots;  // empty: flashinfer's and torch's defaults
  std::vector<std::string> search_path;      // where ninja and toolkits may be found off PATH
  // The GPUs the server is given (indexes; the numeric entries of the env's CUDA_VISIBLE_DEVICES
  // are added) and the container's device dir, where their nodes must be: nvidiaN (N the GPU's
  // minor number, from nvidia-smi when it answers, else its index), nvidiactl and nvidia-uvm, each
  // a character device. No GPU, or an empty dev_root: the nodes are not looked for.
  std::vector<int32_t> gpus;
  std::string dev_root = "/dev";
  // The last step: build a small kernel with the toolchain found (agent/test_compile.h). Off:
  // snapshot.test_compile says it was turned off.
  bool test_compile = true;
  TestCompileOptions test_compile_options;
};

class ToolchainProbe {
 public:
  // `runner` must outlive the probe.
  explicit ToolchainProbe(CommandRunner* runner) : runner_(runner) {}
  fleet::v1::ToolchainSnapshot Probe(const ProbeTarget& target) const;

 private:
  CommandRunner* runner_;
};

}  // namespace fleet::agent
