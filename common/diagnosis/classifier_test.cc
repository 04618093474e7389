// The classifier's unit, evidence, phase and streaming logic, on small logs written for each rule.
#include "common/diagnosis/classifier.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/diagnosis/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

std::vector<int64_t> EvidenceLines(const Diagnosis& d) {
  std::vector<int64_t> lines;
  for (const EvidenceLine& l : d.evidence) lines.push_back(l.line);
  return lines;
}

constexpr char kCascade[] =
    "[2026-11-29 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
    "[2026-11-29 10:00:01 TP0] Loading JIT ops: batch_decode_bf16\n"
    "[1/3] /opt/cuda/bin/nvcc -c decode.cu -o decode.cuda.o\n"
    "[2026-11-29 10:00:05] Received sigquit from a child process. It usually means the child "
    "failed.\n"
    "FAILED: [code=255] decode.cuda.o\n"
    "/opt/cuda/bin/nvcc -c decode.cu -o decode.cuda.o\n"
    "ptxas /tmp/x.ptx, line 5; fatal   : Unsupported .version 9.2; current version is '9.0'\n"
    "ptxas fatal   : Ptx assembly aborted due to errors\n"
    "ninja: build stopped: subcommand failed.\n"
    "[2026-11-29 10:00:06 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    "  File \"/venv/flashinfer/jit/cpp_ext.py\", line 168, in run_ninja\n"
    "    subprocess.run(cmd, check=True)\n"
    "RuntimeError: Ninja build failed.\n";

TEST(Classifier, CauseAfterSigquitWinsAndSymptomsAreListed) {
  const Diagnosis d = ClassifyText(kCascade);
  EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported");
  EXPECT_EQ(d.root_cause_line, 7);
  EXPECT_EQ(d.unit, UnitKind::kNinjaFailed);
  // The evidence is the whole FAILED block, with its own line numbers.
  EXPECT_THAT(EvidenceLines(d), ElementsAre(5, 6, 7, 8, 9));
  EXPECT_EQ(d.evidence[2].text.substr(0, 5), "ptxas");
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::diagnosis_class, "child_process_failed")));
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, 9)));
  // The phase the failure came in is kept as facts: the JIT op.
  EXPECT_EQ(d.facts.First("jit_op"), "batch_decode_bf16");
  EXPECT_FALSE(d.provisional);
}

TEST(Classifier, SymptomBeforeCauseDoesNotWin) {
  const Diagnosis d = ClassifyText(
      "collect2: error: ld returned 1 exit status\n"
      "some other line\n"
      "some more\n"
      "still more\n"
      "/usr/bin/ld: cannot find -lcuda: No such file or directory\n");
  EXPECT_EQ(d.diagnosis_class, "link_error");
  EXPECT_EQ(d.root_cause_line, 5);
  EXPECT_EQ(d.signature_id, "link_cannot_find_library");
}

TEST(Classifier, EvidenceOfAHugeUnitElidesTheMiddleButKeepsTheErrorLine) {
  std::string log = "FAILED: [code=1] big.cuda.o\n";
  for (int i = 2; i <= 2000; ++i) {
    if (i == 1000) {
      log += "ptxas fatal   : Unsupported .version 9.2; current version is '9.0'\n";
    } else {
      log += absl::StrCat("big.cu(", i, "): warning #177-D: variable declared but never used\n");
    }
  }
  log += "ninja: build stopped: subcommand failed.\n";
  const Diagnosis d = ClassifyText(log);
  EXPECT_EQ(d.root_cause_line, 1000);
  const std::vector<int64_t> lines = EvidenceLines(d);
  EXPECT_THAT(lines, Contains(1000));
  EXPECT_THAT(lines, Contains(1));
  EXPECT_THAT(lines, Contains(2001));
  size_t real = 0;
  std::vector<std::string> markers;
  for (const EvidenceLine& l : d.evidence) {
    if (l.line == 0) {
      markers.push_back(l.text);
    } else {
      ++real;
    }
  }
  EXPECT_LE(real, 200u);
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_THAT(markers[0], HasSubstr("lines elided"));
  // The elided counts plus the kept lines add up to the unit's 2001 lines.
  int64_t elided = 0;
  for (size_t i = 1; i < d.evidence.size(); ++i) {
    if (d.evidence[i].line == 0) elided += d.evidence[i + 1].line - d.evidence[i - 1].line - 1;
  }
  EXPECT_EQ(static_cast<int64_t>(real) + elided, 2001);
}

TEST(Classifier, AnyChunkingGivesTheSameDiagnosis) {
  std::string log;
  for (int i = 0; i < 300; ++i) log += absl::StrCat("[", i, "/999] c++ -c f", i, ".cc\n");
  log += kCascade;
  for (int i = 0; i < 100; ++i) log += "trailing output line\n";
  const Diagnosis whole = ClassifyText(log);
  std::mt19937 rng(42);
  for (int round = 0; round < 20; ++round) {
    Classifier c(&BuiltinMatcher());
    size_t pos = 0;
    while (pos < log.size()) {
      const size_t n = std::min<size_t>(log.size() - pos, 1 + rng() % 97);
      c.AddBytes(std::string_view(log).substr(pos, n));
      pos += n;
    }
    const Diagnosis d = c.Finish();
    EXPECT_EQ(d.diagnosis_class, whole.diagnosis_class);
    EXPECT_EQ(d.root_cause_line, whole.root_cause_line);
    EXPECT_EQ(EvidenceLines(d), EvidenceLines(whole));
    EXPECT_EQ(d.lines, whole.lines);
    EXPECT_EQ(d.facts.entries(), whole.facts.entries());
  }
}

