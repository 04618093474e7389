// Agent bootstrap and upgrade: what fleetd does, over SSH to a Proxmox host and `pct` into one of
// its containers, so that the container runs the agent of fleetd's own version and it answers.
//
//   0. status   `pct status CTID` says running
//   1. version  `pct exec CTID -- /opt/gpu-fleet/bin/fleet-agent --version`; the same version as
//               fleetd's package and an agent that answers: done, nothing changed.
//   2. init     systemd in the container (`test -d /run/systemd/system`)?
//   3. stage    the binaries, the CA and the agent's certificate to the host, in a directory of
//               its own per container (kHostStageRoot/CTID, 0700, emptied first: a bootstrap
//               cut off mid-way leaves nothing the next one does not remove, even one that
//               finds the agent up to date: BootstrapSpec::remove_stale_stage), `dd of=FILE`
//               with the bytes on stdin; removed afterwards
//   4. push     `pct push --perms MODE` each into the container: binaries as NAME.new, then
//               renamed over the old ones (a running agent keeps its inode); the private key is
//               never staged on the host: `pct exec ... dd` writes it into a 0600 file in the
//               container
//   5. start    systemd: the unit gpu-fleet-agent.service written, enabled and restarted; no
//               systemd: `fleet-agent --detach --replace ...`, which stops the previous agent (its
//               servers keep running and are re-adopted) and returns once the new one serves
//   6. health   the agent answers over its channel (the caller's check), within a deadline
//
// Every command is an argv vector (RemoteQuote, PctExecArgv, PctPushArgv), never a shell string
// built from data. Idempotent: running it again on an up-to-date, healthy agent runs one command.
// A failed step is an error naming the host, the container and the step.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/ssh/remote_command.h"

namespace fleet::daemon {

// Where the agent lives inside a container.
inline constexpr char kRemoteAgentDir[] = "/opt/gpu-fleet/bin";
inline constexpr char kRemoteAgent[] = "/opt/gpu-fleet/bin/fleet-agent";
inline constexpr char kRemoteProbe[] = "/opt/gpu-fleet/bin/fleet-http-probe";
inline constexpr char kRemoteTlsDir[] = "/etc/gpu-fleet";
inline constexpr char kRemoteStateDir[] = "/var/lib/gpu-fleet-agent";
inline constexpr char kRemoteLog[] = "/var/log/gpu-fleet-agent.log";
inline constexpr char kRemotePidFile[] = "/run/gpu-fleet-agent.pid";
inline constexpr char kRemoteUnit[] = "/etc/systemd/system/gpu-fleet-agent.service";
// The host's staging directories (one per container below it), in the SSH user's home directory
// (where a command over SSH starts: `pwd`; root's is 0700).
inline constexpr char kHostStageRoot[] = ".gpu-fleet-bootstrap";

// What fleetd installs: its own build of the agent.
struct AgentPackage {
  std::string agent_binary;  // local path of fleet-agent
  std::string probe_binary;  // local path of fleet-http-probe
  std::string version;       // the first line `fleet-agent --version` prints
};

// The agent binaries next to fleetd (installed side by side) or in the build tree's agent/
// folder, and their version; FailedPrecondition naming where it looked.
absl::StatusOr<AgentPackage> FindAgentPackage(const std::string& fleetd_path,
                                              const std::string& agent_binary_flag);

struct BootstrapSpec {
  std::string host;  // the config's host name, for errors and the agent's events
  std::string ctid;
  std::string listen;  // the agent's --listen
  // Mutual TLS, installed into the container: the fleet CA, the agent's certificate and key
  // (local paths).
  std::string ca_file;
  std::string agent_cert_file;
  std::string agent_key_file;
  absl::Duration health_timeout = absl::Seconds(30);
  // A bootstrap before this one may have left its staging directory on the host (it was cut
  // off, its clean-up's connection was lost, or fleetd died): removed even when the agent is up
  // to date and nothing is staged (two more commands: `pwd`, `rm`).
  bool remove_stale_stage = false;
};

struct BootstrapResult {
  std::string previous_version;            // what the container ran ("" when none)
  bool pushed = false;                     // binaries installed
  bool started = false;                    // agent (re)started
  bool systemd = false;                    // started as a systemd unit (else detached)
  std::string stage_dir;                   // the host's staging directory (removed afterwards)
  bool stage_left = false;                 // its removal failed: it may still be on the host
  std::vector<std::string> steps;          // the steps that ran, in order
  std::vector<absl::Duration> step_times;  // how long each took (same order)
};

// OK when the agent answers over its channel, waiting up to `wait` for it to connect (zero: a
// call that fails fast; GrpcAgentClient::Answers).
using AgentHealthCheck = std::function<absl::Status(absl::Duration wait)>;

absl::StatusOr<BootstrapResult> EnsureAgent(CommandRunner& host, const AgentPackage& package,
                                            const BootstrapSpec& spec,
                                            const AgentHealthCheck& healthy);

// The agent's command line inside the container (its flags; without --detach).
std::vector<std::string> RemoteAgentArgv(const BootstrapSpec& spec);

}  // namespace fleet::daemon
