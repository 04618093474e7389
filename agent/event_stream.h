// The agent's event stream (agent.proto's Events and EventBatches) over an EventSource: the events
// after the client's position, then each new one as it comes; one to a message (Events), or as
// many as the source holds past the last message when a write is possible, within
// kEventBatchMax events and kEventBatchBytes (EventBatches: never waiting to fill one). Served
// by the agent and by the scale benchmark's simulated agents. Deletes itself when gRPC is done.
#pragma once

#include <deque>
#include <string>
#include <type_traits>

#include "agent/event_source.h"
#include "agent/message_budget.h"
#include "common/net/subscriber_stream.h"
#include "proto/agent.pb.h"

namespace fleet::agent {

template <typename Message>
class EventStream final : public net::SubscriberStream<Message>, public EventSubscriber {
  static_assert(std::is_same_v<Message, fleet::v1::AgentEvent> ||
                std::is_same_v<Message, fleet::v1::EventBatch>);

 public:
  EventStream(EventSource* source, const fleet::v1::EventsRequest& request)
      : net::SubscriberStream<Message>("event stream: write failed"),
        source_(source),
        incarnation_(request.incarnation()),
        cursor_(request.after_sequence()) {
    source_->Subscribe(this);
    this->Start();
  }

  void OnEventsAvailable() override { this->Wake(); }

 private:
  // Under the stream's lock: the only place pending_, incarnation_ and cursor_ are touched.
  bool Fill(Message* out) override {
    if (pending_.empty()) {
      for (auto& e : source_->EventsAfter(incarnation_, cursor_, kEventBatchMax)) {
        pending_.push_back(std::move(e));
      }
    }
    if (pending_.empty()) return false;
    if constexpr (std::is_same_v<Message, fleet::v1::AgentEvent>) {
      Take(out);
    } else {
      size_t bytes = 0;
      while (!pending_.empty() && out->events_size() < static_cast<int>(kEventBatchMax)) {
        const size_t size = pending_.front().ByteSizeLong();
        if (out->events_size() > 0 && bytes + size > kEventBatchBytes) break;
        bytes += size;
        Take(out->add_events());
      }
    }
    return true;
  }

  // The next event into `out`. Whatever this stream said last is where it continues from: after
  // a Resync, the agent's incarnation and sequence.
  void Take(fleet::v1::AgentEvent* out) {
    *out = std::move(pending_.front());
    pending_.pop_front();
    incarnation_ = out->incarnation();
    cursor_ = out->sequence();
  }

  void Detach() override { source_->Unsubscribe(this); }

  EventSource* const source_;
  std::string incarnation_;
  uint64_t cursor_;
  std::deque<fleet::v1::AgentEvent> pending_;
};

}  // namespace fleet::agent
