// Test data shared by fleetctl's test files (cli/*_test.cc), defined once: those files are
// compiled together in a unity build (FLEET_UNITY), where two definitions of one name collide.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/command_context.h"
#include "cli/explain_command.h"

namespace fleet::cli::testing {

// The tests' "now": 2027-01-15T08:00:00Z, FakeFleetEnv's clock too.
inline const absl::Time kNow = absl::FromUnixSeconds(1800000000);

// A flashinfer op name as long as the real ones (about 180 characters): the PHASE column's worst.
inline constexpr char kFlashinferOp[] =
    "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_"
    "qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm120";

// `fleetctl explain` with a context: RunExplain has two overloads, FakeFleetEnv::Run takes one
// function.
inline int Explain(const std::vector<std::string>& args, const CommandContext& ctx) {
  return RunExplain(args, ctx);
}

}  // namespace fleet::cli::testing
