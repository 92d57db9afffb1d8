// RetentionWorker: a stream's retention thread. It reads the spill for sessions
// whose cursor is below memory (ConsumerRegistry::TakeDiskRequests /
// FinishDiskRead), so no gRPC reactor and no holder of the registry's mutex
// ever waits on the disk; it deletes the files of trimmed segments; it reports
// a damaged spill (on_damage); and on_tick runs what may block on the
// checkpoint store (the laggard policy's detach), off the reader thread.
//
//   want_disk / a full stream (any thread) ─► Notify ─► Main: Reap, read each
//   request, hand it over, wake its session ─► on_tick (also every second)
#ifndef WALFEED_SERVER_RETENTION_WORKER_H_
#define WALFEED_SERVER_RETENTION_WORKER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/consumer_registry.h"
#include "server/spill/spill_log.h"

namespace walfeed::server {

class RetentionWorker {
 public:
  struct Hooks {
    // The spill lost or damaged events a session needs (DataLoss).
    std::function<void(const absl::Status&)> on_damage;
    std::function<void()> on_tick;  // About once a second.
  };

  // `registry` and `spill` (may be null: no disk tier) must outlive the worker.
  RetentionWorker(ConsumerRegistry* registry, spill::SpillLog* spill, Hooks hooks);
  ~RetentionWorker();  // Stops.
  RetentionWorker(const RetentionWorker&) = delete;
  RetentionWorker& operator=(const RetentionWorker&) = delete;

  void Start();
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // A session wants a disk read. Only signals: callable under any lock.
  void Notify() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Main() ABSL_LOCKS_EXCLUDED(mu_);

  ConsumerRegistry* const registry_;
  spill::SpillLog* const spill_;
  const Hooks hooks_;
  std::thread thread_;

  absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_RETENTION_WORKER_H_
