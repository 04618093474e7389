// LeaderLease against a real PostgreSQL (tests/testing/postgres_server.h): one leader per fleet,
// takeover after expiry with a higher term, fencing of the old term, the old session ended, and a
// reused pid left alone.
#include "daemon/leader/lease.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "daemon/store/fleet_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/postgres_server.h"

namespace fleet::daemon {
namespace {

using ::testing::HasSubstr;

class LeaseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = fleet::testing::PostgresServer::Start();
    if (!server.ok()) {
      start_error_ = new std::string(server.status().ToString());
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    if (server_ == nullptr) {
      if (fleet::testing::PostgresServer::FindBinDir().empty()) {
        GTEST_SKIP() << "no PostgreSQL binaries (deploy/install-deps.sh installs them)";
      }
      FAIL() << "PostgreSQL did not start: " << *start_error_;
    }
    // A fleet id of its own per test: the rows of other tests do not matter.
    fleet_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  std::unique_ptr<postgres::Database> Connect() {
    auto db = postgres::Database::Connect(server_->url());
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }
  std::unique_ptr<LeaderLease> Lease(postgres::Database* db, std::string holder,
                                     absl::Duration duration = absl::Seconds(30)) {
    auto lease =
        LeaderLease::Create(db, {.fleet_id = fleet_,
                                 .holder = holder,
                                 .address = holder + ".example:7443",
                                 .duration = duration,
                                 .margin = std::min(absl::Milliseconds(50), duration / 2)});
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.ok() ? *std::move(lease) : nullptr;
  }

  static fleet::testing::PostgresServer* server_;
  static std::string* start_error_;
  std::string fleet_;
};

fleet::testing::PostgresServer* LeaseTest::server_ = nullptr;
std::string* LeaseTest::start_error_ = nullptr;

TEST_F(LeaseTest, OneLeadsTheOtherIsToldWhoAndWhere) {
  auto db_a = Connect(), db_b = Connect();
  auto a = Lease(db_a.get(), "fleetd-a"), b = Lease(db_b.get(), "fleetd-b");
  auto term = a->TryAcquire();
  ASSERT_TRUE(term.ok()) << term.status();
  EXPECT_GT(*term, 0);
  EXPECT_TRUE(a->HoldsNow(absl::Now()));
  auto refused = b->TryAcquire();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("fleetd-a"));
  EXPECT_THAT(refused.status().message(), HasSubstr("fleetd-a.example:7443"));
  EXPECT_EQ(b->term(), 0);
  // Acquiring again while holding keeps the term.
  EXPECT_EQ(*a->TryAcquire(), *term);
  auto view = b->Current();
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->holder, "fleetd-a");
  EXPECT_EQ(view->term, *term);
  EXPECT_TRUE(view->live);
}

TEST_F(LeaseTest, AStandbyTakesOverAnExpiredLeaseWithAHigherTermAndFencesTheOld) {
  auto db_a = Connect(), db_b = Connect(), writer = Connect();
  auto a = Lease(db_a.get(), "fleetd-a", absl::Milliseconds(300));
  auto b = Lease(db_b.get(), "fleetd-b", absl::Milliseconds(300));
  const int64_t first = *a->TryAcquire();
  ASSERT_TRUE(LeaderLease::CheckTerm(*writer, fleet_, first).ok());
  // a stops renewing (paused): b gets the lease once it expires by the database's clock.
  ASSERT_TRUE(
      fleet::testing::Eventually([&] { return b->TryAcquire().ok(); }, std::chrono::seconds(10)));
  const int64_t second = b->term();
  EXPECT_GT(second, first);
  // The old term can write nothing, the new one can.
  auto fenced = LeaderLease::CheckTerm(*writer, fleet_, first);
  EXPECT_EQ(fenced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fenced.message(), HasSubstr("fenced"));
  EXPECT_TRUE(LeaderLease::CheckTerm(*writer, fleet_, second).ok());
  // a's session was ended by the takeover: its next renewal fails, and so would any write.
  EXPECT_EQ(a->Renew().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(db_a->IsBroken());
  EXPECT_FALSE(a->HoldsNow(absl::Now())) << "its local deadline passed too";
  // Connected again, it learns that the lease is lost.
  ASSERT_TRUE(db_a->Reconnect().ok());
  EXPECT_EQ(a->Renew().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->term(), 0);
}

TEST_F(LeaseTest, ARenewedLeaseIsNotTaken) {
  auto db_a = Connect(), db_b = Connect();
  auto a = Lease(db_a.get(), "fleetd-a", absl::Seconds(2));
  auto b = Lease(db_b.get(), "fleetd-b", absl::Seconds(2));
  const int64_t term = *a->TryAcquire();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(a->Renew().ok());
    EXPECT_FALSE(b->TryAcquire().ok());
  }
  EXPECT_EQ(a->term(), term);
}

