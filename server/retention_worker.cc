#include "server/retention_worker.h"

#include <utility>
#include <vector>

namespace walfeed::server {

RetentionWorker::RetentionWorker(ConsumerRegistry* registry, spill::SpillLog* spill, Hooks hooks)
    : registry_(registry), spill_(spill), hooks_(std::move(hooks)) {}

RetentionWorker::~RetentionWorker() { Stop(); }

void RetentionWorker::Start() { thread_ = std::thread([this] { Main(); }); }

void RetentionWorker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void RetentionWorker::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

void RetentionWorker::Main() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_ || stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&news), absl::Seconds(1));
      if (stopping_) return;
      notified_ = false;
    }
    if (spill_ != nullptr) spill_->Reap();
    for (const ConsumerRegistry::DiskRequest& request : registry_->TakeDiskRequests()) {
      SessionList wake;
      absl::Status served = registry_->FinishDiskRead(
          request, spill_->ReadAfter(request.read_after, request.max_bytes), &wake);
      for (const std::shared_ptr<Session>& session : wake) session->Wake();
      if (!served.ok() && hooks_.on_damage) hooks_.on_damage(served);
    }
    if (hooks_.on_tick) hooks_.on_tick();
  }
}

}  // namespace walfeed::server
