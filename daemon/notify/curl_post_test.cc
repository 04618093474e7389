// The Notifier's real POST (CurlPost) against a real receiver on loopback (WebhookReceiver):
// the body and headers as they arrive, the signature checked with OpenSSL's HMAC, retries after
// 503s, a receiver that hangs (the timeout, and the stop flag); and over HTTPS with a test CA
// made by the openssl CLI: accepted with Notify.ca_file, refused (never sent) without it.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/json_text.h"
#include "common/base/proto_time.h"
#include "common/events/fleet_event_json.h"
#include "daemon/notify/notifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/webhook_receiver.h"

namespace fleet::daemon {
namespace {

using ::testing::HasSubstr;
using testing::WebhookReceiver;

constexpr absl::Duration kPostDeadline = absl::Seconds(20);
constexpr char kPath[] = "/usr/bin:/bin";
constexpr char kKey[] = "a webhook key";

// Every try's record, and a wait for the last one of a delivery.
class PostRecords {
 public:
  Notifier::Recorder Function() {
    return [this](const DeliveryRecord& d) {
      absl::MutexLock lock(&mu_);
      saved_.push_back(d);
      return absl::OkStatus();
    };
  }
  // The records of delivery `id` once one is final (not pending); empty after kPostDeadline.
  std::vector<DeliveryRecord> UntilFinal(int64_t id) const {
    absl::MutexLock lock(&mu_);
    auto done = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const DeliveryRecord& d : saved_) {
        if (d.id == id && d.status != "pending") return true;
      }
      return false;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&done), kPostDeadline)) return {};
    std::vector<DeliveryRecord> out;
    for (const DeliveryRecord& d : saved_) {
      if (d.id == id) out.push_back(d);
    }
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<DeliveryRecord> saved_ ABSL_GUARDED_BY(mu_);
};

// The hex HMAC-SHA256, straight from OpenSSL (not through SignatureHeader).
std::string Hmac(const std::string& key, const std::string& body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &length);
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(mac), length));
}

fleet::v1::FleetEvent GaveUp() {
  fleet::v1::FleetEvent e;
  e.set_index(7);
  e.set_type("gave_up");
  e.set_server("local/sim/gpu0");
  e.set_host("local");
  e.set_ctid("sim");
  e.set_state("GAVE_UP");
  e.set_previous_state("FAILED");
  e.set_attempt_id("att-1");
  e.set_attempt_number(1);
  e.set_diagnosis_class("ptx_version_unsupported");
  e.set_summary("ptxas is older than the PTX the kernels need");
  e.set_root_cause_line("ptxas fatal   : Unsupported .version 9.2; current version is '9.0'");
  fleet::v1::EvidenceLine* line = e.add_evidence();
  line->set_line(42);
  line->set_text(e.root_cause_line());
  e.set_reason("ptx_version_unsupported: a restart cannot fix it");
  return e;
}

DeliveryRecord Delivery(int64_t id, const fleet::v1::FleetEvent& e) {
  DeliveryRecord d;
  d.id = id;
  d.event_index = e.index();
  d.notify = "hook";
  d.event_type = e.type();
  d.server = e.server();
  d.next_at = absl::Now();
  d.body = events::WebhookBody(e);
  return d;
}

fleet::v1::Notify Hook(const std::string& url, const std::string& secret_file = "") {
  fleet::v1::Notify n;
  n.set_name("hook");
  n.set_url(url);
  n.set_secret_file(secret_file);
  return n;
}

NotifierOptions FastRetries() {
  NotifierOptions o;
  o.backoff_initial = absl::Milliseconds(5);
  o.backoff_max = absl::Milliseconds(20);
  return o;
}

