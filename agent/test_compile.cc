#include "agent/test_compile.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/proto_time.h"
#include "common/base/utf8.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis_proto.h"

namespace fleet::agent {
namespace {

// A kernel that needs what flashinfer's ops need from the toolchain: the runtime's and the half
// type's headers, CCCL (libcu++, whose guard compares the compiler with the headers), device code
// through ptxas for the GPU's arch. Small: the build takes seconds.
constexpr char kSource[] =
    R"(// gpu-fleet's test-compile (agent/test_compile.h): built like a JIT op, never run.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda/std/cstdint>

extern "C" __global__ void fleet_test_compile(const __half* in, __half* out,
                                              ::cuda::std::int32_t n) {
  const ::cuda::std::int32_t i = static_cast<::cuda::std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = __hadd(in[i], in[i]);
}
)";

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool WriteNewFile(const std::string& path, std::string_view text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  return close(fd) == 0 && ok;
}

// How ninja prints a failed step's exit ("[code=1]"), or the signal that ended it.
std::string ExitCode(const CommandResult& r) {
  if (r.timed_out) return "[timed out]";
  if (r.exited) return absl::StrCat("[code=", r.exit_code, "]");
  return absl::StrCat("[signal ", r.signal, "]");
}

}  // namespace

std::vector<std::string> GencodeTargets(const std::vector<std::string>& compute_capabilities,
                                        const std::string& nvcc_release) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::pair<std::string, std::string> release = absl::StrSplit(nvcc_release, '.');
  int release_major = 0, release_minor = 0;
  const bool families = absl::SimpleAtoi(release.first, &release_major) &&
                        absl::SimpleAtoi(release.second, &release_minor) &&
                        (release_major > 12 || (release_major == 12 && release_minor >= 9));
  for (const std::string& cc : compute_capabilities) {
    std::pair<std::string, std::string> parts = absl::StrSplit(cc, '.');
    int major = 0, minor = 0;
    if (!absl::SimpleAtoi(parts.first, &major) || !absl::SimpleAtoi(parts.second, &minor) ||
        major <= 0 || major > 99 || minor < 0 || minor > 9) {
      continue;
    }
    const std::string target = absl::StrCat("sm_", major, minor, major >= 9 ? "a" : "");
    if (seen.insert(target).second) out.push_back(target);
    if (families && major >= 10) {
      const std::string family = absl::StrCat("sm_", major, minor, "f");
      if (seen.insert(family).second) out.push_back(family);
    }
  }
  return out;
}

