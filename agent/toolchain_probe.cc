#include "agent/toolchain_probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/string_view.h"
#include "re2/re2.h"

namespace fleet::agent {
namespace {

using Env = std::map<std::string, std::string>;
using fleet::v1::ToolchainSnapshot;

// `--version` of nvcc/ptxas/ninja and a ptxas run on a three-line file are fast; a tool that takes
// longer is hung (a wedged driver makes nvidia-smi hang), and a hung tool is a fact, not a wait.
constexpr absl::Duration kToolTimeout = absl::Seconds(30);
// Enough of a file's head for METADATA's headers, cuda_runtime_api.h's CUDART_VERSION (line ~140)
// and version.json.
constexpr size_t kHeadBytes = 64 << 10;

// The highest PTX ISA each CUDA release's ptxas accepts (NVIDIA's PTX ISA release notes). Data, not
// code: used only when running ptxas on the probe PTX did not say it (see ProbePtxIsa).
struct PtxIsaRow {
  int cuda_major;
  int cuda_minor;
  const char* ptx_isa;
};
constexpr PtxIsaRow kPtxIsaOfRelease[] = {
    {11, 0, "7.0"}, {11, 1, "7.1"}, {11, 2, "7.2"}, {11, 3, "7.3"}, {11, 4, "7.4"}, {11, 5, "7.5"},
    {11, 6, "7.6"}, {11, 7, "7.7"}, {11, 8, "7.8"}, {12, 0, "8.0"}, {12, 1, "8.1"}, {12, 2, "8.2"},
    {12, 3, "8.3"}, {12, 4, "8.4"}, {12, 5, "8.5"}, {12, 6, "8.5"}, {12, 8, "8.7"}, {12, 9, "8.8"},
    {13, 0, "9.0"}, {13, 1, "9.1"}, {13, 2, "9.2"},
};

// A PTX ISA no ptxas accepts: real ptxas rejects it naming the newest it does accept,
// `ptxas FILE, line 1; fatal   : Unsupported .version 99.9; current version is '9.0'`.
constexpr char kProbePtx[] = ".version 99.9\n.target sm_75\n.address_size 64\n";

// The NVIDIA driver's character devices: nvidiaN is 195:N, nvidiactl 195:255.
constexpr unsigned kNvidiaMajor = 195;
constexpr int64_t kNvidiaCtlMinor = 255;
// Where a note about the GPU device nodes sends the user.
constexpr char kDeviceNodesHint[] =
    "the container's config must pass them in: docs/config.md, GPUs in a Proxmox LXC container";

// pip projects (canonical names) the planner reasons on, besides every nvidia-* one.
constexpr std::string_view kPackagePrefixes[] = {"nvidia-", "flashinfer", "cuda-"};
constexpr std::string_view kPackageNames[] = {"torch",  "sglang", "sgl-kernel", "ninja",
                                              "triton", "vllm",   "xformers"};

#if defined(__aarch64__)
constexpr char kMultiarch[] = "aarch64-linux-gnu";
constexpr char kLdconfigArch[] = "AArch64";
#else
constexpr char kMultiarch[] = "x86_64-linux-gnu";
constexpr char kLdconfigArch[] = "x86-64";
#endif

std::string Get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A regular file, following links (a dangling link is no file).
bool IsFile(const std::string& path) {
  struct stat st;
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsExecutableFile(const std::string& path) {
  return IsFile(path) && access(path.c_str(), X_OK) == 0;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> SplitList(const std::string& value) {
  return absl::StrSplit(value, ':', absl::SkipEmpty());
}

// Names in `dir`, sorted (readdir's order is the file system's, not stable).
std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// The first `max` bytes of a file, or nullopt when it cannot be read.
std::optional<std::string> ReadHead(const std::string& path, size_t max = kHeadBytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  absl::Cleanup close_fd = [fd] { close(fd); };
  std::string data(max, '\0');
  size_t got = 0;
  while (got < max) {
    const ssize_t n = read(fd, data.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

// "13.0.88" → "13.0"; "" when `version` does not start with two numbers.
std::string MajorMinor(std::string_view version) {
  static const RE2 re("^(\\d+)\\.(\\d+)");
  std::string major, minor;
  if (!RE2::PartialMatch(version, re, &major, &minor)) return "";
  return absl::StrCat(major, ".", minor);
}

// "Cuda compilation tools, release 13.0, V13.0.88" → "13.0".
std::string ParseReleaseBanner(std::string_view output) {
  static const RE2 re("release (\\d+\\.\\d+)");
  std::string release;
  return RE2::PartialMatch(output, re, &release) ? release : "";
}

// `#define CUDART_VERSION 13000` → "13.0".
std::string ParseCudartVersion(std::string_view header) {
  static const RE2 re("(?m)^\\s*#\\s*define\\s+CUDART_VERSION\\s+(\\d+)");
  int value = 0;
  if (!RE2::PartialMatch(header, re, &value) || value <= 0) return "";
  return absl::StrCat(value / 1000, ".", (value % 1000) / 10);
}

// The last non-empty line of a tool's output, for a note.
std::string LastLine(std::string_view output) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(AsAbsl(output), '\n', absl::SkipWhitespace());
  if (lines.empty()) return "(no output)";
  return std::string(absl::StripAsciiWhitespace(lines.back()));
}

// The PTX ISA of the release table for a ptxas release: the row of that release, else the
// highest row below it (a lower bound for a release newer than the table).
std::string PtxIsaOfRelease(const std::string& release) {
  int major = 0, minor = 0;
  std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(release, '.');
  if (!absl::SimpleAtoi(parts.first, &major) || !absl::SimpleAtoi(parts.second, &minor)) return "";
  std::string isa;
  for (const PtxIsaRow& row : kPtxIsaOfRelease) {
    if (std::pair(row.cuda_major, row.cuda_minor) <= std::pair(major, minor)) isa = row.ptx_isa;
  }
  return isa;
}

// pip's canonical project name (PEP 503): lower case, runs of -_. become one '-'.
std::string CanonicalName(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (out.empty() || out.back() != '-') out.push_back('-');
    } else {
      out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

bool WantedPackage(const std::string& canonical) {
  for (std::string_view p : kPackagePrefixes) {
    if (absl::StartsWith(canonical, AsAbsl(p))) return true;
  }
  return std::find(std::begin(kPackageNames), std::end(kPackageNames), canonical) !=
         std::end(kPackageNames);
}

// One probe: the target, the snapshot being filled and what earlier steps resolved.
class ProbeRun {
 public:
  ProbeRun(CommandRunner* runner, const ProbeTarget& target, ToolchainSnapshot* snapshot)
      : runner_(runner), target_(target), env_(target.env), snap_(snapshot) {}

  void Run() {
    const int64_t now_ns = absl::ToUnixNanos(absl::Now());
    snap_->mutable_at()->set_seconds(now_ns / 1000000000);
    snap_->mutable_at()->set_nanos(static_cast<int32_t>(now_ns % 1000000000));
    ResolveVenv();
    ReadPipPackages();
    ResolveCuda();
    ProbeNvcc();
    ProbePtxas();
    ProbeHeaders();
    ProbeNvvm();
    ProbeLinkLayout();
    ProbeLoader();
    ProbeNinja();
    ProbeElsewhere();
    ProbeGpus();
    ProbeDeviceNodes();
    ProbeJitCaches();
    if (target_.test_compile) {
      // For the server's GPUs only: its JIT builds for what CUDA_VISIBLE_DEVICES shows it.
      ToolchainSnapshot mine = *snap_;
      if (!target_.gpus.empty()) {
        mine.clear_gpus();
        for (const fleet::v1::Gpu& g : snap_->gpus()) {
          if (std::find(target_.gpus.begin(), target_.gpus.end(), g.index()) !=
              target_.gpus.end()) {
            *mine.add_gpus() = g;
          }
        }
      }
      *snap_->mutable_test_compile() =
          RunTestCompile(runner_, mine, env_, target_.test_compile_options);
    } else {
      snap_->mutable_test_compile()->set_skipped(
          "turned off by the policy (preflight.test_compile: false)");
    }
  }

 private:
  void Note(std::string note) { snap_->add_notes(std::move(note)); }

  // The argv's program, run with the server's environment (argv[0] without '/' is searched on
  // the server's PATH by the runner). NotFound and start failures become a note and nullopt;
  // each tool's own failure (exit code, timeout) is noted by its caller with what it means.
  std::optional<CommandResult> RunTool(std::vector<std::string> argv, const std::string& what) {
    absl::StatusOr<CommandResult> result =
        runner_->Run({.argv = std::move(argv), .env = env_, .timeout = kToolTimeout});
    if (!result.ok()) {
      // The runner's message names the program already ("nvidia-smi: not found on the PATH").
      const absl::string_view message = result.status().message();
      Note(absl::StartsWith(message, what) ? std::string(message)
                                           : absl::StrCat(what, ": ", message));
      return std::nullopt;
    }
    return *std::move(result);  // a timeout is the caller's fact to note (Outcome)
  }

  // Where a relative path of the server (argv[0]) lies: against its working dir.
  std::string Absolute(const std::string& path) const {
    if (path.empty() || path[0] == '/' || target_.workdir.empty()) return path;
    return absl::StrCat(target_.workdir, "/", path);
  }

  // The venv: configured, else the one the server's python lives in (VENV/bin/python), else
  // VIRTUAL_ENV. Links are not resolved: a venv's bin/python is a link to the system python.
  void ResolveVenv() {
    std::string venv = target_.venv;
    if (venv.empty() && !target_.argv.empty()) {
      std::string program = target_.argv[0];
      if (program.find('/') == std::string::npos) {
        program = FindExecutable(program, Get(env_, "PATH"));
      }
      program = Absolute(program);
      const std::string bin = Dirname(program);
      if (!program.empty() && Basename(bin) == "bin") {
        const std::string root = Dirname(bin);
        if (IsFile(absl::StrCat(root, "/pyvenv.cfg")) || !FindSitePackages(root).empty()) {
          venv = root;
        }
      }
    }
    if (venv.empty()) venv = Get(env_, "VIRTUAL_ENV");
    snap_->set_venv(venv);
    if (venv.empty()) {
      Note("venv: none configured, none from the server's argv[0], no VIRTUAL_ENV");
      return;
    }
    site_packages_ = FindSitePackages(venv);
    snap_->set_site_packages(site_packages_);
    if (site_packages_.empty()) {
      Note(absl::StrCat("venv ", venv, ": no lib/python3*/site-packages"));
      return;
    }
    // The pip CUDA root: nvidia/cu13 (cu12 wheels have no such root), the newest if several.
    std::string best;
    int best_major = -1;
    for (const std::string& name : ListDir(absl::StrCat(site_packages_, "/nvidia"))) {
      int major = 0;
      if (!absl::StartsWith(name, "cu") || !absl::SimpleAtoi(name.substr(2), &major)) continue;
      const std::string dir = absl::StrCat(site_packages_, "/nvidia/", name);
      if (major > best_major && IsDir(dir)) {
        best = dir;
        best_major = major;
      }
    }
    snap_->set_pip_cuda_dir(best);
    if (best_major > 0) pip_cuda_major_ = best_major;
  }

  static std::string FindSitePackages(const std::string& venv) {
    std::string found;
    for (const std::string& name : ListDir(absl::StrCat(venv, "/lib"))) {
      const std::string dir = absl::StrCat(venv, "/lib/", name, "/site-packages");
      if (absl::StartsWith(name, "python") && IsDir(dir)) found = dir;  // a venv has one
    }
    return found;
  }

  // Name and Version of every wanted *.dist-info/METADATA (no pip run, no network).
  void ReadPipPackages() {
    if (site_packages_.empty()) return;
    std::map<std::string, fleet::v1::Package> packages;
    for (const std::string& name : ListDir(site_packages_)) {
      if (!absl::EndsWith(name, ".dist-info")) continue;
      std::optional<std::string> metadata =
          ReadHead(absl::StrCat(site_packages_, "/", name, "/METADATA"));
      if (!metadata) continue;
      std::string project, version;
      for (absl::string_view line : absl::StrSplit(*metadata, '\n')) {
        line = absl::StripTrailingAsciiWhitespace(line);
        if (line.empty()) break;  // the headers end at the first blank line
        if (absl::ConsumePrefix(&line, "Name:")) {
          project = std::string(absl::StripAsciiWhitespace(line));
        }
        if (absl::ConsumePrefix(&line, "Version:")) {
          version = std::string(absl::StripAsciiWhitespace(line));
        }
      }
      if (project.empty() || version.empty()) {
        Note(absl::StrCat("pip: ", name, "/METADATA has no Name or Version"));
        continue;
      }
      const std::string canonical = CanonicalName(project);
      if (!WantedPackage(canonical)) continue;
      fleet::v1::Package& p = packages[canonical];
      p.set_name(canonical);
      p.set_version(version);
    }
    for (auto& [name, package] : packages) *snap_->add_pip_packages() = std::move(package);
  }

  std::string PackageVersion(const std::string& canonical) const {
    for (const fleet::v1::Package& p : snap_->pip_packages()) {
      if (p.name() == canonical) return p.version();
    }
    return "";
  }

  // The toolkit as torch and flashinfer resolve it: CUDA_HOME (then CUDA_PATH) when set, taken as
  // given even when it is no directory (its bin/nvcc then is missing: flashinfer does not look
  // further); else the nvcc on the server's PATH, whose bin/.. is the root. The pip CUDA root
  // stands in for the layout facts when neither names one.
  void ResolveCuda() {
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
      const std::string value = Get(env_, var);
      if (value.empty()) continue;
      snap_->set_cuda_home(value);
      snap_->set_cuda_root(value);
      snap_->set_cuda_root_source(var);
      if (value.find(':') != std::string::npos) {
        Note(absl::StrCat(var, "=", value, " contains ':': a search list, not a directory"));
      } else if (!IsDir(value)) {
        Note(absl::StrCat(var, "=", value, " is not a directory"));
      }
      const std::string nvcc = absl::StrCat(value, "/bin/nvcc");
      if (IsExecutableFile(nvcc)) {
        nvcc_ = nvcc;
      } else {
        Note(absl::StrCat("nvcc: ", var, " is set and ", nvcc, " is not an executable file"));
      }
      return;
    }
    nvcc_ = FindExecutable("nvcc", Get(env_, "PATH"));
    if (!nvcc_.empty()) {
      snap_->set_cuda_root(Dirname(Dirname(nvcc_)));
      snap_->set_cuda_root_source("nvcc");
      return;
    }
    Note("nvcc: CUDA_HOME is unset and no nvcc is on the server's PATH");
    if (!snap_->pip_cuda_dir().empty()) {
      snap_->set_cuda_root(snap_->pip_cuda_dir());
      snap_->set_cuda_root_source("pip");
    }
  }

  void ProbeNvcc() {
    if (nvcc_.empty()) return;
    snap_->mutable_nvcc()->set_path(nvcc_);
    std::optional<CommandResult> ran = RunTool({nvcc_, "--version"}, "nvcc --version");
    if (!ran) return;
    const std::string release = ParseReleaseBanner(ran->output);
    if (!ran->ok() || release.empty()) {
      Note(absl::StrCat("nvcc --version: ", Outcome(*ran),
                        ", no 'release X.Y' in its output: ", LastLine(ran->output)));
      return;
    }
    snap_->mutable_nvcc()->set_version(release);
  }

  static std::string Outcome(const CommandResult& r) {
    if (r.timed_out) return "timed out";
    if (!r.exited) return absl::StrCat("killed by signal ", r.signal);
    return absl::StrCat("exit ", r.exit_code);
  }

  // The ptxas nvcc runs (its own bin dir), else the one on PATH; its release, and the highest PTX
  // ISA it accepts, learnt by giving it a PTX file newer than any release.
  void ProbePtxas() {
    std::string ptxas;
    if (!nvcc_.empty() && IsExecutableFile(absl::StrCat(Dirname(nvcc_), "/ptxas"))) {
      ptxas = absl::StrCat(Dirname(nvcc_), "/ptxas");
    } else {
      ptxas = FindExecutable("ptxas", Get(env_, "PATH"));
    }
    if (ptxas.empty()) {
      Note("ptxas: none next to nvcc and none on the server's PATH");
      return;
    }
    snap_->mutable_ptxas()->set_path(ptxas);
    if (std::optional<CommandResult> ran = RunTool({ptxas, "--version"}, "ptxas --version")) {
      const std::string release = ParseReleaseBanner(ran->output);
      if (ran->ok() && !release.empty()) {
        snap_->mutable_ptxas()->set_version(release);
      } else {
        Note(absl::StrCat("ptxas --version: ", Outcome(*ran),
                          ", no 'release X.Y' in its output: ", LastLine(ran->output)));
      }
    }
    std::string isa = ProbePtxIsa(ptxas);
    if (!isa.empty()) {
      snap_->set_ptx_isa_max(isa);
      snap_->set_ptx_isa_source("ptxas");
      return;
    }
    isa = PtxIsaOfRelease(snap_->ptxas().version());
    if (!isa.empty()) {
      snap_->set_ptx_isa_max(isa);
      snap_->set_ptx_isa_source("release_table");
    }
  }

  // Runs ptxas on kProbePtx in a fresh temp dir (the agent's) and parses "current version is
  // 'X.Y'"; "" (with a note) when it did not say.
  std::string ProbePtxIsa(const std::string& ptxas) {
    const char* tmp = getenv("TMPDIR");
    std::string dir =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/fleet-ptx-probe.XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      Note(absl::StrCat("ptxas probe: mkdtemp ", dir, ": ", std::strerror(errno)));
      return "";
    }
    const std::string ptx = absl::StrCat(dir, "/probe.ptx");
    const std::string cubin = absl::StrCat(dir, "/probe.cubin");
    absl::Cleanup remove_dir = [&] {
      unlink(ptx.c_str());
      unlink(cubin.c_str());
      rmdir(dir.c_str());
    };
    const int fd = open(ptx.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const size_t size = sizeof(kProbePtx) - 1;
    const bool written = fd >= 0 && write(fd, kProbePtx, size) == static_cast<ssize_t>(size);
    if (fd >= 0) close(fd);
    if (!written) {
      Note(absl::StrCat("ptxas probe: cannot write ", ptx));
      return "";
    }
    std::optional<CommandResult> ran = RunTool({ptxas, ptx, "-o", cubin}, "ptxas probe");
    if (!ran) return "";
    static const RE2 re("current version is '(\\d+\\.\\d+)'");
    std::string isa;
    if (RE2::PartialMatch(ran->output, re, &isa)) return isa;
    Note(absl::StrCat("ptxas probe (a PTX of .version 99.9): ", Outcome(*ran),
                      ", no \"current version is 'X.Y'\": ", LastLine(ran->output)));
    return "";
  }

  // cuda_runtime_api.h where the JIT includes it from: the toolkit root's include dir, else the
  // pip CUDA root's (flashinfer adds it for the pip layout).
  void ProbeHeaders() {
    std::vector<std::string> dirs;
    if (!snap_->cuda_root().empty()) dirs.push_back(absl::StrCat(snap_->cuda_root(), "/include"));
    if (!snap_->pip_cuda_dir().empty()) {
      const std::string pip = absl::StrCat(snap_->pip_cuda_dir(), "/include");
      if (dirs.empty() || dirs[0] != pip) dirs.push_back(pip);
    }
    for (const std::string& dir : dirs) {
      const std::string header = absl::StrCat(dir, "/cuda_runtime_api.h");
      std::optional<std::string> text = ReadHead(header);
      if (!text) continue;
      const std::string version = ParseCudartVersion(*text);
      if (version.empty()) {
        Note(absl::StrCat(header, ": no #define CUDART_VERSION"));
        continue;
      }
      snap_->set_include_dir(dir);
      snap_->set_cudart_header_path(header);
      snap_->set_cudart_header_version(version);
      return;
    }
    Note(absl::StrCat("cuda_runtime_api.h: not in ", dirs.empty()
                                                         ? "any include dir (no toolkit root)"
                                                         : absl::StrJoin(dirs, ", ")));
  }

  // The NVVM (cicc) nvcc uses, <root>/nvvm, and its release: from its pip dist-info (nvidia-nvvm
  // is a package of its own and can differ from nvcc), the toolkit's version.json, or cicc's
  // banner.
  void ProbeNvvm() {
    if (snap_->cuda_root().empty()) return;
    const std::string dir = absl::StrCat(snap_->cuda_root(), "/nvvm");
    if (!IsDir(dir)) return;
    snap_->set_nvvm_dir(dir);
    std::string version;
    if (!site_packages_.empty() && absl::StartsWith(dir, absl::StrCat(site_packages_, "/"))) {
      version = MajorMinor(PackageVersion("nvidia-nvvm"));
    }
    if (version.empty()) version = DistInfoVersion(absl::StrCat(snap_->cuda_root(), "/dist-info"));
    if (version.empty()) {
      // A runfile toolkit: nvvm ships in the cuda_nvcc component.
      if (std::optional<std::string> json = ReadHead(snap_->cuda_root() + "/version.json")) {
        static const RE2 re("\"cuda_nvcc\"\\s*:\\s*\\{[^}]*\"version\"\\s*:\\s*\"(\\d+\\.\\d+)");
        RE2::PartialMatch(*json, re, &version);
      }
    }
    if (version.empty()) {
      const std::string cicc = absl::StrCat(dir, "/bin/cicc");
      if (IsExecutableFile(cicc)) {
        if (std::optional<CommandResult> ran = RunTool({cicc, "--version"}, "cicc --version")) {
          version = ParseReleaseBanner(ran->output);
        }
      }
    }
    if (version.empty()) Note(absl::StrCat("nvvm ", dir, ": release not found"));
    snap_->set_nvvm_version(version);
  }

  // nvidia-nvvm's release from `dir`/nvidia_nvvm-*.dist-info (a toolkit assembled from wheels).
  static std::string DistInfoVersion(const std::string& dir) {
    for (const std::string& name : ListDir(dir)) {
      absl::string_view rest = name;
      if (absl::ConsumePrefix(&rest, "nvidia_nvvm-") && absl::ConsumeSuffix(&rest, ".dist-info")) {
        return MajorMinor(AsStd(rest));
      }
    }
    return "";
  }

  // flashinfer's link line: `-L<root>/lib64/stubs -lcuda ... -L<root>/lib64 -lcudart`, plus
  // LIBRARY_PATH, which ld searches too.
  void ProbeLinkLayout() {
    const std::string root = snap_->cuda_root();
    std::vector<std::string> stub_dirs, lib_dirs;
    if (!root.empty()) {
      snap_->set_cuda_lib64_present(IsDir(absl::StrCat(root, "/lib64")));
      stub_dirs = {absl::StrCat(root, "/lib64/stubs"), absl::StrCat(root, "/lib/stubs")};
      lib_dirs = {absl::StrCat(root, "/lib64"), absl::StrCat(root, "/lib")};
    }
    for (const std::string& dir : SplitList(Get(env_, "LIBRARY_PATH"))) {
      stub_dirs.push_back(dir);
      lib_dirs.push_back(dir);
    }
    snap_->set_libcuda_stub(FirstFile(stub_dirs, "libcuda.so"));
    snap_->set_libcudart_unversioned(FirstFile(lib_dirs, "libcudart.so"));
  }

  static std::string FirstFile(const std::vector<std::string>& dirs, const std::string& name) {
    for (const std::string& dir : dirs) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (IsFile(path)) return path;
    }
    return "";
  }

  // The CUDA major the Python stack was built against, for the sonames it loads
  // (libnvrtc.so.13): the pip CUDA root's, else the headers', else nvcc's; 0 when unknown.
  int CudaMajor() const {
    if (pip_cuda_major_ > 0) return pip_cuda_major_;
    for (const std::string& v : {snap_->cudart_header_version(), snap_->nvcc().version()}) {
      int major = 0;
      if (!v.empty() && absl::SimpleAtoi(v.substr(0, v.find('.')), &major)) return major;
    }
    return 0;
  }

  // Whether the dynamic loader finds lib<name>.so.<major> for the server: LD_LIBRARY_PATH, then
  // the system's cache (ldconfig -p, found on the server's PATH: a simulated container has none
  // and so sees no host library), then the default dirs.
  void ProbeLoader() {
    const int major = CudaMajor();
    auto soname_matches = [major](absl::string_view file, absl::string_view lib) {
      absl::string_view rest = file;
      if (!absl::ConsumePrefix(&rest, lib) || !absl::ConsumePrefix(&rest, ".so.")) return false;
      int v = 0;
      return absl::SimpleAtoi(rest, &v) && (major == 0 || v == major);
    };
    std::vector<std::string> dirs = SplitList(Get(env_, "LD_LIBRARY_PATH"));
    const size_t ld_library_path_dirs = dirs.size();
    std::map<std::string, std::string> cache;  // soname → path, from ldconfig -p
    if (std::optional<CommandResult> ran = RunLdconfig()) {
      for (absl::string_view line : absl::StrSplit(ran->output, '\n')) {
        // "\tlibnvrtc.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib/libnvrtc.so.13"
        const size_t open = line.find(" ("), arrow = line.find(") => ");
        if (open == absl::string_view::npos || arrow == absl::string_view::npos) continue;
        const absl::string_view flags = line.substr(open + 2, arrow - open - 2);
        if (!absl::StrContains(flags, kLdconfigArch)) continue;
        cache.emplace(std::string(absl::StripAsciiWhitespace(line.substr(0, open))),
                      std::string(line.substr(arrow + 5)));
      }
    }
    for (const std::string& dir :
         {absl::StrCat("/lib/", kMultiarch), absl::StrCat("/usr/lib/", kMultiarch),
          std::string("/lib64"), std::string("/usr/lib64"), std::string("/lib"),
          std::string("/usr/lib")}) {
      dirs.push_back(dir);
    }
    // `fixed` names the exact soname (the driver's libcuda.so.1, whatever the CUDA major).
    auto resolve = [&](const char* lib, const char* fixed = nullptr) -> std::string {
      for (size_t i = 0; i < dirs.size(); ++i) {
        if (i == ld_library_path_dirs) {
          for (const auto& [soname, path] : cache) {
            const bool match = fixed != nullptr ? soname == fixed : soname_matches(soname, lib);
            if (match && IsFile(path)) return path;
          }
        }
        if (fixed != nullptr) {
          const std::string path = absl::StrCat(dirs[i], "/", fixed);
          if (IsFile(path)) return path;
          continue;
        }
        if (major > 0) {  // the common case: one stat, no listing of /usr/lib/<multiarch>
          const std::string path = absl::StrCat(dirs[i], "/", lib, ".so.", major);
          if (IsFile(path)) return path;
          continue;
        }
        for (const std::string& file : ListDir(dirs[i])) {
          const std::string path = absl::StrCat(dirs[i], "/", file);
          if (soname_matches(file, lib) && IsFile(path)) return path;
        }
      }
      return "";
    };
    snap_->set_libnvrtc_path(resolve("libnvrtc"));
    snap_->set_libnvrtc_loadable(!snap_->libnvrtc_path().empty());
    snap_->set_libcudart_path(resolve("libcudart"));
    snap_->set_libcudart_loadable(!snap_->libcudart_path().empty());
    snap_->set_driver_libcuda(resolve("libcuda", "libcuda.so.1"));
    const std::string soname = major > 0 ? absl::StrCat(".so.", major) : ".so.N";
    if (!snap_->libnvrtc_loadable()) {
      Note(absl::StrCat("libnvrtc", soname, ": not on LD_LIBRARY_PATH nor in the system's"));
    }
    if (!snap_->libcudart_loadable()) {
      Note(absl::StrCat("libcudart", soname, ": not on LD_LIBRARY_PATH nor in the system's"));
    }
  }

  std::optional<CommandResult> RunLdconfig() {
    absl::StatusOr<CommandResult> ran =
        runner_->Run({.argv = {"ldconfig", "-p"}, .env = env_, .timeout = kToolTimeout});
    if (!ran.ok() || !ran->ok()) return std::nullopt;  // no cache to read: the default dirs
    if (ran->output_bytes > static_cast<int64_t>(ran->output.size())) {
      Note(absl::StrCat("ldconfig -p: only the last ", ran->output.size(), " of ",
                        ran->output_bytes, " bytes read (the runner's output limit)"));
    }
    return *std::move(ran);
  }

  void ProbeNinja() {
    const std::string ninja = FindExecutable("ninja", Get(env_, "PATH"));
    if (ninja.empty()) {
      Note("ninja: not on the server's PATH");
      return;
    }
    snap_->mutable_ninja()->set_path(ninja);
    if (std::optional<CommandResult> ran = RunTool({ninja, "--version"}, "ninja --version")) {
      static const RE2 re("^\\s*(\\d+(?:\\.\\d+)+)");
      std::string version;
      if (ran->ok() && RE2::PartialMatch(ran->output, re, &version)) {
        snap_->mutable_ninja()->set_version(version);
      } else {
        Note(absl::StrCat("ninja --version: ", Outcome(*ran), ": ", LastLine(ran->output)));
      }
    }
  }

  // What the container's tools.search_path holds that the server's PATH does not: a ninja, and
  // CUDA toolkits (a dir with nvcc is a toolkit's bin/, a dir with bin/nvcc its root), each with
  // its nvcc's release. Only the configured dirs: a simulated container sees none of the host's.
  void ProbeElsewhere() {
    if (target_.search_path.empty()) return;
    const std::string list = absl::StrJoin(target_.search_path, ":");
    if (snap_->ninja().path().empty()) {
      snap_->set_ninja_elsewhere(FindExecutable("ninja", list));
    }
    std::set<std::string> roots;
    for (const std::string& dir : target_.search_path) {
      std::string root;
      if (IsExecutableFile(absl::StrCat(dir, "/nvcc"))) {
        root = Dirname(dir);
      } else if (IsExecutableFile(absl::StrCat(dir, "/bin/nvcc"))) {
        root = dir;
      }
      if (root.empty() || root == snap_->cuda_root() || !roots.insert(root).second) continue;
      std::optional<CommandResult> ran =
          RunTool({absl::StrCat(root, "/bin/nvcc"), "--version"}, "nvcc --version");
      const std::string release = ran ? ParseReleaseBanner(ran->output) : "";
      if (!ran || !ran->ok() || release.empty()) continue;
      fleet::v1::Tool* tool = snap_->add_toolkits_elsewhere();
      tool->set_path(root);
      tool->set_version(release);
    }
  }

  void ProbeGpus() {
    std::vector<std::string> smi = target_.nvidia_smi;
    if (smi.empty()) smi = {"nvidia-smi"};
    std::vector<std::string> query = smi;
    query.push_back("--query-gpu=index,name,compute_cap,driver_version");
    query.push_back("--format=csv,noheader");
    std::optional<CommandResult> ran = RunTool(query, "nvidia-smi");
    if (!ran) return;
    if (!ran->ok()) {
      Note(absl::StrCat("nvidia-smi: ", Outcome(*ran), ": ", LastLine(ran->output)));
      return;
    }
    for (absl::string_view line : absl::StrSplit(ran->output, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> fields;
      for (absl::string_view f : absl::StrSplit(line, ',')) {
        fields.emplace_back(absl::StripAsciiWhitespace(f));
      }
      int index = 0;
      if (fields.size() < 4 || !absl::SimpleAtoi(fields[0], &index)) continue;
      fleet::v1::Gpu* gpu = snap_->add_gpus();
      gpu->set_index(index);
      // A name with a comma in it comes back in several fields.
      gpu->set_name(absl::StrJoin(fields.begin() + 1, fields.end() - 2, ", "));
      gpu->set_compute_capability(fields[fields.size() - 2]);
      if (snap_->driver_version().empty()) snap_->set_driver_version(fields.back());
    }
    if (snap_->gpus().empty()) {
      Note(absl::StrCat("nvidia-smi --query-gpu: no GPU rows: ", LastLine(ran->output)));
    }
    // The driver's CUDA version is only in the banner: "| NVIDIA-SMI ... CUDA Version: 13.2 |".
    std::optional<CommandResult> banner = RunTool(smi, "nvidia-smi");
    if (!banner) return;
    static const RE2 cuda_re("CUDA Version:\\s*(\\d+\\.\\d+)");
    static const RE2 driver_re("Driver Version:\\s*(\\d+(?:\\.\\d+)+)");
    std::string cuda, driver;
    if (banner->ok() && RE2::PartialMatch(banner->output, cuda_re, &cuda)) {
      snap_->set_driver_cuda_version(cuda);
    } else {
      Note(
          absl::StrCat("nvidia-smi: ", Outcome(*banner), ", no 'CUDA Version: X.Y' in its banner"));
    }
    if (snap_->driver_version().empty() && RE2::PartialMatch(banner->output, driver_re, &driver)) {
      snap_->set_driver_version(driver);
    }
  }

  // The GPU device nodes the server needs, under the container's dev root: nvidiaN of each of its
  // GPUs, nvidiactl and nvidia-uvm, each a character device. An LXC container sees only the nodes
  // its config passes in, and a CUDA server without them fails with an error that does not name
  // them (cudaErrorNoDevice, "CUDA driver initialization failed"): the probe names them.
  void ProbeDeviceNodes() {
    // The server's GPUs only: the agent pins CUDA_VISIBLE_DEVICES to them whatever the spec says.
    std::set<int32_t> gpus(target_.gpus.begin(), target_.gpus.end());
    const std::string& root = target_.dev_root;
    if (gpus.empty() || root.empty()) return;
    snap_->set_device_nodes_checked(true);
    if (!IsDir(root)) {
      snap_->add_device_node_problems(absl::StrCat(root, ": no such directory"));
      Note(absl::StrCat("no GPU device node in this container: ", root, " is not a directory (",
                        kDeviceNodesHint, ")"));
      return;
    }
    const std::map<int32_t, int64_t> minors = MinorNumbers();
    struct Node {
      std::string path;
      int64_t minor;  // -1: any (nvidia-uvm's major and minor are the driver's choice)
    };
    std::vector<Node> nodes;
    for (int32_t gpu : gpus) {
      auto m = minors.find(gpu);
      const int64_t number = m == minors.end() ? gpu : m->second;
      nodes.push_back({absl::StrCat(root, "/nvidia", number), number});
    }
    nodes.push_back({absl::StrCat(root, "/nvidiactl"), kNvidiaCtlMinor});
    nodes.push_back({absl::StrCat(root, "/nvidia-uvm"), -1});
    std::vector<std::string> missing;
    size_t present = 0;
    for (const Node& node : nodes) {
      struct stat st;
      if (stat(node.path.c_str(), &st) != 0) {
        const int error = errno;
        if (error == ENOENT || error == ENOTDIR) {
          missing.push_back(node.path);
          snap_->add_device_node_problems(absl::StrCat(node.path, ": missing"));
        } else {
          snap_->add_device_node_problems(absl::StrCat(node.path, ": ", std::strerror(error)));
          Note(absl::StrCat(node.path, ": cannot be looked at: ", std::strerror(error)));
        }
        continue;
      }
      ++present;
      if (!S_ISCHR(st.st_mode)) {
        const std::string what = absl::StrCat(FileKind(st.st_mode), ", not a character device");
        snap_->add_device_node_problems(absl::StrCat(node.path, ": ", what));
        Note(absl::StrCat(node.path, " is ", what, " (a bind mount of the wrong source? ",
                          kDeviceNodesHint, ")"));
        continue;
      }
      // nvidiaN is 195:N and nvidiactl 195:255 on every NVIDIA driver; nvidia-uvm's number is
      // the driver's choice.
      if (node.minor >= 0 && (major(st.st_rdev) != kNvidiaMajor ||
                              static_cast<int64_t>(minor(st.st_rdev)) != node.minor)) {
        const std::string what =
            absl::StrCat("the character device ", major(st.st_rdev), ":", minor(st.st_rdev),
                         ", not ", kNvidiaMajor, ":", node.minor);
        snap_->add_device_node_problems(absl::StrCat(node.path, ": ", what));
        Note(absl::StrCat(node.path, " is ", what, " (", kDeviceNodesHint, ")"));
      }
    }
    if (missing.empty()) return;
    std::string list = absl::StrJoin(missing, ", ");
    if (missing.size() > 1) {
      const size_t last = list.rfind(", ");
      list.replace(last, 2, " and ");
    }
    Note(absl::StrCat(present == 0 ? "no GPU device node in this container: "
                                   : "GPU device nodes missing in this container: ",
                      list, missing.size() == 1 ? " is missing (" : " are missing (",
                      kDeviceNodesHint, ")"));
  }

  // GPU index → minor number (the N of /dev/nvidiaN), when nvidia-smi answered the probe's query
  // and knows the field (an H200's 580 driver refused it): quietly none otherwise, and the index
  // stands in, as it is the minor number on every machine seen so far.
  std::map<int32_t, int64_t> MinorNumbers() {
    std::map<int32_t, int64_t> out;
    if (snap_->gpus().empty()) return out;  // nvidia-smi failed or hung once already
    std::vector<std::string> query = target_.nvidia_smi;
    if (query.empty()) query = {"nvidia-smi"};
    query.push_back("--query-gpu=index,minor_number");
    query.push_back("--format=csv,noheader,nounits");
    absl::StatusOr<CommandResult> ran =
        runner_->Run({.argv = std::move(query), .env = env_, .timeout = kToolTimeout});
    if (!ran.ok() || !ran->ok()) return out;
    for (absl::string_view line : absl::StrSplit(ran->output, '\n', absl::SkipWhitespace())) {
      std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
      int32_t index = 0;
      int64_t number = 0;
      if (fields.size() == 2 && absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[0]), &index) &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[1]), &number) && number >= 0 &&
          number < kNvidiaCtlMinor) {
        out[index] = number;
      }
    }
    return out;
  }

  static std::string FileKind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a named pipe";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a device";
  }

