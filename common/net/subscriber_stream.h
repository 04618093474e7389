// SubscriberStream: a gRPC server stream that writes what a subscription has, as it comes. The
// agent's event stream, fleetd's status watch and the scale benchmark's simulated agents are
// each one: a source tells the stream it has something new (Wake); the stream writes one message
// at a time, and asks the source for the next (Fill) when its write in flight is done or when
// woken, whichever comes later. Whatever is there when a write is possible goes in the next
// message; nothing waits to fill one.
//
// It ends once: when the client cancels (CANCELLED), when a write fails (UNAVAILABLE), or when
// the owner ends it (EndAfterWrite: after the write in flight). OnDone calls Detach (the
// subclass unsubscribes there; a source that may still be calling Wake must wait for that call
// before Detach returns) and deletes the stream.
//
// Header only (fleet::net stays free of gRPC for the static agent's socket code): include it
// from a target that links gRPC.
#pragma once

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace fleet::net {

template <typename Message>
class SubscriberStream : public grpc::ServerWriteReactor<Message> {
 public:
  // The source has something new: written now, or when the write in flight is done.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) { MaybeWrite(); }

  // Ends the stream with `status` once the write in flight, if any, is done.
  void EndAfterWrite(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (writing_) {
      end_ = std::move(status);
      ending_ = true;
      return;
    }
    FinishLocked(std::move(status));
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, write_failed_));
        return;
      }
      if (ending_) {
        FinishLocked(std::move(end_));
        return;
      }
    }
    MaybeWrite();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    Detach();
    delete this;
  }

 protected:
  // `write_failed` is the message of the UNAVAILABLE a failed write ends the stream with.
  explicit SubscriberStream(const char* write_failed) : write_failed_(write_failed) {}

  // The first write: called by the subclass at the end of its constructor, once subscribed.
  void Start() ABSL_LOCKS_EXCLUDED(mu_) { MaybeWrite(); }

  // Fills `out` (cleared) with the next message; false when there is nothing to send now.
  virtual bool Fill(Message* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // From Fill, which returns false after it: the stream ends now with `status` (a stream that
  // has said all it had to say).
  void EndInFill(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    FinishLocked(std::move(status));
  }
  // Unsubscribes from the source: no Wake reaches the stream after this returns.
  virtual void Detach() = 0;

  // Guards what Fill reads and writes of the subclass, and the stream's own state.
  absl::Mutex mu_;

 private:
  void MaybeWrite() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (writing_ || finished_ || ending_) return;
    message_.Clear();
    if (!Fill(&message_)) return;
    writing_ = true;
    this->StartWrite(&message_);
  }

  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Finish(std::move(status));
  }

  const char* const write_failed_;
  Message message_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fleet::net