TEST(Classifier, LinesAndBytesAgree) {
  Classifier by_line(&BuiltinMatcher());
  std::string_view rest(kCascade);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    by_line.AddLine(rest.substr(0, nl));
    rest.remove_prefix(nl + 1);
  }
  const Diagnosis a = by_line.Finish();
  const Diagnosis b = ClassifyText(kCascade);
  EXPECT_EQ(a.diagnosis_class, b.diagnosis_class);
  EXPECT_EQ(a.root_cause_line, b.root_cause_line);
  EXPECT_EQ(EvidenceLines(a), EvidenceLines(b));
}

TEST(Classifier, HugeLinesAreCutAndCountedAsOneLine) {
  std::string log(3 << 20, 'x');
  log +=
      "\nImportError: libnvrtc.so.13: cannot open shared object file: No such file or "
      "directory\n";
  // Also a huge line fed in small pieces (the carry path).
  Classifier c(&BuiltinMatcher());
  for (size_t pos = 0; pos < log.size(); pos += 4096) {
    c.AddBytes(std::string_view(log).substr(pos, 4096));
  }
  const Diagnosis streamed = c.Finish();
  const Diagnosis whole = ClassifyText(log);
  for (const Diagnosis* d : {&streamed, &whole}) {
    EXPECT_EQ(d->diagnosis_class, "missing_shared_library");
    EXPECT_EQ(d->root_cause_line, 2);
    EXPECT_EQ(d->lines, 2);
  }
}

TEST(Classifier, HugeEvidenceLinesAreClipped) {
  const std::string log =
      absl::StrCat("FAILED: [code=1] x.o\n", std::string(100000, 'y'),
                   "\nnvcc fatal   : Unsupported gpu architecture 'compute_120f'"
                   "\nninja: build stopped: subcommand failed.\n");
  const Diagnosis d = ClassifyText(log);
  ASSERT_EQ(d.root_cause_line, 3);
  ASSERT_GE(d.evidence.size(), 2u);
  EXPECT_LE(d.evidence[1].text.size(), EvidenceBuilder::kMaxLineBytes + 64);
  EXPECT_THAT(d.evidence[1].text, HasSubstr("bytes cut"));
}

TEST(Classifier, ToleratesNulInvalidUtf8AndCarriageReturnProgress) {
  std::string log = "Loading safetensors checkpoint shards:   0% Completed | 0/4\r";
  log += "Loading safetensors checkpoint shards:  50% Completed | 2/4\r\n";
  log += std::string("binary\0junk\xff\xfe\xc3\x28 here\n", 21);
  log +=
      "ImportError: libcudart.so.13: cannot open shared object file: No such file or "
      "directory\r\n";
  const Diagnosis d = ClassifyText(log);
  EXPECT_EQ(d.diagnosis_class, "missing_shared_library");
  EXPECT_EQ(d.root_cause_line, 3);
  EXPECT_EQ(d.facts.First("library"), "libcudart.so.13");
  // The trailing '\r' is not part of the evidence text.
  EXPECT_EQ(d.evidence.front().text.back(), 'y');
}

TEST(Classifier, SourceQuotedInATracebackIsNotACause) {
  const Diagnosis d = ClassifyText(
      "Traceback (most recent call last):\n"
      "  File \"/app/memory.py\", line 10, in check\n"
      "    raise RuntimeError(\"CUDA out of memory\")\n"
      "ValueError: max_model_len is larger than the model's context\n");
  EXPECT_EQ(d.diagnosis_class, "unknown");
  EXPECT_EQ(d.root_cause_line, 4);
  EXPECT_THAT(EvidenceLines(d), ElementsAre(1, 2, 3, 4));
}

TEST(Classifier, LogPrefixesDoNotHideATraceback) {
  const Diagnosis d = ClassifyText(
      "(EngineCore_DP0 pid=294) ERROR 10-30 18:49:38 [core.py:708] Traceback (most recent call "
      "last):\n"
      "(EngineCore_DP0 pid=294) ERROR 10-30 18:49:38 [core.py:708]   File \"/v/core.py\", line "
      "699, in run\n"
      "(EngineCore_DP0 pid=294) ERROR 10-30 18:49:38 [core.py:708]     engine = Engine()\n"
      "(EngineCore_DP0 pid=294) ERROR 10-30 18:49:38 [core.py:708] FileNotFoundError: [Errno 2] "
      "No such file or directory: 'ninja'\n"
      "(EngineCore_DP0 pid=294) ERROR 10-30 18:49:39 [core.py:710] EngineCore failed to start.\n");
  EXPECT_EQ(d.diagnosis_class, "ninja_not_found");
  EXPECT_EQ(d.unit, UnitKind::kTraceback);
  EXPECT_THAT(EvidenceLines(d), ElementsAre(1, 2, 3, 4));
}

