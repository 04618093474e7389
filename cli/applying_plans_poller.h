// ApplyingPlansPoller: for `status --watch` on a terminal, the plan each container is applying
// (what it installs, since when), so the rows that wait on it can say so. Status rows carry only
// "remediating: CLASS"; the plan's summary comes from ListRemediations, asked for the containers
// the drawer names (Want), at most once per `interval` per container and at most kMaxPerRound
// containers a round, on the poller's own thread: a slow fleetd delays the remediation line, never
// a redraw. A failed call keeps what was known and is tried again after `interval`.
//
// Thread-safe: the drawer calls Want and Snapshot while the thread runs Step.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cli/status_format.h"
#include "common/base/clock.h"
#include "proto/fleet.pb.h"

namespace fleet::cli {

class ApplyingPlansPoller {
 public:
  // Containers fetched in one round; the others wait for the next.
  static constexpr size_t kMaxPerRound = 8;

  // ListRemediations for one container ("host/ctid").
  using Fetch =
      std::function<absl::StatusOr<v1::ListRemediationsResponse>(const std::string& container)>;

  ApplyingPlansPoller(Fetch fetch, const Clock* clock, absl::Duration interval);
  // Stops and joins the thread (an answer in flight is waited for: one call's deadline at most).
  ~ApplyingPlansPoller();
  ApplyingPlansPoller(const ApplyingPlansPoller&) = delete;
  ApplyingPlansPoller& operator=(const ApplyingPlansPoller&) = delete;

  // Runs Step on a thread: at once when Want names a container not fetched yet, else every
  // `interval`.
  void Start();

  // The containers to follow now; plans of the others are forgotten.
  void Want(std::set<std::string> containers);
  // The applying plan of each followed container that has one, as last fetched.
  ApplyingPlans Snapshot() const;

  // One round: fetches the wanted containers whose last fetch is `interval` old or that were never
  // fetched (at most kMaxPerRound, the least recently fetched first). The thread's body; public
  // so tests drive it with a fake clock.
  void Step();

 private:
  bool Woken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || woken_; }
  void Run();

  // Constant after construction.
  const Fetch fetch_;
  const Clock* const clock_;
  const absl::Duration interval_;

  mutable absl::Mutex mu_;
  std::set<std::string> wanted_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> fetched_at_ ABSL_GUARDED_BY(mu_);
  ApplyingPlans plans_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;  // started by Start, joined by the destructor
};

}  // namespace fleet::cli
