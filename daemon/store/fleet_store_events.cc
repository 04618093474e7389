// FleetStore's fleet events (table fleet_events) and webhook deliveries (table deliveries): written
// together in one savepoint, read back by index, a delivery's tries recorded (fleet_store.h).
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/fleet_store.h"
#include "daemon/store/fleet_store_internal.h"

namespace fleet::daemon {

using store_internal::BindTime;
using store_internal::ColumnTime;
using store_internal::InsertedId;
using store_internal::TimeText;

absl::Status FleetStore::AppendFleetEvents(const std::vector<fleet::v1::FleetEvent>& events,
                                           std::vector<DeliveryRecord>* deliveries,
                                           absl::Time now) {
  if (events.empty() && (deliveries == nullptr || deliveries->empty())) return absl::OkStatus();
  auto scope = Scope::Begin(this);
  if (!scope.ok()) return scope.status();
  auto insert = Prepare(
      "INSERT INTO fleet_events (idx, at, type, server, container, event) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!insert.ok()) return insert.status();
  for (const fleet::v1::FleetEvent& e : events) {
    (*insert)->Reset();
    (*insert)
        ->Bind(1, e.index())
        .Bind(2, std::string_view(TimeText(absl::FromUnixSeconds(e.at().seconds()) +
                                           absl::Nanoseconds(e.at().nanos()))))
        .Bind(3, std::string_view(e.type()))
        .Bind(4, std::string_view(e.server()))
        .Bind(5, std::string_view(e.ctid().empty() ? std::string()
                                                   : absl::StrCat(e.host(), "/", e.ctid())))
        .BindBlob(6, e.SerializeAsString());
    if (absl::Status s = (*insert)->Run(); !s.ok()) return s;
  }
  if (deliveries != nullptr) {
    auto add = Prepare(
        "INSERT INTO deliveries (event_idx, notify, event_type, server, status, created_at, "
        "next_at, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id");
    if (!add.ok()) return add.status();
    for (DeliveryRecord& d : *deliveries) {
      d.created_at = now;
      (*add)->Reset();
      (*add)
          ->Bind(1, d.event_index)
          .Bind(2, std::string_view(d.notify))
          .Bind(3, std::string_view(d.event_type))
          .Bind(4, std::string_view(d.server))
          .Bind(5, std::string_view(d.status))
          .Bind(6, std::string_view(TimeText(now)));
      BindTime(**add, 7, d.next_at);
      (*add)->BindBlob(8, d.body);
      absl::StatusOr<int64_t> id = InsertedId(**add, "deliveries");
      if (!id.ok()) return id.status();
      d.id = *id;
    }
  }
  return (*scope)->Commit();
}

absl::StatusOr<std::vector<fleet::v1::FleetEvent>> FleetStore::FleetEvents(int64_t since,
                                                                           int64_t limit) {
  auto st = Prepare("SELECT idx, event FROM fleet_events WHERE idx > ?1 ORDER BY idx LIMIT ?2");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, since).Bind(2, limit);
  std::vector<fleet::v1::FleetEvent> out;
  while (true) {
    auto row = (*st)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    fleet::v1::FleetEvent e;
    if (!e.ParseFromString((*st)->ColumnBlob(1))) {
      return absl::DataLossError(absl::StrCat("fleet event ", (*st)->ColumnInt(0), " unreadable"));
    }
    e.set_index((*st)->ColumnInt(0));
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::pair<int64_t, int64_t>> FleetStore::FleetEventRange() {
  auto st = Prepare("SELECT coalesce(min(idx), 0), coalesce(max(idx), 0) FROM fleet_events");
  if (!st.ok()) return st.status();
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  return std::make_pair((*st)->ColumnInt(0), (*st)->ColumnInt(1));
}

namespace {

constexpr char kDeliveryColumns[] =
    "SELECT id, event_idx, notify, event_type, server, status, attempts, http_status, error, "
    "created_at, next_at, finished_at, body FROM deliveries ";

DeliveryRecord ReadDelivery(const sql::Statement& st) {
  DeliveryRecord d;
  d.id = st.ColumnInt(0);
  d.event_index = st.ColumnInt(1);
  d.notify = st.ColumnText(2);
  d.event_type = st.ColumnText(3);
  d.server = st.ColumnText(4);
  d.status = st.ColumnText(5);
  d.attempts = static_cast<int32_t>(st.ColumnInt(6));
  d.http_status = static_cast<int32_t>(st.ColumnInt(7));
  d.error = st.ColumnText(8);
  d.created_at = ColumnTime(st, 9);
  d.next_at = ColumnTime(st, 10);
  d.finished_at = ColumnTime(st, 11);
  d.body = st.ColumnBlob(12);
  return d;
}

absl::StatusOr<std::vector<DeliveryRecord>> ReadDeliveries(sql::Statement& st) {
  std::vector<DeliveryRecord> out;
  while (true) {
    auto row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back(ReadDelivery(st));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<DeliveryRecord>> FleetStore::PendingDeliveries(int64_t limit) {
  auto st =
      Prepare(absl::StrCat(kDeliveryColumns, "WHERE status = 'pending' ORDER BY id LIMIT ?1"));
  if (!st.ok()) return st.status();
  (*st)->Bind(1, limit);
  return ReadDeliveries(**st);
}

absl::StatusOr<std::vector<DeliveryRecord>> FleetStore::Deliveries(int64_t limit) {
  auto st = Prepare(absl::StrCat("SELECT * FROM (", kDeliveryColumns,
                                 "ORDER BY id DESC LIMIT ?1) AS d ORDER BY id"));
  if (!st.ok()) return st.status();
  (*st)->Bind(1, limit);
  return ReadDeliveries(**st);
}

absl::Status FleetStore::UpdateDelivery(const DeliveryRecord& d) {
  auto tx = Scope::Begin(this);
  if (!tx.ok()) return tx.status();
  auto st = Prepare(
      "UPDATE deliveries SET status = ?2, attempts = ?3, http_status = ?4, error = ?5, "
      "next_at = ?6, finished_at = ?7 WHERE id = ?1");
  if (!st.ok()) return st.status();
  (*st)->Bind(1, d.id).Bind(2, std::string_view(d.status)).Bind(3, int64_t{d.attempts});
  if (d.http_status > 0) {
    (*st)->Bind(4, int64_t{d.http_status});
  } else {
    (*st)->BindNull(4);
  }
  (*st)->Bind(5, std::string_view(d.error));
  BindTime(**st, 6, d.next_at);
  BindTime(**st, 7, d.finished_at);
  if (absl::Status s = (*st)->Run(); !s.ok()) return s;
  return (*tx)->Commit();
}

absl::StatusOr<int64_t> FleetStore::EventCount() {
  auto st = Prepare("SELECT count(*) FROM events");
  if (!st.ok()) return st.status();
  auto row = (*st)->Step();
  if (!row.ok()) return row.status();
  return (*st)->ColumnInt(0);
}

}  // namespace fleet::daemon