// vLLM V1 with tensor parallelism (issue 18): the root cause is in the failing worker's
// traceback (here flashinfer's JIT, ptxas refusing the PTX); the other worker, EngineCore and the
// API server only show what followed (a worker gone, "WorkerProc initialization failed", "Engine
// core initialization failed. See root cause above."). Line shapes of vLLM 0.11's V1 engine.
std::string VllmTensorParallelFailure(bool symptom_first) {
  const std::string tp1 = "(Worker_TP1 pid=301) ERROR 12-03 10:00:20 [multiproc_executor.py:597] ";
  const std::string root_cause =
      tp1 + "WorkerProc failed to start.\n" + tp1 + "Traceback (most recent call last):\n" + tp1 +
      "  File \"/v/vllm/v1/executor/multiproc_executor.py\", line 571, in worker_main\n" + tp1 +
      "    worker = WorkerProc(*args, **kwargs)\n" + tp1 +
      "  File \"/v/flashinfer/jit/cpp_ext.py\", line 287, in run_ninja\n" + tp1 +
      "    raise RuntimeError(msg) from e\n" + tp1 +
      "RuntimeError: Ninja build failed. Ninja output:\n" + tp1 +
      "[1/3] /v/nvidia/cu13/bin/nvcc -gencode=arch=compute_120a,code=sm_120a -c "
      "batch_prefill.cu -o batch_prefill.cuda.o\n" +
      tp1 + "FAILED: [code=255] batch_prefill.cuda.o\n" + tp1 +
      "ptxas fatal   : Unsupported .version 9.2; current version is '9.0'\n" + tp1 +
      "ninja: build stopped: subcommand failed.\n";
  const std::string symptom =
      "(Worker_TP0 pid=300) ERROR 12-03 10:00:21 [multiproc_executor.py:597] WorkerProc failed to "
      "start.\n"
      "(Worker_TP0 pid=300) ERROR 12-03 10:00:21 [multiproc_executor.py:597] Traceback (most "
      "recent call last):\n"
      "(Worker_TP0 pid=300) ERROR 12-03 10:00:21 [multiproc_executor.py:597]   File "
      "\"/v/torch/distributed/distributed_c10d.py\", line 2806, in all_reduce\n"
      "(Worker_TP0 pid=300) ERROR 12-03 10:00:21 [multiproc_executor.py:597]     work = "
      "group.allreduce([tensor], opts)\n"
      "(Worker_TP0 pid=300) ERROR 12-03 10:00:21 [multiproc_executor.py:597] "
      "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote "
      "process exited or there was a network error, NCCL version 2.27.3\n";
  const std::string start =
      "(APIServer pid=100) INFO 12-03 10:00:00 [api_server.py:1896] vLLM API server version "
      "0.11.0\n"
      "(EngineCore_DP0 pid=200) INFO 12-03 10:00:05 [core.py:77] Initializing a V1 LLM engine "
      "(v0.11.0) with config: model='/models/tiny', tensor_parallel_size=2\n"
      "(Worker_TP0 pid=300) INFO 12-03 10:00:10 [gpu_model_runner.py:2602] Starting to load "
      "model /models/tiny...\n"
      "(Worker_TP1 pid=301) INFO 12-03 10:00:10 [gpu_model_runner.py:2602] Starting to load "
      "model /models/tiny...\n";
  const std::string engine =
      "(EngineCore_DP0 pid=200) ERROR 12-03 10:00:22 [core.py:708] EngineCore failed to start.\n"
      "(EngineCore_DP0 pid=200) ERROR 12-03 10:00:22 [core.py:708] Traceback (most recent call "
      "last):\n"
      "(EngineCore_DP0 pid=200) ERROR 12-03 10:00:22 [core.py:708]   File "
      "\"/v/vllm/v1/executor/multiproc_executor.py\", line 509, in wait_for_ready\n"
      "(EngineCore_DP0 pid=200) ERROR 12-03 10:00:22 [core.py:708]     raise e from None\n"
      "(EngineCore_DP0 pid=200) ERROR 12-03 10:00:22 [core.py:708] Exception: WorkerProc "
      "initialization failed due to an exception in a background process. See stack trace for "
      "root cause.\n"
      "(APIServer pid=100) Traceback (most recent call last):\n"
      "(APIServer pid=100)   File \"/v/vllm/v1/engine/utils.py\", line 433, in "
      "wait_for_engine_startup\n"
      "(APIServer pid=100)     raise RuntimeError(\n"
      "(APIServer pid=100) RuntimeError: Engine core initialization failed. See root cause above. "
      "Failed core proc(s): {}\n";
  return start + (symptom_first ? symptom + root_cause : root_cause + symptom) + engine;
}

TEST(Classifier, APeersFailureOutweighsNoStemNorComesAfterOne) {
  const std::string nccl =
      "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote "
      "process exited or there was a network error, NCCL version 2.27.3\n";
  // A stem of a cause first: the NCCL line does not replace it.
  EXPECT_NE(ClassifyText("RuntimeError: ninja is not available\n" + nccl).signature_id,
            "nccl_peer_gone");
  // A stem after it does not replace the NCCL line either.
  EXPECT_EQ(ClassifyText(nccl + "INFO cleanup of libcudart.so.12: no such file\n").diagnosis_class,
            "nccl_error");
  // Alone, it is NCCL's failure.
  EXPECT_EQ(ClassifyText(nccl).signature_id, "nccl_peer_gone");
  // A vLLM worker whose collective lost its peer says its communicator was aborted; the peer's
  // capture failure, logged after it, is the cause.
  EXPECT_EQ(ClassifyText("(Worker_TP0 pid=300) torch.distributed.DistBackendError: NCCL "
                         "communicator was aborted on rank 0.\n"
                         "(Worker_TP1 pid=301) torch.AcceleratorError: CUDA error: operation "
                         "failed due to a previous error during capture\n")
                .diagnosis_class,
            "cuda_graph_capture_failed");
}

