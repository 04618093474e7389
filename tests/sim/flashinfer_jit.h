// flashinfer's JIT build as the simulated server performs it: which ops a start builds, where
// their sources, objects and cached libraries live, and the text `ninja -v` prints for each step
// and each failure. The text follows what real builds print (docs/design.md), so that the
// classifier, the agent's progress tracking and the remediation planner meet the same lines they
// meet on a real machine.
#pragma once

#include <string>
#include <vector>

#include "tests/sim/toolchain.h"

namespace fleet::sim {

// One JIT op: a library built from a few CUDA sources (one ninja step each) and one link step.
struct JitOp {
  std::string uri;                   // flashinfer's name, also the cache directory
  std::string module;                // the flashinfer Python module that builds it ("decode")
  std::vector<std::string> sources;  // file names
  bool generated = true;             // sources generated into the cache, else flashinfer's csrc

  int StepCount() const { return static_cast<int>(sources.size()) + 1; }
};

// The ops a start builds for `attention_backend`: flashinfer's decode and prefill kernels and
// the sampling kernels; other backends need the sampling kernels only.
std::vector<JitOp> JitOpsForBackend(const std::string& attention_backend);

// Content of a library the simulated link step writes; a cached library without it is stale.
inline constexpr char kSimLibraryMagic[] =
    "\x7f"
    "ELF sim-flashinfer-jit-library\n";

// How a cached JIT library looks to a start.
enum class CacheState { kMissing, kValid, kStale };

// The installed flashinfer's version, from its dist-info in `site_packages` (what
// `flashinfer.__version__` says); 0.5.3 when none is installed.
std::string FlashinferVersion(const std::string& site_packages);

// The state of the cached library at `path`: missing, valid (the sim's magic), or stale.
CacheState CachedLibraryState(const std::string& path);

// Paths and ninja text of one server's JIT builds.
class JitBuild {
 public:
  // `workspace` is FLASHINFER_WORKSPACE_BASE or HOME ("" disables the cache); `arch` is "120".
  JitBuild(std::string workspace, std::string flashinfer_version, std::string arch,
           std::string site_packages);

  bool cache_enabled() const { return !workspace_.empty(); }
  // <workspace>/.cache/flashinfer/<version>/<arch>/cached_ops: ninja's directory.
  std::string CachedOpsDir() const;
  std::string LibraryPath(const JitOp& op) const;
  std::string SourcePath(const JitOp& op, int source) const;
  std::string ObjectPath(const JitOp& op, int source) const;

  std::string CompileCommand(const JitToolchain& tc, const JitOp& op, int source) const;
  std::string LinkCommand(const JitToolchain& tc, const JitOp& op) const;
  // "[n/m] <command>": step n (1-based) of the op's build.
  std::string StepLine(const JitToolchain& tc, const JitOp& op, int step) const;
  // The ninja command flashinfer runs, as Python prints its argv list.
  std::string NinjaArgvRepr(const JitOp& op) const;

  // What ninja prints when compiling source `source` fails for the toolchain's problem, from the
  // FAILED line to "ninja: build stopped: subcommand failed.".
  std::string CompileFailure(const JitToolchain& tc, const JitOp& op, int source) const;
  // The same for the link step (missing -l libraries).
  std::string LinkFailure(const JitToolchain& tc, const JitOp& op) const;

 private:
  std::string BaseDir() const;

  std::string workspace_;
  std::string version_;
  std::string arch_;
  std::string site_;
};

}  // namespace fleet::sim