TEST_F(LeaseTest, AReleasedLeaseIsTakenAtOnce) {
  auto db_a = Connect(), db_b = Connect();
  auto a = Lease(db_a.get(), "fleetd-a"), b = Lease(db_b.get(), "fleetd-b");
  const int64_t first = *a->TryAcquire();
  ASSERT_TRUE(a->Release().ok());
  auto second = b->TryAcquire();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, first);
  // A released leader's session is not ended (it stopped cleanly) and it can ask again later.
  EXPECT_FALSE(db_a->IsBroken());
  EXPECT_EQ(a->TryAcquire().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LeaseTest, ATakeoverLeavesAReusedPidAlone) {
  auto db_a = Connect(), db_b = Connect(), bystander = Connect();
  auto a = Lease(db_a.get(), "fleetd-a", absl::Milliseconds(200));
  auto b = Lease(db_b.get(), "fleetd-b", absl::Milliseconds(200));
  ASSERT_TRUE(a->TryAcquire().ok());
  // The row names a backend that is not a's any more (its pid now serves someone else).
  auto pid = bystander->Prepare("SELECT pg_backend_pid()");
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(*pid->Step());
  const int64_t bystander_pid = pid->ColumnInt(0);
  pid->Reset();
  auto point = db_b->Prepare("UPDATE fleet_leases SET backend_pid = ?2 WHERE fleet_id = ?1");
  ASSERT_TRUE(point.ok());
  ASSERT_TRUE(point->Bind(1, fleet_).Bind(2, bystander_pid).Run().ok());
  ASSERT_TRUE(
      fleet::testing::Eventually([&] { return b->TryAcquire().ok(); }, std::chrono::seconds(10)));
  auto alive = bystander->Prepare("SELECT 1");
  ASSERT_TRUE(alive.ok());
  EXPECT_TRUE(alive->Run().ok());
  EXPECT_FALSE(bystander->IsBroken());
}

TEST_F(LeaseTest, FleetsHaveLeadersOfTheirOwn) {
  auto db_a = Connect(), db_b = Connect();
  auto a = Lease(db_a.get(), "fleetd-a");
  auto other =
      LeaderLease::Create(db_b.get(), {.fleet_id = fleet_ + "-other", .holder = "fleetd-b"});
  ASSERT_TRUE(other.ok());
  const int64_t ta = *a->TryAcquire();
  auto tb = (*other)->TryAcquire();
  ASSERT_TRUE(tb.ok()) << tb.status();
  EXPECT_NE(ta, *tb);
  EXPECT_FALSE(LeaderLease::CheckTerm(*db_a, fleet_, *tb).ok()) << "a term is its fleet's";
}

TEST_F(LeaseTest, OptionsAreChecked) {
  auto db = Connect();
  EXPECT_FALSE(LeaderLease::Create(db.get(), {.fleet_id = "", .holder = "x"}).ok());
  EXPECT_FALSE(LeaderLease::Create(
                   db.get(), {.fleet_id = "f", .holder = "x", .duration = absl::Milliseconds(10)})
                   .ok());
}

}  // namespace
}  // namespace fleet::daemon