TEST(Classifier, VllmTensorParallelRootCauseIsTheFailingWorkers) {
  for (bool symptom_first : {false, true}) {
    const std::string log = VllmTensorParallelFailure(symptom_first);
    const Diagnosis d = ClassifyText(log);
    EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported") << symptom_first;
    ASSERT_GT(d.root_cause_line, 0);
    std::vector<std::string> lines = absl::StrSplit(log, '\n');
    EXPECT_THAT(lines[d.root_cause_line - 1], ::testing::HasSubstr("Worker_TP1"))
        << symptom_first << ": " << lines[d.root_cause_line - 1];
    EXPECT_THAT(lines[d.root_cause_line - 1], ::testing::HasSubstr("Unsupported .version 9.2"));
  }
}

TEST(Classifier, ReadyClearsEarlierFailuresButNotLaterOnes) {
  const std::string before =
      "KeyError: 'optional_feature'\n"
      "[2026-11-29 10:00:30] The server is fired up and ready to roll!\n";
  EXPECT_EQ(ClassifyText(before).diagnosis_class, "none");
  EXPECT_EQ(ClassifyText(before).phase, Phase::kReady);
  const Diagnosis after = ClassifyText(
      before + "[2026-11-29 11:00:00 TP0] Watchdog timeout (self.watchdog_timeout=300)\n");
  EXPECT_EQ(after.diagnosis_class, "runtime_watchdog");
  EXPECT_EQ(after.root_cause_line, 3);
}

TEST(Classifier, OfflineALogEndingInsideJitIsStalled) {
  const std::string log =
      "[2026-11-29 10:00:00 TP0] Load weight end. type=Llama\n"
      "flashinfer.jit: Loading JIT ops: batch_prefill_head_dim_128\n"
      "[1/4] /opt/cuda/bin/nvcc -c prefill.cu\n";
  const Diagnosis offline = ClassifyText(log);
  EXPECT_EQ(offline.diagnosis_class, "startup_stalled");
  EXPECT_EQ(offline.root_cause_line, 3);
  EXPECT_EQ(offline.facts.First("jit_op"), "batch_prefill_head_dim_128");
  EXPECT_FALSE(offline.toolchain_fix);
  EXPECT_THAT(EvidenceLines(offline), Contains(3));

  ClassifierOptions live;
  live.offline = false;
  EXPECT_EQ(ClassifyText(log, live).diagnosis_class, "none");
  EXPECT_EQ(ClassifyText(log, live).phase, Phase::kJitCompiling);

  EXPECT_EQ(ClassifyText(log + "[2/4] c\n[3/4] c\n[4/4] link\nFinished loading JIT ops: "
                               "batch_prefill_head_dim_128\n")
                .diagnosis_class,
            "none");
}

TEST(Classifier, UnfinishedNinjaBuildAloneIsAStall) {
  EXPECT_EQ(ClassifyText("[1/9] c++ a.cc\n[2/9] c++ b.cc\n").diagnosis_class, "startup_stalled");
  EXPECT_EQ(ClassifyText("[1/2] c++ a.cc\n[2/2] link\n").diagnosis_class, "none");
}

TEST(Classifier, ChildFailureDuringGraphCaptureIsACaptureFailure) {
  const Diagnosis capture = ClassifyText(
      "[2026-11-29 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
      "[2026-11-29 10:00:05] Received sigquit from a child process. It usually means the child "
      "failed.\n");
  EXPECT_EQ(capture.diagnosis_class, "cuda_graph_capture_failed");
  EXPECT_EQ(capture.root_cause_line, 2);
  EXPECT_FALSE(capture.toolchain_fix);

  const Diagnosis loading = ClassifyText(
      "[2026-11-29 10:00:00 TP0] Load weight begin. avail mem=94.50 GB\n"
      "[2026-11-29 10:00:05] Received sigquit from a child process. It usually means the child "
      "failed.\n");
  EXPECT_EQ(loading.diagnosis_class, "child_process_failed");
}

TEST(Classifier, ACauseOnAWarningLineYieldsToOneOnAnErrorLine) {
  const std::string warning =
      "/venv/torchvision/io/image.py:13: UserWarning: Failed to load image Python extension: "
      "libc10_cuda.so: cannot open shared object file: No such file or directory\n";
  const Diagnosis d = ClassifyText(
      warning +
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
      "capacity of 94.97 GiB\n");
  EXPECT_EQ(d.diagnosis_class, "cuda_out_of_memory");
  EXPECT_EQ(d.root_cause_line, 2);
  // With nothing else, the warning's cause is still reported, and outranks symptoms.
  const Diagnosis alone = ClassifyText(
      warning + "Received sigquit from a child process. It usually means the child failed.\n");
  EXPECT_EQ(alone.diagnosis_class, "missing_shared_library");
  EXPECT_EQ(alone.root_cause_line, 1);
  EXPECT_FALSE(alone.toolchain_fix);
}

