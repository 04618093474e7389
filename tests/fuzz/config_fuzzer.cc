// libFuzzer target for the fleet config reader (common/config: yaml-cpp, the YAML-to-proto walk,
// the defaults and the checks): a config comes from `fleetctl deploy -f`, from `fleetd --config`
// and, stored, back from fleet.db. For each input: ParseFleetConfig must return a config or an
// error, never crash, recurse without bound or take unbounded time or memory (the size, depth
// and alias limits of yaml_message_reader.h); an error is InvalidArgument with a message; a
// config that loads passes ValidateFleetConfig again and loads again from its own defaults
// (ApplyConfigDefaults is idempotent).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "common/config/fleet_config.h"
#include "google/protobuf/util/message_differencer.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "invariant broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<fleet::v1::FleetConfig> config =
      fleet::config::ParseFleetConfig(yaml, "fuzz.yaml");
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument &&
        config.status().code() != absl::StatusCode::kFailedPrecondition) {
      Fail("an error that is not InvalidArgument", config.status().ToString());
    }
    if (config.status().message().empty()) Fail("an error without a message", "");
    return 0;
  }
  if (absl::Status s = fleet::config::ValidateFleetConfig(*config); !s.ok()) {
    Fail("a loaded config does not validate", s.ToString());
  }
  fleet::v1::FleetConfig again = *config;
  fleet::config::ApplyConfigDefaults(&again);
  if (!google::protobuf::util::MessageDifferencer::Equals(again, *config)) {
    Fail("defaults applied twice differ", again.DebugString());
  }
  return 0;
}
