// TestCompile: the probe's last step. With exactly the toolchain a server would use (the nvcc, the
// include dir, the CUDA root and the environment the probe resolved; the JIT caches untouched), it
// builds a small kernel the way flashinfer's JIT builds its ops: nvcc compiles it for the GPUs'
// arch with the toolkit's headers and flashinfer's bundled ones (CCCL) on the include path, which
// runs ptxas on the PTX nvcc emits; then the host compiler links it the way torch's cpp_extension
// links (`-L<root>/lib64/stubs -lcuda -L<root>/lib64 -lcudart`). In a temp dir of the agent's,
// each step bounded in time, nothing run on a GPU. The transcript is written in ninja's shape and
// classified like any server log, so the same classes come out (ptx_version_unsupported,
// cuda_header_mismatch, link_error, unsupported_gpu_arch, ...), with their facts (ptx_wanted). A
// step killed (its bound, a signal) is not classified: it says nothing about the toolchain.
//
// Thread-safe when its CommandRunner is.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/command_runner.h"
#include "proto/agent.pb.h"

namespace fleet::agent {

struct TestCompileOptions {
  absl::Duration step_timeout = absl::Minutes(2);  // each of compile and link
  size_t max_log_bytes = 16 << 10;    // the tail: kept in every plan's before and after
  std::string tmp_root;               // where the temp dir goes; empty: $TMPDIR, else /tmp
  std::string host_compiler = "c++";  // torch's cpp_extension links with c++ from PATH
};

// The -gencode targets for GPUs of these compute capabilities ("12.0" → "sm_120a"): the
// arch-specific form flashinfer's JIT asks for on SM 9.0 and newer, the plain one before; and on
// SM 10.0 and newer the family form too ("sm_120f") when the nvcc's release (`nvcc_release`,
// "13.0") knows it (12.9 and later); each once. Entries that are not "MAJOR.MINOR" are skipped.
std::vector<std::string> GencodeTargets(const std::vector<std::string>& compute_capabilities,
                                        const std::string& nvcc_release = "");

// The test-compile with the toolchain `snapshot` resolved (its nvcc, include_dir, cuda_root,
// site_packages and gpus: give it the server's GPUs only) and the server's environment `env`
// (its CXX links, as torch's; TMPDIR is the private dir). Not run (ran false, `skipped`
// says why) without an nvcc or a GPU arch.
fleet::v1::TestCompile RunTestCompile(CommandRunner* runner,
                                      const fleet::v1::ToolchainSnapshot& snapshot,
                                      const std::map<std::string, std::string>& env,
                                      const TestCompileOptions& options = {});

}  // namespace fleet::agent
