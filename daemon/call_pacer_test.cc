#include "daemon/call_pacer.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::daemon {
namespace {

using ::testing::ElementsAre;

std::vector<AgentCall> Calls(int n) {
  std::vector<AgentCall> out;
  for (int i = 0; i < n; ++i) {
    AgentCall c;
    c.server = absl::StrCat("h/1/gpu", i);
    out.push_back(c);
  }
  return out;
}

// Answers are held until the test releases them: what is unanswered at a time is visible.
struct HeldAnswers {
  std::vector<std::string> sent;
  std::vector<std::function<void()>> unanswered;
  bool Send(AgentCall& c, std::function<void()> finished) {
    sent.push_back(c.server);
    unanswered.push_back(std::move(finished));
    return true;
  }
  void AnswerOldest() {
    auto f = std::move(unanswered.front());
    unanswered.erase(unanswered.begin());
    f();
  }
};

TEST(CallPacer, AtMostTheLimitUnansweredAndTheRestInOrderAsAnswersCome) {
  HeldAnswers agent;
  CallPacer pacer(2, [&](AgentCall& c, std::function<void()> f) { return agent.Send(c, f); });
  pacer.Submit(Calls(5));
  EXPECT_THAT(agent.sent, ElementsAre("h/1/gpu0", "h/1/gpu1"));
  EXPECT_EQ(pacer.in_flight(), 2);
  EXPECT_EQ(pacer.waiting(), 3u);
  agent.AnswerOldest();
  EXPECT_THAT(agent.sent, ElementsAre("h/1/gpu0", "h/1/gpu1", "h/1/gpu2"));
  agent.AnswerOldest();
  agent.AnswerOldest();
  agent.AnswerOldest();
  agent.AnswerOldest();
  EXPECT_EQ(agent.sent.size(), 5u);
  EXPECT_EQ(pacer.in_flight(), 0);
  EXPECT_EQ(pacer.waiting(), 0u);
}

// A client that answers at once (inside send) lets the next call go without a loop of its own
// on the same stack: every call is sent once, in order, at any depth.
TEST(CallPacer, AnswersInsideSendSendEveryCallOnceInOrder) {
  std::vector<std::string> sent;
  int depth = 0, deepest = 0;
  CallPacer pacer(1, [&](AgentCall& c, std::function<void()> finished) {
    sent.push_back(c.server);
    ++depth;
    deepest = std::max(deepest, depth);
    finished();
    --depth;
    return true;
  });
  pacer.Submit(Calls(100));
  EXPECT_EQ(sent.size(), 100u);
  EXPECT_EQ(sent.front(), "h/1/gpu0");
  EXPECT_EQ(sent.back(), "h/1/gpu99");
  EXPECT_EQ(deepest, 1);
  EXPECT_EQ(pacer.in_flight(), 0);
}

// A dropped call (its link gone, its attempt superseded) is not unanswered: it frees its place.
TEST(CallPacer, ADroppedCallFreesItsPlace) {
  HeldAnswers agent;
  CallPacer pacer(1, [&](AgentCall& c, std::function<void()> f) {
    if (c.server == "h/1/gpu0") return false;
    return agent.Send(c, f);
  });
  pacer.Submit(Calls(3));
  EXPECT_THAT(agent.sent, ElementsAre("h/1/gpu1"));
  EXPECT_EQ(pacer.in_flight(), 1);
}

// Close drops what was not sent (and later submits); answers of calls in flight still come.
TEST(CallPacer, CloseDropsTheCallsNotSent) {
  HeldAnswers agent;
  CallPacer pacer(1, [&](AgentCall& c, std::function<void()> f) { return agent.Send(c, f); });
  pacer.Submit(Calls(3));
  pacer.Close();
  EXPECT_EQ(pacer.waiting(), 0u);
  agent.AnswerOldest();
  pacer.Submit(Calls(2));
  EXPECT_THAT(agent.sent, ElementsAre("h/1/gpu0"));
  EXPECT_EQ(pacer.in_flight(), 0);
}

}  // namespace
}  // namespace fleet::daemon
