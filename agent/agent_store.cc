#include "agent/agent_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/private_dir.h"
#include "common/base/string_view.h"
#include "common/log/log.h"

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

// The kernel's boot id (one line of 36 characters), or "" when it cannot be read.
std::string ReadBootId(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.size() > 64) return "";
  return line;
}

absl::Status PutMeta(sqlite::Database& db, std::string_view key, std::string_view value) {
  auto put = db.Prepare(
      "INSERT INTO meta (key, value) VALUES (?1, ?2) "
      "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  if (!put.ok()) return put.status();
  put->Bind(1, key).Bind(2, value);
  return put->Run();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AgentStore>> AgentStore::Open(const std::string& state_dir,
                                                             int64_t retention,
                                                             const std::string& boot_id_path,
                                                             const std::string& vfs) {
  absl::StatusOr<int> old_mode = MakePrivateDir(state_dir);
  if (!old_mode.ok()) return old_mode.status();
  if (*old_mode >= 0) {
    log::Get(log::Component::kStore)
        .warn("state dir {}: mode {:04o} narrowed to 0700 (it holds agent.db)", state_dir,
              *old_mode);
  }
  // NORMAL: see the header (a lost tail is detected by the boot id, and starts a new
  // incarnation).
  sqlite::OpenOptions options;
  options.synchronous = sqlite::OpenOptions::Synchronous::kNormal;
  options.mode = 0600;
  options.vfs = vfs;
  auto db = sqlite::Database::Open(absl::StrCat(state_dir, "/agent.db"), options);
  if (!db.ok()) return db.status();
  if (absl::Status s = (*db)->Migrate(Migrations()); !s.ok()) return s;
  std::unique_ptr<AgentStore> store(new AgentStore(*std::move(db), retention));
  if (absl::Status s = store->Load(ReadBootId(boot_id_path)); !s.ok()) return s;
  return store;
}

AgentStore::~AgentStore() {
  // Only a store that marked itself open marks the close: one whose Load failed must leave an
  // unclean mark from before as it found it.
  if (open_mark_.empty()) return;
  absl::Status s = MarkClosed();
  if (!s.ok()) log::Get(log::Component::kStore).error("agent.db: clean close: {}", s);
}

absl::Status AgentStore::MarkClosed() {
  // Only this run's mark: an agent that replaced this one (and opened the file since) keeps its.
  if (absl::Status s = db_->Exec("PRAGMA synchronous=FULL"); !s.ok()) return s;
  absl::Status put = [&]() -> absl::Status {
    auto update = db_->Prepare("UPDATE meta SET value = '0' WHERE key = 'open' AND value = ?1");
    if (!update.ok()) return update.status();
    update->Bind(1, std::string_view(open_mark_));
    return update->Run();
  }();
  absl::Status back = db_->Exec("PRAGMA synchronous=NORMAL");
  return put.ok() ? back : put;
}

absl::Status AgentStore::Load(const std::string& boot_id) {
  std::map<std::string, std::string> meta;
  {
    auto get = db_->Prepare("SELECT key, value FROM meta");
    if (!get.ok()) return get.status();
    while (true) {
      auto row = get->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      meta[get->ColumnText(0)] = get->ColumnText(1);
    }
  }
  incarnation_ = meta["incarnation"];
  // Open when the machine went down: the log may have lost its last commits (and the daemon may
  // have seen them), so its sequence numbers cannot be trusted to be new.
  const bool was_open = !meta["open"].empty() && meta["open"] != "0";
  const bool lost_tail = !incarnation_.empty() && !boot_id.empty() && was_open &&
                         !meta["boot_id"].empty() && meta["boot_id"] != boot_id;
  // This run's marks and, when needed, a new incarnation: one commit, synced. "open" holds a
  // token of this run until its clean close sets it to "0".
  const std::string mark = NewIncarnation();
  if (absl::Status s = db_->Exec("PRAGMA synchronous=FULL"); !s.ok()) return s;
  absl::Status written = [&]() -> absl::Status {
    auto tx = sqlite::Transaction::Begin(*db_);
    if (!tx.ok()) return tx.status();
    if (incarnation_.empty() || lost_tail) {
      const std::string previous = incarnation_;
      incarnation_ = NewIncarnation();
      if (absl::Status s = db_->Exec("DELETE FROM events; DELETE FROM meta WHERE key = "
                                     "'last_sequence'");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = PutMeta(*db_, "incarnation", incarnation_); !s.ok()) return s;
      if (lost_tail) {
        log::Get(log::Component::kStore)
            .warn(
                "agent.db: the machine went down while the agent ran (boot id {}, now {}): its "
                "last events may be lost; event stream {} replaces {} (the daemon "
                "resynchronises)",
                meta["boot_id"], boot_id, incarnation_, previous);
      }
    }
    if (absl::Status s = PutMeta(*db_, "boot_id", boot_id); !s.ok()) return s;
    if (absl::Status s = PutMeta(*db_, "open", mark); !s.ok()) return s;
    return (*tx)->Commit();
  }();
  absl::Status back = db_->Exec("PRAGMA synchronous=NORMAL");
  if (!written.ok()) return written;
  if (!back.ok()) return back;
  open_mark_ = mark;
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

namespace {
using ::fleet::AsAbsl;
constexpr std::string_view kFencePrefix = "fence_term:";
}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> AgentStore::FenceTerms() {
  auto get = db_->Prepare("SELECT substr(key, ?1), value FROM meta WHERE substr(key, 1, ?2) = ?3");
  if (!get.ok()) return get.status();
  get->Bind(1, static_cast<int64_t>(kFencePrefix.size() + 1))
      .Bind(2, static_cast<int64_t>(kFencePrefix.size()))
      .Bind(3, kFencePrefix);
  std::map<std::string, int64_t> terms;
  for (;;) {
    auto row = get->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    int64_t term = 0;
    if (absl::SimpleAtoi(get->ColumnText(1), &term)) terms[get->ColumnText(0)] = term;
  }
  return terms;
}

absl::Status AgentStore::PutFenceTerm(const std::string& fleet_id, int64_t term) {
  if (absl::Status s = db_->Exec("PRAGMA synchronous=FULL"); !s.ok()) return s;
  absl::Status put =
      PutMeta(*db_, absl::StrCat(AsAbsl(kFencePrefix), fleet_id), absl::StrCat(term));
  absl::Status back = db_->Exec("PRAGMA synchronous=NORMAL");
  return put.ok() ? back : put;
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
