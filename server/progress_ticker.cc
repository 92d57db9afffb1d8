#include "server/progress_ticker.h"

#include <utility>

namespace walfeed::server {

ProgressTicker::ProgressTicker(absl::Duration period, std::function<void()> tick)
    : period_(period), tick_(std::move(tick)), next_(absl::Now() + period), thread_([this] {
        Loop();
      }) {}

ProgressTicker::~ProgressTicker() { Stop(); }

void ProgressTicker::TickBy(absl::Time due) {
  absl::MutexLock lock(&mu_);
  if (due >= next_) return;
  next_ = due;
  moved_ = true;
}

void ProgressTicker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ProgressTicker::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || moved_; };
      // Sleeps until next_, starting over whenever TickBy moves it earlier.
      while (!stopping_ && absl::Now() < next_) {
        moved_ = false;
        mu_.AwaitWithDeadline(absl::Condition(&woken), next_);
      }
      if (stopping_) return;
      next_ = absl::Now() + period_;
    }
    tick_();
  }
}

}  // namespace walfeed::server
