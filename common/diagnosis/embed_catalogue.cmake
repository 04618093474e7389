# Writes OUTPUT, a C++ source defining BuiltinSignatureCatalogue() from INPUT's text.
file(READ "${INPUT}" text)
string(FIND "${text}" ")fleetcatalogue\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter")
endif()
file(WRITE "${OUTPUT}.tmp"
"// Generated from common/diagnosis/signatures.conf; do not edit.
#include \"common/diagnosis/signature_catalogue.h\"

namespace fleet::diagnosis {
std::string_view BuiltinSignatureCatalogue() {
  static constexpr char kText[] = R\"fleetcatalogue(${text})fleetcatalogue\";
  return std::string_view(kText, sizeof(kText) - 1);
}
}  // namespace fleet::diagnosis
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
