#include "daemon/leader/elector.h"

#include <utility>

#include "common/log/log.h"

namespace fleet::daemon {

absl::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Start(std::string conninfo,
                                                                    ElectorOptions options) {
  auto db = postgres::Database::Connect(conninfo);
  if (!db.ok()) return db.status();
  auto lease = LeaderLease::Create(db->get(), options.lease);
  if (!lease.ok()) return lease.status();
  auto elector = std::unique_ptr<LeaderElector>(
      new LeaderElector(*std::move(db), *std::move(lease), std::move(options)));
  elector->thread_ = std::thread([e = elector.get()] { e->Run(); });
  return elector;
}

LeaderElector::~LeaderElector() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    release_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int64_t LeaderElector::term() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

LeaseView LeaderElector::seen() const {
  absl::MutexLock lock(&mu_);
  return seen_;
}

bool LeaderElector::HoldsNow(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  return leading_ > 0 && now < deadline_;
}

void LeaderElector::Run() {
  for (;;) {
    Round();
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      // A leader whose renewal failed (the database away a moment) tries again as soon as a
      // standby would, not a whole renewal period later: its deadline leaves few tries (finding
      // 18: a database back 270 ms before the deadline was missed).
      wait = leading_ > 0 && !renew_failed_ ? options_.renew : options_.retry;
      // Wakes at once when stopped.
      const auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), wait);
      if (stopping_) break;
    }
  }
  bool release;
  {
    absl::MutexLock lock(&mu_);
    release = release_;
  }
  if (release && lease_->term() > 0) {
    if (absl::Status s = lease_->Release(); !s.ok()) {
      log::Get(log::Component::kDaemon).warn("leader: releasing the lease: {}", s.message());
    }
  }
  StepDown();
}

void LeaderElector::Round() {
  if (db_->IsBroken()) {
    absl::Status s = db_->Reconnect();
    if (s.ok()) s = lease_->NameSession();
    if (!s.ok()) {
      log::Get(log::Component::kDaemon).debug("leader: database unreachable: {}", s.message());
    }
  }
  int64_t leading;
  {
    absl::MutexLock lock(&mu_);
    leading = leading_;
  }
  if (leading > 0) {
    const absl::Status renewed = lease_->Renew();
    {
      absl::MutexLock lock(&mu_);
      renew_failed_ = !renewed.ok();
      if (renewed.ok()) {
        deadline_ = lease_->LocalDeadline();
        return;
      }
    }
    if (lease_->term() == 0 || !lease_->HoldsNow(absl::Now())) {
      log::Get(log::Component::kDaemon)
          .warn("leader: stepping down from term {}: {}", leading, renewed.message());
      StepDown();
    }
    return;
  }
  auto term = lease_->TryAcquire();
  if (!term.ok()) {
    // Another leads, or the database is unreachable: try again later. Who leads is kept for the
    // clients a standby sends to the leader.
    absl::StatusOr<LeaseView> view = absl::UnavailableError("not asked");
    if (absl::IsFailedPrecondition(term.status())) view = lease_->Current();
    absl::MutexLock lock(&mu_);
    seen_ = view.ok() && view->live ? *view : LeaseView{};
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    leading_ = *term;
    deadline_ = lease_->LocalDeadline();
    seen_ = LeaseView{*term, options_.lease.holder, options_.lease.address, true};
  }
  if (options_.on_lead) options_.on_lead(*term);
}

void LeaderElector::StepDown() {
  {
    absl::MutexLock lock(&mu_);
    if (leading_ == 0) return;
    leading_ = 0;
    deadline_ = absl::InfinitePast();
    seen_ = LeaseView{};
  }
  if (options_.on_step_down) options_.on_step_down();
}

}  // namespace fleet::daemon
