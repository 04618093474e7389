// Ports for simulated servers that a parallel test cannot take: `count` consecutive TCP ports of
// 127.0.0.1, each bound once to prove it free, picked below the kernel's ephemeral range (read
// from /proc/sys/net/ipv4/ip_local_port_range) so that no port-0 bind of another test or
// connection lands on one between the pick and the server's own bind. Shared by sim-free-ports
// (for scripts) and the C++ tests.
#pragma once

#include "absl/status/statusor.h"

namespace fleet::sim {

// The first of `count` (1..1000) consecutive free ports outside the ephemeral range.
absl::StatusOr<int> ConsecutiveFreePorts(int count);

}  // namespace fleet::sim
