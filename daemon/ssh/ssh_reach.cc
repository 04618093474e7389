#include "daemon/ssh/ssh_reach.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/config/config_duration.h"
#include "common/config/fleet_config.h"

namespace fleet::daemon {
namespace {

constexpr char kSha256Prefix[] = "SHA256:";
// A SHA-256 digest in base64 without its padding, as OpenSSH and libssh print it.
constexpr size_t kSha256Base64Length = 43;

bool IsSsh(const fleet::v1::Host& host) { return host.reach().kind() == fleet::v1::Reach::SSH; }

absl::Status CheckFingerprint(std::string_view fingerprint) {
  absl::string_view digest(fingerprint.data(), fingerprint.size());
  bool ok = absl::ConsumePrefix(&digest, kSha256Prefix) && digest.size() == kSha256Base64Length;
  for (char c : digest) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "fingerprint '", std::string(fingerprint), "' is not a SHA256 fingerprint (SHA256: and ",
      kSha256Base64Length, " base64 characters, as fleetctl hosts trust HOST shows it)"));
}

// "address:port", with an IPv6 literal in brackets.
std::string AddressPort(const SshOptions& options) {
  const bool v6 = absl::StrContains(options.address, ':');
  return absl::StrCat(v6 ? "[" : "", options.address, v6 ? "]" : "", ":", options.port);
}

void AddKeys(const std::vector<HostKey>& keys,
             google::protobuf::RepeatedPtrField<fleet::v1::SshHostKey>* out) {
  for (const HostKey& key : keys) {
    fleet::v1::SshHostKey* k = out->Add();
    k->set_key_type(key.type);
    k->set_fingerprint(key.fingerprint);
  }
}

}  // namespace

SshOptions SshOptionsForHost(const fleet::v1::Host& host, const std::string& state_dir) {
  const fleet::v1::Reach& reach = host.reach();
  SshOptions options;
  options.host_name = host.name();
  if (!IsSsh(host)) return options;
  options.address = reach.address();
  options.port = reach.port() > 0 ? reach.port() : config::kDefaultSshPort;
  options.user = reach.user().empty() ? std::string(config::kDefaultSshUser) : reach.user();
  options.identity_file = reach.identity_file();
  options.known_hosts_path = reach.known_hosts().empty()
                                 ? absl::StrCat(state_dir, "/", kKnownHostsFileName)
                                 : reach.known_hosts();
  const absl::Duration timeout = reach.has_connect_timeout()
                                     ? config::FromProtoDuration(reach.connect_timeout())
                                     : absl::ZeroDuration();
  options.connect_timeout = timeout > absl::ZeroDuration() ? timeout : kDefaultSshConnectTimeout;
  return options;
}

absl::StatusOr<fleet::v1::Host> FindSshHost(const fleet::v1::FleetConfig& config,
                                            std::string_view name) {
  std::vector<std::string> names;
  for (const fleet::v1::Host& host : config.hosts()) {
    if (host.name() != name) {
      names.push_back(host.name());
      continue;
    }
    if (!IsSsh(host)) {
      return absl::FailedPreconditionError(
          absl::StrCat("host ", host.name(),
                       ": reached locally (reach kind local), it has no ssh host key to trust"));
    }
    return host;
  }
  return absl::NotFoundError(
      absl::StrCat("host ", std::string(name), ": not in fleetd's config",
                   names.empty() ? " (it has no hosts: deploy one with fleetctl deploy -f FILE)"
                                 : absl::StrCat(" (its hosts: ", absl::StrJoin(names, ", "), ")")));
}

absl::StatusOr<fleet::v1::TrustHostResponse> TrustConfiguredHost(
    const fleet::v1::FleetConfig& config, const std::string& state_dir,
    const fleet::v1::TrustHostRequest& request) {
  if (request.host().empty()) return absl::InvalidArgumentError("no host given");
  if (!request.fingerprint().empty())
    FLEET_RETURN_IF_ERROR(CheckFingerprint(request.fingerprint()));
  FLEET_ASSIGN_OR_RETURN(const fleet::v1::Host host, FindSshHost(config, request.host()));
  const SshOptions options = SshOptionsForHost(host, state_dir);
  const bool record = !request.fingerprint().empty();
  FLEET_ASSIGN_OR_RETURN(const HostKeyScan scan,
                         record ? SshSession::TrustHost(options, request.fingerprint())
                                : SshSession::ScanHostKey(options));
  fleet::v1::TrustHostResponse response;
  response.set_host(host.name());
  response.set_address(AddressPort(options));
  response.set_known_hosts(options.known_hosts_path);
  response.set_key_type(scan.key.type);
  response.set_fingerprint(scan.key.fingerprint);
  response.set_key_state(std::string(HostKeyStateName(scan.state)));
  response.set_recorded(record);
  AddKeys(scan.recorded, response.mutable_previous_keys());
  return response;
}

fleet::v1::ListHostsResponse ListConfiguredHosts(const fleet::v1::FleetConfig& config,
                                                 const std::string& state_dir) {
  fleet::v1::ListHostsResponse response;
  for (const fleet::v1::Host& host : config.hosts()) {
    fleet::v1::HostRow* row = response.add_hosts();
    row->set_name(host.name());
    row->set_containers(host.containers_size());
    if (!IsSsh(host)) {
      row->set_reach("local");
      continue;
    }
    const SshOptions options = SshOptionsForHost(host, state_dir);
    row->set_reach("ssh");
    row->set_address(options.address);
    row->set_port(options.port);
    row->set_user(options.user);
    row->set_identity_file(options.identity_file);
    row->set_known_hosts(options.known_hosts_path);
    absl::StatusOr<std::vector<HostKey>> keys = SshSession::RecordedHostKeys(options);
    if (keys.ok()) {
      AddKeys(*keys, row->mutable_host_keys());
    } else {
      row->set_host_keys_error(std::string(keys.status().message()));
    }
  }
  return response;
}

}  // namespace fleet::daemon
