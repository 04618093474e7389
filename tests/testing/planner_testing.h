// Planner test data: a container laid out like tests/sim's world (make_sim_world.sh), what the
// probe sees of it in the seed and fixed states, its server spec, and diagnoses. Shared by the
// planner's tests and the daemon's remediation tests.
#pragma once

#include <map>
#include <string>

#include "proto/agent.pb.h"
#include "proto/config.pb.h"
#include "proto/diagnosis.pb.h"

namespace fleet::daemon::plannertest {

inline constexpr char kVenv[] = "/w/venv";
inline constexpr char kSite[] = "/w/venv/lib/python3.12/site-packages";
inline constexpr char kCuda[] = "/w/venv/lib/python3.12/site-packages/nvidia/cu13";
inline constexpr char kLibcuda[] = "/w/usr/lib/x86_64-linux-gnu/libcuda.so.1";

std::string Cuda(const std::string& rest);
void SetPackages(fleet::v1::ToolchainSnapshot* s,
                 const std::map<std::string, std::string>& packages);
extern const std::map<std::string, std::string> kSet130;
std::map<std::string, std::string> Set132();
// What the probe sees in the seed state (agent/toolchain_probe_test.cc's seed expectations).
fleet::v1::ToolchainSnapshot SeedSnapshot();
fleet::v1::ServerSpec SeedSpec();
// The fixed state: CUDA 13.2 throughout, ninja, the link layout, and an env that uses them.
fleet::v1::ToolchainSnapshot FixedSnapshot();
fleet::v1::ServerSpec FixedSpec();
fleet::v1::Policy AutoPolicy();
fleet::v1::Diagnosis Diag(const std::string& cls,
                          const std::map<std::string, std::string>& facts = {},
                          const std::string& fix_kind = "");
fleet::v1::Diagnosis PtxDiag();

}  // namespace fleet::daemon::plannertest
