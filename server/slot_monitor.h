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
  // Stop, then joins the thread (after a read in progress ends: each libpq
  // call is bounded).
  ~SlotMonitor();
  SlotMonitor(const SlotMonitor&) = delete;
  SlotMonitor& operator=(const SlotMonitor&) = delete;

  struct View {
    // The last successful read's report; nullopt before one.
    std::optional<replication::SlotReport> report;
    // When that read started.
    absl::Time read_at = absl::InfinitePast();
    // Why the reads since then failed, if they did.
    std::optional<absl::Status> error;
    // A read that started at most kFresh before the caller asked finished
    // (successfully or not) by the deadline.
    bool fresh = false;
  };

  // Asks for a read unless a recent one is done or running; returns at once.
  void Want() ABSL_LOCKS_EXCLUDED(mu_);
  // Want(), then waits until a read recent for a caller that asked at `asked`
  // is done, or `deadline` passes, or Stop.
  View Get(absl::Time asked, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // No more reads; waiting callers return at once.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool RecentLocked(absl::Time asked) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Reader read_;
  absl::Mutex mu_;
  std::optional<replication::SlotReport> good_ ABSL_GUARDED_BY(mu_);  // Last successful.
  absl::Time good_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::optional<absl::Status> error_ ABSL_GUARDED_BY(mu_);  // Since good_.
  absl::Time last_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // Any outcome.
  bool read_once_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time running_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_SLOT_MONITOR_H_
