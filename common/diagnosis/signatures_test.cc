// One case per signature family, on log text we wrote in the shape the real tools print. Each
// case checks the class, the deciding line, the safety bit and the facts a planner needs.
#include <map>
#include <string>
#include <vector>

#include "common/diagnosis/test_util.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

struct Case {
  std::string name;
  std::string log;
  std::string expected_class;
  int64_t root_line;
  bool toolchain_fix;
  std::map<std::string, std::string> facts;  // key -> first value
  Confidence confidence = Confidence::kHigh;
};

std::vector<Case> Cases() {
  return {
      {"ptxas_version_in_ninja_block",
       "[1/3] /opt/cuda/bin/nvcc -c a.cu -o a.cuda.o -gencode=arch=compute_120a,code=sm_120a\n"
       "FAILED: [code=255] cached_ops/batch_decode/a.cuda.o\n"
       "/opt/cuda/bin/nvcc -c a.cu -o a.cuda.o\n"
       "ptxas /tmp/a.ptx, line 5; fatal   : Unsupported .version 9.2; current version is '9.0'\n"
       "ptxas fatal   : Ptx assembly aborted due to errors\n"
       "ninja: build stopped: subcommand failed.\n",
       "ptx_version_unsupported",
       4,
       true,
       {{"ptx_wanted", "9.2"}, {"ptx_supported", "9.0"}, {"gpu_arch", "sm_120a"}}},
      {"cccl_guard",
       "FAILED: [code=1] x.cuda.o\n"
       "/venv/nvidia/cu13/include/cccl/cuda/std/__cccl/cuda_toolkit.h:41:8: error: #error \"CUDA "
       "compiler and CUDA toolkit headers are incompatible, please check your include paths\"\n"
       "1 error detected in the compilation of \"x.cu\".\n"
       "ninja: build stopped: subcommand failed.\n",
       "cuda_header_mismatch",
       2,
       true,
       {}},
      {"libnvrtc_import",
       "Traceback (most recent call last):\n"
       "  File \"/venv/lib/python3.12/site-packages/sgl_kernel/__init__.py\", line 5, in <module>\n"
       "    from sgl_kernel import common_ops\n"
       "ImportError: libnvrtc.so.13: cannot open shared object file: No such file or directory\n",
       "missing_shared_library",
       4,
       true,
       {{"library", "libnvrtc.so.13"}}},
      {"libcuda_is_the_driver",
       "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n",
       "gpu_driver_unavailable",
       1,
       false,
       {{"library", "libcuda.so.1"}}},
      {"non_cuda_library_is_reported",
       "ImportError: libGL.so.1: cannot open shared object file: No such file or directory\n",
       "missing_shared_library",
       1,
       false,
       {{"library", "libGL.so.1"}}},
      {"nvcc_shell_not_found",
       "building\n/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found\n",
       "nvcc_not_found",
       2,
       true,
       {{"nvcc_path", "/usr/local/cuda/bin/nvcc"}}},
      {"cuda_home_with_colon",
       "error: [Errno 2] No such file or directory: '/usr/local/cuda-12.8:/bin/nvcc'\n",
       "nvcc_not_found",
       1,
       true,
       {{"nvcc_path", "/usr/local/cuda-12.8:/bin/nvcc"}}},
      {"flashinfer_no_nvcc",
       "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist\n",
       "nvcc_not_found",
       1,
       true,
       {{"cuda_home", "/usr/local/cuda"}}},
      {"torch_cuda_home_unset",
       "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
       "root.\n",
       "nvcc_not_found",
       1,
       true,
       {}},
      {"ninja_missing_python",
       "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'\n",
       "ninja_not_found",
       1,
       true,
       {}},
      {"ninja_required_torch",
       "RuntimeError: Ninja is required to load C++ extensions\n",
       "ninja_not_found",
       1,
       true,
       {}},
      {"link_cannot_find_two_libs",
       "/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
       "/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
       "collect2: error: ld returned 1 exit status\n",
       "link_error",
       1,
       true,
       {{"link_library", "-lcudart"}}},
      {"link_cannot_find_the_stub_file_is_a_link_error_not_the_driver",
       "FAILED: [code=1] fleet_ops.so \n"
       "/usr/bin/ld: cannot find /opt/cuda/lib64/stubs/libcuda.so: No such file or directory\n"
       "collect2: error: ld returned 1 exit status\n",
       "link_error",
       2,
       true,
       {{"library", "/opt/cuda/lib64/stubs/libcuda.so"}}},
      {"collect2_alone_is_link_error",
       "collect2: error: ld returned 1 exit status\nninja: build stopped: subcommand failed.\n",
       "link_error",
       1,
       true,
       {}},
      {"nvcc_unknown_option",
       "nvcc fatal   : Unknown option '--compress-mode=size'\n",
       "nvcc_too_old",
       1,
       true,
       {{"option", "--compress-mode=size"}}},
      {"nvcc_host_warning_flag_is_a_build_bug",
       "nvcc fatal   : Unknown option '-Wno-unused-function'\n",
       "jit_build_failed",
       1,
       false,
       {{"option", "-Wno-unused-function"}}},
      {"nvcc_unknown_arch",
       "nvcc fatal   : Unsupported gpu architecture 'compute_120f'\n",
       "unsupported_gpu_arch",
       1,
       true,
       {{"gpu_arch", "compute_120f"}}},
      {"ptxas_unknown_arch",
       "ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'\n",
       "unsupported_gpu_arch",
       1,
       true,
       {{"gpu_arch", "sm_120a"}}},
      {"torch_wheel_without_arch_is_reported",
       "UserWarning: NVIDIA RTX PRO 6000 with CUDA capability sm_120 is not compatible with the "
       "current PyTorch installation.\n"
       "The current PyTorch install supports CUDA capabilities sm_80 sm_86 sm_90.\n",
       "unsupported_gpu_arch",
       1,
       false,
       {{"gpu_arch", "sm_120"}}},
      {"misleading_sm75_after_toolkit_too_old",
       "Failed to get device capability: SM 12.x requires CUDA >= 12.9.\n"
       "RuntimeError: FlashInfer requires GPUs with sm75 or higher\n",
       "unsupported_gpu_arch",
       1,
       true,
       {{"cuda_required", "12.9"}}},
      {"sm75_alone_is_reported",
       "RuntimeError: FlashInfer requires GPUs with sm75 or higher\n",
       "unsupported_gpu_arch",
       1,
       false,
       {}},
      {"jit_step_killed",
       "FAILED: [code=137] gemm_sm120.cuda.o\nKilled\nninja: build stopped: subcommand failed.\n",
       "jit_oom_killed",
       1,
       true,
       {{"exit_code", "137"}}},
      {"cc1plus_killed",
       "g++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n",
       "jit_oom_killed",
       1,
       true,
       {}},
      {"source_error_in_ninja_block",
       "FAILED: [code=1] op.cuda.o\n"
       "/src/op.cu(12): error: identifier \"foo\" is undefined\n"
       "1 error detected in the compilation of \"/src/op.cu\".\n"
       "ninja: build stopped: subcommand failed.\n",
       "jit_build_failed",
       2,
       false,
       {}},
      {"ninja_failed_without_cause",
       "RuntimeError: Ninja build failed. Ninja output:\n"
       "[1/2] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=moe_op -c a.cu\n",
       "jit_build_failed",
       1,
       false,
       {{"jit_op", "moe_op"}}},
      {"stale_elf",
       "ImportError: /root/.cache/flashinfer/cached_ops/sampling/sampling.so: invalid ELF header\n",
       "stale_jit_cache",
       1,
       true,
       {{"path", "/root/.cache/flashinfer/cached_ops/sampling/sampling.so"}}},
      {"undefined_symbol",
       "ImportError: /venv/lib/python3.12/site-packages/sgl_kernel/common_ops.so: undefined "
       "symbol: _ZN3c104cuda9SetDeviceEa\n",
       "abi_mismatch",
       1,
       false,
       {{"symbol", "_ZN3c104cuda9SetDeviceEa"}}},
      {"cuda_oom",
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
       "capacity of 94.97 GiB of which 1.10 GiB is free.\n",
       "cuda_out_of_memory",
       1,
       false,
       {{"alloc_requested", "2.00 GiB"}, {"gpu_total", "94.97 GiB"}}},
      {"sglang_not_enough_memory",
       "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
       "cuda_out_of_memory",
       1,
       false,
       {}},
      {"port_in_use",
       "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30001): address "
       "already in use\n",
       "port_in_use",
       1,
       false,
       {{"port", "30001"}}},
      {"model_not_found_hub",
       "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find "
       "it in the cached files and it looks like org/tiny-model is not the path to a directory "
       "containing a file named config.json.\n",
       "model_not_found",
       1,
       false,
       {{"model", "org/tiny-model"}}},
      {"model_not_identifier",
       "OSError: /models/missing is not a local folder and is not a valid model identifier listed "
       "on 'https://huggingface.co/models'\n",
       "model_not_found",
       1,
       false,
       {{"model", "/models/missing"}}},
      {"nccl_error",
       "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
       "process exited or there was a network error (run with NCCL_DEBUG=INFO for details), NCCL "
       "version 2.27.3\n",
       "nccl_error",
       1,
       false,
       {{"nccl_error", "remote process exited or there was a network error"},
        {"nccl_version", "2.27.3"}}},
      {"cuda_invalid_device_ordinal",
       "(Worker_TP1 pid=301) torch.AcceleratorError: CUDA error: invalid device ordinal\n",
       "gpu_driver_unavailable",
       1,
       false,
       {}},
      {"vllm_free_memory_below_utilization",
       "(EngineCore_DP0 pid=210) ValueError: Free memory on device (13.45/79.19 GiB) on startup "
       "is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory "
       "utilization or reduce GPU memory used by other processes.\n",
       "cuda_out_of_memory",
       1,
       false,
       {{"gpu_free_gib", "13.45"}, {"gpu_total_gib", "79.19"}, {"gpu_memory_utilization", "0.9"}}},
      {"driver_too_old",
       "RuntimeError: The NVIDIA driver on your system is too old (found version 12040).\n",
       "gpu_driver_unavailable",
       1,
       false,
       {}},
      {"attention_backend",
       "AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use "
       "`--attention-backend flashinfer`.\n",
       "attention_backend_unsupported",
       1,
       false,
       {}},
      {"graph_capture",
       "Exception: Capture cuda graph failed: operation not permitted when stream is capturing\n",
       "cuda_graph_capture_failed",
       1,
       false,
       {}},
      {"watchdog",
       "[2026-11-29 10:00:00 TP0] Watchdog timeout (self.watchdog_timeout=300)\n",
       "runtime_watchdog",
       1,
       false,
       {{"watchdog_timeout", "300"}}},
      {"sigquit_alone",
       "[2026-11-29 10:00:00] Received sigquit from a child process. It usually means the child "
       "failed.\n",
       "child_process_failed",
       1,
       false,
       {}},
      {"unrecognised_exception",
       "Traceback (most recent call last):\n"
       "  File \"/app/x.py\", line 3, in <module>\n"
       "    main()\n"
       "KeyError: 'rope_scaling'\n",
       "unknown",
       4,
       false,
       {}},
      {"clean_start",
       "[2026-11-29 10:00:00 TP0] Load weight begin. avail mem=94.50 GB\n"
       "[2026-11-29 10:00:09 TP0] Load weight end. type=LlamaForCausalLM, avail mem=80.1 GB\n"
       "[2026-11-29 10:00:30] The server is fired up and ready to roll!\n",
       "none",
       0,
       false,
       {}},

      // Issue 15, retyped messages: a stem is low confidence and never a toolchain fix, and its
      // facts still come out.
      {"stem_library_cannot_open",
       "ImportError: libnvrtc.so.12: shared object file cannot be opened\n",
       "missing_shared_library",
       1,
       false,
       {{"library", "libnvrtc.so.12"}},
       Confidence::kLow},
      {"stem_driver_library",
       "ImportError: libcuda.so.1: can't open shared objet file\n",
       "gpu_driver_unavailable",
       1,
       false,
       {{"library", "libcuda.so.1"}},
       Confidence::kLow},
      {"stem_no_driver",
       "RuntimeError: Found no NVIDA driver on your sytem.\n",
       "gpu_driver_unavailable",
       1,
       false,
       {},
       Confidence::kLow},
      {"stem_other_library",
       "ImportError: libGL.so.1: cannot open shared objet file\n",
       "missing_shared_library",
       1,
       false,
       {{"library", "libGL.so.1"}},
       Confidence::kLow},
      {"stem_nvcc",
       "RuntimeError: Couldn't find nvcc\n",
       "nvcc_not_found",
       1,
       false,
       {},
       Confidence::kLow},
      {"ninja_message_in_lower_case",
       "RuntimeError: Ninja is required to load c++ extensions\n",
       "ninja_not_found",
       1,
       true,
       {}},
      {"stem_ninja",
       "RuntimeError: ninja is required to lod C++ extensions\n",
       "ninja_not_found",
       1,
       false,
       {},
       Confidence::kLow},
      {"stem_cccl",
       "error: #error -- cuda compiler and cuda toolkit header are incompatible\n",
       "cuda_header_mismatch",
       1,
       false,
       {},
       Confidence::kLow},
      {"stem_ptxas",
       "ptxas fatal : unsupported .version 8.7 ; current version is 8.6\n",
       "ptx_version_unsupported",
       1,
       false,
       {{"ptx_wanted", "8.7"}, {"ptx_supported", "8.6"}},
       Confidence::kLow},
      {"stem_gpu_arch",
       "nvcc fatal : unsupported GPU architecture \xc2\xb4"
       "compute_120a\xc2\xb4\n",
       "unsupported_gpu_arch",
       1,
       false,
       {{"gpu_arch", "compute_120a"}},
       Confidence::kLow},
      {"stem_no_kernel_image",
       "RuntimeError: CUDA error: no kernel image is availabe\n",
       "unsupported_gpu_arch",
       1,
       false,
       {},
       Confidence::kLow},
      {"stem_link",
       "/usr/bin/ld: can not find -lcuda\n",
       "link_error",
       1,
       false,
       {{"link_library", "-lcuda"}},
       Confidence::kLow},
      {"stem_cuda_oom",
       "RuntimeError: CUDA out of memmory. Tried to allocate 2.00 GiB. GPU 0 has a total "
       "capacity of 44.52 GiB\n",
       "cuda_out_of_memory",
       1,
       false,
       {{"alloc_requested", "2.00 GiB"}},
       Confidence::kLow},
      {"stem_port",
       "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
       "adress already in use\n",
       "port_in_use",
       1,
       false,
       {{"port", "30000"}},
       Confidence::kLow},
      {"stem_nccl",
       "RuntimeError: NCCL ERROR: unhandled cuda error\n",
       "nccl_error",
       1,
       false,
       {{"nccl_error", "unhandled cuda error"}},
       Confidence::kLow},
      {"nccl_debug_trailer",
       "RuntimeError: nccl eror: x (run with NCCL_DEBUG=INFO for details)\n",
       "nccl_error",
       1,
       false,
       {}},
      // Older and newer spellings: real messages, high confidence.
      {"thrust_cub_mismatch",
       "config.h:78:2: error: #error The version of CUB in your include path is not compatible "
       "with this release of Thrust.\n",
       "cuda_header_mismatch",
       1,
       true,
       {}},
      {"nccl_unique_id_old_spelling",
       "RuntimeError: [1] is setting up NCCL communicator and retreiving ncclUniqueId from [0]\n",
       "nccl_error",
       1,
       false,
       {}},
      {"vllm_old_kv_cache_message",
       "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
       "that can be stored in KV cache (15248).\n",
       "cuda_out_of_memory",
       1,
       false,
       {}},
      {"transformers_path_or_model_id",
       "OSError: Incorrect path_or_model_id: '/data/m'. Please provide either the path\n",
       "model_not_found",
       1,
       false,
       {{"model", "/data/m"}}},
      {"ld_killed",
       "collect2: fatal error: ld terminated with signal 9 [Killed]\n",
       "jit_oom_killed",
       1,
       true,
       {}},
      {"bash_nvcc_no_such_file",
       "bash: /usr/local/cuda-12.4/bin/nvcc: No such file or directory\n",
       "nvcc_not_found",
       1,
       true,
       {{"nvcc_path", "/usr/local/cuda-12.4/bin/nvcc"}}},
      {"nvcc_std_value",
       "nvcc fatal   : Value 'c++17' is not defined for option 'std'\n",
       "nvcc_too_old",
       1,
       true,
       {{"option", "c++17"}}},
      {"tensorrt_llm_oom",
       "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, s->get()): out of "
       "memory (/app/tllmBuffers.h:112)\n",
       "cuda_out_of_memory",
       1,
       false,
       {}},
      {"bf16_on_old_gpu",
       "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
       "Your Tesla T4 GPU has compute capability 7.5.\n",
       "unsupported_gpu_arch",
       1,
       false,
       {{"compute_capability", "7.5"}}},
      {"watchdog_with_soft_flag",
       "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n",
       "runtime_watchdog",
       1,
       false,
       {{"watchdog_timeout", "300"}}},
      // Paths that reveal a malformed CUDA_HOME.
      {"nvcc_path_with_leading_colon",
       "/bin/sh: 1: :/usr/local/cuda-12.8/bin/nvcc: not found\n",
       "nvcc_not_found",
       1,
       true,
       {{"nvcc_path", ":/usr/local/cuda-12.8/bin/nvcc"}}},
      {"nvcc_path_from_empty_cuda_home",
       "/bin/sh: 1: /bin/nvcc: not found\n",
       "nvcc_not_found",
       1,
       true,
       {{"nvcc_path", "/bin/nvcc"}}},
      {"nvcc_path_with_empty_version",
       "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda-/bin/nvcc'\n",
       "nvcc_not_found",
       1,
       true,
       {{"nvcc_path", "/usr/local/cuda-/bin/nvcc"}}},
      {"cuda_library_versioned_symbol",
       "ImportError: /x/libcusparse.so.12: undefined symbol: __nvJitLinkComplete_12_4, version "
       "libnvJitLink.so.12\n",
       "missing_shared_library",
       1,
       true,
       {{"library", "libnvJitLink.so.12"}, {"symbol", "__nvJitLinkComplete_12_4"}}},
  };
}

