// StandaloneRunner: `fleet-agent --standalone FILE` without a daemon. It plays the daemon's part
// for a local spec: allocates attempt ids, launches every server, prints each event as one line,
// and relaunches a server that failed or stalled (up to max_attempts per server, after the
// backoff); it stops a stalled one first. Run() returns when stopped or, with until_ready, when
// every server is READY (0) or one has given up (1).
//
// Thread-safe: Run() on one thread, RequestStop() from any (a signal handler thread).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "absl/synchronization/mutex.h"
#include "agent/agent.h"
#include "common/base/clock.h"
#include "proto/agent.pb.h"
#include "proto/states.pb.h"

namespace fleet::agent {

class StandaloneRunner : public EventSubscriber {
 public:
  StandaloneRunner(Agent* agent, fleet::v1::StandaloneConfig config, Clock* clock,
                   std::ostream* out);
  ~StandaloneRunner() override;

  int Run(bool until_ready);
  void RequestStop();
  void OnEventsAvailable() override;

 private:
  struct Server {
    fleet::v1::ServerSpec spec;
    int64_t attempts = 0;
    std::string attempt_id;
    fleet::v1::ServerState state = fleet::v1::SERVER_STATE_UNSPECIFIED;
    bool stopping_for_relaunch = false;
    bool gave_up = false;
    absl::Time relaunch_at = absl::InfiniteFuture();
  };

  void Launch(Server& server);
  void Handle(const fleet::v1::AgentEvent& event, absl::Time now);
  std::string Describe(const fleet::v1::AgentEvent& event) const;

  Agent* const agent_;
  const fleet::v1::StandaloneConfig config_;
  Clock* const clock_;
  std::ostream* const out_;
  std::map<int32_t, Server> servers_;
  std::string incarnation_;
  uint64_t cursor_ = 0;

  absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// Reads a StandaloneConfig in protobuf text format; InvalidArgument names the file and line.
absl::StatusOr<fleet::v1::StandaloneConfig> ReadStandaloneConfig(const std::string& path);

}  // namespace fleet::agent
