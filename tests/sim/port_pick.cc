#include "tests/sim/port_pick.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fleet::sim {
namespace {

// The kernel's ephemeral range; Linux's default when the file cannot be read.
std::pair<int, int> EphemeralRange() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  if (in >> low >> high && low > 0 && high >= low && high < 65536) return {low, high};
  return {32768, 60999};
}

// True when every port of [base, base + count) binds on 127.0.0.1 now.
bool AllBind(int base, int count) {
  std::vector<int> fds;
  bool all = true;
  for (int i = 0; i < count && all; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(base + i));
    all = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  for (int fd : fds) close(fd);
  return all;
}

}  // namespace

absl::StatusOr<int> ConsecutiveFreePorts(int count) {
  if (count < 1 || count > 1000) return absl::InvalidArgumentError("count must be 1..1000");
  const auto [low, high] = EphemeralRange();
  // Ports 10000 and up below the range, else above it (a range that starts low).
  int first = 10000;
  int last = low - count;
  if (last - first < 10 * count) {
    first = high + 1;
    last = 65536 - count;
  }
  if (last - first < count) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no room outside the ephemeral range ", low, "-", high));
  }
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(first, last);
  for (int tries = 0; tries < 200; ++tries) {
    const int base = pick(random);
    if (AllBind(base, count)) return base;
  }
  return absl::ResourceExhaustedError(absl::StrCat("no ", count, " consecutive free ports"));
}

}  // namespace fleet::sim
