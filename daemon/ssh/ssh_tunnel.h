// SshTunnel: the `ssh_tunnel` channel to an agent. A listener on 127.0.0.1 (a port of its own)
// in fleetd; each connection accepted there is carried to `remote_host:remote_port`, as the SSH
// host sees it, over a direct-tcpip channel of one SSH connection to the host (what `ssh -L`
// does). gRPC dials the listener; TLS runs inside, end to end between fleetd and the agent, so
// the host relays bytes it cannot read.
//
// The tunnel owns its SSH connection (a session of its own, not the one commands run on: a
// command waiting for minutes must not stall the agent's stream) and one thread that moves the
// bytes of every connection. When the SSH connection breaks, every connection through it is
// closed and broken() turns true: the owner opens a new tunnel.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/ssh/ssh_session.h"

namespace fleet::daemon {

class SshTunnel {
 public:
  // Connects to the host (host key checked, authenticated, as SshSession::Connect) and listens.
  static absl::StatusOr<std::unique_ptr<SshTunnel>> Open(const SshOptions& options,
                                                         std::string remote_host, int remote_port);
  ~SshTunnel();
  SshTunnel(const SshTunnel&) = delete;
  SshTunnel& operator=(const SshTunnel&) = delete;

  // The listener's port on 127.0.0.1.
  int local_port() const { return local_port_; }
  // "127.0.0.1:PORT": a gRPC target.
  std::string target() const;
  // True once the SSH connection is gone (every tunnelled connection was closed).
  bool broken() const { return broken_.load(); }
  // Connections forwarded so far (accepted and given a channel).
  int64_t forwarded() const { return forwarded_.load(); }

 private:
  struct Connection;
  SshTunnel(std::unique_ptr<SshSession> ssh, int listen_fd, int local_port, int wake_read,
            int wake_write, std::string remote_host, int remote_port);
  void Loop();

  const std::unique_ptr<SshSession> ssh_;
  const int listen_fd_;
  const int local_port_;
  const int wake_read_;
  const int wake_write_;
  const std::string remote_host_;
  const int remote_port_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> broken_{false};
  std::atomic<int64_t> forwarded_{0};
  std::thread thread_;
};

}  // namespace fleet::daemon
