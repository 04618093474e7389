// sim-free-ports N: prints N distinct TCP ports of 127.0.0.1 that are free now, one a line. Each
// comes from binding port 0 (the kernel picks), all held until every one is read back so they
// differ, then released. For scripts (deploy/demo.sh) that start servers on ports found at run
// time and cannot bind a socket themselves.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"

int main(int argc, char** argv) {
  int count = 1;
  if (argc > 2 ||
      (argc == 2 && (!absl::SimpleAtoi(argv[1], &count) || count < 1 || count > 1000))) {
    std::fprintf(stderr, "usage: sim-free-ports [N]   (1 <= N <= 1000)\n");
    return 2;
  }
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::fprintf(stderr, "sim-free-ports: %s\n", std::strerror(errno));
      return 1;
    }
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  for (int port : ports) std::printf("%d\n", port);
  return 0;
}
