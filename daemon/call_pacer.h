// CallPacer: the agent calls a reconciler turn decided (Launch, Stop), sent a bounded number at a
// time, in order, without waiting for their answers. Thousands of Launches at once would hold
// thousands of gRPC calls (and their requests) in memory together; the pacer keeps at most
// `limit` unanswered and lets the next one go as each answer is applied.
//
// The pacer does not know agents: `send` (the daemon's) hands one call to its agent's client and
// says whether it went (false: dropped, e.g. its link is gone or a newer attempt superseded it).
// A call that went counts as unanswered until the `finished` it was given is run, once, after its
// answer was applied (on a gRPC thread, or inside `send` for a client that answers at once).
//
// Thread-safe. Locks: mu_ only, never held while `send` runs (send takes the daemon's state lock,
// and an answer applied inside it comes back here).
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/agent.pb.h"

namespace fleet::daemon {

// One call a turn decided to make, sent without the daemon's lock.
struct AgentCall {
  enum Kind { kLaunch, kStop } kind = kLaunch;
  std::string server;     // host/ctid/gpuN
  std::string container;  // host/ctid
  fleet::v1::LaunchRequest launch;
  fleet::v1::StopRequest stop;
};

class CallPacer {
 public:
  using Send = std::function<bool(AgentCall& call, std::function<void()> finished)>;

  CallPacer(int limit, Send send) : limit_(limit), send_(std::move(send)) {}
  CallPacer(const CallPacer&) = delete;
  CallPacer& operator=(const CallPacer&) = delete;

  // Queues `calls` after those waiting and sends while fewer than `limit` are unanswered.
  void Submit(std::vector<AgentCall> calls) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the calls not sent yet (and every later Submit), and returns once no `send` runs: a
  // client that `send` held is let go by then, so its owner may destroy it on this thread.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);
  int in_flight() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void SendWhileRoom() ABSL_LOCKS_EXCLUDED(mu_);
  void Finished() ABSL_LOCKS_EXCLUDED(mu_);

  const int limit_;
  const Send send_;

  mutable absl::Mutex mu_;
  std::deque<AgentCall> waiting_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int sending_ ABSL_GUARDED_BY(mu_) = 0;  // `send` calls running now
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fleet::daemon
