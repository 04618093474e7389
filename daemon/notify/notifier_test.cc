// The Notifier with a fake POST (FakePost): what each answer does to a delivery (delivered,
// retried after a backoff, failed, dropped), the signature, the secret file, the order per
// receiver, a hanging receiver that holds neither another receiver nor the caller, the queue's
// limit and a stop while a POST hangs. Waits are on the recorder's condition, never on sleeps.
#include "daemon/notify/notifier.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr absl::Duration kDeadline = absl::Seconds(20);

// What the fake was asked to POST.
struct Post {
  std::string notify;
  std::string body;
  std::map<std::string, std::string> headers;
  absl::Time at;
};

// A PostFunction: answers each receiver (Notify.name) with its script of results (then 200),
// records every call, and hangs the receivers told to until Release() or the stop flag (which it
// checks every few milliseconds, as libcurl's progress callback does).
class FakePost {
 public:
  PostFunction Function() {
    return [this](const fleet::v1::Notify& notify, const std::string& body, const Headers& headers,
                  const std::atomic<bool>* stop) { return Call(notify, body, headers, stop); };
  }

  void Script(const std::string& notify, std::vector<PostResult> results) {
    absl::MutexLock lock(&mu_);
    for (PostResult& r : results) script_[notify].push_back(std::move(r));
  }
  void Hang(const std::string& notify) {
    absl::MutexLock lock(&mu_);
    hanging_[notify] = true;
  }
  void Release(const std::string& notify) {
    absl::MutexLock lock(&mu_);
    hanging_[notify] = false;
  }

  std::vector<Post> Posts() const {
    absl::MutexLock lock(&mu_);
    return posts_;
  }
  std::vector<Post> PostsTo(const std::string& notify) const {
    std::vector<Post> out;
    for (Post& p : Posts()) {
      if (p.notify == notify) out.push_back(std::move(p));
    }
    return out;
  }
  // Until `count` calls hang at once.
  bool WaitForHanging(int count) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_hang_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kDeadline);
  }

 private:
  PostResult Call(const fleet::v1::Notify& notify, const std::string& body, const Headers& headers,
                  const std::atomic<bool>* stop) {
    absl::MutexLock lock(&mu_);
    Post p{notify.name(), body, {}, absl::Now()};
    for (const auto& [name, value] : headers) p.headers[name] = value;
    posts_.push_back(std::move(p));
    if (hanging_[notify.name()]) {
      ++in_hang_;
      auto over = [this, &notify, stop]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !hanging_[notify.name()] || stop->load();
      };
      while (!mu_.AwaitWithTimeout(absl::Condition(&over), absl::Milliseconds(5))) {
      }
      --in_hang_;
      if (stop->load()) return PostResult{0, "aborted by the stop flag"};
    }
    std::deque<PostResult>& script = script_[notify.name()];
    if (script.empty()) return PostResult{200, ""};
    PostResult r = std::move(script.front());
    script.pop_front();
    return r;
  }

  mutable absl::Mutex mu_;
  std::vector<Post> posts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::deque<PostResult>> script_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> hanging_ ABSL_GUARDED_BY(mu_);
  int in_hang_ ABSL_GUARDED_BY(mu_) = 0;
};

// The Recorder: every try's record, in the order they were saved.
class Records {
 public:
  Notifier::Recorder Function() {
    return [this](const DeliveryRecord& d) {
      absl::MutexLock lock(&mu_);
      saved_.push_back(d);
      return absl::OkStatus();
    };
  }
  std::vector<DeliveryRecord> Of(int64_t id) const {
    absl::MutexLock lock(&mu_);
    std::vector<DeliveryRecord> out;
    for (const DeliveryRecord& d : saved_) {
      if (d.id == id) out.push_back(d);
    }
    return out;
  }
  // Until delivery `id` has a record in a final status (not pending); false after kDeadline.
  bool WaitForFinal(int64_t id) const {
    absl::MutexLock lock(&mu_);
    auto done = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const DeliveryRecord& d : saved_) {
        if (d.id == id && d.status != "pending") return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kDeadline);
  }
  // Until delivery `id` has `count` records.
  bool WaitForRecords(int64_t id, size_t count) const {
    absl::MutexLock lock(&mu_);
    auto done = [this, id, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      size_t n = 0;
      for (const DeliveryRecord& d : saved_) n += d.id == id ? 1 : 0;
      return n >= count;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kDeadline);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<DeliveryRecord> saved_ ABSL_GUARDED_BY(mu_);
};

