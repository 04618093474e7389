// FleetStore's side of several fleetds on one record (issue 16): the record's fleet id, and the
// term fence every write transaction of a leader begins with (term_fence.h, fleet_store.h).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/fleet_store.h"
#include "daemon/store/fleet_store_internal.h"
#include "daemon/store/term_fence.h"

namespace fleet::daemon {

absl::Status FleetStore::BeginWrite() {
  if (absl::Status s = EnsureConnected(); !s.ok()) return s;
  if (absl::Status s = db_->Begin(); !s.ok()) return s;
  if (fence_term_ == 0) return absl::OkStatus();
  absl::Status s = CheckTermFence(*db_, fence_fleet_, fence_term_);
  if (!s.ok()) db_->Rollback().IgnoreError();
  return s;
}

void FleetStore::SetFence(std::string fleet_id, int64_t term) {
  fence_fleet_ = std::move(fleet_id);
  fence_term_ = term;
}

absl::StatusOr<std::string> FleetStore::FleetId() {
  auto st = Prepare("SELECT fleet_id FROM fleet_identity WHERE singleton = 1");
  if (!st.ok()) return st.status();
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::DataLossError(absl::StrCat("store ", db_->name(), ": no fleet id"));
  return (*st)->ColumnText(0);
}

}  // namespace fleet::daemon
