#ifndef WALFEED_SERVER_PROGRESS_TICKER_H_
#define WALFEED_SERVER_PROGRESS_TICKER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace walfeed::server {

// Runs `tick` on its own thread at least every `period`, and sooner when asked:
// an idle subscription's progress frame is due progress_interval after its last
// frame (10 ms at the least), which a fixed period would round up to the period.
// Sessions that go idle say when their next frame is due (TickBy); the thread
// sleeps until the earliest such time or the period, whichever comes first.
class ProgressTicker {
 public:
  ProgressTicker(absl::Duration period, std::function<void()> tick);
  ~ProgressTicker();  // Stop().
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

  // A tick at `due` or earlier. Cheap and non-blocking: callers hold their own
  // locks (ConsumerRegistry calls it under its mutex).
  void TickBy(absl::Time due) ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the thread; no tick runs after it returns. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration period_;
  const std::function<void()> tick_;
  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_);
  bool moved_ ABSL_GUARDED_BY(mu_) = false;  // next_ moved earlier while asleep.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts once the rest is initialised.
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_PROGRESS_TICKER_H_
