// LeaderElector against a real PostgreSQL: one of several leads; a crashed leader's lease is taken
// after it expires, a stopped one's at once; a leader whose session is ended reconnects and keeps
// its lease; a leader that cannot reach the database steps down by its deadline.
#include "daemon/leader/elector.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/postgres_server.h"

namespace fleet::daemon {
namespace {

using fleet::testing::Eventually;
using fleet::testing::PostgresServer;
using std::chrono::seconds;

class ElectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (PostgresServer::FindBinDir().empty()) {
      GTEST_SKIP() << "no PostgreSQL binaries (deploy/install-deps.sh installs them)";
    }
    auto server = PostgresServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  struct Watched {
    std::unique_ptr<LeaderElector> elector;
    std::atomic<int64_t> led{0};
    std::atomic<int> step_downs{0};
  };
  std::unique_ptr<Watched> Elect(const std::string& holder,
                                 absl::Duration duration = absl::Milliseconds(600),
                                 absl::Duration renew = absl::Milliseconds(100)) {
    auto w = std::make_unique<Watched>();
    ElectorOptions o;
    o.lease = {.fleet_id = "fleet",
               .holder = holder,
               .address = holder + ":1",
               .duration = duration,
               .margin = absl::Milliseconds(100)};
    o.renew = renew;
    o.retry = absl::Milliseconds(100);
    o.on_lead = [p = w.get()](int64_t term) { p->led = term; };
    o.on_step_down = [p = w.get()] { p->step_downs++; };
    auto e = LeaderElector::Start(server_->url(), std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) w->elector = *std::move(e);
    return w;
  }

  // Ends the database sessions named `name` (application_name), as a lost connection would.
  static bool EndSessions(postgres::Database& admin, const std::string& name) {
    auto end = admin.Prepare(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?1");
    if (!end.ok()) return false;
    end->Bind(1, name);
    return end->Run().ok();
  }

  // The database sessions named `name` (application_name) now.
  static int64_t Sessions(postgres::Database& admin, const std::string& name) {
    auto row = admin.Prepare("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?1");
    if (!row.ok()) return 0;
    row->Bind(1, name);
    if (!row->Step().value_or(false)) return 0;
    return row->ColumnInt(0);
  }

  std::unique_ptr<PostgresServer> server_;
};

TEST_F(ElectorTest, OneLeadsAndAStoppedLeadersLeaseIsTakenAtOnce) {
  auto a = Elect("a"), b = Elect("b");
  ASSERT_TRUE(Eventually([&] { return a->led > 0 || b->led > 0; }, seconds(10)));
  Watched* leader = a->led > 0 ? a.get() : b.get();
  Watched* standby = leader == a.get() ? b.get() : a.get();
  EXPECT_EQ(standby->elector->term(), 0);
  EXPECT_TRUE(leader->elector->HoldsNow(absl::Now()));
  const int64_t first = leader->led;
  leader->elector->Stop();
  EXPECT_EQ(leader->step_downs, 1);
  ASSERT_TRUE(Eventually([&] { return standby->led > 0; }, seconds(10)));
  EXPECT_GT(standby->led.load(), first);
}

TEST_F(ElectorTest, ACrashedLeadersLeaseIsTakenWhenItExpires) {
  auto a = Elect("a");
  ASSERT_TRUE(Eventually([&] { return a->led > 0; }, seconds(10)));
  auto b = Elect("b");
  const int64_t first = a->led;
  a->elector.reset();  // gone without releasing, as in kill -9
  ASSERT_TRUE(Eventually([&] { return b->led > 0; }, seconds(10)));
  EXPECT_GT(b->led.load(), first);
}

TEST_F(ElectorTest, ALeaderWhoseSessionIsEndedReconnectsAndKeepsItsTerm) {
  auto a = Elect("a", absl::Seconds(5));
  ASSERT_TRUE(Eventually([&] { return a->led > 0; }, seconds(10)));
  const int64_t term = a->led;
  auto admin = postgres::Database::Connect(server_->url());
  ASSERT_TRUE(admin.ok());
  ASSERT_TRUE(EndSessions(**admin, "a"));
  // It renews over a new session: same term, never stepped down.
  ASSERT_TRUE(Eventually([&] { return Sessions(**admin, "a") == 1; }, seconds(10)));
  EXPECT_EQ(a->elector->term(), term);
  EXPECT_EQ(a->step_downs, 0);
}

// Finding 18: after a renewal that failed the leader tries again at the standby's pace, not a
// whole renewal period later. Here a renewal period (3 s) outlasts what is left of the lease after
// it (4 s - 3 s - 0.1 s margin): the old pace stepped down; the new one reconnects and renews in
// time, keeping its term.
TEST_F(ElectorTest, ALeaderRetriesAFailedRenewalAtOnceAndKeepsItsLease) {
  auto a = Elect("a", absl::Seconds(4), absl::Seconds(3));
  ASSERT_TRUE(Eventually([&] { return a->led > 0; }, seconds(10)));
  const int64_t term = a->led;
  auto admin = postgres::Database::Connect(server_->url());
  ASSERT_TRUE(admin.ok());
  // The leader's session ends: its next renewal fails (the database was away a moment).
  ASSERT_TRUE(EndSessions(**admin, "a"));
  ASSERT_TRUE(Eventually([&] { return Sessions(**admin, "a") == 1; }, seconds(10)));
  // And it renewed over it before its deadline: two renewals on (6 s), still the same term.
  const absl::Time until = absl::Now() + absl::Seconds(6);
  ASSERT_TRUE(Eventually([&] { return absl::Now() >= until || a->step_downs > 0; }, seconds(10)));
  EXPECT_EQ(a->step_downs, 0);
  EXPECT_EQ(a->elector->term(), term);
}

TEST_F(ElectorTest, ALeaderThatCannotReachTheDatabaseStepsDownByItsDeadline) {
  auto a = Elect("a", absl::Milliseconds(800));
  ASSERT_TRUE(Eventually([&] { return a->led > 0; }, seconds(10)));
  ASSERT_TRUE(server_->Kill().ok());
  ASSERT_TRUE(Eventually([&] { return a->step_downs == 1; }, seconds(10)));
  EXPECT_EQ(a->elector->term(), 0);
  EXPECT_FALSE(a->elector->HoldsNow(absl::Now()));
  // The database back, it leads again (with a new term: its lease expired meanwhile).
  const int64_t first = a->led;
  ASSERT_TRUE(server_->Restart().ok());
  ASSERT_TRUE(Eventually([&] { return a->elector->term() > 0; }, seconds(20)));
  EXPECT_GT(a->elector->term(), first);
}

}  // namespace
}  // namespace fleet::daemon
