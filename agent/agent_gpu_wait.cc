// The Agent's launches that wait for their GPUs (gpu_guard.h): queued with the guard, started
// when every GPU of the server is free, failed when one stays busy past the guard's max_wait.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "agent/agent_internal.h"
#include "agent/env_files.h"
#include "agent/server_run.h"
#include "common/config/server_gpus.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/log/log.h"

namespace fleet::agent {
namespace internal {

void FillGpuRequest(const fleet::v1::LaunchRequest& request, const std::string& owner,
                    const AgentOptions& options, GpuRequest* out) {
  const fleet::v1::ServerSpec& spec = request.spec();
  out->gpu = spec.server().gpu();
  for (int gpu : config::ServerGpus(spec)) out->gpus.push_back(gpu);
  out->key = request.attempt_id();
  out->owner = owner;
  out->server = ServerMark(spec, options);
  out->nvidia_smi.assign(spec.tools().nvidia_smi().begin(), spec.tools().nvidia_smi().end());
  out->env = ServerEnv(spec);
}

void LogGpuCheck(const GpuRequest& request, const GpuCheck& check, bool busy) {
  if (check.reclaimed.empty() && check.orphans.empty() && check.stuck.empty() &&
      check.others.empty() && check.notes.empty() && !busy) {
    return;
  }
  const bool warn = busy || !check.stuck.empty() || !check.notes.empty();
  log::Get(log::Component::kGpu)
      .log(warn ? spdlog::level::warn : spdlog::level::info, "{} gpu check: {}",
           log::LogFields{request.server, request.key}, check.Summary());
}

}  // namespace internal

namespace {

// "gpu 3", or a tensor-parallel server's "gpus 0,1".
std::string GpusPhrase(const std::vector<int>& gpus) {
  if (gpus.empty()) return "its gpu";
  if (gpus.size() == 1) return absl::StrCat("gpu ", gpus.front());
  return absl::StrCat("gpus ", absl::StrJoin(gpus, ","));
}

}  // namespace

void Agent::WaitForGpu(const fleet::v1::LaunchRequest& request, int64_t previous_attempt,
                       PreviousServer previous, const GpuCheck* first) {
  const fleet::v1::ServerSpec& spec = request.spec();
  const int32_t gpu = spec.server().gpu();
  GpuRequest check;
  check.previous = previous;
  internal::FillGpuRequest(request, mark_, options_, &check);
  auto run = std::make_unique<ServerRun>(
      this, internal::EffectiveSpec(spec, options_, request.attempt_id()), request.attempt_id(),
      request.attempt_number());
  const std::vector<int> gpus = config::ServerGpus(spec);
  const std::string which = GpusPhrase(gpus);
  run->WaitForGpu(deps_.clock->Now(), absl::StrCat("checking that ", which,
                                                   gpus.size() == 1 ? " is" : " are", " free"));
  if (first != nullptr) {
    run->GpuBusy(absl::StrCat("waiting for ", which, " to be free: ", first->Summary()));
  }
  Persist(*run);
  Install(gpu, std::move(run));
  gpu_waits_[gpu] = GpuWait{request, previous_attempt};
  deps_.gpu_guard->Submit(std::move(check), /*checked_now=*/first != nullptr);
}

void Agent::OnGpuCheck(const GpuRequest& request, const GpuCheck& check,
                       GpuGuard::Verdict verdict) {
  const std::string summary = check.Summary();
  {
    absl::MutexLock lock(&mu_);
    auto wait = gpu_waits_.find(request.gpu);
    auto run = servers_.find(request.gpu);
    // A stale answer: the attempt was stopped or replaced meanwhile.
    if (wait == gpu_waits_.end() || wait->second.request.attempt_id() != request.key ||
        run == servers_.end() || run->second->attempt_id() != request.key ||
        !run->second->waiting_for_gpu()) {
      return;
    }
    internal::LogGpuCheck(request, check, verdict != GpuGuard::Verdict::kFree);
    const absl::Time now = deps_.clock->Now();
    if (verdict == GpuGuard::Verdict::kWaiting) {
      run->second->GpuBusy(
          absl::StrCat("waiting for ", GpusPhrase(request.gpus), " to be free: ", summary));
    } else {
      GpuWait w = std::move(wait->second);
      gpu_waits_.erase(wait);
      diagnosis::Diagnosis failure;
      failure.fix = diagnosis::FixKind::kReport;
      failure.toolchain_fix = false;
      if (verdict == GpuGuard::Verdict::kGaveUp) {
        // Launching now would end in CUDA out of memory beside whoever holds the GPU.
        failure.diagnosis_class = diagnosis::classes::kCudaOutOfMemory;
        failure.summary =
            absl::StrCat("not launched: ", GpusPhrase(request.gpus), " still busy after ",
                         absl::FormatDuration(deps_.gpu_guard->options().max_wait), ": ", summary);
      } else {
        absl::StatusOr<fleet::v1::ServerStatus> started =
            StartAttempt(w.request, w.previous_attempt);
        if (!started.ok()) {
          failure.diagnosis_class = diagnosis::classes::kUnknown;
          failure.summary = std::string(started.status().message());
        }
      }
      auto current = servers_.find(request.gpu);
      if (failure.diagnosis_class != diagnosis::classes::kNone && current != servers_.end() &&
          current->second->waiting_for_gpu()) {
        current->second->NotLaunched(now, failure);
        Persist(*current->second);
      }
    }
  }
  NotifySubscribers();
  Wake();
}

}  // namespace fleet::agent
