// Eventually: re-checks a condition until it holds or a deadline passes, for what has no event to
// wait on (a row in fleetd's status, a process gone, a Prometheus answer that changes at its
// scrapes). Not a sleep as synchronisation: the test goes on the moment the condition holds, and
// fails when it never does.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace fleet::testing {

inline bool Eventually(const std::function<bool()>& holds, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds interval = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!holds()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);
  }
  return true;
}

}  // namespace fleet::testing