TEST(Classifier, WithinLimitsASignatureToItsUnit) {
  // A bare "Killed" is an OOM-killed compile only inside a ninja FAILED block; elsewhere the
  // server itself was killed, which no toolchain change fixes.
  const Diagnosis server_killed = ClassifyText("python -m sglang.launch_server\nKilled\n");
  EXPECT_EQ(server_killed.diagnosis_class, "unknown");
  EXPECT_FALSE(server_killed.toolchain_fix);
  EXPECT_EQ(ClassifyText("FAILED: a.o\nKilled\nninja: build stopped: subcommand failed.\n")
                .diagnosis_class,
            "jit_oom_killed");
}

TEST(Classifier, AnUnrecognisedExceptionOutranksTheChildsDeath) {
  const Diagnosis d = ClassifyText(
      "[2026-11-29 10:00:00] Received sigquit from a child process. It usually means the child "
      "failed.\n"
      "[2026-11-29 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
      "  File \"/sgl/model_config.py\", line 50, in __init__\n"
      "    self.hf_config.rope_scaling['type']\n"
      "KeyError: 'type'\n");
  EXPECT_EQ(d.diagnosis_class, "unknown");
  EXPECT_EQ(d.root_cause_line, 5);
  EXPECT_THAT(EvidenceLines(d), ElementsAre(2, 3, 4, 5));
}

TEST(Classifier, ACompilerErrorKeepsItsIncludeChain) {
  const Diagnosis d = ClassifyText(
      "nvcc -c op.cu\n"
      "In file included from /cuda/include/cuda_runtime.h:82,\n"
      "                 from <command-line>:\n"
      "/cuda/include/cccl/cuda/std/__cccl/cuda_toolkit.h:39:6: error: #error \"CUDA compiler and "
      "CUDA toolkit headers are incompatible, please check your include paths\"\n"
      "   39 | #    error \"CUDA compiler and CUDA toolkit headers are incompatible\"\n"
      "      |      ^~~~~\n"
      "unrelated line\n");
  EXPECT_EQ(d.diagnosis_class, "cuda_header_mismatch");
  EXPECT_EQ(d.root_cause_line, 4);
  EXPECT_EQ(d.unit, UnitKind::kCompilerOutput);
  // The chain, the error, its source excerpt (which repeats the message) and two more lines.
  EXPECT_THAT(EvidenceLines(d), ElementsAre(2, 3, 4, 5, 6, 7));
  // An include chain that leads to no error is not a unit that matters.
  EXPECT_EQ(ClassifyText("In file included from a.h:1,\n                 from b.cc:2:\nok\n")
                .diagnosis_class,
            "none");
}

TEST(Classifier, TheFailingNinjaTargetIsAFact) {
  const Diagnosis d = ClassifyText(
      "FAILED: [code=1] cached_ops/sampling/sampling.cuda.o\n"
      "ptxas fatal   : Unsupported .version 9.2; current version is '9.0'\n"
      "ninja: build stopped: cannot make progress due to previous errors.\n");
  EXPECT_EQ(d.facts.First("ninja_target"), "cached_ops/sampling/sampling.cuda.o");
  EXPECT_EQ(d.facts.First("ptx_wanted"), "9.2");
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, 3)));
}

TEST(Classifier, EmptyInputIsNone) {
  const Diagnosis d = ClassifyText("");
  EXPECT_EQ(d.diagnosis_class, "none");
  EXPECT_EQ(d.root_cause_line, 0);
  EXPECT_EQ(d.lines, 0);
  EXPECT_TRUE(d.evidence.empty());
}

TEST(Classifier, LastLineWithoutNewlineCounts) {
  const Diagnosis d =
      ClassifyText("ok\nImportError: libnvrtc.so.13: cannot open shared object file: x");
  EXPECT_EQ(d.diagnosis_class, "missing_shared_library");
  EXPECT_EQ(d.root_cause_line, 2);
  EXPECT_EQ(d.lines, 2);
}

class RecordingListener : public ClassifierListener {
 public:
  explicit RecordingListener(const Classifier** classifier) : classifier_(classifier) {}
  void OnPhaseChanged(Phase phase, std::string_view detail, int64_t line) override {
    phases.push_back(
        absl::StrCat(std::string(PhaseName(phase)), ":", std::string(detail), "@", line));
  }
  void OnProgress(int64_t step, int64_t total, int64_t line) override {
    progress.push_back(absl::StrCat(step, "/", total, "@", line));
  }
  void OnRootCause(int64_t line) override {
    root_line = line;
    provisional_at_root = (*classifier_)->Snapshot().provisional;
    class_at_root = (*classifier_)->Snapshot().diagnosis_class;
  }
  void OnFailingUnitEnded(int64_t line) override {
    unit_end_line = line;
    final_evidence = (*classifier_)->Snapshot().evidence.size();
  }

  std::vector<std::string> phases;
  std::vector<std::string> progress;
  int64_t root_line = 0;
  int64_t unit_end_line = 0;
  bool provisional_at_root = false;
  std::string class_at_root;
  size_t final_evidence = 0;

 private:
  const Classifier** classifier_;
};

// A classifier run as the agent runs it (not offline), telling a RecordingListener.
class Listened {
 public:
  Listened() : listener(&self_), c(&BuiltinMatcher(), Online(), &listener) { self_ = &c; }

 private:
  static ClassifierOptions Online() {
    ClassifierOptions options;
    options.offline = false;
    return options;
  }
  const Classifier* self_ = nullptr;  // before listener, which points at it

 public:
  RecordingListener listener;
  Classifier c;
};

