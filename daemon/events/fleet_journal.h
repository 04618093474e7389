// FleetJournal: the fleet's events (fleet.proto FleetEvent) between the moment the daemon makes
// them and the moment everyone who reads them does. The daemon Add()s an event where its state
// changes (under its state lock: Add takes only the journal's own, a leaf); at the end of a turn
// it Take()s what waits, writes it (table fleet_events, with the turn's rows) and, once the commit
// held, Committed() it: only then does an event get its index, reach the recent ring that
// `fleetctl events -f` reads, and go to the listeners (the metrics, the webhooks). A write that
// fails puts the events back (Requeue), in order, under the same indexes next time: no reader
// ever sees an index that a crash could give to another event.
//
// Thread-safe. Listeners are called on the committing thread, with no daemon lock held, in index
// order; they must not block (queue, count, wake).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/fleet.pb.h"

namespace fleet::daemon {

class FleetEventListener {
 public:
  virtual ~FleetEventListener() = default;
  virtual void OnFleetEvents(const std::vector<fleet::v1::FleetEvent>& events) = 0;
};

class FleetJournal {
 public:
  // `recent`: how many committed events are kept in memory for the streams.
  explicit FleetJournal(size_t recent = 4096) : recent_limit_(recent) {}

  // After a start: the highest index the record holds (0 when none).
  void SetLastIndex(int64_t index) ABSL_LOCKS_EXCLUDED(mu_);

  void Add(fleet::v1::FleetEvent event) ABSL_LOCKS_EXCLUDED(mu_);
  // The waiting events, given their indexes (the next after the last committed, in order).
  std::vector<fleet::v1::FleetEvent> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Their write failed: they wait again, before the ones added since, and keep their indexes.
  void Requeue(std::vector<fleet::v1::FleetEvent> events) ABSL_LOCKS_EXCLUDED(mu_);
  // Their write held: the indexes are theirs, readers and listeners see them.
  void Committed(const std::vector<fleet::v1::FleetEvent>& events) ABSL_LOCKS_EXCLUDED(mu_);

  // Committed events with an index above `since`, at most `limit`, from memory. False when
  // memory no longer holds all of them (the caller reads the record).
  bool Recent(int64_t since, size_t limit, std::vector<fleet::v1::FleetEvent>* out) const
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t LastIndex() const ABSL_LOCKS_EXCLUDED(mu_);

  void AddListener(FleetEventListener* listener) ABSL_LOCKS_EXCLUDED(listeners_mu_);
  // No call reaches `listener` after this returns.
  void RemoveListener(FleetEventListener* listener) ABSL_LOCKS_EXCLUDED(listeners_mu_);
  // Tells the listeners (the committing thread calls it after Committed, without daemon locks).
  void Publish(const std::vector<fleet::v1::FleetEvent>& events) ABSL_LOCKS_EXCLUDED(listeners_mu_);

 private:
  const size_t recent_limit_;
  mutable absl::Mutex mu_;
  int64_t last_index_ ABSL_GUARDED_BY(mu_) = 0;  // the highest committed
  std::deque<fleet::v1::FleetEvent> waiting_ ABSL_GUARDED_BY(mu_);
  std::deque<fleet::v1::FleetEvent> recent_ ABSL_GUARDED_BY(mu_);
  // Held while listeners are told: RemoveListener waits for a call in progress.
  absl::Mutex listeners_mu_;
  std::set<FleetEventListener*> listeners_ ABSL_GUARDED_BY(listeners_mu_);
};

}  // namespace fleet::daemon