fleet::v1::TestCompile RunTestCompile(CommandRunner* runner,
                                      const fleet::v1::ToolchainSnapshot& snapshot,
                                      const std::map<std::string, std::string>& env,
                                      const TestCompileOptions& options) {
  fleet::v1::TestCompile out;
  if (snapshot.nvcc().path().empty()) {
    out.set_skipped("no nvcc");
    return out;
  }
  std::vector<std::string> ccs;
  for (const fleet::v1::Gpu& gpu : snapshot.gpus()) ccs.push_back(gpu.compute_capability());
  const std::vector<std::string> targets = GencodeTargets(ccs, snapshot.nvcc().version());
  if (targets.empty()) {
    out.set_skipped("no GPU arch (nvidia-smi gave no compute capability)");
    return out;
  }
  for (const std::string& t : targets) out.add_archs(t);

  std::string root = options.tmp_root;
  if (root.empty()) {
    const char* tmp = getenv("TMPDIR");
    root = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string dir = absl::StrCat(root, "/fleet-test-compile.XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    out.set_skipped(absl::StrCat("mkdtemp ", dir, ": ", std::strerror(errno)));
    return out;
  }
  absl::Cleanup remove_dir = [&dir] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  const std::string source = absl::StrCat(dir, "/test_compile.cu");
  const std::string object = absl::StrCat(dir, "/test_compile.cuda.o");
  const std::string library = absl::StrCat(dir, "/test_compile.so");
  if (!WriteNewFile(source, kSource)) {
    out.set_skipped(absl::StrCat("cannot write ", source, ": ", std::strerror(errno)));
    return out;
  }

  // flashinfer's compile line (flashinfer/jit/cpp_ext.py): the toolkit's include dir, then the
  // headers flashinfer bundles (its CCCL among them) as system includes.
  std::vector<std::string> compile = {snapshot.nvcc().path(), "-c", source, "-o", object};
  std::string include = snapshot.include_dir();
  if (include.empty() && !snapshot.cuda_root().empty()) {
    include = absl::StrCat(snapshot.cuda_root(), "/include");
  }
  if (!include.empty()) compile.insert(compile.end(), {"-isystem", include});
  if (!snapshot.site_packages().empty()) {
    for (const char* bundled : {"/flashinfer/data/include", "/flashinfer/data/csrc"}) {
      const std::string path = absl::StrCat(snapshot.site_packages(), bundled);
      if (IsDirectory(path)) compile.insert(compile.end(), {"-isystem", path});
    }
  }
  compile.insert(compile.end(), {"--compiler-options=-fPIC", "--expt-relaxed-constexpr"});
  for (const std::string& t : targets) {
    const std::string arch = t.substr(3);  // "120a"
    compile.push_back(absl::StrCat("-gencode=arch=compute_", arch, ",code=sm_", arch));
  }
  compile.insert(compile.end(), {"-O3", "-std=c++17"});

  // torch's cpp_extension link line, as flashinfer's ops get it: the driver's stub, the runtime.
  // torch's cpp_extension links with $CXX when the server's environment sets it.
  const auto cxx = env.find("CXX");
  std::vector<std::string> link = {
      cxx != env.end() && !cxx->second.empty() ? cxx->second : options.host_compiler, object,
      "-shared"};
  if (!snapshot.cuda_root().empty()) {
    link.insert(link.end(), {absl::StrCat("-L", snapshot.cuda_root(), "/lib64/stubs"), "-lcuda",
                             absl::StrCat("-L", snapshot.cuda_root(), "/lib64"), "-lcudart"});
  } else {
    link.insert(link.end(), {"-lcuda", "-lcudart"});
  }
  link.insert(link.end(), {"-o", library});

  // nvcc's and ptxas' own temporary files in the private dir too (not a shared /tmp; gone with it).
  std::map<std::string, std::string> build_env = env;
  build_env["TMPDIR"] = dir;
  const absl::Time start = absl::Now();
  std::string log;
  bool conclusive = true;
  out.set_ran(true);
  out.set_ok(true);
  const std::vector<std::pair<std::string, const std::vector<std::string>*>> steps = {
      {"compile", &compile}, {"link", &link}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, argv] = steps[i];
    const std::string command = absl::StrJoin(*argv, " ");
    absl::StrAppend(&log, "[", i + 1, "/", steps.size(), "] ", command, "\n");
    absl::StatusOr<CommandResult> r =
        runner->Run({.argv = *argv, .env = build_env, .cwd = dir, .timeout = options.step_timeout});
    if (r.ok() && r->ok()) {
      absl::StrAppend(&log, r->output);
      continue;
    }
    out.set_ok(false);
    out.set_failed_step(step);
    const std::string target = step == "compile" ? object : library;
    absl::StrAppend(&log, "FAILED: ", r.ok() ? ExitCode(*r) : "[not started]", " ", target, "\n",
                    command, "\n");
    if (r.ok()) {
      absl::StrAppend(&log, r->output);
      if (!r->output.empty() && r->output.back() != '\n') log.push_back('\n');
      if (r->timed_out) {
        absl::StrAppend(&log, "gpu-fleet: the ", step, " step ran past ",
                        absl::FormatDuration(options.step_timeout), " and was killed\n");
      }
      // Killed (the bound, the OOM killer): says nothing about the toolchain.
      conclusive = r->exited;
    } else {
      absl::StrAppend(&log, r.status().message(), "\n");
    }
    absl::StrAppend(&log, "ninja: build stopped: subcommand failed.\n");
    break;
  }
  *out.mutable_took() = ToProtoDuration(absl::Now() - start);
  if (log.size() > options.max_log_bytes) log = log.substr(log.size() - options.max_log_bytes);
  // A proto string: cut anywhere above, and the tools' own bytes, made valid UTF-8.
  log = SanitizeUtf8(log);
  if (!out.ok() && conclusive) {
    diagnosis::Classifier classifier(&diagnosis::SignatureMatcher::Builtin(), {});
    classifier.AddBytes(log);
    diagnosis::ToProto(classifier.Finish(), out.mutable_diagnosis());
  }
  out.set_log(std::move(log));
  return out;
}

}  // namespace fleet::agent