TEST(Classifier, ListenerGetsPhasesProgressAndProvisionalThenFinal) {
  Listened run;
  RecordingListener& listener = run.listener;
  Classifier& c = run.c;
  std::string_view rest(kCascade);
  // Line by line, as a follower would; the provisional diagnosis exists at the root-cause line.
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    c.AddLine(rest.substr(0, nl));
    rest.remove_prefix(nl + 1);
    if (c.lines() == 7) {
      EXPECT_TRUE(c.Snapshot().provisional);
    }
  }
  EXPECT_EQ(listener.root_line, 7);
  EXPECT_TRUE(listener.provisional_at_root);
  EXPECT_EQ(listener.class_at_root, "ptx_version_unsupported");
  EXPECT_EQ(listener.unit_end_line, 9);
  EXPECT_EQ(listener.final_evidence, 5u);
  EXPECT_THAT(listener.phases,
              ElementsAre("CAPTURING_GRAPHS:@1", "JIT_COMPILING:batch_decode_bf16@2"));
  EXPECT_THAT(listener.progress, ElementsAre("1/3@3"));
  EXPECT_FALSE(c.Snapshot().provisional);
}

// SGLang's weight loading: tqdm's bar, each state on a line of its own (a log written with
// newlines, as the simulator writes it).
constexpr char kWeightLoading[] =
    "[2026-12-02 10:00:01 TP0] Load weight begin. avail mem=93.12 GB\n"
    "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\n"
    "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:03,  1.02s/it]\n"
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:04<00:00,  1.01s/it]\n"
    "[2026-12-02 10:00:06 TP0] Load weight end. type=LlamaForCausalLM, avail mem=78.0 GB\n";

TEST(Classifier, WeightShardsCountInsideTheLoadingPhaseOnly) {
  Listened run;
  RecordingListener& listener = run.listener;
  Classifier& c = run.c;
  // A shard count before any loading phase is not a step of anything shown.
  c.AddLine("Loading weights: 50% Completed | 1/2 [00:01<00:01,  1.0s/it] (stray)");
  c.AddBytes(kWeightLoading);
  EXPECT_THAT(listener.phases, ElementsAre("LOADING:@2", "STARTING:@6"));
  EXPECT_THAT(listener.progress, ElementsAre("0/4@3", "1/4@4", "4/4@5"));
  // Weight shards are not build steps: a failure's summary never reads "last build step 4/4".
  EXPECT_EQ(c.Snapshot().progress_total, 0);
}

TEST(Classifier, ABarThatRedrawsItselfCountsEachStateAsItIsDrawn) {
  Listened run;
  RecordingListener& listener = run.listener;
  Classifier& c = run.c;
  c.AddBytes("[2026-12-02 10:00:01 TP0] Load weight begin. avail mem=93.12 GB\n");
  // tqdm writing to a file: "\r" and the new state, a newline only when the bar closes. Each
  // state counts when it is written, on the line it will end up on (2), not when the line ends.
  c.AddBytes("\rLoading safetensors checkpoint shards:   0% Completed | 0/3 [00:00<?, ?it/s]");
  EXPECT_THAT(listener.progress, ElementsAre("0/3@2"));
  c.AddBytes("\rLoading safetensors checkpoint shards:  33% Completed | 1/");
  EXPECT_THAT(listener.progress, ElementsAre("0/3@2"));  // half a state: not "1/" anything
  c.AddBytes("3 [00:01<00:02,  1.0s/it]");
  EXPECT_THAT(listener.progress, ElementsAre("0/3@2", "1/3@2"));
  c.AddBytes("\rLoading safetensors checkpoint shards: 100% Completed | 3/3 [00:03<00:00]\n");
  EXPECT_THAT(listener.progress, ElementsAre("0/3@2", "1/3@2", "3/3@2"));
  EXPECT_EQ(c.lines(), 2);
  // The line as a whole is what the terminal showed last.
  c.AddBytes("[2026-12-02 10:00:06 TP0] Load weight end. type=LlamaForCausalLM\n");
  EXPECT_THAT(listener.phases, ElementsAre("LOADING:@1", "STARTING:@3"));
}

TEST(Classifier, AnEmptyGpuArchitectureIsAMalformedListNotAnOldCompiler) {
  // 'compute_' with no number: TORCH_CUDA_ARCH_LIST (or the -gencode flags) came out empty. A
  // newer nvcc would fail the same way: never a toolchain fix.
  const Diagnosis d = ClassifyText(
      "[1/2] /usr/local/cuda/bin/nvcc -gencode=arch=compute_,code=sm_ -c k.cu -o k.cuda.o\n"
      "FAILED: k.cuda.o\n"
      "nvcc fatal   : Unsupported gpu architecture 'compute_'\n"
      "ninja: build stopped: subcommand failed.\n");
  EXPECT_EQ(d.diagnosis_class, "jit_build_failed");
  EXPECT_EQ(d.root_cause_line, 3);
  EXPECT_FALSE(d.toolchain_fix);
  EXPECT_THAT(d.summary, HasSubstr("empty GPU architecture ('compute_')"));
  // A real one stays what it was: the compiler is older than the GPU.
  const Diagnosis real = ClassifyText(
      "FAILED: k.cuda.o\nnvcc fatal   : Unsupported gpu architecture 'compute_120a'\n"
      "ninja: build stopped: subcommand failed.\n");
  EXPECT_EQ(real.diagnosis_class, "unsupported_gpu_arch");
  EXPECT_TRUE(real.toolchain_fix);
}