namespace fleet::daemon {
namespace {

// The store's side of fencing: with a term (FleetStore::SetFence), each write transaction checks
// the lease, and a term that no longer leads writes nothing.
TEST_F(LeaseTest, StoreWritesCheckTheTermAndAReplacedLeaderWritesNothing) {
  auto store = FleetStore::Open(server_->url());
  ASSERT_TRUE(store.ok()) << store.status();
  auto fleet_id = (*store)->FleetId();
  ASSERT_TRUE(fleet_id.ok()) << fleet_id.status();
  fleet_ = *fleet_id;  // the leases below are the record's own fleet's
  auto db_a = Connect(), db_b = Connect();
  auto a = Lease(db_a.get(), "fleetd-a"), b = Lease(db_b.get(), "fleetd-b");
  auto term_a = a->TryAcquire();
  ASSERT_TRUE(term_a.ok()) << term_a.status();
  (*store)->SetFence(*fleet_id, *term_a);

  fleet::v1::FleetConfig config;
  auto v1 = (*store)->SaveConfig(config, "a.yaml", "hosts: []\n", absl::Now());
  ASSERT_TRUE(v1.ok()) << v1.status();

  // A hands over (as at a clean stop); B takes the lease with a higher term.
  ASSERT_TRUE(a->Release().ok());
  auto term_b = b->TryAcquire();
  ASSERT_TRUE(term_b.ok()) << term_b.status();
  EXPECT_GT(*term_b, *term_a);

  // A's store, still fenced with A's term: nothing is written, alone or in a batch.
  auto refused = (*store)->SaveConfig(config, "b.yaml", "hosts: []\n", absl::Now());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("fenced"));
  {
    FleetStore::Batch batch(store->get());
    EXPECT_FALSE((*store)->SaveConfig(config, "c.yaml", "hosts: []\n", absl::Now()).ok());
    EXPECT_EQ(batch.Commit().code(), absl::StatusCode::kFailedPrecondition);
  }
  auto latest = (*store)->LatestConfigInfo();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->version, *v1);

  // With B's term the same store writes again.
  (*store)->SetFence(*fleet_id, *term_b);
  auto v2 = (*store)->SaveConfig(config, "d.yaml", "hosts: []\n", absl::Now());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_GT(*v2, *v1);
  ASSERT_TRUE(b->Release().ok());
}

// Finding 17: a write of the leader that holds the fence (and waits on some other lock) must not
// hold up the leader's renewal; a takeover still waits for it.
TEST_F(LeaseTest, AnOpenWriteDoesNotHoldUpTheRenewalButHoldsUpATakeover) {
  auto db_a = Connect(), db_b = Connect(), writer = Connect();
  auto a = Lease(db_a.get(), "fleetd-a", absl::Seconds(30));
  auto b = Lease(db_b.get(), "fleetd-b", absl::Seconds(30));
  auto term = a->TryAcquire();
  ASSERT_TRUE(term.ok()) << term.status();
  // A's write transaction: fenced, then left open (as one blocked on a lock elsewhere would be).
  ASSERT_TRUE(writer->Exec("BEGIN").ok());
  ASSERT_TRUE(LeaderLease::CheckTerm(*writer, fleet_, *term).ok());
  // Neither may wait forever: a lock wait fails after a second instead.
  ASSERT_TRUE(db_a->Exec("SET lock_timeout = '1s'").ok());
  ASSERT_TRUE(db_b->Exec("SET lock_timeout = '1s'").ok());
  EXPECT_TRUE(a->Renew().ok()) << "the renewal waited for the open write";
  // A hands over; B's takeover must wait for the write of A's term to end.
  ASSERT_TRUE(a->Release().ok());
  auto taken = b->TryAcquire();
  EXPECT_FALSE(taken.ok()) << "the takeover did not wait for the old term's write";
  ASSERT_TRUE(writer->Exec("COMMIT").ok());
  taken = b->TryAcquire();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_GT(*taken, *term);
}

TEST_F(LeaseTest, TheFleetIdIsMadeWithTheRecordAndKept) {
  auto first = FleetStore::Open(server_->url());
  ASSERT_TRUE(first.ok()) << first.status();
  auto id = (*first)->FleetId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 32u);
  first->reset();
  auto again = FleetStore::Open(server_->url());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*(*again)->FleetId(), *id);

  // Another record (another database) is another fleet.
  auto admin = Connect();
  ASSERT_TRUE(admin->Exec("DROP DATABASE IF EXISTS other_fleet").ok());
  ASSERT_TRUE(admin->Exec("CREATE DATABASE other_fleet").ok());
  std::string other_url = server_->url();
  const size_t at = other_url.find("/fleet?");
  ASSERT_NE(at, std::string::npos) << "the test server's URL changed shape";
  other_url.replace(at, 7, "/other_fleet?");
  auto other = FleetStore::Open(other_url);
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_id = (*other)->FleetId();
  ASSERT_TRUE(other_id.ok()) << other_id.status();
  EXPECT_NE(*other_id, *id);
}

}  // namespace
}  // namespace fleet::daemon