fleet::v1::Notify Receiver(const std::string& name, int max_attempts = 0,
                           const std::string& secret_file = "") {
  fleet::v1::Notify n;
  n.set_name(name);
  n.set_url(absl::StrCat("https://", name, ".example/hook"));
  n.set_max_attempts(max_attempts);
  n.set_secret_file(secret_file);
  return n;
}

DeliveryRecord Delivery(int64_t id, const std::string& notify) {
  DeliveryRecord d;
  d.id = id;
  d.event_index = 100 + id;
  d.notify = notify;
  d.event_type = "gave_up";
  d.server = "local/sim/gpu0";
  d.created_at = absl::Now();
  d.next_at = d.created_at;
  d.body = absl::StrCat("{\"index\":", 100 + id, "}");
  return d;
}

NotifierOptions Fast() {
  NotifierOptions o;
  o.workers = 2;
  o.backoff_initial = absl::Milliseconds(5);
  o.backoff_max = absl::Milliseconds(20);
  return o;
}

class NotifierTest : public ::testing::Test {
 protected:
  std::unique_ptr<Notifier> Make(std::vector<fleet::v1::Notify> notify,
                                 NotifierOptions options = Fast()) {
    auto n = std::make_unique<Notifier>(records_.Function(), post_.Function(), options);
    n->Configure(std::move(notify));
    return n;
  }

  FakePost post_;
  Records records_;
};

TEST_F(NotifierTest, A2xxIsDeliveredAndRecordedWithTheEventsHeaders) {
  post_.Script("a", {{204, ""}});
  auto n = Make({Receiver("a")});
  n->Deliver({Delivery(1, "a")});
  ASSERT_TRUE(records_.WaitForFinal(1));
  const std::vector<DeliveryRecord> r = records_.Of(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, "delivered");
  EXPECT_EQ(r[0].attempts, 1);
  EXPECT_EQ(r[0].http_status, 204);
  EXPECT_EQ(r[0].error, "");
  EXPECT_NE(r[0].finished_at, absl::InfinitePast());
  const std::vector<Post> posts = post_.Posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].body, "{\"index\":101}");
  EXPECT_EQ(posts[0].headers.at("Content-Type"), "application/json");
  EXPECT_EQ(posts[0].headers.at("X-Fleet-Event"), "gave_up");
  EXPECT_EQ(posts[0].headers.at("X-Fleet-Delivery"), "1");
  EXPECT_THAT(posts[0].headers.at("User-Agent"), HasSubstr("gpu-fleet/"));
  EXPECT_EQ(posts[0].headers.count("X-Fleet-Signature-256"), 0u) << "no secret_file, no signature";
}

TEST_F(NotifierTest, RetryableAnswersAreTriedAgainAfterADoublingBackoff) {
  post_.Script("a", {{500, ""}, {0, "Connection refused"}, {429, ""}, {408, ""}, {200, ""}});
  auto n = Make({Receiver("a")});
  n->Deliver({Delivery(1, "a")});
  ASSERT_TRUE(records_.WaitForFinal(1));
  const std::vector<DeliveryRecord> r = records_.Of(1);
  ASSERT_EQ(r.size(), 5u);
  const std::vector<Post> posts = post_.Posts();
  ASSERT_EQ(posts.size(), 5u);
  const std::vector<std::string> errors = {"HTTP 500", "Connection refused", "HTTP 429",
                                           "HTTP 408"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r[i].status, "pending") << i;
    EXPECT_EQ(r[i].attempts, static_cast<int>(i + 1));
    EXPECT_EQ(r[i].error, errors[i]);
    // Each wait is due after the try that failed, twice the one before (up to the maximum),
    // and the next try is never made before it is due.
    const absl::Duration wait = r[i].next_at - posts[i].at;
    EXPECT_GE(wait, std::min(absl::Milliseconds(5) * (1 << i), absl::Milliseconds(20))) << i;
    EXPECT_GE(posts[i + 1].at, r[i].next_at) << i;
  }
  EXPECT_EQ(r[0].http_status, 500);
  EXPECT_EQ(r[1].http_status, 0);
  EXPECT_EQ(r[4].status, "delivered");
  EXPECT_EQ(r[4].attempts, 5);
  EXPECT_EQ(r[4].error, "");
}

