#include "tests/sim/tracebacks.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/string_view.h"

namespace fleet::sim {
namespace {

constexpr char kPython[] = "/usr/lib/python3.12";

std::vector<Frame> SchedulerFrames(const std::string& site) {
  const std::string sched = absl::StrCat(site, "/sglang/srt/managers/scheduler.py");
  return {
      {sched, 2985, "run_scheduler_process", "scheduler = Scheduler("},
      {sched, 341, "__init__", "self.init_model_worker()"},
      {sched, 512, "init_model_worker", "self.tp_worker = TpModelWorker("},
      {absl::StrCat(site, "/sglang/srt/managers/tp_worker.py"), 247, "__init__",
       "self._model_runner = ModelRunner("},
      {absl::StrCat(site, "/sglang/srt/model_executor/model_runner.py"), 330, "__init__",
       "self.initialize(min_per_gpu_memory)"},
  };
}

std::vector<Frame> SetDeviceFrames(const std::string& site) {
  const std::string runner = absl::StrCat(site, "/sglang/srt/model_executor/model_runner.py");
  const std::string cuda = absl::StrCat(site, "/torch/cuda/__init__.py");
  return {
      {runner, 407, "initialize", "min_per_gpu_memory = self.init_torch_distributed()"},
      {runner, 735, "init_torch_distributed",
       "torch.get_device_module(self.device).set_device(self.gpu_id)"},
      {cuda, 567, "set_device", "torch._C._cuda_setDevice(device)"},
  };
}

std::vector<Frame> NcclFrames(const std::string& site) {
  const std::string runner = absl::StrCat(site, "/sglang/srt/model_executor/model_runner.py");
  return {
      {runner, 407, "initialize", "min_per_gpu_memory = self.init_torch_distributed()"},
      {runner, 781, "init_torch_distributed", "initialize_model_parallel("},
      {absl::StrCat(site, "/sglang/srt/distributed/parallel_state.py"), 1552,
       "initialize_model_parallel", "_TP = init_model_parallel_group("},
      {absl::StrCat(site, "/sglang/srt/distributed/parallel_state.py"), 1288,
       "init_model_parallel_group", "return GroupCoordinator("},
      {absl::StrCat(site, "/torch/distributed/c10d_logger.py"), 81, "wrapper",
       "return func(*args, **kwargs)"},
      {absl::StrCat(site, "/torch/distributed/distributed_c10d.py"), 4799, "barrier",
       "work = group.barrier(opts=opts)"},
  };
}

std::vector<Frame> AttentionBackendFrames(const std::string& site) {
  const std::string runner = absl::StrCat(site, "/sglang/srt/model_executor/model_runner.py");
  return {
      {runner, 489, "initialize", "self.init_attention_backend()"},
      {runner, 1897, "init_attention_backend", "self.attn_backend = self._get_attention_backend()"},
      {runner, 1958, "_get_attention_backend_from_str", "assert ("},
  };
}

// From the model runner down to the attention backend's plan() that triggers the JIT build.
std::vector<Frame> CaptureFrames(const std::string& site) {
  const std::string runner = absl::StrCat(site, "/sglang/srt/model_executor/model_runner.py");
  const std::string graphs = absl::StrCat(site, "/sglang/srt/model_executor/cuda_graph_runner.py");
  return {
      {runner, 493, "initialize", "self.init_device_graphs()"},
      {runner, 2160, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"},
      {graphs, 380, "__init__", "self.capture()"},
      {graphs, 498, "capture", ") = self.capture_one_batch_size(bs, forward, stream_idx)"},
  };
}

std::vector<Frame> JitModuleFrames(const std::string& site, const JitOp& op) {
  const std::string graphs = absl::StrCat(site, "/sglang/srt/model_executor/cuda_graph_runner.py");
  const std::string backend =
      absl::StrCat(site, "/sglang/srt/layers/attention/flashinfer_backend.py");
  std::vector<Frame> frames;
  if (op.module == "sampling") {
    frames = {
        {graphs, 712, "capture_one_batch_size", "out = run_once()"},
        {absl::StrCat(site, "/sglang/srt/layers/sampler.py"), 118, "forward",
         "batch_next_token_ids = top_k_top_p_sampling_from_probs("},
    };
  } else {
    frames = {
        {graphs, 680, "capture_one_batch_size",
         "self.model_runner.attn_backend.init_forward_metadata_capture_cuda_graph("},
        {backend, 448, "init_forward_metadata_capture_cuda_graph",
         "self.indices_updater_decode.update("},
        {backend, 1187, "call_begin_forward", "wrapper.begin_forward("},
    };
  }
  Append(&frames, FlashinferOpFrames(site, op));
  return frames;
}

std::vector<Frame> PopenFrames() {
  const std::string sub = absl::StrCat(kPython, "/subprocess.py");
  return {
      {sub, 548, "run", "with Popen(*popenargs, **kwargs) as process:"},
      {sub, 1026, "__init__", "self._execute_child(args, executable, preexec_fn, close_fds,"},
      {sub, 1955, "_execute_child", "raise child_exception_type(errno_num, err_msg, err_filename)"},
  };
}

}  // namespace

std::string Render(const std::vector<Frame>& frames) {
  std::string out;
  for (const Frame& f : frames) {
    absl::StrAppend(&out, "  File \"", f.file, "\", line ", f.line, ", in ", f.function, "\n");
    if (!f.code.empty()) absl::StrAppend(&out, "    ", f.code, "\n");
  }
  return out;
}

void Append(std::vector<Frame>* to, const std::vector<Frame>& more) {
  to->insert(to->end(), more.begin(), more.end());
}

std::vector<Frame> FlashinferOpFrames(const std::string& site, const JitOp& op) {
  const std::string module = absl::StrCat(site, "/flashinfer/", op.module, ".py");
  if (op.module == "sampling") {
    return {
        {module, 1021, "top_k_top_p_sampling_from_probs",
         "return get_sampling_module().top_k_top_p_sampling_from_probs("},
        {module, 48, "get_sampling_module", "module = gen_sampling_module().build_and_load()"},
    };
  }
  const std::string plan_fn =
      op.module == "decode" ? "get_batch_decode_module" : "get_batch_prefill_module";
  return {
      {module, 1044, "plan", absl::StrCat("self._cached_module = ", plan_fn, "(")},
      {module, 343, plan_fn, "module = gen_module(*args).build_and_load()"},
  };
}

std::string JitFailureTraceback(const std::string& site, const SchedulerFailureDetail& d,
                                const std::vector<Frame>& prefix) {
  const std::string core = absl::StrCat(site, "/flashinfer/jit/core.py");
  const std::string cpp_ext = absl::StrCat(site, "/flashinfer/jit/cpp_ext.py");
  std::vector<Frame> frames = prefix;
  if (d.failure != SchedulerFailure::kJitStaleLibrary) {
    Append(&frames, {{core, 305, "build_and_load", "self.build(verbose, need_lock=False)"}});
  }
  switch (d.failure) {
    case SchedulerFailure::kJitNvcc: {
      Append(&frames, {{core, 289, "build", "self.write_ninja()"},
                       {core, 272, "write_ninja", "content = generate_ninja_build_for_op("}});
      if (!d.toolchain->missing_nvcc.empty()) {
        Append(&frames,
               {{cpp_ext, 160, "generate_ninja_build_for_op", "cuda_version = get_cuda_version()"},
                {cpp_ext, 80, "get_cuda_version",
                 "txt = subprocess.check_output([nvcc, \"--version\"], text=True)"},
                {absl::StrCat(kPython, "/subprocess.py"), 466, "check_output",
                 "return run(*popenargs, stdout=PIPE, timeout=timeout, check=True,"}});
        Append(&frames, PopenFrames());
        return absl::StrCat(Render(frames),
                            "FileNotFoundError: [Errno 2] No such file or directory: '",
                            d.toolchain->missing_nvcc, "'\n");
      }
      if (d.toolchain->problem == JitProblem::kNvccBroken) {
        Append(&frames,
               {{cpp_ext, 160, "generate_ninja_build_for_op", "cuda_version = get_cuda_version()"},
                {cpp_ext, 80, "get_cuda_version",
                 "txt = subprocess.check_output([nvcc, \"--version\"], text=True)"},
                {absl::StrCat(kPython, "/subprocess.py"), 571, "run",
                 "raise CalledProcessError(retcode, process.args,"}});
        return absl::StrCat(Render(frames), "subprocess.CalledProcessError: Command '['",
                            d.toolchain->nvcc,
                            "', '--version']' returned non-zero exit status 1.\n");
      }
      Append(&frames, {{cpp_ext, 148, "generate_ninja_build_for_op", "cuda_home = get_cuda_path()"},
                       {cpp_ext, 62, "get_cuda_path", "raise RuntimeError("}});
      return absl::StrCat(
          Render(frames),
          "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' "
          "doesn't exist\n");
    }
    case SchedulerFailure::kJitNinjaMissing:
      Append(&frames, {{core, 291, "build",
                        "run_ninja(jit_env.FLASHINFER_JIT_DIR, self.ninja_path, verbose)"},
                       {cpp_ext, 339, "run_ninja", "subprocess.run("}});
      Append(&frames, PopenFrames());
      return absl::StrCat(Render(frames),
                          "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'\n");
    case SchedulerFailure::kJitNinjaFailed: {
      Append(&frames, {{core, 291, "build",
                        "run_ninja(jit_env.FLASHINFER_JIT_DIR, self.ninja_path, verbose)"}});
      std::vector<Frame> inner = frames;
      Append(&inner, {{cpp_ext, 339, "run_ninja", "subprocess.run("},
                      {absl::StrCat(kPython, "/subprocess.py"), 571, "run",
                       "raise CalledProcessError(retcode, process.args,"}});
      Append(&frames, {{cpp_ext, 351, "run_ninja", "raise RuntimeError(msg) from e"}});
      // Python prints the cause first, then the exception raised from it.
      return absl::StrCat(
          Render(inner), "subprocess.CalledProcessError: Command '", d.build->NinjaArgvRepr(*d.op),
          "' returned non-zero exit status 1.\n\n",
          "The above exception was the direct cause of the following exception:\n\n",
          kTracebackHead, Render(frames), "RuntimeError: Ninja build failed.\n");
    }
    case SchedulerFailure::kJitStaleLibrary:
      Append(&frames, {{core, 300, "build_and_load", "return self.load(so_path)"},
                       {core, 318, "load", "return tvm_ffi.load_module(str(so_path))"},
                       {absl::StrCat(site, "/tvm_ffi/module.py"), 412, "load_module",
                        "return core.load_module(path)"}});
      return absl::StrCat(Render(frames), "OSError: ", d.build->LibraryPath(*d.op),
                          ": invalid ELF header\n");
    default:
      return Render(frames);
  }
}

std::string SglKernelImportError(const std::string& site, std::string_view library) {
  const std::vector<Frame> frames = {
      {"<frozen runpy>", 198, "_run_module_as_main", ""},
      {"<frozen runpy>", 88, "_run_code", ""},
      {absl::StrCat(site, "/sglang/launch_server.py"), 7, "<module>",
       "from sglang.srt.entrypoints.http_server import launch_server"},
      {absl::StrCat(site, "/sglang/srt/entrypoints/http_server.py"), 59, "<module>",
       "from sglang.srt.entrypoints.engine import _launch_subprocesses"},
      {absl::StrCat(site, "/sglang/srt/entrypoints/engine.py"), 41, "<module>",
       "from sglang.srt.managers.data_parallel_controller import ("},
      {absl::StrCat(site, "/sglang/srt/managers/data_parallel_controller.py"), 32, "<module>",
       "from sglang.srt.managers.scheduler import run_scheduler_process"},
      {absl::StrCat(site, "/sglang/srt/layers/activation.py"), 48, "<module>",
       "from sgl_kernel import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul"},
      {absl::StrCat(site, "/sgl_kernel/__init__.py"), 5, "<module>",
       "common_ops = _load_architecture_specific_ops()"},
      {absl::StrCat(site, "/sgl_kernel/load_utils.py"), 188, "_load_architecture_specific_ops",
       "raise ImportError(error_msg)"},
  };
  return absl::StrCat(kTracebackHead, Render(frames), "ImportError: ", AsAbsl(library),
                      ": cannot open shared object file: No such file or directory\n");
}

std::string HubOsErrorLine(const std::string& model) {
  return absl::StrCat(
      "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find "
      "it in the cached files and it looks like ",
      model,
      " is not the path to a directory containing a file named config.json.\nCheckout your "
      "internet connection or see how to run the library in offline mode at "
      "'https://huggingface.co/docs/transformers/installation#offline-mode'.\n");
}

std::string ModelNotFoundError(const std::string& site, const std::string& model) {
  const std::vector<Frame> frames = {
      {"<frozen runpy>", 198, "_run_module_as_main", ""},
      {"<frozen runpy>", 88, "_run_code", ""},
      {absl::StrCat(site, "/sglang/launch_server.py"), 11, "<module>",
       "launch_server(server_args)"},
      {absl::StrCat(site, "/sglang/srt/entrypoints/http_server.py"), 1304, "launch_server",
       "tokenizer_manager, template_manager, scheduler_info, port_args = _launch_subprocesses("},
      {absl::StrCat(site, "/sglang/srt/utils/hf_transformers_utils.py"), 152, "get_config",
       "config = AutoConfig.from_pretrained("},
      {absl::StrCat(site, "/transformers/utils/hub.py"), 511, "cached_files", "raise OSError("},
  };
  return absl::StrCat(kTracebackHead, Render(frames), HubOsErrorLine(model));
}

std::string SchedulerException(const std::string& site, const SchedulerFailureDetail& d) {
  std::vector<Frame> frames = SchedulerFrames(site);
  std::string body;
  switch (d.failure) {
    case SchedulerFailure::kNoDriver:
      Append(&frames, SetDeviceFrames(site));
      Append(&frames, {{absl::StrCat(site, "/torch/cuda/__init__.py"), 410, "_lazy_init",
                        "torch._C._cuda_init()"}});
      body = absl::StrCat(Render(frames),
                          "RuntimeError: Found no NVIDIA driver on your system. Please check that "
                          "you have an NVIDIA GPU and installed a driver from "
                          "http://www.nvidia.com/Download/index.aspx\n");
      break;
    case SchedulerFailure::kInvalidDevice:
      Append(&frames, SetDeviceFrames(site));
      body = absl::StrCat(Render(frames),
                          "torch.AcceleratorError: CUDA error: invalid device ordinal\nCUDA kernel "
                          "errors might be asynchronously reported at some other API call, so the "
                          "stacktrace below might be incorrect.\n");
      break;
    case SchedulerFailure::kNccl:
      Append(&frames, NcclFrames(site));
      body = absl::StrCat(
          Render(frames),
          "torch.distributed.DistBackendError: NCCL error in: "
          "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, unhandled system error "
          "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7\n"
          "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
          "device error. \nLast error:\n"
          "socketStartConnect: Connect to 127.0.0.1<41213> failed : Connection refused\n");
      break;
    case SchedulerFailure::kAttentionBackend:
      Append(&frames, AttentionBackendFrames(site));
      body = absl::StrCat(Render(frames),
                          d.attention_backend == "fa3"
                              ? "AssertionError: FlashAttention v3 Backend requires SM>=80 and "
                                "SM<=90. Please use `--attention-backend flashinfer`.\n"
                              : absl::StrCat("AssertionError: ", d.attention_backend,
                                             " backend requires SM90 or SM100. Please use "
                                             "`--attention-backend flashinfer`.\n"));
      break;
    case SchedulerFailure::kCaptureOutOfMemory: {
      Append(&frames, CaptureFrames(site));
      const std::string graphs =
          absl::StrCat(site, "/sglang/srt/model_executor/cuda_graph_runner.py");
      Append(&frames, {{graphs, 712, "capture_one_batch_size", "out = run_once()"},
                       {graphs, 699, "run_once", "logits_output_or_pp_proxy_tensors = forward("},
                       {absl::StrCat(site, "/torch/utils/_contextlib.py"), 120, "decorate_context",
                        "return func(*args, **kwargs)"}});
      body = absl::StrCat(
          Render(frames),
          absl::StrFormat(
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU %d has "
              "a total capacity of %.2f GiB of which 1.06 GiB is free. Including non-PyTorch "
              "memory, this process has %.2f GiB memory in use. Of the allocated memory %.2f GiB "
              "is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. If "
              "reserved but unallocated memory is large try setting "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
              "documentation for Memory Management  "
              "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
              d.gpu, d.gpu_total_gib, d.gpu_total_gib - 1.06, d.gpu_total_gib - 2.27));
      break;
    }
    default: {
      Append(&frames, CaptureFrames(site));
      Append(&frames, JitModuleFrames(site, *d.op));
      body = JitFailureTraceback(site, d, frames);
      break;
    }
  }
  return absl::StrCat("Scheduler hit an exception: ", kTracebackHead, body);
}

}  // namespace fleet::sim
