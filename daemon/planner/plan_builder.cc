// PlanBuilder's checks (plan_builder.h): the toolkit (one CUDA release for compiler, headers and
// ptxas, within the driver's and the GPU's bounds), the loader path, ninja, flashinfer's link
// layout, and the per-class fixes (MAX_JOBS, the JIT cache, the slower fallbacks).
#include "daemon/planner/plan_builder.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/string_view.h"
#include "common/diagnosis/diagnosis_class.h"
#include "daemon/planner/plan_actions.h"

namespace fleet::daemon {
namespace {

using fleet::v1::Action;
using fleet::v1::ServerSpec;

// The classes the planner acts on, by the table's names (common/diagnosis/diagnosis_class.h).
namespace classes = fleet::diagnosis::classes;

std::string EnvOf(const ServerSpec& spec, const std::string& name) {
  auto it = spec.env().find(name);
  return it == spec.env().end() ? "" : it->second;
}

bool OnList(const std::string& list, const std::string& dir) {
  for (absl::string_view entry : absl::StrSplit(list, ':', absl::SkipEmpty())) {
    if (entry == dir) return true;
  }
  return false;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

std::string FactValue(const google::protobuf::RepeatedPtrField<fleet::v1::Fact>& facts,
                      const std::string& key) {
  for (const fleet::v1::Fact& f : facts) {
    if (f.key() == key && !f.values().empty()) return f.values(0);
  }
  return "";
}

}  // namespace

void PlanBuilder::ToolkitNeeds::Raise(CudaVersion v, bool strict, std::string why) {
  if (!floor || v > *floor || (v == *floor && strict && !floor_strict)) {
    floor = v;
    floor_strict = strict;
    floor_why = std::move(why);
  }
}

std::vector<std::string> PlanBuilder::ToolkitNeeds::Causes() const {
  std::vector<std::string> causes;
  for (const auto& [cause, what] : violated) {
    if (!Contains(causes, cause)) causes.push_back(cause);
  }
  return causes;
}

PlanBuilder::PlanBuilder(const CudaReleaseTable& table, const PlannerOptions& options,
                         const PlannerInput& input, const fleet::v1::Diagnosis* diagnosis,
                         Choice choice)
    : table_(table),
      options_(options),
      in_(input),
      snap_(input.snapshot),
      diagnosis_(diagnosis),
      cls_(diagnosis != nullptr ? diagnosis->diagnosis_class() : ""),
      choice_(choice),
      after_(input.spec) {
  for (const fleet::v1::Package& p : snap_.pip_packages()) {
    const std::string piece = table_.PieceOfPackage(p.name());
    if (!piece.empty()) pieces_[piece] = ParseCudaVersion(p.version());
  }
}

void PlanBuilder::Run() {
  LearnConstraints();
  // No action reaches the host's container config: a missing GPU device node is said, never
  // planned for, and blocks nothing (a probe outside a container may see nodes missing that the
  // driver creates on first use).
  if (!snap_.device_node_problems().empty()) {
    constraints_.push_back(absl::StrCat(
        "the server's GPU device nodes must be in the container (its config passes them in, "
        "docs/config.md; no action can): ",
        absl::StrJoin(snap_.device_node_problems(), "; ")));
  }
  PlanToolkit();
  PlanLoaderPath();
  PlanNinja();
  PlanLinkLayout();
  if (cls_ == classes::kJitOomKilled) PlanMaxJobs();
  if (cls_ == classes::kStaleJitCache) PlanClearJitCache();
  if (cls_ == classes::kAttentionBackendUnsupported || cls_ == classes::kCudaGraphCaptureFailed)
    PlanFallback();
  if (cls_ == classes::kCudaOutOfMemory) PlanGpuMemoryUtilization();
  // A test-compile failure the toolchain plan above does not address is a problem all the same:
  // shown, and counted (a fix after which it appears made things worse, unless it could not be
  // seen before).
  const fleet::v1::TestCompile& compiled = snap_.test_compile();
  const std::string& failed = compiled.diagnosis().diagnosis_class();
  if (compiled.ran() && !compiled.ok() && !failed.empty() && !Contains(causes_, failed) &&
      std::none_of(unresolved_.begin(), unresolved_.end(),
                   [&](const Unresolved& u) { return u.cause == failed; })) {
    Leave(failed,
          absl::StrCat("the probe's test-compile fails with it (", compiled.diagnosis().summary(),
                       ") and no change the planner "
                       "knows addresses it"));
  }
  std::stable_sort(actions_.begin(), actions_.end(),
                   [](const PlannedAction& a, const PlannedAction& b) {
                     return KindRank(a.action) < KindRank(b.action);
                   });
}

std::vector<PlannedAction> PlanBuilder::TakeActions() {
  std::vector<PlannedAction> all;
  if (!pip_.empty()) {
    // One pip run for every package: one resolve, one saved package set, one rollback point.
    PlannedAction pip;
    std::vector<std::string> reasons;
    for (const auto& [requirement, reason] : pip_) {
      *pip.action.mutable_pip_install()->add_requirements() = requirement;
      if (!Contains(reasons, reason)) reasons.push_back(reason);
    }
    pip.reason = absl::StrJoin(reasons, "; ");
    all.push_back(std::move(pip));
  }
  for (PlannedAction& a : actions_) all.push_back(std::move(a));
  return all;
}

bool PlanBuilder::Allowed(std::string_view kind) const {
  return in_.policy.allowed_actions().empty() || Contains(in_.policy.allowed_actions(), kind);
}

std::string PlanBuilder::PolicyName() const {
  return in_.policy.name().empty() ? "default" : in_.policy.name();
}

void PlanBuilder::AddCause(const std::string& cause) {
  if (!Contains(causes_, cause)) causes_.push_back(cause);
}

void PlanBuilder::Leave(const std::string& cause, std::string why) {
  unresolved_.push_back({cause, std::move(why)});
}

bool PlanBuilder::Commit(Fix fix, const std::vector<std::string>& also_causes) {
  for (const PlannedAction& p : fix.actions) {
    if (!Allowed(ActionKind(p.action))) {
      Leave(fix.cause,
            absl::StrCat("needs ", AsAbsl(ActionKind(p.action)), " (", DescribeAction(p.action),
                         "), which policy ", PolicyName(), " does not allow"));
      return false;
    }
  }
  if (fix.actions.empty()) return false;
  for (PlannedAction& p : fix.actions) {
    if (p.action.has_pip_install()) {
      pip_.emplace_back(p.action.pip_install().requirements(0), p.reason);
      continue;
    }
    const std::string described = DescribeAction(p.action);
    if (std::any_of(actions_.begin(), actions_.end(), [&](const PlannedAction& q) {
          return DescribeAction(q.action) == described;
        })) {
      continue;
    }
    ApplyAction(p.action, &after_);
    actions_.push_back(std::move(p));
  }
  AddCause(fix.cause);
  for (const std::string& c : also_causes) AddCause(c);
  affects_jit_build_ = affects_jit_build_ || fix.affects_jit_build;
  return true;
}

void PlanBuilder::LearnConstraints() {
  auto learn = [&](const google::protobuf::RepeatedPtrField<fleet::v1::Fact>& facts,
                   const std::string& from) {
    std::optional<CudaVersion> wanted = ParseCudaVersion(FactValue(facts, "ptx_wanted"));
    if (wanted && (!ptx_wanted_ || *wanted > *ptx_wanted_)) {
      ptx_wanted_ = wanted;
      ptx_wanted_from_ = from;
    }
  };
  if (diagnosis_ != nullptr) learn(diagnosis_->facts(), "this diagnosis");
  // What only a build shows, seen before any launch (agent/test_compile.h).
  const fleet::v1::TestCompile& compiled = snap_.test_compile();
  if (compiled.ran() && !compiled.ok()) {
    learn(compiled.diagnosis().facts(), "the probe's test-compile");
    constraints_.push_back(absl::StrCat(
        "the probe's test-compile failed at its ", compiled.failed_step(), " step: ",
        compiled.diagnosis().diagnosis_class().empty() ? "unknown"
                                                       : compiled.diagnosis().diagnosis_class(),
        compiled.diagnosis().summary().empty() ? "" : ": ", compiled.diagnosis().summary()));
  }
  for (const PastRemediation& r : in_.history) {
    google::protobuf::RepeatedPtrField<fleet::v1::Fact> facts(r.trigger_facts.begin(),
                                                              r.trigger_facts.end());
    learn(facts, absl::StrCat("the diagnosis of remediation ", r.id));
  }
  if (ptx_wanted_) {
    constraints_.push_back(absl::StrCat("ptxas must accept PTX ", ptx_wanted_->ToString(),
                                        " (learnt from ", ptx_wanted_from_, ")"));
  }
}

std::optional<CudaVersion> PlanBuilder::Piece(const std::string& piece) const {
  auto it = pieces_.find(piece);
  return it == pieces_.end() ? std::nullopt : it->second;
}

std::string PlanBuilder::PipRoot(int major) const {
  if (!snap_.pip_cuda_dir().empty()) return snap_.pip_cuda_dir();
  if (snap_.site_packages().empty()) return "";
  return absl::StrCat(snap_.site_packages(), "/nvidia/cu", major);
}

std::optional<int> PlanBuilder::StackMajor() const {
  int major = 0;
  const std::string dir = snap_.pip_cuda_dir();
  const size_t cu = dir.rfind("/cu");
  if (cu != std::string::npos && absl::SimpleAtoi(dir.substr(cu + 3), &major)) return major;
  for (const fleet::v1::Package& p : snap_.pip_packages()) {
    const size_t local = p.version().find("+cu");
    if (p.name() == "torch" && local != std::string::npos &&
        absl::SimpleAtoi(p.version().substr(local + 3), &major) && major >= 100) {
      return major / 10;  // cu128 → 12, cu130 → 13
    }
  }
  if (std::optional<CudaVersion> runtime = Piece("runtime")) return runtime->major;
  return std::nullopt;
}

PlanBuilder::ToolkitNeeds PlanBuilder::CheckToolkit() {
  ToolkitNeeds n;
  auto violate = [&](const std::string& cause, std::string what) {
    n.violated.emplace_back(cause, what);
    constraints_.push_back(std::move(what));
  };
  const bool nvcc_found =
      !snap_.nvcc().path().empty() && snap_.cuda_home().find(':') == std::string::npos;
  const bool active_is_pip =
      !snap_.cuda_root().empty() && snap_.cuda_root() == snap_.pip_cuda_dir();
  const std::optional<CudaVersion> nvcc = ParseCudaVersion(snap_.nvcc().version());
  const std::optional<CudaVersion> headers = ParseCudaVersion(snap_.cudart_header_version());
  const std::optional<CudaVersion> nvvm = ParseCudaVersion(snap_.nvvm_version());
  const std::optional<CudaVersion> ptxas = ParseCudaVersion(snap_.ptxas().version());
  std::optional<CudaVersion> isa = ParseCudaVersion(snap_.ptx_isa_max());
  if (!isa && ptxas) isa = table_.PtxIsaOf(*ptxas);

  if (!nvcc_found) {
    violate(classes::kNvccNotFound,
            snap_.cuda_home().find(':') != std::string::npos
                ? absl::StrCat("CUDA_HOME=", snap_.cuda_home(),
                               " is a list, not a toolkit: nvcc is not found")
                : "nvcc must be found by the server (CUDA_HOME or PATH): none is");
  }
  if (nvcc && headers && *nvcc != *headers) {
    violate(classes::kCudaHeaderMismatch,
            absl::StrCat("nvcc ", nvcc->ToString(), " must match the headers' CUDART_VERSION ",
                         headers->ToString(), " (CCCL's compiler/header check)"));
  }
  if (nvvm && ptxas && *nvvm > *ptxas) {
    violate(classes::kPtxVersionUnsupported,
            absl::StrCat("nvvm ", nvvm->ToString(), " emits PTX that ptxas ", ptxas->ToString(),
                         " rejects"));
  }
  if (ptx_wanted_) {
    if (std::optional<CudaVersion> need = table_.MinReleaseForPtx(*ptx_wanted_)) {
      n.Raise(*need, false,
              absl::StrCat("PTX ", ptx_wanted_->ToString(), " needs CUDA >= ", need->ToString()));
    } else {
      const CudaRelease& newest = table_.releases().back();
      n.no_release = absl::StrCat("no CUDA release the planner knows accepts PTX ",
                                  ptx_wanted_->ToString(), " (", newest.version.ToString(),
                                  " accepts ", newest.ptx_isa.ToString(), ")");
    }
    if (nvcc_found && isa && *isa < *ptx_wanted_) {
      violate(classes::kPtxVersionUnsupported,
              absl::StrCat("ptxas ", snap_.ptxas().version(), " accepts PTX ", isa->ToString(),
                           ", PTX ", ptx_wanted_->ToString(), " is wanted"));
    }
  }
  for (const auto& [piece, version] : pieces_) {
    if (version) n.installed.insert(*version);
  }
  if (active_is_pip && nvcc) n.installed.insert(*nvcc);
  if (n.installed.size() > 1) {
    std::vector<std::string> seen;
    for (const auto& [piece, version] : pieces_) {
      if (version) seen.push_back(absl::StrCat(piece, " ", version->ToString()));
    }
    violate(classes::kCudaHeaderMismatch,
            absl::StrCat("toolkit pieces must be of one release: ", absl::StrJoin(seen, ", ")));
  }
  // Pieces the JIT needs from the pip root, when that root is (or becomes) the toolkit.
  if (active_is_pip || !nvcc_found) {
    for (const char* piece : {"crt", "nvvm", "runtime"}) {
      if (!pieces_.count(piece))
        violate(classes::kNvccNotFound, absl::StrCat("the pip toolkit lacks ", piece));
    }
    if (!pieces_.count("nvrtc") && !snap_.libnvrtc_loadable()) {
      violate(classes::kMissingSharedLibrary,
              "libnvrtc must be loadable: no nvrtc package is installed");
    }
  }
  if (cls_ == classes::kNvccTooOld && nvcc) {
    n.Raise(*nvcc, true,
            absl::StrCat("nvcc ", nvcc->ToString(), " rejects an option the build needs"));
    violate(classes::kNvccTooOld, absl::StrCat("nvcc must be newer than ", nvcc->ToString()));
  }
  if (cls_ == classes::kUnsupportedGpuArch) {
    if (std::optional<CudaVersion> required =
            ParseCudaVersion(FactValue(diagnosis_->facts(), "cuda_required"))) {
      n.Raise(*required, false, absl::StrCat("the build says CUDA >= ", required->ToString()));
    } else if (nvcc) {
      n.Raise(*nvcc, true, absl::StrCat("nvcc ", nvcc->ToString(), " does not know this GPU"));
    }
    violate(classes::kUnsupportedGpuArch, "nvcc must know the GPU's architecture");
  }
  for (const fleet::v1::Gpu& gpu : snap_.gpus()) {
    std::optional<CudaVersion> cc = ParseCudaVersion(gpu.compute_capability());
    std::optional<CudaVersion> need = cc ? table_.MinReleaseForGpu(*cc) : std::nullopt;
    if (!need) continue;
    n.Raise(*need, false,
            absl::StrCat("GPUs of SM ", cc->major, ".x need CUDA >= ", need->ToString()));
    if (nvcc && *nvcc < *need) {
      violate(classes::kUnsupportedGpuArch,
              absl::StrCat("SM ", cc->major, ".x needs CUDA >= ", need->ToString(), ", nvcc is ",
                           nvcc->ToString()));
    }
  }
  return n;
}

std::vector<CudaVersion> PlanBuilder::ReleasesThatFit(const ToolkitNeeds& n,
                                                      std::string* why) const {
  const std::optional<CudaVersion> driver = ParseCudaVersion(snap_.driver_cuda_version());
  const std::optional<int> major = StackMajor();
  // 0.0 when nothing is installed: every release is then at or above it.
  const CudaVersion newest = n.installed.empty() ? CudaVersion{} : *n.installed.rbegin();
  std::vector<CudaVersion> above, below;
  for (const CudaRelease& r : table_.releases()) {
    if (r.pip.empty()) continue;
    if (n.floor && (r.version < *n.floor || (n.floor_strict && r.version == *n.floor))) continue;
    if (driver && r.version > *driver) continue;
    if (major && r.version.major != *major) continue;
    (r.version < newest ? below : above).push_back(r.version);
  }
  above.insert(above.end(), below.rbegin(), below.rend());
  if (above.empty()) {
    std::vector<std::string> bounds;
    if (n.floor) {
      bounds.push_back(absl::StrCat(n.floor_strict ? "above " : ">= ", n.floor->ToString(), " (",
                                    n.floor_why, ")"));
    }
    if (driver) bounds.push_back(absl::StrCat("<= ", driver->ToString(), " (the driver's)"));
    if (major) bounds.push_back(absl::StrCat("CUDA ", *major, ".x (the Python stack's)"));
    *why =
        absl::StrCat("no CUDA release the planner can install fits: ", absl::StrJoin(bounds, ", "));
  }
  return above;
}

void PlanBuilder::PlanToolkit() {
  const ToolkitNeeds n = CheckToolkit();
  if (n.violated.empty()) {
    // The toolkit is right; the server must still find its nvcc by name.
    const std::string bin = Dirname(snap_.nvcc().path());
    if (!snap_.nvcc().path().empty() && !OnList(EnvOf(after_, "PATH"), bin)) {
      constraints_.push_back(absl::StrCat("nvcc's directory ", bin, " must be on PATH"));
      Commit({classes::kNvccNotFound,
              {{PrependPathAction("PATH", bin),
                "nvcc on the server's PATH (builds call it by name)"}}});
    }
    return;
  }
  const std::vector<std::string> causes = n.Causes();
  auto leave_all = [&](const std::string& why) {
    for (const std::string& cause : causes) Leave(cause, why);
  };
  if (causes.size() == 1 && causes.front() == classes::kNvccNotFound && UseToolkitElsewhere())
    return;
  std::string why_none = n.no_release;
  const std::vector<CudaVersion> fits =
      why_none.empty() ? ReleasesThatFit(n, &why_none) : std::vector<CudaVersion>{};
  if (fits.empty()) return leave_all(why_none);
  release_choice_used_ = true;
  if (choice_.release_rank >= fits.size()) {
    releases_exhausted_ = true;
    return;
  }
  const CudaRelease& release = *table_.Find(fits[choice_.release_rank]);
  const std::string root = PipRoot(release.version.major);
  if (root.empty()) return leave_all("no venv site-packages to install the CUDA toolkit into");

  Fix fix{causes.front(), {}};
  std::vector<std::string> moved;
  for (std::string_view name : kToolkitPieces) {
    const std::string piece(name);
    // cupti is kept in step when present; the JIT does not need it.
    if (Piece(piece) == release.version || (piece == "cupti" && !pieces_.count(piece))) continue;
    moved.push_back(piece);
    fix.actions.push_back({PipAction(release.pip.at(piece)), ""});
  }
  const std::string why = absl::StrCat(
      "the CUDA ", release.version.ToString(), " set (", absl::StrJoin(moved, ", "),
      "): one release for compiler, headers and ptxas",
      ptx_wanted_ ? absl::StrCat(", ptxas accepts PTX ", release.ptx_isa.ToString()) : "");
  for (PlannedAction& p : fix.actions) p.reason = why;
  if (EnvOf(after_, "CUDA_HOME") != root) {
    fix.actions.push_back(
        {SetEnvAction("CUDA_HOME", root), "the JIT's toolkit root is the venv's pip CUDA root"});
  }
  if (!OnList(EnvOf(after_, "PATH"), root + "/bin")) {
    fix.actions.push_back(
        {PrependPathAction("PATH", root + "/bin"), "nvcc and ptxas on the server's PATH"});
  }
  if (fix.actions.empty()) {
    return leave_all(
        absl::StrCat("the probe shows it, but the pip packages and the environment "
                     "already are the CUDA ",
                     release.version.ToString(), " set"));
  }
  if (Commit(std::move(fix), causes)) {
    cuda_release_ = release.version.ToString();
    toolkit_root_ = root;
  }
}

bool PlanBuilder::UseToolkitElsewhere() {
  const std::optional<int> major = StackMajor();
  const std::optional<CudaVersion> driver = ParseCudaVersion(snap_.driver_cuda_version());
  for (const fleet::v1::Tool& t : snap_.toolkits_elsewhere()) {
    const std::optional<CudaVersion> v = ParseCudaVersion(t.version());
    if (!v) continue;
    if (major && v->major != *major) continue;
    if (driver && *v > *driver) continue;
    if (ptx_wanted_) {
      std::optional<CudaVersion> isa = table_.PtxIsaOf(*v);
      if (!isa || *isa < *ptx_wanted_) continue;
    }
    Fix fix{classes::kNvccNotFound, {}};
    if (EnvOf(after_, "CUDA_HOME") != t.path()) {
      fix.actions.push_back({SetEnvAction("CUDA_HOME", t.path()),
                             absl::StrCat("the container's CUDA ", t.version(), " toolkit at ",
                                          t.path(), " (its nvcc is found nowhere else)")});
    }
    if (!OnList(EnvOf(after_, "PATH"), t.path() + "/bin")) {
      fix.actions.push_back(
          {PrependPathAction("PATH", t.path() + "/bin"), "its nvcc on the server's PATH"});
    }
    if (fix.actions.empty() || !Commit(std::move(fix))) return false;
    toolkit_root_ = t.path();
    toolkit_is_pip_ = false;
    return true;
  }
  return false;
}

bool PlanBuilder::RootIsPip() const {
  if (!toolkit_root_.empty()) return toolkit_is_pip_;
  return !snap_.cuda_root().empty() && snap_.cuda_root() == snap_.pip_cuda_dir();
}

void PlanBuilder::PlanLoaderPath() {
  const bool broken = !snap_.libnvrtc_loadable() || !snap_.libcudart_loadable();
  if (!broken && cls_ != classes::kMissingSharedLibrary) return;
  const std::string library = diagnosis_ != nullptr && cls_ == classes::kMissingSharedLibrary
                                  ? FactValue(diagnosis_->facts(), "library")
                                  : "libnvrtc";
  const std::string root = Root();
  if (root.empty()) {
    Leave(classes::kMissingSharedLibrary,
          "no CUDA toolkit root (no pip CUDA libraries either) to load from");
    return;
  }
  const std::string dir = RootIsPip() ? root + "/lib" : root + "/lib64";
  constraints_.push_back(
      absl::StrCat(library, " must be loadable: ", dir, " on the server's LD_LIBRARY_PATH"));
  if (!OnList(EnvOf(after_, "LD_LIBRARY_PATH"), dir)) {
    Fix fix{classes::kMissingSharedLibrary,
            {{PrependPathAction("LD_LIBRARY_PATH", dir),
              absl::StrCat(library, " loadable: the CUDA libraries onto the loader path")}},
            /*affects_jit_build=*/false};
    Commit(std::move(fix));
  } else if (!Contains(causes_, std::string(classes::kMissingSharedLibrary))) {
    Leave(classes::kMissingSharedLibrary,
          absl::StrCat(library, " is not loadable though ", dir,
                       " is on LD_LIBRARY_PATH: it is not a library the "
                       "planner installs"));
  }
}

void PlanBuilder::PlanNinja() {
  const bool broken = snap_.ninja().path().empty() || snap_.ninja().version().empty();
  if (!broken && cls_ != classes::kNinjaNotFound) return;
  if (!broken) {
    Leave(classes::kNinjaNotFound, absl::StrCat("the probe finds a working ninja at ",
                                                snap_.ninja().path(), " on the server's PATH"));
    return;
  }
  constraints_.push_back("ninja must be on the server's PATH (the JIT build tool)");
  if (!snap_.ninja_elsewhere().empty() && Allowed("prepend_path")) {
    // Already in the container, only not on the server's PATH: nothing to install.
    const std::string bin = Dirname(snap_.ninja_elsewhere());
    Commit({classes::kNinjaNotFound,
            {{PrependPathAction("PATH", bin),
              absl::StrCat("the container's ninja (", snap_.ninja_elsewhere(),
                           ") on the server's PATH")}}});
    return;
  }
  const bool apt = Allowed("apt_install") && !table_.ninja_apt().empty();
  const bool pip = Allowed("pip_install") && !snap_.venv().empty();
  ninja_choice_used_ = apt && pip;
  if (apt && !(pip && choice_.ninja_by_pip)) {
    Action a;
    a.mutable_apt_install()->add_packages(table_.ninja_apt());
    Commit(
        {classes::kNinjaNotFound, {{a, "ninja for the JIT build, system-wide (on every PATH)"}}});
    return;
  }
  if (pip) {
    Fix fix{classes::kNinjaNotFound, {{PipAction(table_.ninja_pip()), "ninja for the JIT build"}}};
    const std::string bin = snap_.venv() + "/bin";
    if (!OnList(EnvOf(after_, "PATH"), bin)) {
      fix.actions.push_back(
          {PrependPathAction("PATH", bin), "the venv's ninja on the server's PATH"});
    }
    Commit(std::move(fix));
    return;
  }
  Leave(classes::kNinjaNotFound,
        absl::StrCat("needs apt_install or pip_install (into a known venv); "
                     "policy ",
                     PolicyName(), " allows neither"));
}

void PlanBuilder::PlanLinkLayout() {
  const std::string root = Root();
  // The probe's layout facts are about its root; a root this plan switches to is taken as bare
  // (a link that already exists is answered "already so" by the agent).
  const bool facts = root == snap_.cuda_root();
  // A whole toolkit this plan points at has its own layout (only a link failure says not).
  if (!facts && !toolkit_is_pip_ && cls_ != classes::kLinkError) return;
  const bool lib64 = facts && snap_.cuda_lib64_present();
  const bool cudart = facts && !snap_.libcudart_unversioned().empty();
  const bool stub = facts && !snap_.libcuda_stub().empty();
  if (lib64 && cudart && stub) {
    if (cls_ == classes::kLinkError) {
      Leave(classes::kLinkError, absl::StrCat("the link layout of ", root,
                                              " is complete (lib64, libcudart.so, libcuda stub)"));
    }
    return;
  }
  if (root.empty()) {
    if (cls_ == classes::kLinkError) Leave(classes::kLinkError, "no CUDA toolkit root to lay out");
    return;
  }
  constraints_.push_back(absl::StrCat(root,
                                      " must have lib64, libcudart.so and a libcuda stub "
                                      "(flashinfer's link line)"));
  const bool pip = RootIsPip();
  Fix fix{classes::kLinkError, {}};
  if (!lib64) {
    if (!pip) {
      Leave(classes::kLinkError, absl::StrCat(root, " has no lib64 and is not the pip layout"));
      return;
    }
    fix.actions.push_back({SymlinkAction("lib", root + "/lib64"), "lib64 for -L$CUDA_HOME/lib64"});
  }
  const std::string libdir = pip ? root + "/lib" : root + "/lib64";
  if (!cudart) {
    int major = 0;
    if (!cuda_release_.empty()) {
      major = ParseCudaVersion(cuda_release_)->major;
    } else if (std::optional<int> m = StackMajor()) {
      major = *m;
    }
    if (major <= 0) {
      Leave(classes::kLinkError, "the CUDA major of libcudart is not known");
      return;
    }
    fix.actions.push_back(
        {SymlinkAction(absl::StrCat("libcudart.so.", major), libdir + "/libcudart.so"),
         "the unversioned libcudart.so that -lcudart needs"});
  }
  if (!stub) {
    // The probe's answer (the loader's libcuda.so.1 for this server) wins over the default.
    const std::string libcuda =
        !snap_.driver_libcuda().empty() ? snap_.driver_libcuda() : options_.driver_libcuda;
    if (libcuda.empty()) {
      Leave(classes::kLinkError, "no libcuda stub and the driver's libcuda.so.1 is not known");
      return;
    }
    fix.actions.push_back({SymlinkAction(libcuda, libdir + "/stubs/libcuda.so"),
                           "a libcuda.so for -lcuda (the driver's library links as a stub)"});
  }
  if (EnvOf(after_, "CUDA_HOME") != root) {
    fix.actions.push_back({SetEnvAction("CUDA_HOME", root), "the link line is $CUDA_HOME/lib64"});
  }
  Commit(std::move(fix));
}

void PlanBuilder::PlanMaxJobs() {
  const std::string now = EnvOf(after_, "MAX_JOBS");
  int jobs = 0;
  if (!now.empty() && (!absl::SimpleAtoi(now, &jobs) || jobs < 1)) jobs = 0;
  if (jobs == 1) {
    Leave(classes::kJitOomKilled,
          "MAX_JOBS is already 1: one compile at a time still runs out of memory");
    return;
  }
  const int next = jobs > 1 ? jobs / 2 : options_.first_max_jobs;
  constraints_.push_back(absl::StrCat("JIT compiles must fit in host memory: MAX_JOBS=", next));
  Commit({classes::kJitOomKilled,
          {{SetEnvAction("MAX_JOBS", absl::StrCat(next)),
            absl::StrCat("fewer parallel JIT compiles (", now.empty() ? "unset" : now, " -> ", next,
                         "): a step was OOM-killed")}}});
}

void PlanBuilder::PlanClearJitCache() {
  const std::string path = FactValue(diagnosis_->facts(), "path");
  std::vector<std::string> dirs;
  for (const std::string& dir : snap_.jit_cache_dirs()) {
    if (!path.empty() && absl::StartsWith(path, dir + "/")) dirs = {dir};
  }
  if (dirs.empty()) dirs.assign(snap_.jit_cache_dirs().begin(), snap_.jit_cache_dirs().end());
  if (dirs.empty()) {
    Leave(classes::kStaleJitCache, "the probe finds no JIT cache directory to clear");
    return;
  }
  Fix fix{classes::kStaleJitCache, {}};
  for (const std::string& dir : dirs) {
    Action a;
    a.mutable_clear_jit_cache()->set_directory(dir);
    fix.actions.push_back({a, absl::StrCat("a stale JIT artefact", path.empty() ? "" : " (", path,
                                           path.empty() ? "" : ")", ": rebuild it")});
  }
  Commit(std::move(fix));
}

void PlanBuilder::PlanGpuMemoryUtilization() {
  // Only vLLM's startup check of free memory names the share that would fit; any other out of
  // memory is reported (never a toolchain change, never a guess).
  double free_gib = 0, total_gib = 0, wanted = 0;
  if (in_.spec.engine() != "vllm" ||
      !absl::SimpleAtod(FactValue(diagnosis_->facts(), "gpu_free_gib"), &free_gib) ||
      !absl::SimpleAtod(FactValue(diagnosis_->facts(), "gpu_total_gib"), &total_gib) ||
      !absl::SimpleAtod(FactValue(diagnosis_->facts(), "gpu_memory_utilization"), &wanted) ||
      !(total_gib > 0)) {
    Leave(cls_, "the GPU ran out of memory: lower the memory fraction, batch or context size");
    return;
  }
  if (!in_.policy.allow_fallbacks()) {
    Leave(cls_, absl::StrCat("its fix takes less GPU memory (a smaller KV cache), and policy ",
                             PolicyName(), " does not allow fallbacks"));
    return;
  }
  if (!(free_gib > 0 && free_gib <= total_gib && wanted > 0 && wanted <= 1)) {
    Leave(cls_, "vLLM's memory check names no share that fits");
    return;
  }
  // What is free, less 2% of the GPU for what the start itself allocates, in hundredths.
  const long share = std::lround(std::floor((free_gib / total_gib - 0.02) * 100));
  if (share >= std::lround(wanted * 100)) {
    Leave(cls_, "the share asked already fits in what is free: another cause");
    return;
  }
  if (share < 10) {
    Leave(cls_, absl::StrCat("only ", free_gib, " of ", total_gib,
                             " GiB are free: too little for vLLM to start; free the GPU"));
    return;
  }
  const std::string next = absl::StrCat("0.", share);  // share is 10..99
  const auto& argv = in_.spec.argv();
  Fix fix{cls_, {}, /*affects_jit_build=*/false};
  for (int i = 0; i < argv.size(); ++i) {
    if ((argv[i] == "--gpu-memory-utilization" || argv[i] == "--gpu_memory_utilization") &&
        i + 1 < argv.size()) {
      fix.actions.push_back({ServerArgsAction(false, {argv[i], argv[i + 1]}), "the share asked"});
    } else if (absl::StartsWith(argv[i], "--gpu-memory-utilization=") ||
               absl::StartsWith(argv[i], "--gpu_memory_utilization=")) {
      fix.actions.push_back({ServerArgsAction(false, {argv[i]}), "the share asked"});
    }
  }
  fix.actions.push_back(
      {ServerArgsAction(true, {"--gpu-memory-utilization", next}),
       absl::StrCat("take ", next, " of the GPU (", free_gib, "/", total_gib,
                    " GiB free; a smaller KV cache, kept after the memory is free again)")});
  if (Commit(std::move(fix))) {
    degraded_ = true;
    constraints_.push_back(absl::StrCat(
        "vLLM may take only what is free on the GPU: --gpu-memory-utilization ", next));
  }
}

void PlanBuilder::PlanFallback() {
  if (!in_.policy.allow_fallbacks()) {
    Leave(cls_, absl::StrCat("its fix is a slower fallback, and policy ", PolicyName(),
                             " does not allow fallbacks"));
    return;
  }
  const auto& argv = in_.spec.argv();
  Fix fix{cls_, {}, /*affects_jit_build=*/false};
  if (cls_ == classes::kCudaGraphCaptureFailed) {
    const std::string flag =
        in_.spec.engine() == "vllm" ? "--enforce-eager" : "--disable-cuda-graph";
    if (Contains(argv, flag)) {
      Leave(cls_, absl::StrCat("CUDA graphs are already off (", flag, ")"));
      return;
    }
    fix.actions.push_back({ServerArgsAction(true, {flag}), "start without CUDA graphs (slower)"});
  } else {
    if (in_.spec.engine() == "vllm") {
      // vLLM picks its backend from VLLM_ATTENTION_BACKEND.
      const std::string current = EnvOf(after_, "VLLM_ATTENTION_BACKEND");
      const std::string failing =
          current.empty() ? FactValue(diagnosis_->facts(), "attention_backend") : current;
      // The list walked on from the failing one (a backend that failed after a fallback leads to
      // the next one, not back to the first); the first when the failing one is not listed.
      const std::vector<std::string>& list = options_.fallback_vllm_attention_backends;
      std::string next;
      for (size_t i = 0; i < list.size(); ++i) {
        if (absl::EqualsIgnoreCase(list[i], failing)) {
          next = i + 1 < list.size() ? list[i + 1] : "";
          break;
        }
        if (next.empty()) next = list[0];
      }
      if (next.empty()) {
        Leave(cls_, "no other vLLM attention backend is configured to fall back to");
        return;
      }
      fix.actions.push_back(
          {SetEnvAction("VLLM_ATTENTION_BACKEND", next),
           absl::StrCat("fall back to vLLM's ", next, " attention backend (slower)",
                        failing.empty() ? "" : absl::StrCat(": ", failing, " does not fit"))});
      if (Commit(std::move(fix))) degraded_ = true;
      return;
    }
    std::vector<std::string> old;
    std::string current;
    for (int i = 0; i < argv.size(); ++i) {
      if (argv[i] == "--attention-backend" && i + 1 < argv.size()) {
        old = {argv[i], argv[i + 1]};
        current = argv[i + 1];
      } else if (absl::StartsWith(argv[i], "--attention-backend=")) {
        old = {argv[i]};
        current = argv[i].substr(sizeof("--attention-backend=") - 1);
      }
    }
    const std::string failing =
        current.empty() ? FactValue(diagnosis_->facts(), "attention_backend") : current;
    std::string next;
    for (const std::string& b : options_.fallback_attention_backends) {
      if (b != failing) {
        next = b;
        break;
      }
    }
    if (next.empty()) {
      Leave(cls_, "no other attention backend is configured to fall back to");
      return;
    }
    if (!old.empty()) {
      fix.actions.push_back(
          {ServerArgsAction(false, old),
           absl::StrCat("the attention backend ", current, " does not support this GPU")});
    }
    fix.actions.push_back({ServerArgsAction(true, {"--attention-backend", next}),
                           absl::StrCat("fall back to the ", next, " attention backend (slower)")});
  }
  if (Commit(std::move(fix))) degraded_ = true;
}

}  // namespace fleet::daemon