TEST_F(NotifierTest, AnotherClientErrorFailsAtOnce) {
  post_.Script("a", {{400, ""}});
  auto n = Make({Receiver("a")});
  n->Deliver({Delivery(1, "a")});
  ASSERT_TRUE(records_.WaitForFinal(1));
  const std::vector<DeliveryRecord> r = records_.Of(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, "failed");
  EXPECT_EQ(r[0].attempts, 1);
  EXPECT_EQ(r[0].http_status, 400);
  EXPECT_EQ(r[0].error, "HTTP 400");
  EXPECT_EQ(post_.Posts().size(), 1u);
}

TEST_F(NotifierTest, MaxAttemptsSpentFailsTheDelivery) {
  post_.Script("a", {{503, ""}, {503, ""}, {503, ""}, {200, ""}});
  auto n = Make({Receiver("a", /*max_attempts=*/3)});
  n->Deliver({Delivery(1, "a")});
  ASSERT_TRUE(records_.WaitForFinal(1));
  const std::vector<DeliveryRecord> r = records_.Of(1);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[2].status, "failed");
  EXPECT_EQ(r[2].attempts, 3);
  EXPECT_EQ(r[2].http_status, 503);
  EXPECT_EQ(post_.Posts().size(), 3u);
}

// RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
constexpr char kRfc4231Case2[] =
    "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";

TEST(SignatureHeader, IsTheHexHmacSha256OfTheBody) {
  EXPECT_EQ(SignatureHeader("Jefe", "what do ya want for nothing?"), kRfc4231Case2);
}

TEST_F(NotifierTest, TheBodyIsSignedWithTheKeyOfTheSecretFile) {
  testing::TempDir dir;
  dir.WriteFile("secret", "Jefe\n");  // the trailing newline is not part of the key
  auto n = Make({Receiver("a", 0, dir.Join("secret"))});
  DeliveryRecord d = Delivery(1, "a");
  d.body = "what do ya want for nothing?";
  n->Deliver({d});
  ASSERT_TRUE(records_.WaitForFinal(1));
  const std::vector<Post> posts = post_.Posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].headers.at("X-Fleet-Signature-256"), kRfc4231Case2);
  EXPECT_EQ(records_.Of(1).back().status, "delivered");
}

TEST_F(NotifierTest, AMissingOrEmptySecretFileIsNeverSentUnsigned) {
  testing::TempDir dir;
  dir.WriteFile("empty", "\n");
  auto n = Make(
      {Receiver("missing", 2, dir.Join("no-such-file")), Receiver("empty", 2, dir.Join("empty"))});
  n->Deliver({Delivery(1, "missing"), Delivery(2, "empty")});
  ASSERT_TRUE(records_.WaitForFinal(1));
  ASSERT_TRUE(records_.WaitForFinal(2));
  EXPECT_TRUE(post_.Posts().empty());
  for (int64_t id : {1, 2}) {
    const std::vector<DeliveryRecord> r = records_.Of(id);
    ASSERT_EQ(r.size(), 2u) << id;
    EXPECT_EQ(r[0].status, "pending");
    EXPECT_EQ(r[1].status, "failed");
    EXPECT_EQ(r[1].attempts, 2);
    EXPECT_EQ(r[1].http_status, 0);
    EXPECT_THAT(r[1].error, HasSubstr("secret_file "));
    EXPECT_THAT(r[1].error, HasSubstr("unreadable or empty"));
  }
}

TEST_F(NotifierTest, AReceiverGetsItsDeliveriesInOrderEvenAcrossRetries) {
  post_.Script("a", {{503, ""}, {503, ""}});  // the first one is tried three times
  NotifierOptions o = Fast();
  o.workers = 4;
  auto n = Make({Receiver("a")}, o);
  n->Deliver({Delivery(1, "a"), Delivery(2, "a"), Delivery(3, "a")});
  n->Deliver({Delivery(4, "a"), Delivery(5, "a")});
  for (int64_t id = 1; id <= 5; ++id) ASSERT_TRUE(records_.WaitForFinal(id)) << id;
  std::vector<std::string> bodies;
  for (const Post& p : post_.Posts()) bodies.push_back(p.body);
  EXPECT_THAT(bodies, ElementsAre("{\"index\":101}", "{\"index\":101}", "{\"index\":101}",
                                  "{\"index\":102}", "{\"index\":103}", "{\"index\":104}",
                                  "{\"index\":105}"));
}

