// WalSenderWatch: asks, over a second, ordinary connection, whether a
// replication session's walsender still holds its slot.
//
// Why: the reader presumes a connection dead when nothing arrives for
// wal_sender_timeout although it asked for a reply (stream_reader.h). A
// walsender answers such a request at once while it reads WAL, but not while
// one step of decoding takes long: serializing a large transaction's changes to
// disk (past logical_decoding_work_mem) on a slow or busy disk kept one silent
// for 21 s with wal_sender_timeout 5 s. Ending that session would restart the
// decoding of the whole transaction, which can take as long again. The walsender
// holding the slot (pg_replication_slots.active_pid) says the server and that
// process are alive: the silence is work, not a dead network. A black hole
// answers neither connection, so it is still detected in the same time.
//
// Checks run on a thread of their own, started by the first Request(), with
// non-blocking libpq calls in short slices, so the destructor returns promptly
// even while a connect or query is stuck in a black hole.
#ifndef WALFEED_REPLICATION_PG_WALSENDER_WATCH_H_
#define WALFEED_REPLICATION_PG_WALSENDER_WATCH_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace walfeed::replication::pg {

class WalSenderWatch {
 public:
  // `conninfo` as given for the replication connection (an ordinary connection
  // is made from it); `walsender_pid` is that connection's backend pid. A check
  // gives up after `check_timeout`.
  WalSenderWatch(std::string conninfo, std::string slot_name, int walsender_pid,
                 absl::Duration check_timeout);
  ~WalSenderWatch();
  WalSenderWatch(const WalSenderWatch&) = delete;
  WalSenderWatch& operator=(const WalSenderWatch&) = delete;

  // Starts a check unless one is running; returns at once.
  void Request() ABSL_LOCKS_EXCLUDED(mu_);
  // How many checks found the walsender holding the slot.
  uint64_t confirmations() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many checks ended without that (not holding it, an error, a timeout),
  // and what the last of them found.
  uint64_t failures() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string last_failure() const ABSL_LOCKS_EXCLUDED(mu_);

  // One check, blocking until it ends or `deadline` (or `stop` turns true):
  // true when `slot_name`'s active_pid is `walsender_pid`. Exposed for tests.
  static absl::StatusOr<bool> HoldsSlot(const std::string& conninfo, const std::string& slot_name,
                                        int walsender_pid, absl::Time deadline,
                                        const std::atomic<bool>* stop = nullptr);

 private:
  void Loop();

  const std::string conninfo_;
  const std::string slot_name_;
  const int walsender_pid_;
  const absl::Duration check_timeout_;

  mutable absl::Mutex mu_;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};  // Polled by a running check between slices.
  uint64_t confirmations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_failure_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Started by the first Request().
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_WALSENDER_WATCH_H_
