// TlsFiles: the mutual-TLS material of one end of a connection, read from its three PEM files
// (made by `fleetctl certs init`): its own certificate and key, and the CA the other end's
// certificate must be signed by. fleetd's --listen and fleetctl's --server both read theirs here,
// so a missing or unreadable file is said the same way, naming the flag that gave it.
//
// Plain functions of files; no state, safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fleet::net {

struct TlsFiles {
  std::string cert_file, key_file, ca_file;

  // How many of the three are given (not empty): 0 or 3 make sense, 1 and 2 are a usage error.
  int given() const { return !cert_file.empty() + !key_file.empty() + !ca_file.empty(); }
};

struct TlsPem {
  std::string cert_pem, key_pem, ca_pem;
};

// Reads the three files. `flag_prefix` names the flags in messages ("--listen-" gives
// "--listen-cert FILE: cannot be read (no such file, no access, or empty)"). InvalidArgument when
// not all three are given or one cannot be read.
absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files, const std::string& flag_prefix);

}  // namespace fleet::net
