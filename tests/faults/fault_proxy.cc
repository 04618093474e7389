// fault-proxy: the "network" between fleetd and a simulated container in the fault matrix
// (tests/faults/run.sh): a unix-socket relay, LISTEN_PATH to TARGET_PATH, byte for byte, every
// connection its own pair. The harness partitions the link by stopping this process (SIGSTOP):
// connections stay open and bytes stop, as with a dropped route; SIGCONT heals it and what was
// buffered flows on, as TCP would after retransmission.
//
//   fault-proxy LISTEN_PATH TARGET_PATH
//
// One thread, poll(2) over every socket; a side that closes or fails closes its pair. Exits on
// SIGTERM/SIGINT (default action). Test tool: no product code uses it.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool Address(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

struct Pair {
  int a = -1;  // accepted from the listener (fleetd's side)
  int b = -1;  // connected to the target (the agent's side)
};

// Moves what `from` has to `to`; false when the pair is done.
bool Relay(int from, int to) {
  char buffer[65536];
  const ssize_t n = read(from, buffer, sizeof(buffer));
  if (n <= 0) return n < 0 && (errno == EINTR || errno == EAGAIN);
  for (ssize_t off = 0; off < n;) {
    const ssize_t w = write(to, buffer + off, static_cast<size_t>(n - off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += w;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fault-proxy LISTEN_PATH TARGET_PATH\n");
    return 2;
  }
  sockaddr_un listen_addr, target_addr;
  if (!Address(argv[1], &listen_addr) || !Address(argv[2], &target_addr)) {
    std::fprintf(stderr, "fault-proxy: socket path too long\n");
    return 2;
  }
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  unlink(argv[1]);
  if (listener < 0 ||
      bind(listener, reinterpret_cast<sockaddr*>(&listen_addr), sizeof(listen_addr)) != 0 ||
      listen(listener, 64) != 0) {
    std::fprintf(stderr, "fault-proxy: listen on %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  std::vector<Pair> pairs;
  while (true) {
    std::vector<pollfd> fds = {{listener, POLLIN, 0}};
    for (const Pair& p : pairs) {
      fds.push_back({p.a, POLLIN, 0});
      fds.push_back({p.b, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "fault-proxy: poll: %s\n", std::strerror(errno));
      return 1;
    }
    std::vector<Pair> kept;
    for (size_t i = 0; i < pairs.size(); ++i) {
      const pollfd& fa = fds[1 + 2 * i];
      const pollfd& fb = fds[2 + 2 * i];
      bool open = true;
      if (open && (fa.revents & (POLLIN | POLLHUP | POLLERR))) open = Relay(pairs[i].a, pairs[i].b);
      if (open && (fb.revents & (POLLIN | POLLHUP | POLLERR))) open = Relay(pairs[i].b, pairs[i].a);
      if (open) {
        kept.push_back(pairs[i]);
      } else {
        close(pairs[i].a);
        close(pairs[i].b);
      }
    }
    pairs.swap(kept);
    if (fds[0].revents & POLLIN) {
      const int a = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (a < 0) continue;
      const int b = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (b < 0 ||
          connect(b, reinterpret_cast<sockaddr*>(&target_addr), sizeof(target_addr)) != 0) {
        // The agent is not there (restarting): the caller sees the connection closed.
        close(a);
        if (b >= 0) close(b);
        continue;
      }
      pairs.push_back({a, b});
    }
  }
}