class SignatureFamilies : public ::testing::TestWithParam<Case> {};

TEST_P(SignatureFamilies, NamesClassLineSafetyAndFacts) {
  const Case& c = GetParam();
  const Diagnosis d = ClassifyText(c.log);
  EXPECT_EQ(d.diagnosis_class, c.expected_class) << d.summary;
  EXPECT_EQ(d.root_cause_line, c.root_line);
  EXPECT_EQ(d.toolchain_fix, c.toolchain_fix);
  EXPECT_EQ(d.confidence, c.confidence);
  for (const auto& [key, value] : c.facts) {
    EXPECT_EQ(d.facts.First(key), value) << "fact " << key;
  }
  EXPECT_FALSE(d.summary.empty());
  EXPECT_EQ(d.summary.find('{'), std::string::npos) << "unrendered placeholder: " << d.summary;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, SignatureFamilies, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

TEST(SignatureFamilies, MalformedNvccPathNamesTheVariable) {
  const Diagnosis d = ClassifyText("/bin/sh: 1: :/usr/local/cuda-12.8/bin/nvcc: not found\n");
  EXPECT_NE(d.summary.find("CUDA_HOME"), std::string::npos) << d.summary;
  EXPECT_NE(d.summary.find("malformed"), std::string::npos) << d.summary;
}

TEST(SignatureFamilies, AnIntactMessageAfterAStemIsTheCause) {
  const Diagnosis d = ClassifyText(
      "INFO jit.py:12] ninja is required for JIT kernels; found /usr/bin/ninja\n"
      "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
      "address already in use\n");
  EXPECT_EQ(d.diagnosis_class, "port_in_use");
  EXPECT_EQ(d.confidence, Confidence::kHigh);
  EXPECT_EQ(d.root_cause_line, 2);
}

TEST(SignatureFamilies, StemsInInfoLinesOfAGoodStartAreNoCause) {
  const Diagnosis d = ClassifyText(
      "INFO worker.py:80] Tried to allocate 2.00 GiB for the KV cache, 70.1 GiB available\n"
      "INFO utils.py:12] checking kernels for sm_90 (to avoid no kernel images later)\n"
      "INFO api_server.py:200] Uvicorn running on http://0.0.0.0:8000\n");
  EXPECT_EQ(d.diagnosis_class, "none");
  EXPECT_FALSE(d.toolchain_fix);
}

TEST(SignatureFamilies, TwoCannotFindLinesGiveBothLibraries) {
  const Diagnosis d = ClassifyText(
      "/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
      "/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
      "collect2: error: ld returned 1 exit status\n");
  ASSERT_EQ(d.facts.entries().size(), 1u);
  EXPECT_EQ(d.facts.entries()[0].first, "link_library");
  EXPECT_EQ(d.facts.entries()[0].second, (std::vector<std::string>{"-lcudart", "-lcuda"}));
}

TEST(SignatureFamilies, PipListGivesPackages) {
  const Diagnosis d = ClassifyText(
      "error: #error \"CUDA compiler and CUDA toolkit headers are incompatible, please check your "
      "include paths\"\n"
      "nvidia-cuda-nvcc        13.2.51\n"
      "nvidia-cuda-runtime     13.0.96\n"
      "torch                   2.9.1+cu130\n");
  EXPECT_EQ(d.diagnosis_class, "cuda_header_mismatch");
  std::map<std::string, std::string> packages(d.facts.packages().begin(), d.facts.packages().end());
  EXPECT_EQ(packages["nvidia-cuda-nvcc"], "13.2.51");
  EXPECT_EQ(packages["nvidia-cuda-runtime"], "13.0.96");
  EXPECT_EQ(packages["torch"], "2.9.1+cu130");
}

}  // namespace
}  // namespace fleet::diagnosis
