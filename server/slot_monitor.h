// SlotMonitor: the stream's slot as PostgreSQL last reported it, read on the
// monitor's own thread.
//
// GetStatus used to read the slot on the worker pool that acks wait on, with a
// fresh connection per call: a silent database then held workers (and acks
// queued behind them) until TCP gave up, and a client polling status in a loop
// opened a connection per call. Here at most one read per stream runs at a
// time, reads are shared by every caller that wants one within kFresh, and a
// caller waits only until its deadline: then it gets the last report and its
// age, so status always answers and says how old its slot figures are.
#ifndef WALFEED_SERVER_SLOT_MONITOR_H_
#define WALFEED_SERVER_SLOT_MONITOR_H_

#include <functional>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/start_plan.h"

namespace walfeed::server {

class SlotMonitor {
 public:
  // A read that started at most this long before a caller asked serves it.
  static constexpr absl::Duration kFresh = absl::Milliseconds(250);

  using Reader = std::function<absl::StatusOr<replication::SlotReport>()>;
  explicit SlotMonitor(Reader read);
  // Joins the thread (after a read in progress ends: each libpq call is bounded).
  ~SlotMonitor();
  SlotMonitor(const SlotMonitor&) = delete;
  SlotMonitor& operator=(const SlotMonitor&) = delete;

  struct View {
    // The last read's outcome; nullopt before any read finished.
    std::optional<absl::StatusOr<replication::SlotReport>> report;
    // When that read started.
    absl::Time read_at = absl::InfinitePast();
    // It is recent enough for the caller (it did not stop at the deadline).
    bool fresh = false;
  };

  // Asks for a read unless a recent one is done or running; returns at once.
  void Want() ABSL_LOCKS_EXCLUDED(mu_);
  // Want(), then waits until a recent read is done or `deadline` passes.
  View Get(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool RecentLocked(absl::Time asked) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Reader read_;
  absl::Mutex mu_;
  std::optional<absl::StatusOr<replication::SlotReport>> last_ ABSL_GUARDED_BY(mu_);
  absl::Time last_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time running_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_SLOT_MONITOR_H_
