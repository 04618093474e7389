#include "daemon/bounded_stop.h"

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"

namespace fleet::daemon {

bool StopWithin(absl::Duration timeout, std::function<void()> stop) {
  // Shared with the thread: it may outlive this call (when the stop does not end in time).
  auto done = std::make_shared<absl::Notification>();
  std::thread stopper([done, stop = std::move(stop)] {
    stop();
    done->Notify();
  });
  if (!done->WaitForNotificationWithTimeout(timeout)) {
    stopper.detach();
    return false;
  }
  stopper.join();
  return true;
}

}  // namespace fleet::daemon
