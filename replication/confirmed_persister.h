// ConfirmedPersister: stores the stream's confirmed position on a thread of its
// own, so the replication loop never waits on SQL.
//
//   reader: Request(lsn) ──► persister thread: store->PersistConfirmed(lsn)
//           durable() ◄───── (the highest position stored; on_stored() wakes the reader)
//
// The reader confirms to PostgreSQL only what durable() returns, so the rule
// "stored before confirmed" holds however slow the store is. Requests coalesce:
// while a write is in flight only the newest requested position waits, and a
// position at or below what is stored is not written again. A failed write keeps
// the older durable position; the error is kept for the reader to log, and the
// next Request tries again.
#ifndef WALFEED_REPLICATION_CONFIRMED_PERSISTER_H_
#define WALFEED_REPLICATION_CONFIRMED_PERSISTER_H_

#include <functional>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/lsn.h"
#include "replication/stream_source.h"

namespace walfeed::replication {

class ConfirmedPersister {
 public:
  // `store` must outlive the persister. `on_stored` runs on the persister's thread
  // after every write (successful or not); it must not block.
  ConfirmedPersister(ConfirmedLsnStore* store, Lsn durable, std::function<void()> on_stored);
  // Waits for a write in flight, drops a request not yet started.
  ~ConfirmedPersister();
  ConfirmedPersister(const ConfirmedPersister&) = delete;
  ConfirmedPersister& operator=(const ConfirmedPersister&) = delete;

  // Asks for `lsn` to be stored; returns at once.
  void Request(Lsn lsn) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks for a store->Ping() when no write is waiting; returns at once. A
  // failure is kept like a failed write's (TakeError).
  void RequestPing() ABSL_LOCKS_EXCLUDED(mu_);
  // The highest position stored so far (starts at the constructor's `durable`).
  Lsn durable() const ABSL_LOCKS_EXCLUDED(mu_);
  // The error of the last failed write since the last call, if any.
  std::optional<absl::Status> TakeError() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `timeout` until no request is pending or in flight; false on timeout.
  bool AwaitIdle(absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  ConfirmedLsnStore* const store_;
  const std::function<void()> on_stored_;

  mutable absl::Mutex mu_;
  Lsn durable_ ABSL_GUARDED_BY(mu_);
  std::optional<Lsn> requested_ ABSL_GUARDED_BY(mu_);  // Waiting to be written.
  bool ping_ ABSL_GUARDED_BY(mu_) = false;  // A ping is asked for.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: starts once the rest is initialised.
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_CONFIRMED_PERSISTER_H_
