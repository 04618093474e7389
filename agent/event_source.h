// An agent's event log as its streams see it: the events after a position, and a subscription
// that says when more may be there. The agent is one (agent.h); the scale benchmark's simulated
// agents are others. Its stream over gRPC is agent/event_stream.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/agent.pb.h"

namespace fleet::agent {

// A stream position's owner: told (without the source's lock held) that events may be waiting.
class EventSubscriber {
 public:
  virtual ~EventSubscriber() = default;
  virtual void OnEventsAvailable() = 0;
};

class EventSource {
 public:
  virtual ~EventSource() = default;
  // Events after (incarnation, sequence), at most `limit`, in order and without a hole. A
  // position of another incarnation, or one the log no longer holds, yields one Resync event
  // instead (at the current sequence: the reader takes a Status snapshot and continues after it).
  virtual std::vector<fleet::v1::AgentEvent> EventsAfter(const std::string& incarnation,
                                                         uint64_t after, size_t limit) = 0;
  virtual void Subscribe(EventSubscriber* subscriber) = 0;
  // No OnEventsAvailable reaches `subscriber` after this returns (one in progress is waited for).
  virtual void Unsubscribe(EventSubscriber* subscriber) = 0;
};

}  // namespace fleet::agent
