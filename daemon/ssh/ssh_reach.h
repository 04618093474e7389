// SSH reach of a configured host: the one translation from a fleet config Host (reach kind ssh)
// to the SshOptions the SSH layer connects with, and what `fleetctl hosts` and `fleetctl hosts
// trust HOST` do with it. The SSH transport and the trust verbs take their options from here, so
// they see the same address, port, user, identity and known_hosts file.
//
// Defaults (docs/config.md, Reach): port 22, user root, known_hosts STATE_DIR/known_hosts, connect
// timeout 10 s; no identity file means the ssh-agent. Pure functions, except where they say they
// connect or read known_hosts; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/ssh/ssh_session.h"
#include "proto/config.pb.h"
#include "proto/fleet.pb.h"

namespace fleet::daemon {

inline constexpr char kKnownHostsFileName[] = "known_hosts";
inline constexpr absl::Duration kDefaultSshConnectTimeout = absl::Seconds(10);

// The options that reach `host` over ssh: host_name its name, address, port, user, identity file
// and known_hosts from its reach with the defaults above (known_hosts: `state_dir`/known_hosts),
// connect timeout from the config when set; the other fields keep SshOptions' defaults. For a
// host that is not reached over ssh the address is empty (and Connect refuses the options).
SshOptions SshOptionsForHost(const fleet::v1::Host& host, const std::string& state_dir);

// The host `name` of `config`, reached over ssh. NotFound when the config has no such host
// (the message lists those it has), FailedPrecondition when it is reached locally.
absl::StatusOr<fleet::v1::Host> FindSshHost(const fleet::v1::FleetConfig& config,
                                            std::string_view name);

// `fleetctl hosts trust HOST [--fingerprint FP]`, fleetd's side. Connects to the host (blocks for
// up to about twice its connect timeout) and, without a fingerprint, shows its key and how it
// stands against known_hosts, recording nothing; with one, records the key only if the host shows
// that key (SshSession::TrustHost). InvalidArgument for a request without a host or with a
// malformed fingerprint, FindSshHost's errors, then the SSH layer's (host unreachable:
// Unavailable; another key than the one given: FailedPrecondition).
absl::StatusOr<fleet::v1::TrustHostResponse> TrustConfiguredHost(
    const fleet::v1::FleetConfig& config, const std::string& state_dir,
    const fleet::v1::TrustHostRequest& request);

// `fleetctl hosts`: every host of `config` in its order, its ssh options resolved, and for an
// ssh host the keys its known_hosts file holds for it (read from the file: no connection).
fleet::v1::ListHostsResponse ListConfiguredHosts(const fleet::v1::FleetConfig& config,
                                                 const std::string& state_dir);

}  // namespace fleet::daemon
