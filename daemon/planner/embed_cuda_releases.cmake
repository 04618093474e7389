# Writes OUTPUT, a C++ source defining BuiltinCudaReleaseText() from INPUT's text
# (daemon/planner/cuda_releases.conf), as common/diagnosis/embed_catalogue.cmake does for the signatures.
file(READ "${INPUT}" text)
string(FIND "${text}" ")fleetreleases\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter")
endif()
file(WRITE "${OUTPUT}.tmp"
"// Generated from daemon/planner/cuda_releases.conf; do not edit.
#include \"daemon/planner/cuda_releases.h\"

namespace fleet::daemon {
std::string_view BuiltinCudaReleaseText() {
  static constexpr char kText[] = R\"fleetreleases(${text})fleetreleases\";
  return std::string_view(kText, sizeof(kText) - 1);
}
}  // namespace fleet::daemon
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