TEST(Classifier, ARedrawnStateLongerThanABarIsNotCountedBeforeItsLineEnds) {
  Listened run;
  run.c.AddBytes("[2026-12-02 10:00:01 TP0] Load weight begin. avail mem=93.12 GB\n");
  // A state past kMaxRedrawBytes is no progress bar: nothing counts it while the line grows (the
  // search for it stays within the last kMaxRedrawBytes of the unfinished line).
  run.c.AddBytes("\r" + std::string(Classifier::kMaxRedrawBytes, 'x'));
  run.c.AddBytes("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]");
  run.c.AddBytes("\r");
  EXPECT_THAT(run.listener.progress, ElementsAre());
  // A bar's own state after it counts at once.
  run.c.AddBytes("Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:02<00:00]");
  EXPECT_THAT(run.listener.progress, ElementsAre("2/2@2"));
}

TEST(Classifier, ACauseBeforeARedrawOnItsLineStillCounts) {
  // Steps come from a redrawn line's last state; a cause is looked for in all of it.
  const Diagnosis d = ClassifyText(
      "ImportError: libnvrtc.so.13: cannot open shared object file: No such file or directory"
      "\rbuilding... |\rbuilding... /\r   \n");
  EXPECT_EQ(d.diagnosis_class, "missing_shared_library");
  EXPECT_EQ(d.root_cause_line, 1);
}

// A traceback that lost its exception line: the innermost frame a frame signature names decides,
// with low confidence; a `caller` must be an outer frame of the same traceback.
constexpr char kHeadlessNinjaTraceback[] =
    "Traceback (most recent call last):\n"
    "  File \"/venv/flashinfer/jit/cpp_ext.py\", line 228, in run_ninja\n"
    "    subprocess.run(\n"
    "  File \"/usr/lib/python3.10/subprocess.py\", line 503, in run\n"
    "    with Popen(*popenargs, **kwargs) as process:\n"
    "  File \"/usr/lib/python3.10/subprocess.py\", line 1863, in _execute_child\n"
    "    raise child_exception_type(errno_num, err_msg, err_filename)\n";