TEST(CurlPost, ARealReceiverGetsTheSignedBodyAfterTwo503s) {
  auto receiver = WebhookReceiver::Start();
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  (*receiver)->AnswerNext({503, 503});
  testing::TempDir dir;
  dir.WriteFile("secret", absl::StrCat(kKey, "\n"));
  PostRecords records;
  Notifier notifier(records.Function(), CurlPost, FastRetries());
  notifier.Configure({Hook((*receiver)->url(), dir.Join("secret"))});
  const DeliveryRecord d = Delivery(1, GaveUp());
  notifier.Deliver({d});

  const std::vector<DeliveryRecord> r = records.UntilFinal(1);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].status, "pending");
  EXPECT_EQ(r[0].http_status, 503);
  EXPECT_EQ(r[0].error, "HTTP 503");
  EXPECT_EQ(r[1].attempts, 2);
  EXPECT_EQ(r[2].status, "delivered");
  EXPECT_EQ(r[2].attempts, 3);
  EXPECT_EQ(r[2].http_status, 200);

  const std::vector<testing::ReceivedRequest> got = (*receiver)->Requests();
  ASSERT_EQ(got.size(), 3u);
  for (const testing::ReceivedRequest& req : got) {
    EXPECT_EQ(req.method, "POST");
    EXPECT_EQ(req.path, "/hook");
    EXPECT_EQ(req.body, d.body);
    EXPECT_EQ(req.headers.at("content-type"), "application/json");
    EXPECT_EQ(req.headers.at("x-fleet-event"), "gave_up");
    EXPECT_EQ(req.headers.at("x-fleet-delivery"), "1");
    EXPECT_EQ(req.headers.at("x-fleet-signature-256"), "sha256=" + Hmac(kKey, req.body));
  }
  const Json body = Json::parse(got[0].body, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(body.is_object()) << got[0].body;
  for (const char* key : {"server", "state", "class", "cause", "root_cause_line", "evidence",
                          "attempt_id", "command", "text"}) {
    EXPECT_TRUE(body.contains(key)) << key << " in " << got[0].body;
  }
  EXPECT_EQ(body.value("server", ""), "local/sim/gpu0");
  EXPECT_EQ(body.value("state", ""), "GAVE_UP");
  EXPECT_EQ(body.value("class", ""), "ptx_version_unsupported");
  EXPECT_EQ(body.value("cause", ""), "ptxas is older than the PTX the kernels need");
  EXPECT_EQ(body.value("attempt_id", ""), "att-1");
  EXPECT_EQ(body.value("command", ""), "fleetctl explain --server local/sim/gpu0");
  ASSERT_TRUE(body["evidence"].is_array() && body["evidence"].size() == 1) << got[0].body;
  EXPECT_EQ(body["evidence"][0].value("line", 0), 42);
  EXPECT_THAT(body.value("text", ""), HasSubstr("local/sim/gpu0 gave up: ptx_version_unsupported"));
}

TEST(CurlPost, AHangingReceiverTimesOutAndTheStopFlagEndsThePostEarly) {
  auto receiver = WebhookReceiver::Start();
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  (*receiver)->Hold();
  fleet::v1::Notify hook = Hook((*receiver)->url());
  *hook.mutable_timeout() = ToProtoDuration(absl::Milliseconds(300));
  std::atomic<bool> stop{false};
  const PostResult timed_out = CurlPost(hook, "{}", {}, &stop);
  EXPECT_EQ(timed_out.http_status, 0);
  EXPECT_THAT(timed_out.error, HasSubstr("timed out"));

  *hook.mutable_timeout() = ToProtoDuration(absl::Minutes(5));
  PostResult stopped;
  absl::Time returned;
  std::thread post([&] {
    stopped = CurlPost(hook, "{}", {}, &stop);
    returned = absl::Now();
  });
  ASSERT_TRUE((*receiver)->WaitForHeld(2, kPostDeadline));
  const absl::Time asked = absl::Now();
  stop = true;
  post.join();
  EXPECT_EQ(stopped.http_status, 0);
  EXPECT_FALSE(stopped.error.empty());
  // libcurl asks its progress callback about once a second while nothing moves.
  EXPECT_LT(returned - asked, absl::Seconds(5));
}