TEST_F(NotifierTest, AHangingReceiverHoldsNeitherTheCallerNorAnotherReceiver) {
  post_.Hang("slow");
  auto n = Make({Receiver("slow"), Receiver("fast")});  // two workers
  // Two for the hanging receiver first: its second must wait behind its first, not take the
  // other worker.
  n->Deliver({Delivery(1, "slow"), Delivery(2, "slow")});
  ASSERT_TRUE(post_.WaitForHanging(1));
  const absl::Time before = absl::Now();
  n->Deliver({Delivery(3, "fast"), Delivery(4, "fast")});
  EXPECT_LT(absl::Now() - before, absl::Seconds(1)) << "Deliver waited for the hanging POST";
  ASSERT_TRUE(records_.WaitForFinal(3));
  ASSERT_TRUE(records_.WaitForFinal(4));
  EXPECT_EQ(records_.Of(4).back().status, "delivered");
  EXPECT_EQ(post_.PostsTo("slow").size(), 1u);
  EXPECT_TRUE(records_.Of(1).empty());

  post_.Release("slow");
  ASSERT_TRUE(records_.WaitForFinal(1));
  ASSERT_TRUE(records_.WaitForFinal(2));
  EXPECT_EQ(records_.Of(1).back().status, "delivered");
  EXPECT_EQ(records_.Of(2).back().status, "delivered");
}

TEST_F(NotifierTest, PastTheQueueLimitDeliveriesAreDroppedAndRecorded) {
  post_.Hang("a");
  NotifierOptions o = Fast();
  o.queue_limit = 2;
  auto n = Make({Receiver("a")}, o);
  n->Deliver({Delivery(1, "a")});
  ASSERT_TRUE(post_.WaitForHanging(1));
  n->Deliver({Delivery(2, "a"), Delivery(3, "a"), Delivery(4, "a")});  // 1 in flight, 2 waits
  for (int64_t id : {3, 4}) {
    const std::vector<DeliveryRecord> r = records_.Of(id);  // recorded before Deliver returned
    ASSERT_EQ(r.size(), 1u) << id;
    EXPECT_EQ(r[0].status, "dropped");
    EXPECT_EQ(r[0].attempts, 0);
    EXPECT_THAT(r[0].error, HasSubstr("queue is full (2 waiting)"));
  }
  EXPECT_EQ(n->Pending(), 2u);
  post_.Release("a");
  ASSERT_TRUE(records_.WaitForFinal(2));
  EXPECT_EQ(records_.Of(2).back().status, "delivered");
  EXPECT_EQ(post_.Posts().size(), 2u);
}

TEST_F(NotifierTest, ADeliveryForANameNoLongerConfiguredIsDropped) {
  auto n = Make({Receiver("a")});
  n->Deliver({Delivery(1, "gone")});
  ASSERT_TRUE(records_.WaitForFinal(1));
  const std::vector<DeliveryRecord> r = records_.Of(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, "dropped");
  EXPECT_THAT(r[0].error, HasSubstr("'gone' is no longer in the config"));
  EXPECT_TRUE(post_.Posts().empty());
}

TEST_F(NotifierTest, TheDestructorReturnsWhileAPostHangsAndLeavesItPending) {
  post_.Hang("a");
  auto n = Make({Receiver("a")});
  n->Deliver({Delivery(1, "a")});
  ASSERT_TRUE(post_.WaitForHanging(1));
  absl::Notification destroyed;
  std::thread stopper([&] {
    n.reset();
    destroyed.Notify();
  });
  const bool returned = destroyed.WaitForNotificationWithTimeout(kDeadline);
  post_.Release("a");  // so that a failing test still ends
  stopper.join();
  ASSERT_TRUE(returned) << "~Notifier waited for the hanging POST";
  const std::vector<DeliveryRecord> r = records_.Of(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, "pending");  // the next start delivers it
  EXPECT_EQ(r[0].attempts, 1);
  EXPECT_EQ(r[0].finished_at, absl::InfinitePast());
}

}  // namespace
}  // namespace fleet::daemon
