#include "tests/sim/gpu_info.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fleet::sim {

std::string GpuInfo::ArchDigits() const {
  return absl::StrReplaceAll(compute_capability, {{".", ""}});
}

absl::StatusOr<std::vector<GpuInfo>> QueryGpus(const Environment& env) {
  const std::string smi = FindExecutable("nvidia-smi", env.List("PATH"));
  if (smi.empty()) return absl::FailedPreconditionError("no nvidia-smi on PATH");
  absl::StatusOr<ToolResult> ran = RunTool(
      {smi, "--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader,nounits"});
  if (!ran.ok()) return absl::FailedPreconditionError(ran.status().message());
  if (ran->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat("nvidia-smi failed: ", ran->output));
  }
  std::vector<GpuInfo> gpus;
  for (absl::string_view line : absl::StrSplit(ran->output, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> fields = absl::StrSplit(line, ',');
    if (fields.size() != 4) continue;
    for (std::string& f : fields) f = std::string(absl::StripAsciiWhitespace(f));
    GpuInfo gpu;
    if (!absl::SimpleAtoi(fields[0], &gpu.index) || !absl::SimpleAtoi(fields[3], &gpu.memory_mib)) {
      continue;
    }
    gpu.name = fields[1];
    gpu.compute_capability = fields[2];
    gpus.push_back(gpu);
  }
  if (gpus.empty()) return absl::FailedPreconditionError("nvidia-smi reported no GPU");
  return gpus;
}

absl::StatusOr<GpuInfo> VisibleGpu(const std::vector<GpuInfo>& gpus, const Environment& env,
                                   int ordinal) {
  std::vector<int> visible;
  if (env.Has("CUDA_VISIBLE_DEVICES")) {
    for (absl::string_view item : absl::StrSplit(env.Get("CUDA_VISIBLE_DEVICES"), ',')) {
      int index = 0;
      // Like CUDA, the list ends at the first entry that is not a valid device.
      if (!absl::SimpleAtoi(item, &index)) break;
      bool exists = false;
      for (const GpuInfo& g : gpus) exists = exists || g.index == index;
      if (!exists) break;
      visible.push_back(index);
    }
  } else {
    for (const GpuInfo& g : gpus) visible.push_back(g.index);
  }
  if (ordinal < 0 || ordinal >= static_cast<int>(visible.size())) {
    return absl::OutOfRangeError("invalid device ordinal");
  }
  for (const GpuInfo& g : gpus) {
    if (g.index == visible[static_cast<size_t>(ordinal)]) return g;
  }
  return absl::OutOfRangeError("invalid device ordinal");
}

void HoldGpuMemory(const Environment& env, int index, int64_t mib) {
  const std::string smi = FindExecutable("nvidia-smi", env.List("PATH"));
  if (smi.empty()) return;
  const std::filesystem::path world = std::filesystem::path(smi).parent_path().parent_path();
  // This process's start time, field 22 of /proc/self/stat (after the command's parentheses).
  std::ifstream in("/proc/self/stat");
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  const size_t close = stat.rfind(')');
  std::string ticks;
  if (close != std::string::npos) {
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
    if (fields.size() > 19) ticks = fields[19];
  }
  std::error_code ec;
  const std::filesystem::path dir = world / "run" / "gpu-mem" / absl::StrCat(index);
  std::filesystem::create_directories(dir, ec);
  std::ofstream(dir / absl::StrCat(getpid())) << mib << " " << ticks << " python3\n";
  std::filesystem::create_directories(world / "dev", ec);
  // Kept open until the process ends, as CUDA keeps /dev/nvidiaN open. A world made as root has
  // the real character devices (nvidiactl among them), which no driver backs on a test machine
  // (ENXIO): an O_PATH descriptor links to the node in /proc/PID/fd all the same, and a node its
  // config left out stays missing. A world without them gets a plain file standing in.
  const std::string node = (world / "dev" / absl::StrCat("nvidia", index)).string();
  const bool has_nodes = access((world / "dev" / "nvidiactl").c_str(), F_OK) == 0;
  const int fd = has_nodes ? open(node.c_str(), O_PATH | O_CLOEXEC)
                           : open(node.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  static_cast<void>(fd);
}

}  // namespace fleet::sim