TEST(CurlPost, RefusesAUrlThatIsNotAWebhookUrl) {
  std::atomic<bool> stop{false};
  const PostResult r = CurlPost(Hook("http://192.0.2.1/hook"), "{}", {}, &stop);
  EXPECT_EQ(r.http_status, 0);
  EXPECT_THAT(r.error, HasSubstr("url: http:// to 192.0.2.1"));
}

// A test CA and a certificate for IP 127.0.0.1 it signed, made by the openssl CLI; the
// receiver's PEM holds the certificate and its key.
class CurlPostTls : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FindOnPath("openssl", kPath).empty()) {
      GTEST_SKIP() << "openssl is not installed: the test CA is made with it";
    }
    const std::vector<std::vector<std::string>> steps = {
        {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", dir_.Join("ca.key"), "-out", ca(), "-days", "2", "-subj",
         "/CN=webhook test CA"},
        {"openssl",
         "req",
         "-x509",
         "-newkey",
         "ec",
         "-pkeyopt",
         "ec_paramgen_curve:P-256",
         "-nodes",
         "-keyout",
         dir_.Join("server.key"),
         "-out",
         dir_.Join("server.crt"),
         "-days",
         "2",
         "-subj",
         "/CN=127.0.0.1",
         "-CA",
         ca(),
         "-CAkey",
         dir_.Join("ca.key"),
         "-addext",
         "subjectAltName=IP:127.0.0.1",
         "-addext",
         "basicConstraints=critical,CA:FALSE"}};
    for (const std::vector<std::string>& argv : steps) {
      testing::RunOptions o;
      o.env = std::map<std::string, std::string>{{"PATH", kPath}};
      o.output_path = dir_.Join("openssl.out");
      auto r = testing::Run(argv, o);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->exit_code, 0) << r->output;
    }
    dir_.WriteFile("server.pem", absl::StrCat(testing::ReadFile(dir_.Join("server.crt")),
                                              testing::ReadFile(dir_.Join("server.key"))));
    auto receiver = WebhookReceiver::Start(dir_.Join("server.pem"));
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    receiver_ = *std::move(receiver);
  }

  std::string ca() const { return dir_.Join("ca.crt"); }

  testing::TempDir dir_;
  std::unique_ptr<WebhookReceiver> receiver_;
  PostRecords records_;
};

TEST_F(CurlPostTls, TheReceiversCertificateIsCheckedWithTheEntrysCa) {
  ASSERT_THAT(receiver_->url(), ::testing::StartsWith("https://127.0.0.1:"));
  Notifier notifier(records_.Function(), CurlPost, FastRetries());
  fleet::v1::Notify hook = Hook(receiver_->url());
  hook.set_ca_file(ca());
  notifier.Configure({hook});
  const DeliveryRecord d = Delivery(1, GaveUp());
  notifier.Deliver({d});
  const std::vector<DeliveryRecord> r = records_.UntilFinal(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, "delivered") << r[0].error;
  const std::vector<testing::ReceivedRequest> got = receiver_->Requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, d.body);
}

TEST_F(CurlPostTls, WithoutTheCaTheCertificateIsRefusedAndNothingIsSent) {
  Notifier notifier(records_.Function(), CurlPost, FastRetries());
  fleet::v1::Notify hook = Hook(receiver_->url());
  hook.set_max_attempts(2);  // the system's CAs do not know the test CA
  notifier.Configure({hook});
  notifier.Deliver({Delivery(1, GaveUp())});
  const std::vector<DeliveryRecord> r = records_.UntilFinal(1);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, "pending");  // retried, as any transport error
  EXPECT_EQ(r[1].status, "failed");
  EXPECT_EQ(r[1].attempts, 2);
  EXPECT_EQ(r[1].http_status, 0);
  EXPECT_THAT(r[1].error, HasSubstr("certificate"));
  EXPECT_TRUE(receiver_->Requests().empty());
}

}  // namespace
}  // namespace fleet::daemon
