#include "tests/testing/planner_testing.h"

namespace fleet::daemon::plannertest {

using fleet::v1::Diagnosis;
using fleet::v1::Policy;
using fleet::v1::ServerSpec;
using fleet::v1::ToolchainSnapshot;

std::string Cuda(const std::string& rest) { return std::string(kCuda) + rest; }

void SetPackages(ToolchainSnapshot* s, const std::map<std::string, std::string>& packages) {
  s->clear_pip_packages();
  for (const auto& [name, version] : packages) {
    fleet::v1::Package* p = s->add_pip_packages();
    p->set_name(name);
    p->set_version(version);
  }
}

const std::map<std::string, std::string> kSet130 = {
    {"nvidia-cuda-crt", "13.0.88"},   {"nvidia-cuda-cupti", "13.0.85"},
    {"nvidia-cuda-nvrtc", "13.0.88"}, {"nvidia-cuda-runtime", "13.0.96"},
    {"nvidia-nvvm", "13.0.88"},       {"torch", "2.9.1"},
    {"flashinfer-python", "0.5.3"},   {"sglang", "0.5.6"}};

std::map<std::string, std::string> Set132() {
  return {{"nvidia-cuda-nvcc", "13.2.78"},
          {"nvidia-cuda-crt", "13.2.78"},
          {"nvidia-cuda-cupti", "13.2.75"},
          {"nvidia-cuda-nvrtc", "13.2.78"},
          {"nvidia-cuda-runtime", "13.2.75"},
          {"nvidia-nvvm", "13.2.78"},
          {"torch", "2.9.1"},
          {"flashinfer-python", "0.5.3"}};
}

ToolchainSnapshot SeedSnapshot() {
  ToolchainSnapshot s;
  s.set_cudart_header_version("13.0");
  s.set_include_dir(Cuda("/include"));
  s.set_nvvm_version("13.0");
  s.set_nvvm_dir(Cuda("/nvvm"));
  s.set_pip_cuda_dir(kCuda);
  s.set_cuda_root(kCuda);
  s.set_cuda_root_source("pip");
  s.set_venv(kVenv);
  s.set_site_packages(kSite);
  SetPackages(&s, kSet130);
  for (int i = 0; i < 8; ++i) {
    fleet::v1::Gpu* gpu = s.add_gpus();
    gpu->set_index(i);
    gpu->set_name("NVIDIA RTX PRO 6000 Blackwell Server Edition");
    gpu->set_compute_capability("12.0");
  }
  s.set_driver_version("595.45.04");
  s.set_driver_cuda_version("13.2");
  return s;
}

ServerSpec SeedSpec() {
  ServerSpec spec;
  spec.set_engine("sglang");
  for (const char* arg : {"/w/venv/bin/python", "-m", "sglang.launch_server", "--model-path",
                          "/w/models/tiny", "--port", "30000"}) {
    spec.add_argv(arg);
  }
  (*spec.mutable_env())["PATH"] = "/w/venv/bin:/w/bin";
  (*spec.mutable_env())["HOME"] = "/w/root";
  return spec;
}

ToolchainSnapshot FixedSnapshot() {
  ToolchainSnapshot s = SeedSnapshot();
  SetPackages(&s, Set132());
  s.set_cuda_home(kCuda);
  s.set_cuda_root_source("CUDA_HOME");
  s.mutable_nvcc()->set_path(Cuda("/bin/nvcc"));
  s.mutable_nvcc()->set_version("13.2");
  s.mutable_ptxas()->set_path(Cuda("/bin/ptxas"));
  s.mutable_ptxas()->set_version("13.2");
  s.set_ptx_isa_max("9.2");
  s.set_ptx_isa_source("ptxas");
  s.set_cudart_header_version("13.2");
  s.set_nvvm_version("13.2");
  s.mutable_ninja()->set_path("/w/bin/ninja");
  s.mutable_ninja()->set_version("1.11.1");
  s.set_libnvrtc_loadable(true);
  s.set_libnvrtc_path(Cuda("/lib/libnvrtc.so.13"));
  s.set_libcudart_loadable(true);
  s.set_libcudart_path(Cuda("/lib/libcudart.so.13"));
  s.set_cuda_lib64_present(true);
  s.set_libcuda_stub(Cuda("/lib64/stubs/libcuda.so"));
  s.set_libcudart_unversioned(Cuda("/lib64/libcudart.so"));
  return s;
}

ServerSpec FixedSpec() {
  ServerSpec spec = SeedSpec();
  (*spec.mutable_env())["PATH"] = Cuda("/bin") + ":/w/venv/bin:/w/bin";
  (*spec.mutable_env())["CUDA_HOME"] = kCuda;
  (*spec.mutable_env())["LD_LIBRARY_PATH"] = Cuda("/lib");
  return spec;
}

Policy AutoPolicy() {
  Policy p;
  p.set_name("default");
  p.set_remediation(Policy::AUTO);
  p.set_max_fixes_per_cause(3);
  p.set_canary(true);
  return p;
}

Diagnosis Diag(const std::string& cls, const std::map<std::string, std::string>& facts,
               const std::string& fix_kind) {
  Diagnosis d;
  d.set_diagnosis_class(cls);
  d.set_fix_kind(fix_kind);
  d.set_summary("summary of " + cls);
  d.set_root_cause_line(42);
  fleet::v1::EvidenceLine* line = d.add_evidence();
  line->set_line(42);
  line->set_text("the line that shows " + cls);
  for (const auto& [key, value] : facts) {
    fleet::v1::Fact* f = d.add_facts();
    f->set_key(key);
    f->add_values(value);
  }
  return d;
}

Diagnosis PtxDiag() {
  return Diag("ptx_version_unsupported", {{"ptx_wanted", "9.2"}, {"ptx_supported", "9.0"}});
}

}  // namespace fleet::daemon::plannertest
