// LeaderElector: keeps trying to lead a fleet through a LeaderLease (lease.h), on a thread of its
// own. A standby tries to take the lease every `retry`; the leader renews it every `renew`, and
// every `retry` after a renewal that failed. The
// elector tells its owner when it starts leading (with the term: every write and every agent
// request carries it) and when it stops, which is at the latest at the lease's local deadline: a
// leader that cannot reach the database (a partition, the database down) steps down before a
// standby can take over, and a leader paused past its deadline finds on waking that its renewal
// fails and steps down (its writes are fenced by the term in any case).
//
// A lost connection is reconnected on the next round. Stop() releases the lease when held (a
// clean shutdown: a standby takes over at once); destroying the elector without Stop() abandons
// it (as a crash would: the lease expires).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/postgres/database.h"
#include "daemon/leader/lease.h"

namespace fleet::daemon {

struct ElectorOptions {
  LeaseOptions lease;
  absl::Duration renew = absl::Seconds(1);
  absl::Duration retry = absl::Seconds(1);
  // Called on the elector's thread: leading with `term`, and no longer leading (lost, stepped
  // down or stopped). Neither is called again before the other.
  std::function<void(int64_t term)> on_lead;
  std::function<void()> on_step_down;
};

class LeaderElector {
 public:
  // Connects its own session to `conninfo` (the lease's; a successor may end it) and starts.
  static absl::StatusOr<std::unique_ptr<LeaderElector>> Start(std::string conninfo,
                                                              ElectorOptions options);
  ~LeaderElector();  // abandons the lease (no release), like a crash

  // Steps down, releasing the lease, and ends the thread.
  void Stop();
  // The term led now, 0 when standing by.
  int64_t term() const;
  // Whether it leads and may still act at `now`: before the lease's local deadline. The owner
  // checks it before each action, since the thread notices a passed deadline only at its next
  // round.
  bool HoldsNow(absl::Time now) const;
  // The lease as this elector last saw it: itself while it leads; else the live holder and its
  // address (what a standby sends clients to), or none (term 0) when nobody held it live or the
  // database could not be asked.
  LeaseView seen() const;

 private:
  LeaderElector(std::unique_ptr<postgres::Database> db, std::unique_ptr<LeaderLease> lease,
                ElectorOptions options)
      : db_(std::move(db)), lease_(std::move(lease)), options_(std::move(options)) {}
  void Run();
  // One round: take or renew the lease; steps down when it is lost or its deadline passes.
  void Round();
  void StepDown();

  std::unique_ptr<postgres::Database> db_;
  std::unique_ptr<LeaderLease> lease_;
  const ElectorOptions options_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool release_ ABSL_GUARDED_BY(mu_) = false;
  int64_t leading_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  LeaseView seen_ ABSL_GUARDED_BY(mu_);
  bool renew_failed_ ABSL_GUARDED_BY(mu_) = false;  // the last renewal failed: retry sooner
  std::thread thread_;
};

}  // namespace fleet::daemon
