// SshSession: one authenticated SSH connection (libssh) to a Proxmox host, on which the daemon
// runs commands (`pct exec CTID -- ...`, `pct push ...`) with argv semantics (see
// remote_command.h). This is the only code that touches libssh; it owns every libssh handle
// (session, channels, keys, poll events) and frees each once.
//
// Host keys are checked against our own known_hosts file (options.known_hosts_path), never the
// user's ~/.ssh nor ssh_config: an unknown or changed key is refused with FailedPrecondition
// whose message shows the key's SHA256 fingerprint and what to do
// (`host pve1: ssh host key unknown (SHA256:...); run fleetctl hosts trust pve1`). ScanHostKey
// and TrustHost are the two steps of `fleetctl hosts trust HOST`: the first shows the key the
// host presents and how it stands against known_hosts, recording nothing; the second records
// it (only if it is the key the operator saw), replacing the host's old entry.
//
// Errors name the host and the step: `host pve1: ssh connect: ...` (Unavailable),
// `host pve1: ssh auth: permission denied (publickey)` (PermissionDenied), host key
// (FailedPrecondition), bad options or key file (InvalidArgument / NotFound), a command past
// its timeout (DeadlineExceeded). A session whose connection broke answers Unavailable from
// then on; the owner connects a new one.
//
// Thread-safe: libssh sessions are not, so calls are serialised by an internal mutex; a command
// holds the session until it ends. For parallel commands on one host, connect several sessions.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/ssh/remote_command.h"

// libssh's handle types, so that this header does not include libssh.
struct ssh_session_struct;

namespace fleet::daemon {

struct SshOptions {
  std::string host_name;  // the fleet config's name for the host ("pve1"): errors, trust hint
  std::string address;    // what to connect to: DNS name or IP address
  int port = 22;
  std::string user = "root";
  // Private key file (ed25519 or RSA, OpenSSH or PEM format, no passphrase). Empty: ask the
  // ssh-agent at agent_socket, or at $SSH_AUTH_SOCK when that is empty too.
  std::string identity_file;
  std::string agent_socket;
  std::string known_hosts_path;                        // required; TrustHost creates it
  absl::Duration connect_timeout = absl::Seconds(10);  // also bounds each protocol round trip
  absl::Duration command_timeout = absl::Minutes(5);   // Run's default
  // TCP keepalive on the connection (idle time and probe interval; dead after 3 probes), so a
  // host that vanished is noticed by a waiting command. Zero: off.
  absl::Duration keepalive_interval = absl::Seconds(30);
  size_t max_output_bytes = size_t{1} << 20;  // per stream and command; the last bytes are kept
  // Also enforce each command's timeout on the host, with coreutils `timeout -s KILL` around it
  // (a second past ours, so that ours fires first). Needed because OpenSSH ignores "signal"
  // requests on root logins (they get no post-auth privilege separation) and Proxmox is reached
  // as root: closing the channel alone leaves a command running that neither reads stdin nor
  // writes. Off for a host without `timeout` on its PATH.
  bool remote_deadline = true;
};

// A public host key: its type as known_hosts writes it ("ssh-ed25519", "ecdsa-sha2-nistp256")
// and its SHA256 fingerprint as `ssh-keygen -l` prints it ("SHA256:...").
struct HostKey {
  std::string type;
  std::string fingerprint;
};

// The key a host presents now, and how it stands against options.known_hosts_path.
struct HostKeyScan {
  enum class State {
    kNew,      // known_hosts holds no key for the host (or does not exist yet)
    kTrusted,  // it is the key recorded for the host: Connect accepts it
    kChanged,  // known_hosts holds another key for the host: Connect refuses it
  };
  HostKey key;
  State state = State::kNew;
  // The host's keys in known_hosts, as they were before this call (a TrustHost replaced them).
  std::vector<HostKey> recorded;
};

// "new", "trusted", "changed": the stable names of the states (fleet.proto, fleetctl's JSON).
std::string_view HostKeyStateName(HostKeyScan::State state);

class SshSession : public CommandRunner {
 public:
  // Connects, verifies the host key against options.known_hosts_path, and authenticates.
  static absl::StatusOr<std::unique_ptr<SshSession>> Connect(const SshOptions& options);

  // Connects (without authenticating) and reports the host key it is shown, and whether
  // known_hosts trusts it; records nothing. The first step of `fleetctl hosts trust HOST`.
  static absl::StatusOr<HostKeyScan> ScanHostKey(const SshOptions& options);

  // Connects (without authenticating), and records the host key it is shown in
  // options.known_hosts_path in place of any entry the host had there; returns that key, with
  // the state and entries known_hosts had before. With `expected_fingerprint` non-empty, records
  // the key only when it has that fingerprint (FailedPrecondition otherwise, nothing written):
  // the operator confirms the key they were shown (by ScanHostKey or in an error), out of band,
  // without a window for a different one.
  static absl::StatusOr<HostKeyScan> TrustHost(const SshOptions& options,
                                               std::string_view expected_fingerprint = "");

  // The keys options.known_hosts_path holds for the host (options.address and port, as
  // Connect looks them up), without connecting. None when the file does not exist.
  static absl::StatusOr<std::vector<HostKey>> RecordedHostKeys(const SshOptions& options);

  ~SshSession() override;
  SshSession(const SshSession&) = delete;
  SshSession& operator=(const SshSession&) = delete;

  // Runs argv (quoted by RemoteQuote) with `stdin_data` on its stdin. `timeout` <= 0 means
  // options.command_timeout. On timeout the channel is closed after a SIGKILL request (which
  // OpenSSH honours for non-root users only), the host's `timeout` kills the command a second
  // later (options.remote_deadline), and the session stays usable.
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                                    std::string_view stdin_data, absl::Duration timeout) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // The verified host key's fingerprint, "SHA256:...".
  const std::string& host_key_fingerprint() const { return fingerprint_; }
  // False once the connection is known to be broken.
  bool connected() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class SshTunnel;  // drives a session of its own (ssh_tunnel.h)
  struct SessionCloser {
    void operator()(ssh_session_struct* session) const;
  };
  using SessionPtr = std::unique_ptr<ssh_session_struct, SessionCloser>;

  SshSession(SshOptions options, SessionPtr session, std::string fingerprint);

  // A transport-level session to the host: options set, TCP and key exchange done.
  static absl::StatusOr<SessionPtr> OpenTransport(const SshOptions& options);
  // The key the session's host presented, against known_hosts: what Connect checks,
  // ScanHostKey shows and TrustHost records.
  static absl::StatusOr<HostKeyScan> ReadHostKey(ssh_session_struct* session,
                                                 const SshOptions& options);
  static absl::Status VerifyHostKey(const HostKeyScan& scan, const SshOptions& options);
  static absl::Status Authenticate(ssh_session_struct* session, const SshOptions& options);

  // Constant after construction.
  const SshOptions options_;
  const std::string fingerprint_;

  mutable absl::Mutex mu_;
  SessionPtr session_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fleet::daemon
