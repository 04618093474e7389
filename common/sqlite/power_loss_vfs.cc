#include "common/sqlite/power_loss_vfs.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"
#include "common/base/unique_fd.h"

namespace fleet::sqlite {
namespace {

constexpr char kRecordSuffix[] = "-unsynced";
constexpr uint64_t kMagic = 0x31766c7074656c66;  // "fletplv1"
constexpr int64_t kMaxRecordBytes = int64_t{256} << 20;

// The record's header, then entries of an EntryHead and `length` bytes.
struct Header {
  uint64_t magic;
  int64_t synced_size;  // the file's size at its last completed sync
};
struct EntryHead {
  int64_t offset;
  int64_t length;
};

// Our file: the real (unix) file lives right after it, in the space szOsFile gives us.
struct File {
  sqlite3_file base;
  sqlite3_file* real;
  int record_fd;  // -1: a file that goes straight through (temporary files)
};
constexpr int kFileSize = (sizeof(File) + 15) & ~15;

sqlite3_vfs* real_vfs = nullptr;  // set once, under register_once
sqlite3_vfs vfs;
std::once_flag register_once;

sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The file's size at its last sync, from the record's header; a record still empty gets one with
// the size the file has now (nothing written since its last sync).
int SyncedSize(File* f, int64_t* synced_size, int64_t* record_size) {
  struct stat st = {};
  if (fstat(f->record_fd, &st) != 0) return SQLITE_IOERR_FSTAT;
  Header header = {};
  if (st.st_size >= static_cast<off_t>(sizeof(header))) {
    if (pread(f->record_fd, &header, sizeof(header), 0) != sizeof(header)) return SQLITE_IOERR_READ;
    *synced_size = header.synced_size;
    *record_size = st.st_size;
    return SQLITE_OK;
  }
  // A header cut short (the process died writing it) came before any write to the file.
  if (st.st_size > 0 && ftruncate(f->record_fd, 0) != 0) return SQLITE_IOERR_TRUNCATE;
  sqlite3_int64 size = 0;
  if (int rc = f->real->pMethods->xFileSize(f->real, &size); rc != SQLITE_OK) return rc;
  header = {kMagic, size};
  if (!WriteAll(f->record_fd, reinterpret_cast<const char*>(&header), sizeof(header))) {
    return SQLITE_IOERR_WRITE;
  }
  *synced_size = size;
  *record_size = sizeof(header);
  return SQLITE_OK;
}

// Appends to the record what [offset, offset + length) of the file holds below its synced size,
// before a write or truncation replaces it. One write(2) per entry: one cut short by a kill is
// the last, and the change it precedes never happened.
int Remember(File* f, int64_t offset, int64_t length) {
  int64_t synced_size = 0;
  int64_t record_size = 0;
  if (int rc = SyncedSize(f, &synced_size, &record_size); rc != SQLITE_OK) return rc;
  const int64_t end = std::min(offset + length, synced_size);
  if (offset >= end) return SQLITE_OK;  // only growth since the sync: undone by the size
  const EntryHead head = {offset, end - offset};
  if (record_size + static_cast<int64_t>(sizeof(head)) + head.length > kMaxRecordBytes) {
    return SQLITE_FULL;
  }
  std::string entry(sizeof(head) + static_cast<size_t>(head.length), '\0');
  std::memcpy(entry.data(), &head, sizeof(head));
  // A short read (the file was truncated since its sync; that truncation has its own entry)
  // fills with zeros.
  const int rc = f->real->pMethods->xRead(f->real, entry.data() + sizeof(head),
                                          static_cast<int>(head.length), offset);
  if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return rc;
  if (!WriteAll(f->record_fd, entry.data(), entry.size())) return SQLITE_IOERR_WRITE;
  return SQLITE_OK;
}

int Close(sqlite3_file* file) {
  File* f = reinterpret_cast<File*>(file);
  const int rc = f->real->pMethods->xClose(f->real);
  if (f->record_fd >= 0) close(f->record_fd);
  f->record_fd = -1;
  return rc;
}

int Write(sqlite3_file* file, const void* data, int amount, sqlite3_int64 offset) {
  File* f = reinterpret_cast<File*>(file);
  if (f->record_fd >= 0) {
    if (int rc = Remember(f, offset, amount); rc != SQLITE_OK) return rc;
  }
  return f->real->pMethods->xWrite(f->real, data, amount, offset);
}

int Truncate(sqlite3_file* file, sqlite3_int64 size) {
  File* f = reinterpret_cast<File*>(file);
  if (f->record_fd >= 0) {
    sqlite3_int64 now = 0;
    if (int rc = f->real->pMethods->xFileSize(f->real, &now); rc != SQLITE_OK) return rc;
    if (now > size) {
      if (int rc = Remember(f, size, now - size); rc != SQLITE_OK) return rc;
    }
  }
  return f->real->pMethods->xTruncate(f->real, size);
}

int Sync(sqlite3_file* file, int flags) {
  File* f = reinterpret_cast<File*>(file);
  const int rc = f->real->pMethods->xSync(f->real, flags);
  if (rc != SQLITE_OK || f->record_fd < 0) return rc;
  // On disk now: nothing of it is lost to a power cut any more.
  return ftruncate(f->record_fd, 0) == 0 ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

// The rest goes straight to the real file: reads (and mmap'ed pages) see what the kernel holds,
// as every other process does.
int Read(sqlite3_file* f, void* data, int amount, sqlite3_int64 offset) {
  return Real(f)->pMethods->xRead(Real(f), data, amount, offset);
}
int FileSize(sqlite3_file* f, sqlite3_int64* size) {
  return Real(f)->pMethods->xFileSize(Real(f), size);
}
int Lock(sqlite3_file* f, int level) { return Real(f)->pMethods->xLock(Real(f), level); }
int Unlock(sqlite3_file* f, int level) { return Real(f)->pMethods->xUnlock(Real(f), level); }
int CheckReservedLock(sqlite3_file* f, int* out) {
  return Real(f)->pMethods->xCheckReservedLock(Real(f), out);
}
int FileControl(sqlite3_file* f, int op, void* arg) {
  return Real(f)->pMethods->xFileControl(Real(f), op, arg);
}
int SectorSize(sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); }
int DeviceCharacteristics(sqlite3_file* f) {
  return Real(f)->pMethods->xDeviceCharacteristics(Real(f));
}
int ShmMap(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  return Real(f)->pMethods->xShmMap(Real(f), region, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  return Real(f)->pMethods->xShmLock(Real(f), offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); }
int ShmUnmap(sqlite3_file* f, int delete_flag) {
  return Real(f)->pMethods->xShmUnmap(Real(f), delete_flag);
}
int Fetch(sqlite3_file* f, sqlite3_int64 offset, int amount, void** out) {
  return Real(f)->pMethods->xFetch(Real(f), offset, amount, out);
}
int Unfetch(sqlite3_file* f, sqlite3_int64 offset, void* page) {
  return Real(f)->pMethods->xUnfetch(Real(f), offset, page);
}

const sqlite3_io_methods kMethods = {
    3,
    Close,
    Read,
    Write,
    Truncate,
    Sync,
    FileSize,
    Lock,
    Unlock,
    CheckReservedLock,
    FileControl,
    SectorSize,
    DeviceCharacteristics,
    ShmMap,
    ShmLock,
    ShmBarrier,
    ShmUnmap,
    Fetch,
    Unfetch,
};

int Open(sqlite3_vfs*, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  File* f = reinterpret_cast<File*>(file);
  f->base.pMethods = nullptr;
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(file) + kFileSize);
  f->record_fd = -1;
  int rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK) return rc;
  // The unix VFS's methods are version 3: ours forward every one of them.
  if (f->real->pMethods->iVersion < 3) {
    f->real->pMethods->xClose(f->real);
    return SQLITE_CANTOPEN;
  }
  if (name != nullptr &&
      (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_WAL)) != 0) {
    const std::string record = absl::StrCat(name, kRecordSuffix);
    f->record_fd = open(record.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (f->record_fd < 0) {
      f->real->pMethods->xClose(f->real);
      return SQLITE_CANTOPEN;
    }
  }
  f->base.pMethods = &kMethods;
  return SQLITE_OK;
}

// SQLite deletes a journal or WAL once it is not needed (after syncing what it held): its
// record goes with it.
int Delete(sqlite3_vfs*, const char* name, int sync_dir) {
  const int rc = real_vfs->xDelete(real_vfs, name, sync_dir);
  unlink(absl::StrCat(name, kRecordSuffix).c_str());
  return rc;
}

}  // namespace

