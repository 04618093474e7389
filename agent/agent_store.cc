#include "agent/agent_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fleet::agent {
namespace {

std::vector<sqlite::Migration> Migrations() {
  return {[](sqlite::Database& db) {
    return db.Exec(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE servers (gpu INTEGER PRIMARY KEY, record BLOB NOT NULL);"
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, event BLOB NOT NULL);");
  }};
}

// 128 random bits from the kernel, as 32 hex digits.
std::string NewIncarnation() {
  unsigned char bytes[16] = {};
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = read(fd, bytes, sizeof(bytes));
    static_cast<void>(got);
    close(fd);
  }
  std::string out;
  for (unsigned char b : bytes) absl::StrAppendFormat(&out, "%02x", b);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AgentStore>> AgentStore::Open(const std::string& state_dir,
                                                             int64_t retention) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("agent state dir ", state_dir, ": ", ec.message()));
  }
  auto db = sqlite::Database::Open(absl::StrCat(state_dir, "/agent.db"));
  if (!db.ok()) return db.status();
  if (absl::Status s = (*db)->Migrate(Migrations()); !s.ok()) return s;
  std::unique_ptr<AgentStore> store(new AgentStore(*std::move(db), retention));
  if (absl::Status s = store->Load(); !s.ok()) return s;
  return store;
}

absl::Status AgentStore::Load() {
  auto get = db_->Prepare("SELECT value FROM meta WHERE key = 'incarnation'");
  if (!get.ok()) return get.status();
  auto row = get->Step();
  if (!row.ok()) return row.status();
  if (*row) {
    incarnation_ = get->ColumnText(0);
  } else {
    incarnation_ = NewIncarnation();
    auto put = db_->Prepare("INSERT INTO meta (key, value) VALUES ('incarnation', ?1)");
    if (!put.ok()) return put.status();
    put->Bind(1, std::string_view(incarnation_));
    if (absl::Status s = put->Run(); !s.ok()) return s;
  }
  auto range = db_->Prepare("SELECT min(seq), max(seq) FROM events");
  if (!range.ok()) return range.status();
  auto r = range->Step();
  if (!r.ok()) return r.status();
  if (*r && !range->ColumnIsNull(1)) {
    first_sequence_ = static_cast<uint64_t>(range->ColumnInt(0));
    last_sequence_ = static_cast<uint64_t>(range->ColumnInt(1));
  } else {
    // An empty log remembers where it was: the highest sequence ever given, kept in meta.
    auto seq = db_->Prepare("SELECT value FROM meta WHERE key = 'last_sequence'");
    if (!seq.ok()) return seq.status();
    auto s = seq->Step();
    if (!s.ok()) return s.status();
    if (*s) last_sequence_ = std::stoull(seq->ColumnText(0));
    first_sequence_ = last_sequence_ + 1;
  }
  return absl::OkStatus();
}

absl::Status AgentStore::Append(fleet::v1::AgentEvent* event) {
  event->set_incarnation(incarnation_);
  // A number the agent gave already (an event kept in memory while the store failed) is kept;
  // a hole before it is events lost meanwhile.
  if (event->sequence() <= last_sequence_) event->set_sequence(last_sequence_ + 1);
  auto insert = db_->Prepare("INSERT INTO events (seq, event) VALUES (?1, ?2)");
  if (!insert.ok()) return insert.status();
  insert->Bind(1, static_cast<int64_t>(event->sequence())).BindBlob(2, event->SerializeAsString());
  if (absl::Status s = insert->Run(); !s.ok()) return s;
  last_sequence_ = event->sequence();
  // Prune now and then, not on every append.
  if (static_cast<int64_t>(last_sequence_ - first_sequence_ + 1) >
      retention_ + retention_ / 10 + 1) {
    const uint64_t keep_from = last_sequence_ - static_cast<uint64_t>(retention_) + 1;
    auto prune = db_->Prepare("DELETE FROM events WHERE seq < ?1");
    if (!prune.ok()) return prune.status();
    prune->Bind(1, static_cast<int64_t>(keep_from));
    if (absl::Status s = prune->Run(); !s.ok()) return s;
    auto mark = db_->Prepare(
        "INSERT INTO meta (key, value) VALUES ('last_sequence', ?1) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    if (!mark.ok()) return mark.status();
    mark->Bind(1, std::string_view(absl::StrCat(last_sequence_)));
    if (absl::Status s = mark->Run(); !s.ok()) return s;
    first_sequence_ = keep_from;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<fleet::v1::AgentEvent>> AgentStore::EventsAfter(uint64_t after,
                                                                           size_t limit) {
  auto select = db_->Prepare("SELECT event FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2");
  if (!select.ok()) return select.status();
  select->Bind(1, static_cast<int64_t>(after)).Bind(2, static_cast<int64_t>(limit));
  std::vector<fleet::v1::AgentEvent> out;
  while (true) {
    auto row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    fleet::v1::AgentEvent e;
    if (!e.ParseFromString(select->ColumnBlob(0))) {
      return absl::DataLossError(
          absl::StrCat("agent event log: an unreadable event after ", after));
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status AgentStore::PutServer(int32_t gpu, const fleet::v1::ServerRecord& record) {
  auto put = db_->Prepare(
      "INSERT INTO servers (gpu, record) VALUES (?1, ?2) "
      "ON CONFLICT(gpu) DO UPDATE SET record = excluded.record");
  if (!put.ok()) return put.status();
  put->Bind(1, static_cast<int64_t>(gpu)).BindBlob(2, record.SerializeAsString());
  return put->Run();
}

absl::Status AgentStore::DeleteServer(int32_t gpu) {
  auto del = db_->Prepare("DELETE FROM servers WHERE gpu = ?1");
  if (!del.ok()) return del.status();
  del->Bind(1, static_cast<int64_t>(gpu));
  return del->Run();
}

absl::StatusOr<std::vector<fleet::v1::ServerRecord>> AgentStore::Servers() {
  auto select = db_->Prepare("SELECT gpu, record FROM servers ORDER BY gpu");
  if (!select.ok()) return select.status();
  std::vector<fleet::v1::ServerRecord> out;
  while (true) {
    auto row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    fleet::v1::ServerRecord r;
    if (!r.ParseFromString(select->ColumnBlob(1))) {
      return absl::DataLossError(
          absl::StrCat("agent record: server of gpu ", select->ColumnInt(0), " is unreadable"));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace fleet::agent
