// sim-free-ports [N]: prints N consecutive TCP ports of 127.0.0.1 (base, base+1, ...), one a line,
// each free now and outside the kernel's ephemeral range (tests/sim/port_pick.h), so no port-0
// bind of a parallel test takes one before a server binds it. For scripts (deploy/demo.sh, the
// fault matrix, the benchmarks) that start servers on base_port + gpu and cannot bind a socket
// themselves.
#include <cstdio>

#include "absl/strings/numbers.h"
#include "tests/sim/port_pick.h"

int main(int argc, char** argv) {
  int count = 1;
  if (argc > 2 ||
      (argc == 2 && (!absl::SimpleAtoi(argv[1], &count) || count < 1 || count > 1000))) {
    std::fputs("usage: sim-free-ports [N]   (1 <= N <= 1000)\n", stderr);
    return 2;
  }
  const absl::StatusOr<int> base = fleet::sim::ConsecutiveFreePorts(count);
  if (!base.ok()) {
    std::fprintf(stderr, "sim-free-ports: %s\n", base.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < count; ++i) std::printf("%d\n", *base + i);
  return 0;
}
