#include "daemon/ssh/ssh_tunnel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libssh/libssh.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"

namespace fleet::daemon {

// One forwarded connection: the socket gRPC opened to the listener and its SSH channel.
struct SshTunnel::Connection {
  int fd = -1;
  ssh_channel channel = nullptr;
  bool local_eof = false;   // the socket was read to its end; EOF sent on the channel
  bool remote_eof = false;  // the channel ended; the socket's write side shut down
  ~Connection() {
    if (channel != nullptr) {
      ssh_channel_close(channel);
      ssh_channel_free(channel);
    }
    if (fd >= 0) close(fd);
  }
};

namespace {

// Writes all of `data` to a blocking socket. False when the peer is gone.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SshTunnel>> SshTunnel::Open(const SshOptions& options,
                                                           std::string remote_host,
                                                           int remote_port) {
  auto ssh = SshSession::Connect(options);
  if (!ssh.ok()) return ssh.status();
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "ssh tunnel: socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    close(fd);
    return ErrnoToStatus(e, "ssh tunnel: listen on 127.0.0.1");
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int e = errno;
    close(fd);
    return ErrnoToStatus(e, "ssh tunnel: pipe");
  }
  return std::unique_ptr<SshTunnel>(new SshTunnel(*std::move(ssh), fd, ntohs(addr.sin_port),
                                                  wake[0], wake[1], std::move(remote_host),
                                                  remote_port));
}

SshTunnel::SshTunnel(std::unique_ptr<SshSession> ssh, int listen_fd, int local_port, int wake_read,
                     int wake_write, std::string remote_host, int remote_port)
    : ssh_(std::move(ssh)),
      listen_fd_(listen_fd),
      local_port_(local_port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      remote_host_(std::move(remote_host)),
      remote_port_(remote_port) {
  thread_ = std::thread([this] { Loop(); });
}

SshTunnel::~SshTunnel() {
  stopping_ = true;
  const char byte = 0;
  if (write(wake_write_, &byte, 1) < 0) {
    // The pipe is full: the loop is awake already.
  }
  thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

std::string SshTunnel::target() const { return absl::StrCat("127.0.0.1:", local_port_); }

void SshTunnel::Loop() {
  // The session is this tunnel's alone: held for the loop's life.
  absl::MutexLock lock(&ssh_->mu_);
  ssh_session session = ssh_->session_.get();
  std::list<Connection> connections;
  std::vector<char> buffer(64 * 1024);
  bool pending = false;  // a channel may hold data libssh has read already: poll without waiting
  while (!stopping_) {
    std::vector<pollfd> fds;
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({ssh_get_fd(session), POLLIN, 0});
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.local_eof ? 0 : POLLIN), 0});
    }
    // A second bounds the wait so that libssh's keepalive and a broken connection are noticed.
    if (poll(fds.data(), fds.size(), pending ? 0 : 1000) < 0 && errno != EINTR) break;
    if (stopping_) break;
    if (fds[1].revents & POLLIN) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (fd >= 0) {
        Connection& c = connections.emplace_back();
        c.fd = fd;
        c.channel = ssh_channel_new(session);
        if (c.channel == nullptr ||
            ssh_channel_open_forward(c.channel, remote_host_.c_str(), remote_port_, "127.0.0.1",
                                     ntohs(peer.sin_port)) != SSH_OK) {
          // The host could not connect there (agent down, forwarding refused): gRPC sees the
          // connection close and retries with its backoff.
          if (c.channel != nullptr) ssh_channel_free(c.channel);
          c.channel = nullptr;
          connections.pop_back();
        } else {
          ++forwarded_;
        }
      }
    }
    // Socket to channel.
    size_t i = 3;
    for (Connection& c : connections) {
      const short revents = fds.size() > i ? fds[i].revents : 0;
      ++i;
      if (c.local_eof || !(revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = recv(c.fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n > 0) {
        if (ssh_channel_write(c.channel, buffer.data(), static_cast<uint32_t>(n)) != n) {
          c.local_eof = c.remote_eof = true;  // the channel failed: drop the connection
        }
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        c.local_eof = true;
        ssh_channel_send_eof(c.channel);
      }
    }
    // Channel to socket: everything libssh has, or can read without waiting.
    pending = false;
    for (Connection& c : connections) {
      if (c.remote_eof) continue;
      int n;
      while ((n = ssh_channel_read_nonblocking(c.channel, buffer.data(),
                                               static_cast<uint32_t>(buffer.size()), 0)) > 0) {
        if (!WriteAll(c.fd, buffer.data(), static_cast<size_t>(n))) {
          c.local_eof = c.remote_eof = true;
          break;
        }
      }
      if (n == SSH_ERROR || ssh_channel_is_eof(c.channel) || ssh_channel_is_closed(c.channel)) {
        c.remote_eof = true;
        shutdown(c.fd, SHUT_WR);
      } else if (ssh_channel_poll(c.channel, 0) > 0) {
        pending = true;
      }
    }
    connections.remove_if([](const Connection& c) { return c.local_eof && c.remote_eof; });
    if (!ssh_is_connected(session)) break;
  }
  broken_ = true;
  connections.clear();
}

}  // namespace fleet::daemon