  // The JIT cache roots that exist: configured ones, else flashinfer's and torch's defaults with
  // the server's env (their overrides, then HOME).
  void ProbeJitCaches() {
    std::vector<std::string> roots = target_.jit_cache_roots;
    if (roots.empty()) {
      const std::string home = Get(env_, "HOME");
      auto pick = [&](std::initializer_list<std::pair<const char*, const char*>> choices) {
        for (const auto& [var, suffix] : choices) {
          const std::string base = var != nullptr ? Get(env_, var) : home;
          if (!base.empty()) return absl::StrCat(base, suffix);
        }
        return std::string();
      };
      roots.push_back(pick({{"FLASHINFER_JIT_DIR", ""},
                            {"FLASHINFER_WORKSPACE_BASE", "/.cache/flashinfer"},
                            {nullptr, "/.cache/flashinfer"}}));
      roots.push_back(pick({{"TORCH_EXTENSIONS_DIR", ""},
                            {"XDG_CACHE_HOME", "/torch_extensions"},
                            {nullptr, "/.cache/torch_extensions"}}));
    }
    std::set<std::string> seen;
    for (const std::string& root : roots) {
      if (IsDir(root) && seen.insert(root).second) snap_->add_jit_cache_dirs(root);
    }
  }

  CommandRunner* const runner_;
  const ProbeTarget& target_;
  const Env& env_;
  ToolchainSnapshot* const snap_;

  std::string site_packages_;
  int pip_cuda_major_ = 0;
  std::string nvcc_;
};

}  // namespace

fleet::v1::ToolchainSnapshot ToolchainProbe::Probe(const ProbeTarget& target) const {
  fleet::v1::ToolchainSnapshot snapshot;
  ProbeRun(runner_, target, &snapshot).Run();
  return snapshot;
}

}  // namespace fleet::agent
