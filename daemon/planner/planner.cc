#include "daemon/planner/planner.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/string_view.h"
#include "common/config/fleet_config.h"
#include "common/diagnosis/diagnosis_class.h"

namespace fleet::daemon {
namespace {

using fleet::diagnosis::FixKind;
using fleet::v1::Action;
using fleet::v1::ServerSpec;
using fleet::v1::ToolchainSnapshot;

// The classes the planner acts on (docs/design.md's table; the strings are a contract).
constexpr char kMissingLibrary[] = "missing_shared_library";
constexpr char kNvccNotFound[] = "nvcc_not_found";
constexpr char kNinjaNotFound[] = "ninja_not_found";
constexpr char kHeaderMismatch[] = "cuda_header_mismatch";
constexpr char kPtxUnsupported[] = "ptx_version_unsupported";
constexpr char kLinkError[] = "link_error";
constexpr char kNvccTooOld[] = "nvcc_too_old";
constexpr char kUnsupportedArch[] = "unsupported_gpu_arch";
constexpr char kJitOom[] = "jit_oom_killed";
constexpr char kStaleJitCache[] = "stale_jit_cache";
constexpr char kAttentionBackend[] = "attention_backend_unsupported";
constexpr char kGraphCapture[] = "cuda_graph_capture_failed";

// Negative classes after which a plain relaunch (with backoff) may still work: nothing in the
// container is wrong, something around it was (another process's memory or port, the network).
constexpr std::string_view kTransientClasses[] = {"cuda_out_of_memory",
                                                  "port_in_use",
                                                  "nccl_error",
                                                  "runtime_watchdog",
                                                  "startup_stalled",
                                                  "startup_deadline_exceeded",
                                                  "unknown",
                                                  "child_process_failed"};

// The order a plan applies its actions in: packages first (symlink targets and PATH entries come
// from them), then the environment, then the files that point into the installed tree.
int KindRank(const Action& a) {
  switch (a.kind_case()) {
    case Action::kPipInstall:
      return 0;
    case Action::kPipUninstall:
      return 1;
    case Action::kAptInstall:
      return 1;
    case Action::kSetEnv:
      return 2;
    case Action::kPrependPath:
      return 3;
    case Action::kSymlink:
      return 4;
    case Action::kClearJitCache:
      return 5;
    case Action::kRemoveServerArgs:
      return 6;
    case Action::kAddServerArgs:
      return 7;
    case Action::KIND_NOT_SET:
      break;
  }
  return 8;
}

template <typename Container, typename T>
bool Contains(const Container& c, const T& value) {
  return std::find(std::begin(c), std::end(c), value) != std::end(c);
}

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

Action SetEnvAction(const std::string& name, const std::string& value) {
  Action a;
  a.mutable_set_env()->set_name(name);
  a.mutable_set_env()->set_value(value);
  return a;
}

Action PrependPathAction(const std::string& variable, const std::string& directory) {
  Action a;
  a.mutable_prepend_path()->set_variable(variable);
  a.mutable_prepend_path()->set_directory(directory);
  return a;
}

Action SymlinkAction(const std::string& target, const std::string& link) {
  Action a;
  a.mutable_symlink()->set_target(target);
  a.mutable_symlink()->set_link(link);
  return a;
}

Action PipAction(const fleet::v1::Requirement& requirement) {
  Action a;
  *a.mutable_pip_install()->add_requirements() = requirement;
  return a;
}

Action ServerArgsAction(bool add, std::vector<std::string> args) {
  Action a;
  fleet::v1::ServerArgs* target =
      add ? a.mutable_add_server_args() : a.mutable_remove_server_args();
  for (std::string& arg : args) target->add_args(std::move(arg));
  return a;
}

void ApplyAction(const Action& a, ServerSpec* spec) {
  auto& env = *spec->mutable_env();
  switch (a.kind_case()) {
    case Action::kSetEnv:
      env[a.set_env().name()] = a.set_env().value();
      break;
    case Action::kPrependPath: {
      std::string& value = env[a.prepend_path().variable()];
      value = value.empty() ? a.prepend_path().directory()
                            : absl::StrCat(a.prepend_path().directory(), ":", value);
      break;
    }
    case Action::kRemoveServerArgs: {
      // The first run of argv equal to the args (a flag and its value) goes.
      auto& argv = *spec->mutable_argv();
      const auto& args = a.remove_server_args().args();
      auto at = std::search(argv.begin(), argv.end(), args.begin(), args.end());
      if (!args.empty() && at != argv.end()) argv.erase(at, at + args.size());
      break;
    }
    case Action::kAddServerArgs:
      for (const std::string& arg : a.add_server_args().args()) spec->add_argv(arg);
      break;
    default:
      break;
  }
}

// FNV-1a 64 of the actions' descriptions: stable across builds and processes (unlike std::hash),
// so a fingerprint in the store still matches after a daemon upgrade.
std::string Fingerprint(const std::vector<PlannedAction>& actions) {
  uint64_t h = 1469598103934665603ull;
  for (const PlannedAction& p : actions) {
    for (char c : absl::StrCat(DescribeAction(p.action), "\n")) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
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
              const PlannerInput& input, const fleet::v1::Diagnosis* diagnosis, Choice choice)
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

  void Run() {
    LearnConstraints();
    PlanToolkit();
    PlanLoaderPath();
    PlanNinja();
    PlanLinkLayout();
    if (cls_ == kJitOom) PlanMaxJobs();
    if (cls_ == kStaleJitCache) PlanClearJitCache();
    if (cls_ == kAttentionBackend || cls_ == kGraphCapture) PlanFallback();
    std::stable_sort(actions_.begin(), actions_.end(),
                     [](const PlannedAction& a, const PlannedAction& b) {
                       return KindRank(a.action) < KindRank(b.action);
                     });
  }

  // Results.
  std::vector<PlannedAction> TakeActions() {
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

  bool Allowed(std::string_view kind) const {
    return in_.policy.allowed_actions().empty() || Contains(in_.policy.allowed_actions(), kind);
  }

  std::string PolicyName() const {
    return in_.policy.name().empty() ? "default" : in_.policy.name();
  }

  void AddCause(const std::string& cause) {
    if (!Contains(causes_, cause)) causes_.push_back(cause);
  }

  void Leave(const std::string& cause, std::string why) {
    unresolved_.push_back({cause, std::move(why)});
  }

  // Adds the fix's actions, unless the policy forbids one of them (then none, and why).
  bool Commit(Fix fix, const std::vector<std::string>& also_causes = {}) {
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

  // What past and present diagnoses taught: the PTX ISA that flashinfer's CCCL emits is seen only
  // in a ptxas failure, and it stays wanted after the toolchain that failed on it is gone.
  void LearnConstraints() {
    auto learn = [&](const google::protobuf::RepeatedPtrField<fleet::v1::Fact>& facts,
                     const std::string& from) {
      std::optional<CudaVersion> wanted = ParseCudaVersion(FactValue(facts, "ptx_wanted"));
      if (wanted && (!ptx_wanted_ || *wanted > *ptx_wanted_)) {
        ptx_wanted_ = wanted;
        ptx_wanted_from_ = from;
      }
    };
    if (diagnosis_ != nullptr) learn(diagnosis_->facts(), "this diagnosis");
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

  std::optional<CudaVersion> Piece(const std::string& piece) const {
    auto it = pieces_.find(piece);
    return it == pieces_.end() ? std::nullopt : it->second;
  }

  // The pip CUDA root (site-packages/nvidia/cuN) for a release of `major`.
  std::string PipRoot(int major) const {
    if (!snap_.pip_cuda_dir().empty()) return snap_.pip_cuda_dir();
    if (snap_.site_packages().empty()) return "";
    return absl::StrCat(snap_.site_packages(), "/nvidia/cu", major);
  }

  // The CUDA major the Python stack was built for (it loads libnvrtc.so.13): the pip root's cuN,
  // else torch's local version (2.9.1+cu128), else the pip runtime's.
  std::optional<int> StackMajor() const {
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

  // What the toolkit violates, and the bounds on the release that would fix it.
  struct ToolkitNeeds {
    std::vector<std::pair<std::string, std::string>> violated;  // cause, what
    std::set<CudaVersion> installed;   // releases of the pieces pip installed (and nvcc's)
    std::optional<CudaVersion> floor;  // the lowest release that may be chosen
    bool floor_strict = false;         // ... exclusive: it must be above `floor`
    std::string floor_why;
    std::string no_release;  // why no release at all can fit

    void Raise(CudaVersion v, bool strict, std::string why) {
      if (!floor || v > *floor || (v == *floor && strict && !floor_strict)) {
        floor = v;
        floor_strict = strict;
        floor_why = std::move(why);
      }
    }
    std::vector<std::string> Causes() const {
      std::vector<std::string> causes;
      for (const auto& [cause, what] : violated) {
        if (!Contains(causes, cause)) causes.push_back(cause);
      }
      return causes;
    }
  };

  ToolkitNeeds CheckToolkit() {
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
      violate(kNvccNotFound, snap_.cuda_home().find(':') != std::string::npos
                                 ? absl::StrCat("CUDA_HOME=", snap_.cuda_home(),
                                                " is a list, not a toolkit: nvcc is not found")
                                 : "nvcc must be found by the server (CUDA_HOME or PATH): none is");
    }
    if (nvcc && headers && *nvcc != *headers) {
      violate(kHeaderMismatch,
              absl::StrCat("nvcc ", nvcc->ToString(), " must match the headers' CUDART_VERSION ",
                           headers->ToString(), " (CCCL's compiler/header check)"));
    }
    if (nvvm && ptxas && *nvvm > *ptxas) {
      violate(kPtxUnsupported, absl::StrCat("nvvm ", nvvm->ToString(), " emits PTX that ptxas ",
                                            ptxas->ToString(), " rejects"));
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
        violate(kPtxUnsupported,
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
      violate(kHeaderMismatch,
              absl::StrCat("toolkit pieces must be of one release: ", absl::StrJoin(seen, ", ")));
    }
    // Pieces the JIT needs from the pip root, when that root is (or becomes) the toolkit.
    if (active_is_pip || !nvcc_found) {
      for (const char* piece : {"crt", "nvvm", "runtime"}) {
        if (!pieces_.count(piece))
          violate(kNvccNotFound, absl::StrCat("the pip toolkit lacks ", piece));
      }
      if (!pieces_.count("nvrtc") && !snap_.libnvrtc_loadable()) {
        violate(kMissingLibrary, "libnvrtc must be loadable: no nvrtc package is installed");
      }
    }
    if (cls_ == kNvccTooOld && nvcc) {
      n.Raise(*nvcc, true,
              absl::StrCat("nvcc ", nvcc->ToString(), " rejects an option the build needs"));
      violate(kNvccTooOld, absl::StrCat("nvcc must be newer than ", nvcc->ToString()));
    }
    if (cls_ == kUnsupportedArch) {
      if (std::optional<CudaVersion> required =
              ParseCudaVersion(FactValue(diagnosis_->facts(), "cuda_required"))) {
        n.Raise(*required, false, absl::StrCat("the build says CUDA >= ", required->ToString()));
      } else if (nvcc) {
        n.Raise(*nvcc, true, absl::StrCat("nvcc ", nvcc->ToString(), " does not know this GPU"));
      }
      violate(kUnsupportedArch, "nvcc must know the GPU's architecture");
    }
    for (const fleet::v1::Gpu& gpu : snap_.gpus()) {
      std::optional<CudaVersion> cc = ParseCudaVersion(gpu.compute_capability());
      std::optional<CudaVersion> need = cc ? table_.MinReleaseForGpu(*cc) : std::nullopt;
      if (!need) continue;
      n.Raise(*need, false,
              absl::StrCat("GPUs of SM ", cc->major, ".x need CUDA >= ", need->ToString()));
      if (nvcc && *nvcc < *need) {
        violate(kUnsupportedArch, absl::StrCat("SM ", cc->major, ".x needs CUDA >= ",
                                               need->ToString(), ", nvcc is ", nvcc->ToString()));
      }
    }
    return n;
  }

  // The installable releases within every bound, in the order to try them: at or above the
  // newest piece already installed, nearest first; going down is last (a newer piece was
  // installed for a reason, and nvcc 13.0 under PTX 9.2 is the seesaw), taken only when nothing
  // at or above fits (a driver too old for it). Empty with `why` when none fits.
  std::vector<CudaVersion> ReleasesThatFit(const ToolkitNeeds& n, std::string* why) const {
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
      *why = absl::StrCat("no CUDA release the planner can install fits: ",
                          absl::StrJoin(bounds, ", "));
    }
    return above;
  }

  // nvcc, crt, nvvm, runtime, nvrtc, cupti of one release that fits every constraint, installed
  // into the venv's pip root in one go, which CUDA_HOME and PATH then name.
  void PlanToolkit() {
    const ToolkitNeeds n = CheckToolkit();
    if (n.violated.empty()) {
      // The toolkit is right; the server must still find its nvcc by name.
      const std::string bin = Dirname(snap_.nvcc().path());
      if (!snap_.nvcc().path().empty() && !OnList(EnvOf(after_, "PATH"), bin)) {
        constraints_.push_back(absl::StrCat("nvcc's directory ", bin, " must be on PATH"));
        Commit({kNvccNotFound,
                {{PrependPathAction("PATH", bin),
                  "nvcc on the server's PATH (builds call it by name)"}}});
      }
      return;
    }
    const std::vector<std::string> causes = n.Causes();
    auto leave_all = [&](const std::string& why) {
      for (const std::string& cause : causes) Leave(cause, why);
    };
    if (causes.size() == 1 && causes.front() == kNvccNotFound && UseToolkitElsewhere()) return;
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

  // No nvcc for the server, but a whole toolkit elsewhere in the container (tools.search_path)
  // that fits what is known (the Python stack's CUDA major, the PTX wanted, the driver): point
  // CUDA_HOME and PATH at it. True when that was planned.
  bool UseToolkitElsewhere() {
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
      Fix fix{kNvccNotFound, {}};
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

  // The toolkit root the rest of the plan is about: the one this plan installs into or points
  // at, else the probe's.
  std::string Root() const { return toolkit_root_.empty() ? snap_.cuda_root() : toolkit_root_; }
  bool RootIsPip() const {
    if (!toolkit_root_.empty()) return toolkit_is_pip_;
    return !snap_.cuda_root().empty() && snap_.cuda_root() == snap_.pip_cuda_dir();
  }

  // libnvrtc/libcudart of the pip root, where sgl_kernel's import looks: on LD_LIBRARY_PATH.
  void PlanLoaderPath() {
    const bool broken = !snap_.libnvrtc_loadable() || !snap_.libcudart_loadable();
    if (!broken && cls_ != kMissingLibrary) return;
    const std::string library = diagnosis_ != nullptr && cls_ == kMissingLibrary
                                    ? FactValue(diagnosis_->facts(), "library")
                                    : "libnvrtc";
    const std::string root = Root();
    if (root.empty()) {
      Leave(kMissingLibrary, "no CUDA toolkit root (no pip CUDA libraries either) to load from");
      return;
    }
    const std::string dir = RootIsPip() ? root + "/lib" : root + "/lib64";
    constraints_.push_back(
        absl::StrCat(library, " must be loadable: ", dir, " on the server's LD_LIBRARY_PATH"));
    if (!OnList(EnvOf(after_, "LD_LIBRARY_PATH"), dir)) {
      Fix fix{kMissingLibrary,
              {{PrependPathAction("LD_LIBRARY_PATH", dir),
                absl::StrCat(library, " loadable: the CUDA libraries onto the loader path")}},
              /*affects_jit_build=*/false};
      Commit(std::move(fix));
    } else if (!Contains(causes_, std::string(kMissingLibrary))) {
      Leave(kMissingLibrary, absl::StrCat(library, " is not loadable though ", dir,
                                          " is on LD_LIBRARY_PATH: it is not a library the "
                                          "planner installs"));
    }
  }

  void PlanNinja() {
    const bool broken = snap_.ninja().path().empty() || snap_.ninja().version().empty();
    if (!broken && cls_ != kNinjaNotFound) return;
    if (!broken) {
      Leave(kNinjaNotFound, absl::StrCat("the probe finds a working ninja at ",
                                         snap_.ninja().path(), " on the server's PATH"));
      return;
    }
    constraints_.push_back("ninja must be on the server's PATH (the JIT build tool)");
    if (!snap_.ninja_elsewhere().empty() && Allowed("prepend_path")) {
      // Already in the container, only not on the server's PATH: nothing to install.
      const std::string bin = Dirname(snap_.ninja_elsewhere());
      Commit({kNinjaNotFound,
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
      Commit({kNinjaNotFound, {{a, "ninja for the JIT build, system-wide (on every PATH)"}}});
      return;
    }
    if (pip) {
      Fix fix{kNinjaNotFound, {{PipAction(table_.ninja_pip()), "ninja for the JIT build"}}};
      const std::string bin = snap_.venv() + "/bin";
      if (!OnList(EnvOf(after_, "PATH"), bin)) {
        fix.actions.push_back(
            {PrependPathAction("PATH", bin), "the venv's ninja on the server's PATH"});
      }
      Commit(std::move(fix));
      return;
    }
    Leave(kNinjaNotFound, absl::StrCat("needs apt_install or pip_install (into a known venv); "
                                       "policy ",
                                       PolicyName(), " allows neither"));
  }

  // flashinfer links with `-L$CUDA_HOME/lib64/stubs -lcuda ... -L$CUDA_HOME/lib64 -lcudart`; the
  // pip layout has lib/ only, libcudart.so.N only, and no stub.
  void PlanLinkLayout() {
    const std::string root = Root();
    // The probe's layout facts are about its root; a root this plan switches to is taken as bare
    // (a link that already exists is answered "already so" by the agent).
    const bool facts = root == snap_.cuda_root();
    // A whole toolkit this plan points at has its own layout (only a link failure says not).
    if (!facts && !toolkit_is_pip_ && cls_ != kLinkError) return;
    const bool lib64 = facts && snap_.cuda_lib64_present();
    const bool cudart = facts && !snap_.libcudart_unversioned().empty();
    const bool stub = facts && !snap_.libcuda_stub().empty();
    if (lib64 && cudart && stub) {
      if (cls_ == kLinkError) {
        Leave(kLinkError, absl::StrCat("the link layout of ", root,
                                       " is complete (lib64, libcudart.so, libcuda stub)"));
      }
      return;
    }
    if (root.empty()) {
      if (cls_ == kLinkError) Leave(kLinkError, "no CUDA toolkit root to lay out");
      return;
    }
    constraints_.push_back(absl::StrCat(root,
                                        " must have lib64, libcudart.so and a libcuda stub "
                                        "(flashinfer's link line)"));
    const bool pip = RootIsPip();
    Fix fix{kLinkError, {}};
    if (!lib64) {
      if (!pip) {
        Leave(kLinkError, absl::StrCat(root, " has no lib64 and is not the pip layout"));
        return;
      }
      fix.actions.push_back(
          {SymlinkAction("lib", root + "/lib64"), "lib64 for -L$CUDA_HOME/lib64"});
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
        Leave(kLinkError, "the CUDA major of libcudart is not known");
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
        Leave(kLinkError, "no libcuda stub and the driver's libcuda.so.1 is not known");
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

  void PlanMaxJobs() {
    const std::string now = EnvOf(after_, "MAX_JOBS");
    int jobs = 0;
    if (!now.empty() && (!absl::SimpleAtoi(now, &jobs) || jobs < 1)) jobs = 0;
    if (jobs == 1) {
      Leave(kJitOom, "MAX_JOBS is already 1: one compile at a time still runs out of memory");
      return;
    }
    const int next = jobs > 1 ? jobs / 2 : options_.first_max_jobs;
    constraints_.push_back(absl::StrCat("JIT compiles must fit in host memory: MAX_JOBS=", next));
    Commit({kJitOom,
            {{SetEnvAction("MAX_JOBS", absl::StrCat(next)),
              absl::StrCat("fewer parallel JIT compiles (", now.empty() ? "unset" : now, " -> ",
                           next, "): a step was OOM-killed")}}});
  }

  void PlanClearJitCache() {
    const std::string path = FactValue(diagnosis_->facts(), "path");
    std::vector<std::string> dirs;
    for (const std::string& dir : snap_.jit_cache_dirs()) {
      if (!path.empty() && absl::StartsWith(path, dir + "/")) dirs = {dir};
    }
    if (dirs.empty()) dirs.assign(snap_.jit_cache_dirs().begin(), snap_.jit_cache_dirs().end());
    if (dirs.empty()) {
      Leave(kStaleJitCache, "the probe finds no JIT cache directory to clear");
      return;
    }
    Fix fix{kStaleJitCache, {}};
    for (const std::string& dir : dirs) {
      Action a;
      a.mutable_clear_jit_cache()->set_directory(dir);
      fix.actions.push_back({a, absl::StrCat("a stale JIT artefact", path.empty() ? "" : " (", path,
                                             path.empty() ? "" : ")", ": rebuild it")});
    }
    Commit(std::move(fix));
  }

  // Fallbacks trade speed for a start; only where the policy allows them, and marked degraded.
  void PlanFallback() {
    if (!in_.policy.allow_fallbacks()) {
      Leave(cls_, absl::StrCat("its fix is a slower fallback, and policy ", PolicyName(),
                               " does not allow fallbacks"));
      return;
    }
    const auto& argv = in_.spec.argv();
    Fix fix{cls_, {}, /*affects_jit_build=*/false};
    if (cls_ == kGraphCapture) {
      const std::string flag =
          in_.spec.engine() == "vllm" ? "--enforce-eager" : "--disable-cuda-graph";
      if (Contains(argv, flag)) {
        Leave(cls_, absl::StrCat("CUDA graphs are already off (", flag, ")"));
        return;
      }
      fix.actions.push_back({ServerArgsAction(true, {flag}), "start without CUDA graphs (slower)"});
    } else {
      if (in_.spec.engine() == "vllm") {
        Leave(cls_, "no attention backend fallback is known for vllm");
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
      fix.actions.push_back(
          {ServerArgsAction(true, {"--attention-backend", next}),
           absl::StrCat("fall back to the ", next, " attention backend (slower)")});
    }
    if (Commit(std::move(fix))) degraded_ = true;
  }

  const CudaReleaseTable& table_;
  const PlannerOptions& options_;
  const PlannerInput& in_;
  const ToolchainSnapshot& snap_;
  const fleet::v1::Diagnosis* diagnosis_;
  const std::string cls_;
  const Choice choice_;
  std::map<std::string, std::optional<CudaVersion>> pieces_;  // installed by pip

  ServerSpec after_;  // the spec with the actions so far: later steps see earlier env changes
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

PlannerDecision Reported(PlannerDecision decision, std::string reason, const std::string& cls,
                         const fleet::v1::Diagnosis* diagnosis, bool retry = false) {
  PlannerReport report;
  report.reason = std::move(reason);
  report.diagnosis_class = cls;
  report.retry_with_backoff = retry;
  if (diagnosis != nullptr) {
    report.evidence.assign(diagnosis->evidence().begin(), diagnosis->evidence().end());
  }
  decision.plan.reset();
  decision.report = std::move(report);
  return decision;
}

RemediationPlan MakePlan(const PlanBuilder& b, std::vector<PlannedAction> actions,
                         const std::string& fingerprint, const fleet::v1::Diagnosis* d,
                         const ServerSpec& spec) {
  RemediationPlan plan;
  plan.fingerprint = fingerprint;
  plan.trigger = d == nullptr ? "preflight" : "diagnosis";
  if (d != nullptr) plan.causes.push_back(d->diagnosis_class());
  for (const std::string& c : b.causes()) {
    if (!Contains(plan.causes, c)) plan.causes.push_back(c);
  }
  plan.actions = std::move(actions);
  plan.cuda_release = b.cuda_release();
  plan.affects_jit_build = b.affects_jit_build();
  plan.degraded = b.degraded();
  plan.save_package_set =
      std::any_of(plan.actions.begin(), plan.actions.end(),
                  [](const PlannedAction& p) { return p.action.has_pip_install(); });
  for (const Unresolved& u : b.unresolved()) {
    plan.unresolved.push_back(absl::StrCat(u.cause, ": ", u.why));
  }
  const ServerSpec after = ApplyToSpec(plan, spec);
  for (const auto& [name, value] : after.env()) {
    auto old = spec.env().find(name);
    if (old == spec.env().end() || old->second != value) plan.env_changes[name] = value;
  }
  plan.summary = absl::StrCat(plan.degraded ? "degraded: " : "", plan.actions.size(),
                              " action(s) for ", absl::StrJoin(plan.causes, ", "),
                              plan.cuda_release.empty() ? "" : "; CUDA ", plan.cuda_release);
  return plan;
}

}  // namespace

RemediationPlanner::RemediationPlanner(const CudaReleaseTable* releases, PlannerOptions options)
    : releases_(releases), options_(std::move(options)) {}

PlannerDecision RemediationPlanner::Preflight(const PlannerInput& input) const {
  return Decide(nullptr, input);
}

PlannerDecision RemediationPlanner::Plan(const fleet::v1::Diagnosis& diagnosis,
                                         const PlannerInput& input) const {
  return Decide(&diagnosis, input);
}

PlannerDecision RemediationPlanner::Decide(const fleet::v1::Diagnosis* d,
                                           const PlannerInput& in) const {
  PlannerDecision decision;
  const std::string cls = d != nullptr ? d->diagnosis_class() : "";
  const std::string policy = in.policy.name().empty() ? "default" : in.policy.name();
  if (in.policy.remediation() == fleet::v1::Policy::OFF) {
    return Reported(std::move(decision), absl::StrCat("remediation is off (policy ", policy, ")"),
                    cls, d);
  }

  // A remediation that addressed this class, after which the class came back, failed.
  std::set<std::string> failed;
  for (const PastRemediation& r : in.history) {
    if (r.outcome == RemediationOutcome::kFailed) failed.insert(r.id);
    if (d != nullptr && r.outcome == RemediationOutcome::kApplied && Contains(r.causes, cls)) {
      failed.insert(r.id);
      decision.failed_remediations.push_back(r.id);
    }
  }

  if (d != nullptr) {
    const diagnosis::DiagnosisClassInfo* info = diagnosis::FindDiagnosisClass(cls);
    if (info == nullptr) {
      return Reported(std::move(decision), absl::StrCat("unknown diagnosis class '", cls, "'"), cls,
                      d);
    }
    FixKind fix = info->fix;
    // The signature that decided may know better than the class (a torch wheel without this
    // arch is unsupported_gpu_arch too, but no toolchain change fixes it).
    if (std::optional<FixKind> k = diagnosis::ParseFixKind(d->fix_kind())) fix = *k;
    if (fix != FixKind::kToolchain && fix != FixKind::kEnv && fix != FixKind::kJitCache &&
        fix != FixKind::kLaunchFlags) {
      const std::string what = d->summary().empty() ? std::string(info->summary) : d->summary();
      return Reported(
          std::move(decision),
          absl::StrCat(cls, ": ", what, " (", AsAbsl(diagnosis::FixKindDescription(fix)), ")"), cls,
          d, fix == FixKind::kRestart || Contains(kTransientClasses, cls));
    }
    const int cap = in.policy.max_fixes_per_cause() > 0 ? in.policy.max_fixes_per_cause()
                                                        : config::kDefaultMaxFixesPerCause;
    std::vector<std::string> tried;
    for (const PastRemediation& r : in.history) {
      if (Contains(r.causes, cls)) tried.push_back(r.id);
    }
    if (static_cast<int>(tried.size()) >= cap) {
      return Reported(std::move(decision),
                      absl::StrCat(cls, ": ", tried.size(), " remediations already (",
                                   absl::StrJoin(tried, ", "), "), the cap of policy ", policy,
                                   " (max_fixes_per_cause ", cap, "); giving up"),
                      cls, d);
    }
  }

  // Plans never applied again: one that failed for this cause, or that was rolled back.
  std::map<std::string, std::string> excluded;  // fingerprint → remediation id
  for (const PastRemediation& r : in.history) {
    const bool failed_here = failed.count(r.id) && (d == nullptr || Contains(r.causes, cls));
    if (failed_here || r.outcome == RemediationOutcome::kRolledBack) {
      excluded.emplace(r.fingerprint, r.id);
    }
  }

  // The preferred plan; another choice (pip's ninja, the next release that fits) only when the
  // one before already failed.
  std::vector<std::string> skipped;  // plans passed over, and why
  std::vector<Unresolved> first_unresolved;
  bool first = true;
  bool next_rank = true;
  for (size_t rank = 0; next_rank; ++rank) {
    next_rank = false;
    for (bool ninja_by_pip : {false, true}) {
      PlanBuilder b(*releases_, options_, in, d, {rank, ninja_by_pip});
      b.Run();
      if (first) {
        decision.constraints = b.constraints();
        first_unresolved = b.unresolved();
        decision.problems = b.causes();
        for (const Unresolved& u : first_unresolved) {
          if (!Contains(decision.problems, u.cause)) decision.problems.push_back(u.cause);
        }
        first = false;
      }
      std::vector<PlannedAction> actions = b.TakeActions();
      const bool addressed = d == nullptr ? !actions.empty() : Contains(b.causes(), cls);
      if (!addressed || b.releases_exhausted()) break;
      const std::string fingerprint = Fingerprint(actions);
      auto failed_before = excluded.find(fingerprint);
      if (failed_before == excluded.end()) {
        decision.plan = MakePlan(b, std::move(actions), fingerprint, d, in.spec);
        return decision;
      }
      skipped.push_back(
          absl::StrCat("plan ", fingerprint, " (", failed_before->second, ") already failed"));
      if (b.ninja_choice_used() && !ninja_by_pip) continue;
      next_rank = b.release_choice_used();
      break;
    }
  }

  // No plan: say why, from the first (preferred) pass.
  std::vector<std::string> why;
  for (const Unresolved& u : first_unresolved) {
    if (d != nullptr && u.cause == cls) why.push_back(u.why);
    if (d == nullptr) why.push_back(absl::StrCat(u.cause, ": ", u.why));
  }
  std::string reason;
  if (!skipped.empty()) {
    reason = absl::StrCat(d != nullptr ? cls + ": " : "",
                          "every plan the planner knows was tried: ", absl::StrJoin(skipped, "; "));
  } else if (!why.empty()) {
    reason = absl::StrCat(d != nullptr ? cls + ": " : "", "no change: ", absl::StrJoin(why, "; "));
  } else if (d != nullptr) {
    reason = absl::StrCat(cls, ": the probe shows nothing the planner would change for it");
  } else {
    reason = "the probe shows nothing to fix";
  }
  return Reported(std::move(decision), std::move(reason), cls, d);
}

bool RetryMayHelp(std::string_view diagnosis_class) {
  return diagnosis_class.empty() || diagnosis_class == "none" ||
         Contains(kTransientClasses, diagnosis_class);
}

std::string_view ActionKind(const Action& action) {
  switch (action.kind_case()) {
    case Action::kSetEnv:
      return "set_env";
    case Action::kPrependPath:
      return "prepend_path";
    case Action::kPipInstall:
      return "pip_install";
    case Action::kPipUninstall:
      return "pip_uninstall";
    case Action::kAptInstall:
      return "apt_install";
    case Action::kAddServerArgs:
      return "add_server_args";
    case Action::kRemoveServerArgs:
      return "remove_server_args";
    case Action::kClearJitCache:
      return "clear_jit_cache";
    case Action::kSymlink:
      return "symlink";
    case Action::KIND_NOT_SET:
      break;
  }
  return "none";
}

std::string DescribeAction(const Action& a) {
  const std::string kind(ActionKind(a));
  switch (a.kind_case()) {
    case Action::kSetEnv:
      return absl::StrCat(kind, " ", a.set_env().name(), "=", a.set_env().value());
    case Action::kPrependPath:
      return absl::StrCat(kind, " ", a.prepend_path().variable(), " ",
                          a.prepend_path().directory());
    case Action::kPipInstall: {
      std::vector<std::string> reqs;
      for (const fleet::v1::Requirement& r : a.pip_install().requirements()) {
        reqs.push_back(absl::StrCat(r.name(), "==", r.version()));
      }
      return absl::StrCat(kind, " ", absl::StrJoin(reqs, " "));
    }
    case Action::kPipUninstall:
      return absl::StrCat(kind, " ", absl::StrJoin(a.pip_uninstall().packages(), " "));
    case Action::kAptInstall:
      return absl::StrCat(kind, " ", absl::StrJoin(a.apt_install().packages(), " "));
    case Action::kAddServerArgs:
      return absl::StrCat(kind, " ", absl::StrJoin(a.add_server_args().args(), " "));
    case Action::kRemoveServerArgs:
      return absl::StrCat(kind, " ", absl::StrJoin(a.remove_server_args().args(), " "));
    case Action::kClearJitCache:
      return absl::StrCat(kind, " ", a.clear_jit_cache().directory());
    case Action::kSymlink:
      return absl::StrCat(kind, " ", a.symlink().link(), " -> ", a.symlink().target());
    case Action::KIND_NOT_SET:
      break;
  }
  return kind;
}

ServerSpec ApplyToSpec(const RemediationPlan& plan, ServerSpec spec) {
  for (const PlannedAction& p : plan.actions) ApplyAction(p.action, &spec);
  return spec;
}

void ApplyActionsToSpec(const google::protobuf::RepeatedPtrField<fleet::v1::PlannedAction>& actions,
                        ServerSpec* spec) {
  for (const fleet::v1::PlannedAction& p : actions) ApplyAction(p.action(), spec);
}

std::string_view OutcomeName(RemediationOutcome outcome) {
  switch (outcome) {
    case RemediationOutcome::kApplied:
      return "applied";
    case RemediationOutcome::kFailed:
      return "failed";
    case RemediationOutcome::kRolledBack:
      return "rolled_back";
  }
  return "applied";
}

std::optional<RemediationOutcome> ParseOutcome(std::string_view name) {
  for (RemediationOutcome o : {RemediationOutcome::kApplied, RemediationOutcome::kFailed,
                               RemediationOutcome::kRolledBack}) {
    if (OutcomeName(o) == name) return o;
  }
  return std::nullopt;
}

}  // namespace fleet::daemon