TEST(Classifier, TheInnermostNamedFrameOfAHeadlessTracebackDecidesWithLowConfidence) {
  const Diagnosis d = ClassifyText(kHeadlessNinjaTraceback);
  EXPECT_EQ(d.diagnosis_class, "ninja_not_found");
  EXPECT_EQ(d.signature_id, "frame_subprocess_start_in_ninja");
  EXPECT_EQ(d.confidence, Confidence::kLow);
  EXPECT_FALSE(d.toolchain_fix);
  EXPECT_EQ(d.root_cause_line, 6);
  EXPECT_EQ(d.unit, UnitKind::kTraceback);
  EXPECT_THAT(EvidenceLines(d), ElementsAre(1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(d.summary, HasSubstr("lost its exception line"));
}

TEST(Classifier, AFrameWithoutItsCallerDoesNotCount) {
  // The same frames, but not called from a ninja build: subprocess failing is no ninja problem.
  std::string text = kHeadlessNinjaTraceback;
  text.replace(text.find("jit/cpp_ext.py\", line 228, in run_ninja"),
               std::string_view("jit/cpp_ext.py\", line 228, in run_ninja").size(),
               "tools/lint.py\", line 228, in run_lint");
  const Diagnosis d = ClassifyText(text);
  EXPECT_EQ(d.diagnosis_class, "unknown");
  EXPECT_EQ(d.signature_id, "traceback_headless");
  EXPECT_EQ(d.confidence, Confidence::kLow);
  EXPECT_EQ(d.root_cause_line, 1);
}

TEST(Classifier, FramesTellNothingWhenTheExceptionLineIsThere) {
  const Diagnosis d =
      ClassifyText(absl::StrCat(kHeadlessNinjaTraceback, "ValueError: something else entirely\n"));
  EXPECT_NE(d.diagnosis_class, "ninja_not_found");
  EXPECT_EQ(d.confidence, Confidence::kHigh);
}

TEST(Classifier, ACauseOrASpecificSymptomBeatsAFrame) {
  Diagnosis d = ClassifyText(absl::StrCat(kHeadlessNinjaTraceback,
                                          "ld: cannot find -lcudart: No such file or directory\n"));
  EXPECT_EQ(d.diagnosis_class, "link_error");
  EXPECT_EQ(d.confidence, Confidence::kHigh);
  // A traceback cut and followed by another record (not an exception line) is still headless.
  d = ClassifyText(absl::StrCat(kHeadlessNinjaTraceback, "[2026-11-29 10:00:06] server exits\n"));
  EXPECT_EQ(d.diagnosis_class, "ninja_not_found");
}

TEST(Classifier, ACutMessageIsALowCauseThatAnIntactOneReplaces) {
  Diagnosis d =
      ClassifyText("FAILED: a.o\nnvcc fatal   : Unsupported gpu architecture 'compute_12");
  EXPECT_EQ(d.diagnosis_class, "unsupported_gpu_arch");
  EXPECT_EQ(d.confidence, Confidence::kLow);
  EXPECT_FALSE(d.toolchain_fix);
  EXPECT_THAT(d.summary, HasSubstr("cut off"));
  d = ClassifyText(
      "ImportError: libnvrtc.so.12: can\n"
      "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
      "directory\n");
  EXPECT_EQ(d.diagnosis_class, "missing_shared_library");
  EXPECT_EQ(d.confidence, Confidence::kHigh);
  EXPECT_EQ(d.facts.First("library"), "libcudart.so.12");
}

TEST(Classifier, ReadyClearsAFrameInference) {
  const Diagnosis d = ClassifyText(
      absl::StrCat(kHeadlessNinjaTraceback, "INFO:     Application startup complete.\n"));
  EXPECT_EQ(d.diagnosis_class, "none");
}

TEST(Classifier, AnNcclPluginProbeOnAnInfoLineIsNoCause) {
  const Diagnosis d = ClassifyText(
      "node:1906:1906 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared "
      "object file: No such file or directory No plugin found (libnccl-net.so)\n"
      "[rank0]: RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for "
      "details)\n");
  EXPECT_EQ(d.diagnosis_class, "nccl_error");
  EXPECT_EQ(d.root_cause_line, 2);
}

TEST(Classifier, ATracebackEndedByAnExceptionLineOfAnyNameIsNotHeadless) {
  // Exception lines IsExceptionLine does not know, and vLLM's worker error (which starts a unit of
  // its own): the traceback kept its exception line, so its frames infer nothing.
  for (const char* last : {
           "triton.runtime.errors.OutOfResources: out of resource: shared memory",
           "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
           "RuntimeError: Worker failed with error 'shape mismatch', please check the stack trace "
           "above for the root cause",
       }) {
    const Diagnosis d = ClassifyText(
        absl::StrCat("Traceback (most recent call last):\n"
                     "  File \"/v/vllm/worker/worker.py\", line 306, in initialize_cache\n"
                     "    self._init_cache_engine()\n",
                     last, "\n"));
    EXPECT_NE(d.diagnosis_class, "cuda_out_of_memory") << last;
    EXPECT_EQ(d.confidence, Confidence::kHigh) << last;
  }
}

TEST(Classifier, ATracebackResumedAfterAnotherProcesssLineKeepsItsExceptionLine) {
  const Diagnosis d = ClassifyText(
      "Traceback (most recent call last):\n"
      "  File \"/v/torch/distributed/distributed_c10d.py\", line 4, in barrier\n"
      "    work = group.barrier(opts=opts)\n"
      "INFO 10-30 10:00:00 [metrics.py:12] Avg prompt throughput: 0.0 tokens/s\n"
      "  File \"/v/vllm/config.py\", line 9, in verify\n"
      "    raise ValueError(msg)\n"
      "ValueError: max_model_len is larger than the model allows\n");
  EXPECT_NE(d.diagnosis_class, "nccl_error");
  EXPECT_EQ(d.confidence, Confidence::kHigh);
}

TEST(Classifier, ANamedFrameAfterASourcelessFrameCountsAndIsKeptAsEvidence) {
  std::string text =
      "Traceback (most recent call last):\n"
      "  File \"<frozen runpy>\", line 198, in _run_module_as_main\n"
      "  File \"<frozen runpy>\", line 88, in _run_code\n";
  for (int i = 0; i < 150; ++i)
    absl::StrAppend(&text, "  File \"/v/m.py\", line 1, in f\n    f()\n");
  absl::StrAppend(&text,
                  "  File \"/v/torch/utils/cpp_extension.py\", line 1809, in "
                  "verify_ninja_availability\n");
  for (int i = 0; i < 150; ++i)
    absl::StrAppend(&text, "  File \"/v/m.py\", line 1, in g\n    g()\n");
  const Diagnosis d = ClassifyText(text);
  EXPECT_EQ(d.diagnosis_class, "ninja_not_found");
  EXPECT_EQ(d.root_cause_line, 304);
  EXPECT_THAT(EvidenceLines(d), Contains(304)) << "the deciding line is never elided";
}

TEST(Classifier, AnNcclInfoLineNamesNoCauseEvenWithoutAnErrorCause) {
  const Diagnosis d = ClassifyText(
      "node:1:1 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object "
      "file: No such file or directory\n"
      "Traceback (most recent call last):\n"
      "  File \"/v/app.py\", line 3, in main\n"
      "    run()\n"
      "ValueError: bad argument\n");
  EXPECT_NE(d.diagnosis_class, "missing_shared_library");
}

TEST(Classifier, APermissionDeniedNvccIsNoSplitCudaHome) {
  EXPECT_NE(ClassifyText("/bin/sh: 1: /usr/local/cuda/bin/nvcc: Permission denied\n").signature_id,
            "nvcc_path_split");
  const Diagnosis d = ClassifyText("/bin/sh: 1: /usr/local/cuda-12.4: Permission denied\n");
  EXPECT_EQ(d.signature_id, "nvcc_path_split");
  EXPECT_EQ(d.facts.First("nvcc_path"), "/usr/local/cuda-12.4");
}

TEST(Classifier, ACutPtxasVersionWithPartOfItsNumberIsCut) {
  for (const char* line :
       {"ptxas fatal   : Unsupported .version", "ptxas fatal   : Unsupported .version 8"}) {
    const Diagnosis d = ClassifyText(line);
    EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported") << line;
    EXPECT_EQ(d.confidence, Confidence::kLow) << line;
  }
}

}  // namespace
}  // namespace fleet::diagnosis
