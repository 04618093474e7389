#include "common/net/tls_files.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace fleet::net {

absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files, const std::string& flag_prefix) {
  if (files.given() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(flag_prefix, "cert, ", flag_prefix, "key and ",
                                                   flag_prefix,
                                                   "ca come together: give all three"));
  }
  TlsPem pem;
  const struct {
    const char* flag;
    const std::string* path;
    std::string* text;
  } parts[] = {{"cert", &files.cert_file, &pem.cert_pem},
               {"key", &files.key_file, &pem.key_pem},
               {"ca", &files.ca_file, &pem.ca_pem}};
  for (const auto& part : parts) {
    std::ifstream f(*part.path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.is_open() || f.bad() || text.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag_prefix, part.flag, " ", *part.path,
                       ": cannot be read (no such file, no access, or empty)"));
    }
    *part.text = std::move(text);
  }
  return pem;
}

}  // namespace fleet::net
