// WorkerPool: a few threads for the work gRPC reactors must not do themselves.
//
// Reactor methods never block (an Ack waits for a durable write, GetStatus for a
// query to PostgreSQL), so those RPCs hand a closure to this pool and finish the
// call from it. Several workers let concurrent acks wait together, which is what
// lets the group committer turn them into one write.
#ifndef WALFEED_SERVER_WORKER_POOL_H_
#define WALFEED_SERVER_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace walfeed::server {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  // Runs every queued task, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Run(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_WORKER_POOL_H_
