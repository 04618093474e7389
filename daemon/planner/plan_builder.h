// PlanBuilder: one planning pass of the RemediationPlanner (planner.h), internal to
// fleet::planner. The planner runs a pass per Choice of the alternatives until one gives a plan
// that has not failed before.
//
// Pure logic, like the planner: no processes, RPC or store. Not thread-safe (one pass, one
// thread); it refers to its table, options and input, which must outlive it.
#pragma once

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/planner/cuda_releases.h"
#include "daemon/planner/planner.h"
#include "proto/agent.pb.h"
#include "proto/diagnosis.pb.h"

namespace fleet::daemon {

// Whether `value` is in `c` (the planner's lists are short).
template <typename Container, typename T>
bool Contains(const Container& c, const T& value) {
  return std::find(std::begin(c), std::end(c), value) != std::end(c);
}

// The alternatives one plan can take; the planner tries them in this order when a plan it would
// make already failed.
struct Choice {
  size_t release_rank = 0;    // which of the CUDA releases that fit (nearest first)
  bool ninja_by_pip = false;  // pip's ninja instead of apt's ninja-build
};

// A problem the plan leaves, and why; `cause` is the class it belongs to.
struct Unresolved {
  std::string cause;
  std::string why;
};

// One planning pass for one Choice: the constraints of the snapshot (and of the diagnosis, and of
// what past diagnoses taught), each checked and, when violated, answered with a group of actions.
// A group is applied whole or not at all: half of a fix (nvcc installed, CUDA_HOME not set) is
// never a plan.
class PlanBuilder {
 public:
  PlanBuilder(const CudaReleaseTable& table, const PlannerOptions& options,
              const PlannerInput& input, const fleet::v1::Diagnosis* diagnosis, Choice choice);

  void Run();

  // Results.
  std::vector<PlannedAction> TakeActions();
  const std::vector<std::string>& causes() const { return causes_; }
  const std::vector<Unresolved>& unresolved() const { return unresolved_; }
  const std::vector<std::string>& constraints() const { return constraints_; }
  const std::string& cuda_release() const { return cuda_release_; }
  bool degraded() const { return degraded_; }
  bool affects_jit_build() const { return affects_jit_build_; }
  // Whether another Choice could give another plan.
  bool release_choice_used() const { return release_choice_used_; }
  bool releases_exhausted() const { return releases_exhausted_; }
  bool ninja_choice_used() const { return ninja_choice_used_; }

 private:
  // A group of actions answering one cause.
  struct Fix {
    std::string cause;
    std::vector<PlannedAction> actions;  // pip requirements go in as single-requirement actions
    bool affects_jit_build = true;
  };

  bool Allowed(std::string_view kind) const;

  std::string PolicyName() const;

  void AddCause(const std::string& cause);

  void Leave(const std::string& cause, std::string why);

  // Adds the fix's actions, unless the policy forbids one of them (then none, and why).
  bool Commit(Fix fix, const std::vector<std::string>& also_causes = {});

  // What past and present diagnoses taught: the PTX ISA that flashinfer's CCCL emits is seen only
  // in a ptxas failure, and it stays wanted after the toolchain that failed on it is gone.
  void LearnConstraints();

  std::optional<CudaVersion> Piece(const std::string& piece) const;

  // The pip CUDA root (site-packages/nvidia/cuN) for a release of `major`.
  std::string PipRoot(int major) const;

  // The CUDA major the Python stack was built for (it loads libnvrtc.so.13): the pip root's cuN,
  // else torch's local version (2.9.1+cu128), else the pip runtime's.
  std::optional<int> StackMajor() const;

  // What the toolkit violates, and the bounds on the release that would fix it.
  struct ToolkitNeeds {
    std::vector<std::pair<std::string, std::string>> violated;  // cause, what
    std::set<CudaVersion> installed;   // releases of the pieces pip installed (and nvcc's)
    std::optional<CudaVersion> floor;  // the lowest release that may be chosen
    bool floor_strict = false;         // ... exclusive: it must be above `floor`
    std::string floor_why;
    std::string no_release;  // why no release at all can fit

    // Raises the floor to `v` (above it when `strict`) unless it is already higher.
    void Raise(CudaVersion v, bool strict, std::string why);
    // The classes of `violated`, each once, in order.
    std::vector<std::string> Causes() const;
  };

  ToolkitNeeds CheckToolkit();

  // The installable releases within every bound, in the order to try them: at or above the
  // newest piece already installed, nearest first; going down is last (a newer piece was
  // installed for a reason, and nvcc 13.0 under PTX 9.2 is the seesaw), taken only when nothing
  // at or above fits (a driver too old for it). Empty with `why` when none fits.
  std::vector<CudaVersion> ReleasesThatFit(const ToolkitNeeds& n, std::string* why) const;

  // nvcc, crt, nvvm, runtime, nvrtc, cupti of one release that fits every constraint, installed
  // into the venv's pip root in one go, which CUDA_HOME and PATH then name.
  void PlanToolkit();

  // No nvcc for the server, but a whole toolkit elsewhere in the container (tools.search_path)
  // that fits what is known (the Python stack's CUDA major, the PTX wanted, the driver): point
  // CUDA_HOME and PATH at it. True when that was planned.
  bool UseToolkitElsewhere();

  // The toolkit root the rest of the plan is about: the one this plan installs into or points
  // at, else the probe's.
  std::string Root() const { return toolkit_root_.empty() ? snap_.cuda_root() : toolkit_root_; }
  bool RootIsPip() const;

  // libnvrtc/libcudart of the pip root, where sgl_kernel's import looks: on LD_LIBRARY_PATH.
  void PlanLoaderPath();

  void PlanNinja();

  // flashinfer links with `-L$CUDA_HOME/lib64/stubs -lcuda ... -L$CUDA_HOME/lib64 -lcudart`; the
  // pip layout has lib/ only, libcudart.so.N only, and no stub.
  void PlanLinkLayout();

  void PlanMaxJobs();

  void PlanClearJitCache();

  // Fallbacks trade speed for a start; only where the policy allows them, and marked degraded.
  void PlanFallback();
  // vLLM's --gpu-memory-utilization lowered to what its startup check says is free.
  void PlanGpuMemoryUtilization();

  const CudaReleaseTable& table_;
  const PlannerOptions& options_;
  const PlannerInput& in_;
  const fleet::v1::ToolchainSnapshot& snap_;
  const fleet::v1::Diagnosis* diagnosis_;
  const std::string cls_;
  const Choice choice_;
  std::map<std::string, std::optional<CudaVersion>> pieces_;  // installed by pip

  fleet::v1::ServerSpec
      after_;  // the spec with the actions so far: later steps see earlier env changes
  std::optional<CudaVersion> ptx_wanted_;
  std::string ptx_wanted_from_;
  std::string toolkit_root_;
  bool toolkit_is_pip_ = true;  // toolkit_root_ is the venv's pip CUDA root
  std::string cuda_release_;
  std::vector<std::pair<fleet::v1::Requirement, std::string>> pip_;
  std::vector<PlannedAction> actions_;
  std::vector<std::string> causes_;
  std::vector<Unresolved> unresolved_;
  std::vector<std::string> constraints_;
  bool affects_jit_build_ = false;
  bool degraded_ = false;
  bool release_choice_used_ = false;
  bool releases_exhausted_ = false;
  bool ninja_choice_used_ = false;
};

}  // namespace fleet::daemon