absl::Status RegisterPowerLossVfs() {
  static int rc = SQLITE_OK;
  std::call_once(register_once, [] {
    real_vfs = sqlite3_vfs_find(nullptr);
    if (real_vfs == nullptr) {
      rc = SQLITE_ERROR;
      return;
    }
    // The default VFS's other methods (full path names, randomness, time, ...) as they are; its
    // pAppData stays too, for those of them that read it.
    vfs = *real_vfs;
    vfs.pNext = nullptr;
    vfs.zName = kPowerLossVfs;
    vfs.szOsFile = kFileSize + real_vfs->szOsFile;
    vfs.xOpen = Open;
    vfs.xDelete = Delete;
    rc = sqlite3_vfs_register(&vfs, /*makeDflt=*/0);
  });
  if (rc != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("sqlite vfs ", kPowerLossVfs, ": register: ", sqlite3_errstr(rc)));
  }
  return absl::OkStatus();
}

namespace {

// Puts back what the record at `record_path` remembers of `path`, then removes the record. Adds
// a line to `undone` when `path` lost something.
absl::Status Undo(const std::string& path, const std::string& record_path,
                  std::vector<std::string>* undone) {
  std::string record;
  {
    UniqueFd in(open(record_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in.valid()) return ErrnoToStatus(errno, absl::StrCat(record_path, ": open"));
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in.get(), buf, sizeof(buf))) > 0) record.append(buf, static_cast<size_t>(n));
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat(record_path, ": read"));
  }
  Header header = {};
  if (record.size() >= sizeof(header)) {
    std::memcpy(&header, record.data(), sizeof(header));
    if (header.magic != kMagic) {
      return absl::DataLossError(absl::StrCat(record_path, ": not a record of ", kPowerLossVfs));
    }
    std::vector<std::pair<EntryHead, size_t>> entries;  // head, where its bytes start
    size_t at = sizeof(header);
    while (at + sizeof(EntryHead) <= record.size()) {
      EntryHead head = {};
      std::memcpy(&head, record.data() + at, sizeof(head));
      const size_t bytes = at + sizeof(head);
      if (head.offset < 0 || head.length < 0 ||
          bytes + static_cast<size_t>(head.length) > record.size()) {
        break;  // cut short: its write never happened
      }
      entries.emplace_back(head, bytes);
      at = bytes + static_cast<size_t>(head.length);
    }
    UniqueFd fd(open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd.valid() && errno != ENOENT) return ErrnoToStatus(errno, absl::StrCat(path, ": open"));
    struct stat st = {};
    if (fd.valid() && fstat(fd.get(), &st) != 0) {
      return ErrnoToStatus(errno, absl::StrCat(path, ": stat"));
    }
    if (fd.valid() && (!entries.empty() || st.st_size != header.synced_size)) {
      undone->push_back(absl::StrCat(std::filesystem::path(path).filename().string(), ": ",
                                     entries.size(), " writes undone, ", st.st_size, " -> ",
                                     header.synced_size, " bytes"));
    }
    if (fd.valid()) {
      // Newest first: the oldest entry of a range holds what the sync left there.
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        const ssize_t n =
            pwrite(fd.get(), record.data() + it->second, it->first.length, it->first.offset);
        if (n != it->first.length) return ErrnoToStatus(errno, absl::StrCat(path, ": write"));
      }
      if (ftruncate(fd.get(), header.synced_size) != 0 || fsync(fd.get()) != 0) {
        return ErrnoToStatus(errno, absl::StrCat(path, ": truncate"));
      }
    }
  }
  if (unlink(record_path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat(record_path, ": unlink"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CutPower(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> records;
  std::vector<std::string> undone;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().string();
    if (absl::EndsWith(name, kRecordSuffix)) records.push_back(name);
  }
  if (ec) return ErrnoToStatus(ec.value(), absl::StrCat(dir, ": list"));
  for (const std::string& record : records) {
    const std::string path = record.substr(0, record.size() - std::strlen(kRecordSuffix));
    if (absl::Status s = Undo(path, record, &undone); !s.ok()) return s;
  }
  return undone;
}

}  // namespace fleet::sqlite
