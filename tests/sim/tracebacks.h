// The Python tracebacks the simulated server prints, shaped like CPython's (frames, the chained
// "The above exception was the direct cause" form, the exception line) with the frames of
// SGLang, torch and flashinfer that real failures show. Each function returns the whole text; the
// caller writes it as one log record so that it cannot interleave with other processes' output.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tests/sim/flashinfer_jit.h"
#include "tests/sim/toolchain.h"

namespace fleet::sim {

inline constexpr char kTracebackHead[] = "Traceback (most recent call last):\n";

// One frame of a Python traceback.
struct Frame {
  std::string file;  // absolute, or "<frozen runpy>"
  int line;
  std::string function;
  std::string code;  // "" for frozen frames
};

// The frames as CPython prints them ("  File ..., line N, in F" and the code line).
std::string Render(const std::vector<Frame>& frames);
void Append(std::vector<Frame>* to, const std::vector<Frame>& more);

// `python -m sglang.launch_server` failing to import sgl_kernel's extension (launcher).
std::string SglKernelImportError(const std::string& site, std::string_view library);

// Transformers failing to find the model's config.json (launcher).
std::string ModelNotFoundError(const std::string& site, const std::string& model);
// Transformers' OSError for a model path without config.json (both engines end with it).
std::string HubOsErrorLine(const std::string& model);

// What a scheduler child fails with; rendered by SchedulerException.
enum class SchedulerFailure {
  kNoDriver,            // no GPU driver to initialise CUDA with
  kInvalidDevice,       // CUDA_VISIBLE_DEVICES leaves no GPU for this rank
  kNccl,                // NCCL fails while the process group is set up
  kAttentionBackend,    // the chosen attention backend does not run on this GPU
  kJitNvcc,             // flashinfer's JIT finds no (working) nvcc
  kJitNinjaMissing,     // subprocess cannot start ninja
  kJitNinjaFailed,      // a ninja step failed (its output is already in the log)
  kJitStaleLibrary,     // a cached JIT library cannot be loaded
  kCaptureOutOfMemory,  // CUDA graph capture runs out of GPU memory
};

struct SchedulerFailureDetail {
  SchedulerFailure failure;
  const JitToolchain* toolchain = nullptr;  // kJit*
  const JitBuild* build = nullptr;          // kJit*
  const JitOp* op = nullptr;                // kJit*
  int gpu = 0;                              // kCaptureOutOfMemory: the physical GPU's ordinal
  double gpu_total_gib = 0;                 // kCaptureOutOfMemory
  std::string attention_backend;            // kAttentionBackend
};

// flashinfer's frames for building `op`: the op module's plan() (or the sampling function) down
// to the build_and_load() call.
std::vector<Frame> FlashinferOpFrames(const std::string& site, const JitOp& op);

// The traceback of a flashinfer JIT failure (detail.failure one of the kJit* values), without its
// "Traceback (most recent call last):" head: `prefix` (the caller's frames down to
// FlashinferOpFrames), flashinfer's build frames, the exception line(s), and for a ninja failure
// the chained CalledProcessError. The SGLang scheduler and the vLLM worker share it.
std::string JitFailureTraceback(const std::string& site, const SchedulerFailureDetail& detail,
                                const std::vector<Frame>& prefix);

// "Scheduler hit an exception: Traceback (most recent call last): ..." with the frames from the
// scheduler's entry point down to the failure and the exception line(s).
std::string SchedulerException(const std::string& site, const SchedulerFailureDetail& detail);

}  // namespace fleet::sim
